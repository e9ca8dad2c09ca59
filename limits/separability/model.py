"""Theorem 2 on a model (Algorithm 4): one layer's heads, every query with its causal prefix,
the per-head vectors projected onto the sphere S^{d-1}(M) (Assumption 1).

:func:`layer_sums` is the per-layer kernel, on the device under jit: each row's top max(N) + 1
keys from ``lax.top_k`` (:func:`limits.selection.top_k_rows`, the one tie rule; one call per
causal block for every head, :func:`_block_top`, before the loops; on the host for the
step's float32 records, :func:`_block_top_host`, the same indices), every I_N
a threshold on the row (the N-th weight and the index of the last tied key kept: no rank
array, no L × L cumsum), causal query blocks of ``ROW_BLOCK`` rows (block b reads only the
keys it can see, see :func:`layer_sums`) walked in chunks of ``ROW_CHUNK`` rows (their
(R, K, C) distances stay in the cache), every N at once (s_N from the k selected keys'
vectors, one (R·K, d) @ (d, C) product for the distances r needs), ‖α_i x_i − s‖ < r decided on
d² − ‖s‖² (:func:`_excess`: exact for weights far below 1, where ‖s‖²'s rounding used to
decide), and Theorem 2's ξ_i and bounds over the Σ_N min(N, k) selected places in sorted
order (:func:`_ragged`; sums over N, not L). :func:`layer_sums_reference` is the previous
path (every row sorted, selection and bounds over whole rows); tests/test_separability.py
checks the two agree (float64, ties) and checks layer_sums against the plain §2.2 loop and
exact fractions.

Windowed attention (Gemma 3's local layers, ``window`` W > 0): query t sees its last
min(t + 1, W) keys; keys before the window (weight exactly 0) are not tokens of the row: not
non-selected (r is the minimum over the window's non-selected keys), not in the kept rows'
length (t > N counts min(t + 1, W)), and delta (Assumption 2) is the minimum pairwise distance
within the window (:func:`limits.separability.rows.window_min_pairwise_distance`).
tests/test_separability_window.py checks both paths against the rows cut to their windows.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from limits.distance.block import block_visible, causal_blocks
from limits.distance.host_select import block_top_host
from limits.distance.kernels import check_window
from limits.selection import sort_desc, sort_rows, top_k_rows, visible_window
from limits.separability.rows import (row_stats,
                                      window_min_pairwise_distance)

LAYER_FIELDS = ("frac", "lower", "lower_raw", "upper", "r", "delta", "upper_printed", "count")


def normalize_to_sphere(v, M):
  """Projects vectors onto S^{d-1}(M) (Assumption 1, "in practice we normalize"); 0 stays 0."""
  norm = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
  return jnp.asarray(M, v.dtype) * v / jnp.where(norm > 0, norm, 1)


def _head_sums(weights, v, ns, M, rule, srt=None, window: int = 0):
  """One head, reference path: sums over queries with more than n visible keys (AMBIG-8),
  (K, len(LAYER_FIELDS)).

  The sort of every attention row, the projection onto the sphere and the prefix deltas are
  computed once and shared by every n in ``ns``. ``srt`` (L, L): the rows already sorted
  (:func:`sort_rows_host`); else sorted here.
  """
  L = weights.shape[-1]
  visible = jnp.asarray(visible_window(L, window))           # causal prefix (or window)
  x = normalize_to_sphere(v, M)                              # (L, d)
  if srt is None:
    srt = sort_desc(weights, visible)                        # (L, L)
  delta = window_min_pairwise_distance(x, window)            # (L,) delta of query t's keys
  dl = jnp.where(jnp.isfinite(delta), delta, 0)
  t_vis = jnp.sum(visible, axis=-1)                          # t + 1 or min(t + 1, W)

  def one(n):
    st = row_stats(weights, srt, visible, x, n, M, dl, rule=rule)
    keep = t_vis > n
    z = lambda a: jnp.sum(jnp.where(keep, a, 0))
    return jnp.stack([z(st.frac), z(st.lower), z(st.lower_raw), z(st.upper), z(st.r), z(dl),
                      z(st.upper_printed), jnp.sum(keep).astype(weights.dtype)])

  return jax.lax.map(one, ns)


def sort_rows_host(weights, window: int = 0):
  """(…, L, L) causal rows sorted descending on the host, masked keys −inf last: the same
  array as ``sort_desc(weights, tril)``; NumPy's sort is ~20× XLA's on CPU, and the one sort
  per row serves every N (:func:`limits.selection.sort_rows`; ``window`` as there)."""
  return sort_rows(weights, window)


@functools.partial(jax.jit, static_argnames=("rule", "window"))
def layer_sums_reference(weights, v, ns, M, *, rule: str = "strict", sorted_rows=None,
                         window: int = 0):
  """The previous per-layer path (same arguments and result as :func:`layer_sums`): each row
  sorted (or ``sorted_rows`` from :func:`sort_rows_host` with the same ``window``), I_N by a
  cumsum over the row, the bounds over whole rows. Kept as the reference of tests and
  benchmarks."""
  ns = jnp.atleast_1d(jnp.asarray(ns, jnp.int32))
  if sorted_rows is None:
    return jax.lax.map(lambda wv: _head_sums(wv[0], wv[1], ns, M, rule, window=window),
                       (weights, v))
  return jax.lax.map(lambda a: _head_sums(a[0], a[1], ns, M, rule, a[2], window=window),
                     (weights, v, sorted_rows))


def _ragged(ns: tuple, k: int):
  """Static layout of the (N, i) pairs with i < min(N, k): every N's selected places in
  selection order, concatenated (P = Σ_N min(N, k) places instead of K·k).

  Returns (m (P,) the index of N of each place, i (P,) its rank, seg (P, K) 0/1 the place's
  N, loo (k, P) 0/1 with loo[j, p] = 1 iff j < N and j != i: ``w @ loo`` is Theorem 2's
  leave-one-out sum over I_N \\ {i} for every place at once, a sum of exact terms, so a
  selection with one non-zero weight gives exactly 0 (see rows._leave_one_out_sum))."""
  m = np.concatenate([np.full(min(n, k), j) for j, n in enumerate(ns)]).astype(np.int32)
  i = np.concatenate([np.arange(min(n, k)) for n in ns]).astype(np.int32)
  seg = (m[:, None] == np.arange(len(ns))[None, :])
  cut = np.minimum(np.asarray(ns), k)[m]                     # (P,) min(N, k) of each place
  j = np.arange(k)[:, None]
  loo = (j < cut[None, :]) & (j != i[None, :])
  return m, i, seg, loo


def _excess(a, xx, xs):
  """t_j = ‖α_j x_j − s‖² − ‖s‖² = α_j² ‖x_j‖² − 2 α_j ⟨x_j, s⟩ (Gram identity): the one formula
  for selected and non-selected keys. Comparing t decides ‖α_i x_i − s‖ < r without ‖s‖²,
  whose rounding (≈ eps·‖s‖²) swamps the differences between keys of tiny weight (a head
  with one weight near 1: α_i ≈ 1e-14 and d_i − r ≈ 1e-15·r); t keeps them to eps·|t|. Equal
  inputs (a tie: same α and x) give equal bits."""
  return a * a * xx - 2 * a * xs


def _tie_margin(a_p, a_top, vis_top, ss, pm, ns: tuple, k: int, M, d: int, C: int):
  """(R, P) a bound of the rounding of t_i − t_j (:func:`_excess`) between a selected place i
  and any non-selected key j (weight <= α_(N+1), the largest non-selected one): t_i and t_j
  within it count as a tie (the strict rule's ‖α_i x_i − s‖ = r: not inside).

  t_i − t_j = α_i²M² − α_j²M² − 2⟨α_i x_i − α_j x_j, s⟩ with ‖x‖ = M: the products and
  ⟨x, s⟩ (d terms) round to ≈ (d + 2)·eps·(α_i + α_j)·M·(‖s‖ + (α_i + α_j)·M), and s itself
  (a sum of C terms) to ≈ (C + 2)·eps·M·Σ_{I_N} α, which moves t_i − t_j by 2(α_i + α_j)·M
  times that; the factor 4 covers the 2 and the error bounds' second-order terms. Keys of
  tiny weight (α ≈ 1e-14 in a head with one weight near 1) differ in t by far more than
  this; equal (α, x) pairs differ by rounding only and are ties, as in exact arithmetic."""
  dt = a_p.dtype
  eps = jnp.finfo(dt).eps
  nxt = np.minimum(np.asarray(ns), k - 1)                    # (K,) place of the (N+1)-th key
  a_next = jnp.where(vis_top[:, nxt] & (np.asarray(ns) < k), a_top[:, nxt], 0)  # (R, K)
  a_sum = jnp.stack([jnp.sum(a_top[:, :min(n, k)], axis=-1) for n in ns], axis=-1)  # (R, K)
  w = a_p + jnp.take(a_next, pm, axis=-1)                    # (R, P) α_i + α_j (bound)
  s_norm = jnp.sqrt(jnp.take(ss, pm, axis=-1))
  M = jnp.asarray(M, dt)
  return 4 * eps * w * M * ((d + 2) * (s_norm + w * M)
                            + (C + 2) * M * jnp.take(a_sum, pm, axis=-1))


def _rows_sums(a, x, dl, M, lo, valid, *, ns: tuple, rule: str, window: int = 0, idx=None):
  """(K, F) sums of the queries lo … lo + R − 1 of one head (lo may be traced): a (R, C) their
  weights over the C keys of their causal block (the records' dtype; cast to x's), x (C, d) on
  the sphere, dl (R,) their deltas, valid (R,) bool the row is a query (False: padding), ns
  the K values of N (static); window: static W > 0 in a sliding-window layer. Every N at once:

  - the top k = max N + 1 keys of each row (``idx`` (R, k), from :func:`_block_top`; None:
    one ``lax.top_k`` here) in selection order (weight descending, ties to the lower index); I_N is a threshold on the row (the N-th value and
    the index of the last tied key kept), so no (R, C) rank array is built;
  - s_N = Σ_{i ∈ I_N} α_i x_i for every N: one batched product (R, K, k) @ (R, k, d) of the
    selected weights and the selected keys' vectors (R, K, d);
  - ⟨x_j, s_N⟩ for every visible key j and every N in one product (R·K, d) @ (d, C): r, the
    minimum over the non-selected keys, needs all of them (Algorithm 4's dominant work);
  - the selected keys' ⟨x_i, s_N⟩ gathered from the same product, and ‖α_i x_i − s‖ < r
    decided on d² − ‖s‖² (:func:`_excess`, one formula for both sides: a tie with the key
    that sets r stays a tie, and keys of tiny weight are compared without ‖s‖²'s rounding);
  - Theorem 2's ξ_i and bounds over the P = Σ_N min(N, k) selected places only
    (:func:`_ragged`), not K·k.
  """
  R, C = a.shape
  dt = x.dtype
  K, kmax = len(ns), max(ns)
  k = min(kmax + 1, C)
  pm, pi, seg, loo = _ragged(ns, k)                          # (P,), (P,), (P, K), (k, P)
  cut_pos = np.minimum(np.asarray(ns), k) - 1                # (K,) place of each N's last key
  vis = block_visible(lo, R, C, window)                      # (R, C) causal prefix / window
  # Selection on the records' own values: float32 records cast to float64 keep their order
  # and ties exactly, so top_k_rows needs no float64 fallback (its lax.cond and stable sort).
  if idx is None:
    idx = top_k_rows(jnp.where(vis, a, 0), vis, k, jnp.asarray(ns, jnp.int32))  # (R, k)
  a = jnp.where(vis, a.astype(dt), 0)
  a_top = jnp.take_along_axis(a, idx, axis=-1)               # (R, k) weights, sorted
  vis_top = jnp.take_along_axis(vis, idx, axis=-1)
  xx = jnp.sum(x * x, axis=-1)                               # (C,)
  n_vis = jnp.sum(vis, axis=-1)                              # (R,) visible keys per query
  # I_N as a threshold: key j is selected iff α_j > α_(N) or (α_j = α_(N) and j <= the
  # index of the N-th key): lax.top_k's order (ties to the lower index). Rows with <= N
  # visible keys select them all (their α_(N) is a masked key's: every visible j passes).
  thr = jnp.where(vis_top[:, cut_pos], a_top[:, cut_pos], -1.0)  # (R, K) α_(N)
  cut = idx[:, cut_pos]                                      # (R, K)
  jpos = jnp.arange(C, dtype=jnp.int32)
  sel = (a[:, None] > thr[..., None]) | ((a[:, None] == thr[..., None])
                                         & (jpos <= cut[..., None]))
  nonsel = vis[:, None] & ~sel                               # (R, K, C)
  # (R, K, d) context vectors s_N = Σ_{j ∈ I_N} α_j x_j over the k selected keys' vectors
  # (gathered, (R, k, d)): I_N is their first min(N, k) places (the threshold above selects
  # the same keys), so K·k·d per row, not the K·C·d of a product over the whole row (1.15×
  # per SmolLM2 layer, ``python -m benchmarks.separability_model --model=smollm2 --layer=15
  # --pairs=4 --before=a1ca337``; a cumsum over the k places instead, not committed, 0.63×).
  w_top = a_top * vis_top                                    # (R, k) 0 for a masked key
  prefix = jnp.asarray(np.arange(k)[None, :] <= cut_pos[:, None], dt)   # (K, k) place in I_N
  s = jnp.einsum("rnk,rkd->rnd", prefix[None] * w_top[:, None], jnp.take(x, idx, axis=0))
  xs = jnp.einsum("rnd,cd->rnc", s, x)                       # (R, K, C) ⟨x_j, s_N⟩
  ss = jnp.sum(s * s, axis=-1)                               # (R, K)
  t = _excess(a[:, None], xx, xs)                            # (R, K, C) d² − ‖s‖²
  # r² = ‖s‖² + min over non-selected of t (rounding is monotone: the same bits as the
  # minimum of the rounded d², clipped at 0); +inf when every visible key is selected.
  t_min = jnp.min(jnp.where(nonsel, t, jnp.inf), axis=-1)    # (R, K)
  r = jnp.sqrt(jnp.maximum(t_min + ss, 0))                   # (R, K)
  # The P selected places: ⟨x_i, s_N⟩ gathered from the same product.
  flat = (pm * C)[None, :] + jnp.take(idx, pi, axis=-1)     # (R, P) into (K·C)
  xs_p = jnp.take_along_axis(xs.reshape(R, K * C), flat, axis=-1)        # (R, P)
  a_p = jnp.take(a_top, pi, axis=-1)                         # (R, P)
  sel_p = jnp.take(vis_top, pi, axis=-1)                     # (R, P) a visible key
  t_p = _excess(a_p, jnp.take(xx, jnp.take(idx, pi, axis=-1)), xs_p)     # (R, P)
  if rule == "strict":  # ‖α_i x_i − s‖ < r  ⇔  t_i < min over non-selected of t
    inside = sel_p & (t_p < jnp.take(t_min, pm, axis=-1)
                      - _tie_margin(a_p, a_top, vis_top, ss, pm, ns, k, M, x.shape[-1], C))
  else:  # literal: the token that sets r is never outside B_r(s); only rows without one
    inside = sel_p & (n_vis[:, None] <= np.asarray(ns)[pm][None, :])
  segf = jnp.asarray(seg, dt)                                # (P, K)
  n_s = inside.astype(dt) @ segf                             # (R, K) exact counts
  n_eff = sel_p.astype(dt) @ segf
  frac = jnp.where(n_eff > 0, n_s / jnp.maximum(n_eff, 1), 1.0).astype(dt)
  lower_raw, upper, upper_p = _bounds_ragged(w_top, sel_p, jnp.asarray(loo, dt),
                                             segf, pm, M, dl, r, n_eff)  # each (R, K)
  keep = (n_vis[:, None] > np.asarray(ns)[None, :]) & valid[:, None]  # (R, K) t > N (AMBIG-8)
  z = lambda v: jnp.sum(jnp.where(keep, v, 0), axis=0)       # (K,)
  return jnp.stack([z(frac), z(jnp.maximum(lower_raw, 0)), z(lower_raw), z(upper),
                    z(r), z(jnp.broadcast_to(dl[:, None], (R, K))), z(upper_p),
                    jnp.sum(keep, axis=0).astype(dt)], axis=-1)


ROW_CHUNK = 32  # queries per step inside a causal block: (32, K, C) float64 distances stay
# in the L2 cache (256 rows at once spilled it: 1.6x the time of the product and the minimum)


def _padded_rows(R: int) -> int:
  """R block rows rounded up to whole ``ROW_CHUNK`` chunks (:func:`_block_sums`' padding)."""
  rc = min(ROW_CHUNK, R)
  return -(-R // rc) * rc


def _block_top(a, lo: int, *, ns: tuple, window: int = 0):
  """(…, nc·rc, k) int32: the top k = min(max N + 1, C) keys of the queries lo … lo + R − 1
  (a (…, R, C), rows padded to whole ``ROW_CHUNK`` chunks as in :func:`_block_sums`), every
  head of the layer in one ``lax.top_k`` (one call per block: 8 calls of 32 rows per head
  cost ~2x more on XLA's CPU backend; the same indices)."""
  R, C = a.shape[-2:]
  n = _padded_rows(R)
  a = jnp.pad(a, [(0, 0)] * (a.ndim - 2) + [(0, n - R), (0, 0)])
  vis = block_visible(lo, n, C, window)
  return top_k_rows(jnp.where(vis, a, 0), jnp.broadcast_to(vis, a.shape),
                    min(max(ns) + 1, C), jnp.asarray(ns, jnp.int32))


def _block_top_host(a, lo: int, *, ns: tuple, window: int = 0):
  """:func:`_block_top` on the host for float32 weights ``a`` (H, R, C) (NumPy): the same
  (H, padded rows, k) int32 array (:func:`limits.selection.top_k_rows_host`, the indices of
  ``lax.top_k`` on float32 rows, where :func:`limits.selection.top_k_rows` takes them as they
  are). Run before the layer's kernel is dispatched, it overlaps the previous layer's."""
  H, R, C = a.shape
  n = _padded_rows(R)
  if n > R:  # (np.pad copies even when it adds nothing: a block of whole chunks goes as it is)
    a = np.pad(a, ((0, 0), (0, n - R), (0, 0)))
  return block_top_host(a, lo, min(max(ns) + 1, C), window)


def _block_sums(a, x, dl, M, lo: int, *, ns: tuple, rule: str, window: int = 0, idx=None):
  """(K, F) sums of the queries lo … lo + R − 1 of one head: a (R, C) their weights over the
  C = lo + R keys they can see, x (C, d), dl (R,): :func:`_rows_sums` over chunks of
  ``ROW_CHUNK`` rows (``lax.map``: one compiled body per block; the last chunk padded with
  rows that count nowhere); idx (padded rows, k) their top k (:func:`_block_top`), or None:
  each chunk selects its own."""
  R, C = a.shape
  rc = min(ROW_CHUNK, R)
  nc = -(-R // rc)
  pad = nc * rc - R
  a = jnp.pad(a, ((0, pad), (0, 0)))
  dl = jnp.pad(dl, (0, pad))
  first = jnp.arange(nc, dtype=jnp.int32) * rc               # (nc,) each chunk's first row
  ic = None if idx is None else idx.reshape(nc, rc, idx.shape[-1])

  def one(args):
    ac, dc, c0, ic = args
    valid = c0 + jnp.arange(rc) < R
    return _rows_sums(ac, x, dc, M, lo + c0, valid, ns=ns, rule=rule, window=window, idx=ic)

  return jnp.sum(jax.lax.map(one, (a.reshape(nc, rc, C), dl.reshape(nc, rc), first, ic)),
                 axis=0)


def _bounds_ragged(w, sel, loo, seg, pm, M, delta, r, n_eff):
  """Theorem 2's raw lower, derived upper and printed upper bounds (R, K) from the P selected
  places (:func:`_ragged`): w (R, k) the sorted weights (0 for a masked key), sel (R, P) the
  place holds a visible key, loo (k, P), seg (P, K) 0/1, pm (P,) static, delta (R,), r (R, K),
  n_eff (R, K). Same formulas as :func:`limits.separability.rows._bounds_from_selected`."""
  dtype = w.dtype
  M = jnp.asarray(M, dtype)
  delta = jnp.clip(jnp.asarray(delta, dtype), 0, 2 * M)[:, None]        # (R, 1)
  s1 = w @ loo                                               # (R, P) Σ_{I_N \ {i}} α_j
  s2 = (w * w) @ loo                                         # (R, P) Σ_{I_N \ {i}} α_j²
  xi2 = (M * M - delta * delta / 2) * s1 * s1 + (delta * delta / 2) * s2
  xis = jnp.where(sel, jnp.sqrt(jnp.maximum(xi2, 0)), 0)     # (R, P)
  nf = jnp.maximum(n_eff, 1).astype(dtype)
  xi_sum = xis @ seg                                         # (R, K)
  safe_r = jnp.where(r > 0, r, 1)
  lower = jnp.where(r > 0, 1 - xi_sum / (nf * safe_r), -jnp.inf)
  lower = jnp.where(n_eff > 0, lower, 1)
  r_p = jnp.take(r, pm, axis=-1)                             # (R, P)
  gap = jnp.maximum(xis - r_p, 0)                            # (ξ_i − r)_+ ; 0 when r = +inf
  terms = jnp.where(sel, jnp.exp(-gap * gap / (2 * M * M)), 0)
  upper = jnp.where(n_eff > 0, (terms @ seg) / nf, 1)
  # The printed form (1/N)·Σ exp[−(r − ξ_i)²/(16M²)] (no positive part); 1 where r = +inf.
  finite = jnp.isfinite(r)
  d = jnp.where(jnp.take(finite, pm, axis=-1), r_p - xis, 0)
  pterms = jnp.where(sel, jnp.exp(-d * d / (16 * M * M)), 0)
  upper_printed = jnp.where((n_eff > 0) & finite, (pterms @ seg) / nf, 1)
  return lower, upper, upper_printed


ROW_BLOCK = 256  # queries per causal block: 4 blocks at L = 1,024 (0.62·L² of the products;
# more blocks cut that towards L²/2 but each is compiled separately)


@functools.partial(jax.jit, static_argnames=("ns", "rule", "blocks", "window", "dtype",
                                             "block_top"))
def _layer_kernel(weights, v, M, tops=None, *, ns: tuple, rule: str, blocks: int,
                  window: int = 0, dtype=None, block_top: bool = True):
  """:func:`layer_sums`'s kernel. ``block_top``: every head's top k keys per causal block in
  one ``lax.top_k`` before the loops (:func:`_block_top`); False: each chunk of ``ROW_CHUNK``
  rows selects its own inside the loop (the previous kernel, the reference of
  tests/test_separability_top.py: the same indices, ~10 % more CPU time per layer).
  ``tops``: those per-block indices already selected (:func:`_block_host_tops`), or None."""
  L = weights.shape[-1]
  dt = weights.dtype if dtype is None else dtype

  spans = causal_blocks(L, blocks)
  if tops is None:
    tops = tuple(_block_top(weights[:, lo:hi, :hi], lo, ns=ns, window=window) if block_top
                 else None for lo, hi in spans)             # each (H, rows, k)

  def on_sphere(vh):
    x = normalize_to_sphere(vh.astype(dt), M)                # (L, d)
    delta = window_min_pairwise_distance(x, window)          # (L,) delta of each query's keys
    return x, jnp.where(jnp.isfinite(delta), delta, 0)

  def sums(w, x, dl, top):
    # w stays in the records' dtype: _block_sums selects on it and casts to dt (exact)
    return sum(_block_sums(w[lo:hi, :hi], x[:hi], dl[lo:hi], M, lo, ns=ns, rule=rule,
                           window=window, idx=idx)
               for (lo, hi), idx in zip(spans, top))

  if v.ndim == 2:  # one (L, d) for every head (the residual stream): projected and its
    x, dl = on_sphere(v)  # deltas (an (L, L) Gram of d = 576 for SmolLM2) computed once
    return jax.lax.map(lambda args: sums(args[0], x, dl, args[1]), (weights, tops))
  return jax.lax.map(lambda args: sums(args[0], *on_sphere(args[1]), args[2]),
                     (weights, v, tops))


def _block_host_tops(weights, ns: tuple, blocks: int, window: int):
  """Every causal block's :func:`_block_top_host` of float32 host weights (H, L, L)."""
  L = weights.shape[-1]
  return tuple(_block_top_host(weights[:, lo:hi, :hi], lo, ns=ns, window=window)
               for lo, hi in causal_blocks(L, blocks))


def layer_sums(weights, v, ns, M, *, rule: str = "strict", sorted_rows=None,
               blocks: int | None = None, window: int | None = 0, dtype=None,
               host_top: bool | None = None):
  """Sums for every head of one layer and every n: (H, K, F), on the device.

  Args:
    weights: (H, L, L) causal attention rows; v: (H, L, d) value vectors, or (L, d) vectors
      shared by every head (the residual stream: projected and its deltas taken once), each
      projected onto S^{d-1}(M) here; ns: (K,) top-N values (a sequence, NumPy or JAX
      array; its maximum fixes the static top-k size); M: radius.
    sorted_rows: accepted for compatibility and unused (selection is ``lax.top_k`` on the
      device).
    blocks: causal query blocks (default ceil(L / ROW_BLOCK): block b reads only the keys
      its queries can see, ≈ L²/2 of the (L, L) products, and its (R, K, C) distances stay
      near the cache). Any count gives the same values up to the products' rounding (~1e-16
      relative), which can decide an exact distance tie ‖α_i x_i − s‖ = r differently.
    window: the layer's sliding window (the record's ``window``): W > 0 for a local layer
      (each query's last min(t + 1, W) keys), 0 or None for a global one.
    dtype: the computation's dtype (default the inputs'); the float32 records are cast on the
      device, inside the kernel (no host-side float64 copy).
    host_top: select each block's top k keys on the host (:func:`_block_top_host`: the same
      indices as the kernel's ``lax.top_k``, ~2× less CPU time) before the kernel is
      dispatched; needs float32 NumPy weights. None: when ``weights`` is a float32 NumPy
      array (the step passes the records as read) and JAX runs on the CPU (where NumPy's
      partition beats XLA's CPU top-k), else on the device (a GPU or TPU selects there).

  F = len(LAYER_FIELDS): sums over the kept queries (t > n) of N_s/N, clipped and raw lower
  bound, upper bound, r, delta, the printed upper bound and the number of kept queries. Heads
  run one at a time (``lax.map``), every N at once. Same values as
  :func:`layer_sums_reference` up to rounding (summation order of the bounds and of the
  context vector: a prefix sum over the selected keys instead of a masked row product).
  """
  del sorted_rows
  ns_host = np.asarray(jax.device_get(ns)).reshape(-1).astype(np.int32)
  L = weights.shape[-1]
  nb = -(-L // ROW_BLOCK) if blocks is None else int(blocks)
  ns_t, window = tuple(int(n) for n in ns_host), check_window(window)
  if host_top is None:
    host_top = (isinstance(weights, np.ndarray) and weights.dtype == np.float32
                and jax.default_backend() == "cpu")
  tops = None
  if host_top:
    if np.dtype(weights.dtype) != np.float32:
      raise ValueError("host_top needs float32 weights (the indices of lax.top_k on them)")
    tops = _block_host_tops(np.asarray(weights), ns_t, nb, window)
  return _layer_kernel(jnp.asarray(weights), jnp.asarray(v), M, tops, ns=ns_t, rule=rule,
                       blocks=nb, window=window,
                       dtype=None if dtype is None else jnp.dtype(dtype))
