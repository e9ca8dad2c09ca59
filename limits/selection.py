"""Top-N selection I_N: the N visible keys with the largest weights, under one tie rule.

**Tie rule.** Among equal weights the lower key index is selected first: the order of
``lax.top_k`` and of a stable descending sort. Masked keys are never selected; a row with
fewer than N visible keys selects all of them. Every path below implements this one rule,
each for the setting where it is fastest (tests/test_selection.py checks they select the
same keys on rows full of ties):

- :func:`top_n_rank`: ``lax.top_k`` of one row, ranks of the top ``n_cap`` (the per-row
  reference of Theorem 1, :mod:`limits.distance.rows`).
- :func:`ranks`: the rank of every key by a stable sort (Theorem 2's reference).
- :func:`sort_desc` + :func:`select_sorted` / :func:`top_n_mask`: I_N from one sort, N may be
  traced (Theorem 2 on sampled rows, :mod:`limits.separability.rows`).
- :func:`sort_rows` + :func:`thresholds_from_sorted` / :func:`thresholds` +
  :func:`select_thresholds`: every causal row of a layer sorted once on the host (NumPy's sort
  is ~20× XLA's on CPU), each N a threshold with an index cut for ties at the N-th place (any N
  up to L: Algorithm 3's search).
- :func:`top_k_rows` + :func:`ranks_from_top`: the top k keys of every row on the device under
  jit (``lax.top_k``, static k), for the per-layer paths of Algorithms 1, 2 and 4 (N ≤ k).
- :func:`top_k_rows_host`: the same indices as ``lax.top_k`` of float32 rows, on the host
  (NumPy's partition and a 64-bit key sort: ~2× less time than XLA's CPU top-k at k = 129),
  for Algorithm 4 on the model's float32 records.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from limits.errors import LimitsError
from limits.numerics import mask_like


@jax.jit
def ranks(alpha, mask=None):
  """Rank of each token by weight within its row (0 = largest), masked tokens last.

  Ties are broken by position (stable sort). alpha (..., L) -> int32 (..., L).
  """
  visible = mask_like(alpha, mask)
  key = jnp.where(visible, alpha, -jnp.inf)
  order = jnp.argsort(-key, axis=-1, stable=True)
  return jnp.argsort(order, axis=-1, stable=True).astype(jnp.int32)


def sort_desc(alpha, mask=None):
  """Row-wise weights sorted in decreasing order, masked entries as -inf last. (..., L)."""
  key = jnp.where(mask_like(alpha, mask), alpha, -jnp.inf)
  return -jnp.sort(-key, axis=-1)


def select_sorted(alpha, sorted_desc, visible, n):
  """I_N from one sort: tokens above the N-th largest weight, plus ties at it by position.

  Equals ``ranks(alpha, mask) < n`` (stable tie-breaking) without a second sort; n may be
  traced.
  """
  L = alpha.shape[-1]
  key = jnp.where(visible, alpha, -jnp.inf)
  idx = jnp.clip(jnp.asarray(n, jnp.int32) - 1, 0, L - 1)
  thr = jnp.take(sorted_desc, idx, axis=-1)[..., None]              # N-th largest weight
  gt = (key > thr) & visible
  eq = (key == thr) & visible
  need = n - jnp.sum(gt, axis=-1, keepdims=True)
  return (gt | (eq & (jnp.cumsum(eq, axis=-1) <= need))) & (n >= 1)


@jax.jit
def top_n_mask(alpha, n, mask=None):
  """Boolean (..., L): the N visible tokens with the largest weights (I_N). n may be traced.

  Ties are broken by position (lower index first).
  """
  visible = mask_like(alpha, mask)
  return select_sorted(alpha, sort_desc(alpha, mask), visible, n)


def top_n_rank(alpha, n_cap: int, mask=None):
  """Rank of each key among the visible keys by weight (0 = largest), n_cap if not in top n_cap.

  Ties: ``lax.top_k`` puts the lower index first. Returns ``(rank (L,) int32, idx (n_cap,),
  idx_valid (n_cap,) bool)``; ``idx_valid`` is False for slots beyond the t visible keys.
  """
  valid = mask_like(alpha, mask)
  L = alpha.shape[-1]
  if not 1 <= n_cap <= L:
    raise LimitsError(f"top-N cap n_cap={n_cap} must be in [1, L={L}]")
  score = jnp.where(valid, alpha, -jnp.inf)
  _, idx = lax.top_k(score, n_cap)  # (n_cap,)
  idx_valid = valid[idx]
  ranks = jnp.arange(n_cap, dtype=jnp.int32)
  rank = jnp.full((L,), n_cap, dtype=jnp.int32)
  rank = rank.at[idx].set(jnp.where(idx_valid, ranks, n_cap))
  return rank, idx, idx_valid


class Thresholds(NamedTuple):
  """Top-N selection of every causal row for K values of N, as thresholds on the weights.

  Key i is selected in row q for the k-th N iff ``i <= q`` and (α_i > thr or (α_i == thr and
  i <= cut)): ``thr`` (..., L, K) is the N-th largest visible weight and ``cut`` (..., L, K)
  int32 the index of the last tied key kept (L where no tie straddles the boundary), which
  reproduces ``lax.top_k``'s lower-index-first rule exactly.
  """
  thr: np.ndarray
  cut: np.ndarray


def visible_window(L: int, window: int = 0) -> np.ndarray:
  """(L, L) bool, True = key visible from query (row): causal, and within the query's last
  ``window`` keys when window > 0 (a local layer with a sliding window W: query t sees keys
  t − W + 1 … t, i.e. min(t + 1, W) of them; same rule as ``limits.models.attention_mask``)."""
  vis = np.tri(L, dtype=bool)  # key <= query
  if window:
    vis &= ~np.tri(L, k=-int(window), dtype=bool)  # key > query − W
  return vis


def _row_window(R: int, L: int, window: int, row0: int) -> np.ndarray:
  """(R, L) rows row0 … row0 + R − 1 of :func:`visible_window` (L, window)."""
  if not 0 <= row0 <= L - R:
    raise ValueError(f"rows {row0}..{row0 + R - 1} are not rows of an (L = {L}) layer")
  return visible_window(L, window)[row0:row0 + R]


def sort_rows(weights, window: int = 0, row0: int = 0) -> np.ndarray:
  """(…, R, L) causal weights → (…, R, L) each row's visible weights sorted descending, −inf
  padded (masked keys). One sort per row serves every N (:func:`thresholds_from_sorted`).
  ``window`` W > 0: a sliding-window layer, keys outside the query's window are masked.
  ``row0``: the rows given are rows row0 … row0 + R − 1 of the (L, L) layer (R = L, row0 = 0:
  the whole layer; a caller that reads only the later rows sorts only those,
  :func:`limits.distance.search.search_stats`)."""
  w = np.asarray(weights)
  L = w.shape[-1]
  vis = _row_window(w.shape[-2], L, window, row0)  # (R, L) key <= query (and in the window)
  neg = np.where(vis, -w, np.inf)  # ascending sort of −α = descending α, masked last
  neg.sort(axis=-1)
  return -neg


def thresholds_from_sorted(weights, sorted_desc, ns: Sequence[int],
                           window: int = 0, row0: int = 0) -> Thresholds:
  """Thresholds (…, R, K) for every N in ``ns`` from rows sorted by :func:`sort_rows` (with
  the same ``window``: W > 0 for a sliding-window layer, where query t sees min(t + 1, W) keys,
  and the same ``row0``: the rows are rows row0 … row0 + R − 1 of the (L, L) layer)."""
  w = np.asarray(weights)
  L = w.shape[-1]
  ns = [int(n) for n in ns]
  thr = np.stack([sorted_desc[..., min(n, L) - 1] for n in ns], axis=-1)  # (…, L, K)
  nxt = np.stack([sorted_desc[..., n] if n < L else np.full(w.shape[:-1], -np.inf, w.dtype)
                  for n in ns], axis=-1)
  cut = np.full(thr.shape, L, np.int32)
  vis_all = _row_window(w.shape[-2], L, window, row0)  # (R, L)
  t = vis_all.sum(axis=-1)  # visible keys per query: t + 1, or min(t + 1, W)
  counted = t[:, None] > np.asarray(ns)[None, :]  # (L, K)
  straddle = (thr == nxt) & counted  # a tie crosses the N-th place: choose by index
  if straddle.any():
    idx = np.nonzero(straddle)
    k = idx[-1]
    rows = w[idx[:-1]]  # (R, L) the straddling rows
    q = idx[-2]
    vis = vis_all[q]  # (R, L)
    tr = thr[idx][:, None]
    n_gt = np.sum(vis & (rows > tr), axis=-1)
    need = np.asarray(ns)[k] - n_gt  # >= 1 tied keys to keep, lowest indices first
    cs = np.cumsum(vis & (rows == tr), axis=-1)
    cut[idx] = np.argmax(cs >= need[:, None], axis=-1)
  return Thresholds(thr, cut)


def thresholds(weights, ns: Sequence[int], window: int = 0) -> Thresholds:
  """Thresholds (…, L, K) of causal rows for every N in ``ns`` (one sort per row)."""
  return thresholds_from_sorted(weights, sort_rows(weights, window), ns, window)


def select_thresholds(a, thr, cut, vis, kpos):
  """(R, K) selected keys for one N: thr, cut (R,) per row; vis (R, K) causal; kpos (K,)."""
  return vis & ((a > thr[:, None]) | ((a == thr[:, None]) & (kpos[None, :] <= cut[:, None])))


def top_k_rows(a, vis, k: int, ns):
  """Indices (R, k) int32 of the k largest visible weights of each row, in selection order
  (weight descending, ties to the lower index), on the device; masked keys come last.

  XLA's CPU top-k is fast only for float32, so a float64 row is selected from its float32
  rounding. Rounding is monotone, so for every N in ``ns`` the first N indices are exactly
  the float64 I_N when (a) the row is exactly representable in float32 (model records are
  float32: always), or (b) the N-th and (N+1)-th float32 values differ (a float32 tie can only
  hide an order at that boundary), or (c) the row has <= N visible keys. Where some row and N
  meet none of these (margin: a float32 tie straddling the N-th place), the whole block is
  recomputed by a float64 stable sort (``lax.cond``: the rare path costs nothing otherwise).

  a: (…, R, C) weights (float32 or float64); vis: (…, R, C) bool; k <= C static; ns: (K,) int top-N
  sizes (may be traced), each <= k − 1 or >= C, so the check (b) sees the (N+1)-th value
  (callers take k = min(max N + 1, C)).
  """
  key32 = jnp.where(vis, a.astype(jnp.float32), -jnp.inf)
  v32, idx = lax.top_k(key32, k)  # (R, k)
  idx = idx.astype(jnp.int32)
  if a.dtype == jnp.float32:
    return idx
  ns = jnp.atleast_1d(jnp.asarray(ns, jnp.int32))
  exact_row = jnp.all(~vis | (a == a.astype(jnp.float32).astype(a.dtype)), axis=-1)  # (R,)
  j = jnp.clip(ns, 1, k - 1)  # boundary positions N − 1 | N
  above = jnp.take(v32, j - 1, axis=-1)  # (R, K) N-th largest (float32)
  below = jnp.take(v32, j, axis=-1)  # (R, K) (N+1)-th largest
  ok = exact_row[..., None] | (above > below) | (below == -jnp.inf) | (ns >= a.shape[-1])
  key = jnp.where(vis, -a, jnp.inf)  # ascending (−α, index): the tie rule

  def exact():
    pos = lax.broadcasted_iota(jnp.int32, a.shape, a.ndim - 1)
    _, order = lax.sort((key, pos), dimension=a.ndim - 1, is_stable=True, num_keys=1)
    return order[..., :k]

  return lax.cond(jnp.all(ok), lambda: idx, exact)


def _ordered_int(key):
  """int32 of float32 ``key`` (no NaN) whose order is the floats' total order, as XLA's
  top-k compares them (−0 below +0): the IEEE bits, with a negative float's magnitude bits
  flipped."""
  bits = np.asarray(key, np.float32).view(np.int32)
  return np.where(bits < 0, bits ^ np.int32(0x7FFFFFFF), bits)


def top_k_rows_host(key, k: int):
  """(B, k) int32 indices of the k largest entries of each row of ``key`` (B, C) float32
  (masked keys −inf, no NaN) in ``lax.top_k``'s order: value descending (−0 below +0), ties
  to the lower index; the same array as ``lax.top_k(key, k)[1]``
  (tests/test_separability_host_top.py). :func:`top_k_ordered` on :func:`_ordered_int`."""
  return top_k_ordered(_ordered_int(key), k)


# int32 bits of float32 −inf: below the bits of every float >= +0, above those of every other
# negative float (−0 included), so on values >= +0 or −inf the bits are already ordered
NEG_INF_BITS = np.int32(-8388608)


def top_k_ordered(s, k: int):
  """(B, k) int32 indices of the k largest entries of each row of ``s`` (B, C) int32 (floats
  mapped to their order, :func:`_ordered_int`), largest first, ties to the lower index.

  ``np.partition`` gives each row's k-th largest value; the entries at or above it are the
  k largest, except in rows with more than k of them (a tie across the k-th place, e.g. the
  −inf of a row with fewer than k visible keys), where the tied entries are chosen again,
  lowest indices first. Their columns, in index order, come from one ``np.flatnonzero`` over
  the (B, C) mask (every row then holds exactly k), and are sorted by one uint64 key (value
  descending in the high 32 bits, the index in the low 32): a unique key per entry, so the
  order needs no stable sort. With the mask written into the weights' bits
  (``limits.distance.host_select.block_top_host``), a partition of the values and a flat nonzero
  select a SmolLM2-shaped layer's 4 causal blocks (k = 129) 1.50× faster (spread 1.47–1.56×)
  than the masked float key, its order map, an ``np.argpartition`` of the indices and a take
  (``python -m benchmarks.host_ops --length=1024 --heads=9 --pairs=5``, case ``select``)."""
  B, C = s.shape
  if k < C:
    kth = np.partition(s, C - k, axis=-1)[:, C - k:C - k + 1]    # (B, 1) the k-th largest
    ge = s >= kth                                                 # (B, C) >= k per row
    tied = np.flatnonzero(np.count_nonzero(ge, axis=-1) > k)
    if tied.size:
      st, th = s[tied], kth[tied]
      gt, eq = st > th, st == th
      need = k - np.count_nonzero(gt, axis=-1)
      ge[tied] = gt | (eq & (np.cumsum(eq, axis=-1) <= need[:, None]))
    cols = np.flatnonzero(ge).reshape(B, k)                       # (B, k) flat, index order
    cols -= (np.arange(B) * C)[:, None]
  else:
    cols = np.broadcast_to(np.arange(C), (B, C))
  vals = np.take_along_axis(s, cols, axis=-1).view(np.uint32) ^ np.uint32(0x80000000)
  order = np.sort(((~vals).astype(np.uint64) << np.uint64(32)) | cols.astype(np.uint64),
                  axis=-1)
  return (order & np.uint64(0xFFFFFFFF)).astype(np.int32)


def ranks_from_top(idx, C: int):
  """(R, C) int32 rank of each key in the order of ``idx`` (R, k); keys outside it get k.
  Selection for N <= k: ``vis & (rank < N)``. An index >= C (padding: no key) is dropped."""
  R, k = idx.shape
  rank = jnp.full((R, C), k, jnp.int32)
  return rank.at[jnp.arange(R)[:, None], idx].set(jnp.arange(k, dtype=jnp.int32)[None, :],
                                                   mode="drop")
