"""Theorem 2 on a model (Algorithm 4): one layer's heads, every query with its causal prefix,
the per-head vectors projected onto the sphere S^{d-1}(M) (Assumption 1).

:func:`layer_sums` is the per-layer kernel, on the device under jit: each row's top max(N) + 1
keys from one ``lax.top_k`` (:func:`limits.selection.top_k_rows`, the one tie rule), every N a
rank cut (no L × L cumsum), causal query blocks of ``ROW_BLOCK`` rows (block b reads only the
keys it can see, see :func:`layer_sums`), every N at once (one (R·K, d) @ (d, C) product for
the distances r needs), and Theorem 2's ξ_i and bounds over the <= N selected weights in
sorted order (sums over N, not L). :func:`layer_sums_reference` is the previous path (every
row sorted, selection and bounds over whole rows); tests/test_separability.py checks the two
agree (float64, ties).

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

from limits.distance.kernels import block_visible, causal_blocks, check_window
from limits.selection import ranks_from_top, sort_desc, sort_rows, top_k_rows, visible_window
from limits.separability.rows import (_bounds_from_selected, row_stats,
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


def _block_sums(a, x, dl, M, lo, *, ns: tuple, rule: str, window: int = 0):
  """(K, F) sums of the queries lo … lo + R − 1 of one head: a (R, C) their weights over the
  C = lo + R keys they can see (the records' dtype; cast to x's), x (C, d) on the sphere,
  dl (R,) their deltas, ns the K values of N (static); window: static W > 0 in a
  sliding-window layer. Every N at once:

  - s_N = Σ_{i ∈ I_N} α_i x_i for every N from the top-k keys in selection order (R, k, d)
    (O(R·K·k·d), not a masked (R, C) product per N);
  - ⟨x_j, s_N⟩ for every visible key j and every N in one product (R·K, d) @ (d, C): r, the
    minimum over the non-selected keys, needs all of them (Algorithm 4's dominant work);
  - the selected keys' distances gathered from the same (R, K, C) matrix, so a selected and
    a non-selected key with the same α and x get the same bits (a tie ‖α_i x_i − s‖ = r is
    decided as the reference decides it when both sides round alike).
  """
  R, C = a.shape
  dt = x.dtype
  K, kmax = len(ns), max(ns)
  ns = jnp.asarray(ns, jnp.int32)                            # (K,)
  vis = block_visible(lo, R, C, window)                      # (R, C) causal prefix / window
  k = min(kmax + 1, C)
  # Selection on the records' own values: float32 records cast to float64 keep their order
  # and ties exactly, so top_k_rows needs no float64 fallback (its lax.cond and stable sort).
  idx = top_k_rows(jnp.where(vis, a, 0), vis, k, ns)         # (R, k) selection order
  a = jnp.where(vis, a.astype(dt), 0)
  rank = ranks_from_top(idx, C)                              # (R, C)
  a_top = jnp.take_along_axis(a, idx, axis=-1)               # (R, k) weights, sorted
  vis_top = jnp.take_along_axis(vis, idx, axis=-1)
  x_top = x[idx]                                             # (R, k, d)
  xx = jnp.sum(x * x, axis=-1)                               # (C,)
  keep_t = jnp.sum(vis, axis=-1)                             # visible keys per query
  in_n = vis_top[:, None] & (jnp.arange(k)[None, None, :] < ns[None, :, None])  # (R, K, k)
  # (R, K, d) context vectors: a batched (K, k) @ (k, d) product per row (a cumsum over k
  # lowers to an O(k²) reduce-window on CPU: 10x slower).
  s = jnp.einsum("rnk,rkd->rnd", jnp.where(in_n, a_top[:, None], 0), x_top)
  xs = jnp.einsum("rnd,cd->rnc", s, x)                       # (R, K, C) ⟨x_j, s_N⟩
  ss = jnp.sum(s * s, axis=-1)                               # (R, K)
  d2 = jnp.maximum(a[:, None] * a[:, None] * xx - 2 * a[:, None] * xs + ss[..., None], 0)
  nonsel = vis[:, None] & (rank[:, None] >= ns[None, :, None])           # (R, K, C)
  # r = min over non-selected of the distance; sqrt is monotone, so sqrt(min) = min(sqrt).
  r = jnp.sqrt(jnp.min(jnp.where(nonsel, d2, jnp.inf), axis=-1))         # (R, K)
  dist = jnp.sqrt(jnp.take_along_axis(d2, jnp.broadcast_to(idx[:, None], (R, K, k)), axis=-1))
  if rule == "strict":
    inside = in_n & (dist < r[..., None])
  else:  # literal: the token that sets r is never outside B_r(s); only rows without one
    inside = in_n & (dist <= r[..., None]) & ~jnp.any(nonsel, axis=-1)[..., None]
  n_s = jnp.sum(inside, axis=-1)
  n_eff = jnp.sum(in_n, axis=-1)
  frac = jnp.where(n_eff > 0, n_s / jnp.maximum(n_eff, 1), 1.0).astype(dt)
  # Theorem 2's bounds over the k <= max N + 1 sorted keys, every N at once (a loop over N
  # with each N's own keys does fewer exps but multiplies the compile time by K).
  lower_raw, upper, upper_p = _bounds_from_selected(
      jnp.broadcast_to(a_top[:, None], (R, K, k)), in_n, M, dl[:, None], r, clip=False,
      printed=True, product=True)                            # each (R, K)
  keep = keep_t[:, None] > ns[None, :]                       # (R, K) t > N (AMBIG-8)
  z = lambda v: jnp.sum(jnp.where(keep, v, 0), axis=0)       # (K,)
  return jnp.stack([z(frac), z(jnp.maximum(lower_raw, 0)), z(lower_raw), z(upper),
                    z(r), z(jnp.broadcast_to(dl[:, None], (R, K))), z(upper_p),
                    jnp.sum(keep, axis=0).astype(dt)], axis=-1)


ROW_BLOCK = 256  # queries per causal block: 4 blocks at L = 1,024 (0.62·L² of the products;
# more blocks cut that towards L²/2 but each is compiled separately)


@functools.partial(jax.jit, static_argnames=("ns", "rule", "blocks", "window", "dtype"))
def _layer_kernel(weights, v, M, *, ns: tuple, rule: str, blocks: int, window: int = 0,
                  dtype=None):
  L = weights.shape[-1]
  dt = weights.dtype if dtype is None else dtype

  def head(args):
    w, vh = args
    # w stays in the records' dtype: _block_sums selects on it and casts to dt (exact)
    x = normalize_to_sphere(vh.astype(dt), M)                # (L, d)
    delta = window_min_pairwise_distance(x, window)          # (L,) delta of each query's keys
    dl = jnp.where(jnp.isfinite(delta), delta, 0)
    return sum(_block_sums(w[lo:hi, :hi], x[:hi], dl[lo:hi], M, lo, ns=ns, rule=rule,
                           window=window)
               for lo, hi in causal_blocks(L, blocks))

  return jax.lax.map(head, (weights, v))


def layer_sums(weights, v, ns, M, *, rule: str = "strict", sorted_rows=None,
               blocks: int | None = None, window: int | None = 0, dtype=None):
  """Sums for every head of one layer and every n: (H, K, F), on the device.

  Args:
    weights: (H, L, L) causal attention rows; v: (H, L, d) value vectors (projected onto
      S^{d-1}(M) here); ns: (K,) top-N values (a sequence, NumPy or JAX array; its maximum
      fixes the static top-k size); M: radius.
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
  return _layer_kernel(weights, v, M, ns=tuple(int(n) for n in ns_host), rule=rule, blocks=nb,
                       window=check_window(window),
                       dtype=None if dtype is None else jnp.dtype(dtype))
