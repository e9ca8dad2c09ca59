"""Theorem 1 per layer, fast path (Algorithms 1-3 on a model): same values as
:func:`limits.distance.heads.head_stats`.

Selection (the one tie rule, :mod:`limits.selection`): for N <= :data:`TOPK_MAX` (Algorithms
1-2) each row's top max(N) + 1 keys come from one ``lax.top_k`` on the device
(:func:`layer_kernel`, everything under jit, no host round trip), or, on the CPU backend for
float32 NumPy records and max N >= ``HOST_TOP_FROM`` (Algorithm 2), the same indices from
NumPy (:mod:`limits.distance.host_select`: 5-10 % less CPU time per SmolLM2 layer); larger N (Algorithm 3's
search) use rows sorted once on the host (:func:`sort_rows`) and a threshold per N with an
index cut for ties (:func:`thresholds_from_sorted`). The per-N work of all queries of a causal
query block is two (R, C)·(C, d) products through the Gram identities:

  s_N = A_N X (R, d),  c_N = s_N Xᵀ (R, C),  ‖α_i x_i − s‖² = α_i²‖x_i‖² − 2α_i c_i + ‖s‖².

Per-N passes over a block's (R, C) rows are what a layer costs (issue 27): what does not
depend on N is done once per block (the Jensen gap's sum, the d_1 gathers of the selection
order, :func:`.farthest.prefix_gathers`), and the d_max spread of non-negative rows is a closed
form (:func:`_block_rows`); Algorithm 3's search (``lean``) skips the gap it does not read.

Compile time (what a short run pays): the per-N body is traced once and looped over the K
values of N (``lax.map``), float32 records are selected as they are (no float64 tie fallback
is compiled for them) and cast to the compute dtype after, and a layer is one causal block
below :data:`BLOCKS_FROM_LENGTH` (each block is its own copy of the kernel).
benchmarks/distance_compile.py measures the first call and the run against an earlier commit.

d_1 is computed only when the bound is verified (:mod:`limits.distance.farthest`). Device
path: from the per-key prefix maxima of the distance matrix (once per head, shared by its
causal blocks with the distance matrix and x's prefix sums: :func:`_head_shared`), exact, with
the gather of the <= N selected rows only for rows whose farthest pair lies inside I_N; for
few small N (K·(max N + 1) <= :data:`D1_DIRECT_K`, Algorithm 1's N = 5) directly from the
distance rows of each row's selected keys (no prefix maxima: 1.14-1.17× less CPU per SmolLM2
layer at L = 1,024, same values).
Host path: the gather for every row. The paper's printed E (both x̄ readings) and the E with
p = N/L are folded into the same kernel on request (:func:`layer_stats_printed`: the shared
s_all, c_all and causal blocks). Same semantics as ``head_stats`` (causal prefix, ties to the
lower index, t <= N skipped); tests/test_distance_fast.py checks it against ``head_stats``
(1e-12 relative, float64, ties included) and the printed E against :mod:`limits.distance.printed`.

Windowed attention (Gemma 3's local layers, ``window`` W > 0): query t sees only its last
min(t + 1, W) keys. Keys outside the window have weight exactly 0 and are not tokens of the
row: they are neither selected nor non-selected, and every length in the formulas (t in
p = N/(t − 1), (t − N)/t, the counted rows t > N, x̄ of the printed E) is the effective length
min(t + 1, W). tests/test_distance_window.py checks every quantity against the row cut to its
window.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from limits.distance import farthest
from limits.distance.heads import HeadStats, reduce_rows
from limits.distance.block import block_rows as _block_rows, block_visible, causal_blocks
from limits.distance.host_select import host_top, use_host_top
from limits.distance.rows import RowStats, check_inclusion
from limits.errors import LimitsError
from limits.selection import (ranks_from_top, select_thresholds, sort_rows,
                              thresholds_from_sorted, top_k_rows)


PRINTED = ("expected_printed_output", "expected_printed_xmean", "expected_nl")
# Largest top-N served by one device ``lax.top_k`` per row; larger N (Algorithm 3's search up
# to L − 1) use the host sort and thresholds.
TOPK_MAX = 128
# The token averages computed with ``avg_dtype`` (float32 in the steps, issue 27): E and the
# printed E / E with p = N/L of :data:`PRINTED` (HeadStats' ``expected``; the Jensen gap ε's
# N-independent sum stays in the compute dtype, :mod:`limits.distance.block`). They are reported and plotted, and compared to nothing row by row: each
# per-row term carries a relative error of a few float32 ulp (~1e-7), and the token averages
# of SmolLM2 at L = 1,024 (layers 0 and 20, float32 vs float64) differ by <= 1.1e-8 relative;
# AVG32_RTOL, ~100× that, is the tolerance tests/test_distance_avg32.py holds them to, far
# below the margins the claims read them with (linear fits, plateau ratios: >= 1e-2). The one
# order a per-head E enters, the KS test of the vary steps' summary, is guarded by
# :func:`limits.distance.task.ks_order_safe` (float64 again within 2·AVG32_RTOL).
AVERAGED = ("expected",) + PRINTED
AVG32_RTOL = 1e-6


def _head_shared(x, *, bound: bool, printed: bool, window: int, prefix: bool = True):
  """The block-independent arrays of one head (see :func:`_block_rows`' ``shared``), over all
  L keys; a block [lo, hi) reads rows lo … hi − 1 and keys < hi of them (:func:`_cut`). The
  prefix maxima of a block's rows use keys <= query < hi only, so they equal the block's own."""
  out = {"n2": jnp.sum(x * x, axis=-1)}  # (L,)
  if bound:
    out["dist2"] = farthest.dist2(x, out["n2"])  # (L, L)
    if prefix:  # else d_1 from the selected keys' rows directly (D1_DIRECT_K)
      out["P"], out["I"] = farthest.prefix_maxima(out["dist2"])  # (L, L) each, row = query
  if printed and not window:
    out["xcum"] = jnp.cumsum(x, axis=0)  # (L, d)
  return out


def _cut(shared, lo: int, hi: int):
  """``shared`` cut to the causal block [lo, hi): keys < hi, rows lo … hi − 1."""
  cut = {"n2": shared["n2"][:hi]}
  if "dist2" in shared:
    cut["dist2"] = shared["dist2"][:hi, :hi]
  if "P" in shared:
    cut.update(P=shared["P"][lo:hi, :hi], I=shared["I"][lo:hi, :hi])
  if "xcum" in shared:
    cut["xcum"] = shared["xcum"][lo:hi]
  return cut


# Below this length a layer is one block: every block is compiled as its own copy of the
# kernel (4 blocks: 2.4-3.3× the compile time of 1; at L = 512 on 2 cores, no persistent
# cache, first call 1.3-1.4 s -> 3.3-3.5 s with N = 5, 2.1 -> 4.8 s with Algorithm 2's five N),
# and the work saved (38 % of the products and elementwise passes) shows only at long rows.
# 1,024 until the twenty-second session, from a probe of the embedded model's shapes under
# load 11-15 (L = 512: 0.17 s with 1 block, 0.30 s with 4). Today's kernel at L = 512, a
# SmolLM2 layer (`python -m benchmarks.distance_ab --ref=eb9476a --model=smollm2 --length=512
# --cases=alg1p,alg2p --pairs=5`, 2026-12-07, idle): 1.6x (N = 5), 1.7x (five N) with 4
# blocks. A scratch script (float64, printed E, float32 averages, median of 4 alternated
# calls, random rows), L = 512: SmolLM2's value shapes (9 heads, d = 64) 0.084 -> 0.057 s
# with N = 5 and 0.264 -> 0.177 s with N = 1, 5, 10, 20, 100; its residual stream (d = 576)
# 0.239 -> 0.187 and 0.649 -> 0.403 s; the embedded model's (4 heads, d = 32) 0.027 -> 0.014
# and 0.092 -> 0.065 s. At L = 256 no gain (d = 256, five N: 0.144 vs 0.150 s); at L = 1,024
# 8 blocks instead of 4: 0.213 -> 0.209 and 0.579 -> 0.565 s (not taken: twice the compile).
BLOCKS_FROM_LENGTH = 512


def default_blocks(L: int) -> int:
  """Causal query blocks used for an L × L layer: 1 below BLOCKS_FROM_LENGTH, else 4."""
  return 1 if L < BLOCKS_FROM_LENGTH else 4


def _reduce(parts, printed: bool):
  """Per-block (RowStats, printed rows) → (HeadStats (K,), printed sums (K, 3) or None)."""
  rows = RowStats(*[jnp.concatenate(f, axis=0) for f in zip(*[p[0] for p in parts])])
  extra = sum(jnp.sum(p[1], axis=0) for p in parts) if printed else None
  return reduce_rows(rows), extra


@functools.partial(jax.jit, static_argnames=("cap", "inclusion", "bound", "row_block",
                                             "blocks", "printed", "window", "lean"))
def _layer_kernel(weights, x, thr, cut, ns, *, cap: int, inclusion: str, bound: bool,
                  row_block: int, blocks: int, printed: bool = False, window: int = 0,
                  lean: bool = False):
  """Host-threshold path: HeadStats (G, K) for G heads: weights (G, L, L), x (G, L, d),
  thr/cut (G, L, K) from :func:`thresholds_from_sorted` (any N up to L); cap (static) bounds
  the N values (the d_1 gather size). lean: the Jensen gap left 0 (Algorithm 3's search reads
  only d̃ and E)."""
  L = weights.shape[-1]

  def per_head(args):
    a, xh, th, ct = args
    parts = []
    for lo, hi in causal_blocks(L, blocks):
      ab = a[lo:hi, :hi]
      kpos = jnp.arange(hi)
      vis = block_visible(lo, hi - lo, hi, window)
      av = jnp.where(vis, ab, 0.0)
      tb, cb = th[lo:hi], ct[lo:hi]  # (R, K)
      select = lambda k, av=av, vis=vis, kpos=kpos, tb=tb, cb=cb: select_thresholds(
          av, tb[:, k], cb[:, k], vis, kpos)
      parts.append(_block_rows(ab, xh[:hi], select, ns, lo, cap=cap, inclusion=inclusion,
                               bound=bound, row_block=row_block, printed=printed,
                               window=window, lean=lean and not printed))
    return _reduce(parts, printed)

  return lax.map(per_head, (weights, x, thr, cut))


# d_1 by the prefix maxima (one C-step scan per head, then (R, k) gathers per N) or, when
# K·(kmax + 1) <= D1_DIRECT_K (K values of N, the top kmax + 1 keys), directly from the
# distance rows of each row's selected keys (farthest.d1_sq_top, K·(kmax + 1)·C per row): same
# values (the maximum of the same entries). Algorithm 1 (N = 5) takes the direct path.
D1_DIRECT_K = 16


def _block_top(ab, vis, kmax: int, ns):
  """Selection order (R, k) of one causal block's rows: top kmax + 1 keys (the one tie rule)."""
  return top_k_rows(jnp.where(vis, ab, 0.0), vis, min(kmax + 1, ab.shape[-1]), ns)


@functools.partial(jax.jit, static_argnames=("kmax", "blocks", "window", "width"))
def layer_top(weights, ns, *, kmax: int, blocks: int = 4, window: int = 0,
              width: int | None = None):
  """The selection order :func:`layer_kernel` computes, once: a tuple over the causal blocks
  (:func:`causal_blocks`) of (G, R_b, min(kmax + 1, hi_b)) int32 key indices, to pass as its
  ``top`` so that calls for other Ns (Algorithm 3's scan batches) do not select again.
  weights (G, L, L); ns: every N the order will serve (each <= kmax; the float64 tie check of
  :func:`limits.selection.top_k_rows` reads them).

  ``width`` (>= kmax): the order of the top kmax + 1 keys, padded to min(width + 1, hi_b)
  columns with the key index hi_b (outside the block: no key), so that a ``layer_kernel``
  compiled for ``kmax=width`` serves every N <= kmax (with ``bound=False``: the rank of a key
  beyond the first kmax + 1 is then width + 1, the padding is dropped; a larger top-k costs
  more: ``lax.top_k`` of 257 keys per row takes ~9× the time of 9 on CPU)."""
  L = weights.shape[-1]

  def per_head(a):
    out = []
    for lo, hi in causal_blocks(L, blocks):
      idx = _block_top(a[lo:hi, :hi], block_visible(lo, hi - lo, hi, window), kmax, ns)
      if width is not None and min(width + 1, hi) > idx.shape[-1]:
        idx = jnp.pad(idx, ((0, 0), (0, min(width + 1, hi) - idx.shape[-1])),
                      constant_values=hi)
      out.append(idx)
    return tuple(out)

  return lax.map(per_head, weights)


@functools.partial(jax.jit, static_argnames=("kmax", "inclusion", "bound", "blocks",
                                             "printed", "dtype", "window", "lean", "avg_dtype"))
def layer_kernel(weights, x, ns, *, kmax: int, inclusion: str = "n_over_l_minus_1",
                 bound: bool = True, blocks: int = 4, printed: bool = False, dtype=None,
                 window: int = 0, top=None, lean: bool = False, avg_dtype=None):
  """Device path, everything under jit: (HeadStats (G, K), printed sums (G, K, 3) or None).

  weights (G, L, L) causal rows, x (G, L, d) or (L, d) shared by the G heads (what does not
  depend on the head, :func:`_head_shared`, is then computed once), ns (K,) int32 each <= kmax
  (static). Each row's
  top kmax + 1 keys from one ``lax.top_k`` (:func:`limits.selection.top_k_rows`, the one tie
  rule), I_N as a rank cut, d_1 from the per-key prefix maxima (:func:`.farthest.d1_sq_prefix`), the
  printed E (:data:`PRINTED`, sums over counted queries) on the same s, c and causal blocks.
  ``dtype`` (static, default x's) is the compute dtype: float32 weights (model records) are
  selected as they are and cast after, so no float64 tie fallback is compiled for them
  (:func:`limits.selection.top_k_rows`: a float32 row needs none).
  window: static W > 0 for a sliding-window layer (each query's last min(t + 1, W) keys).
  top: the selection order from :func:`layer_top` (same kmax, or ``width=kmax``; blocks,
  window) or :func:`host_top` (the same indices, on the host;
  :mod:`limits.distance.host_select`), reused instead of selecting
  again; a padded order (``width``) with ``bound=False`` only. lean: see :func:`_block_rows`
  (Algorithm 3's scan). avg_dtype (static): the dtype of the averaged-only passes
  (:data:`AVERAGED`, :func:`_block_rows`); None = ``dtype``.
  """
  L = weights.shape[-1]
  exact_top = top is None or all(t.shape[-1] == min(kmax + 1, hi) for t, (_, hi) in
                                 zip(top, causal_blocks(L, blocks)))
  if not exact_top and bound:
    raise ValueError("layer_kernel: a padded selection order (top, width > kmax) serves "
                     "bound=False only")
  dtype = x.dtype if dtype is None else jnp.dtype(dtype)
  x = x.astype(dtype)
  head_shared = functools.partial(_head_shared, bound=bound, printed=printed and not lean,
                                  window=window, prefix=ns.shape[0] * (kmax + 1) > D1_DIRECT_K)
  # x (L, d): one reading shared by every head (the residual stream, AMBIG-7): its arrays
  # (‖x‖², the distance matrix, its prefix maxima, x's prefix sums) computed once, not per head.
  common = head_shared(x) if x.ndim == 2 else None

  def per_head(args):
    if common is not None:
      (a, tops), xh, shared = args, x, common
    else:
      a, xh, tops = args
      shared = head_shared(xh)
    parts = []
    for b, (lo, hi) in enumerate(causal_blocks(L, blocks)):
      ab = a[lo:hi, :hi]
      vis = block_visible(lo, hi - lo, hi, window)
      idx = _block_top(ab, vis, kmax, ns) if tops is None else tops[b]  # (R, k)
      rank = ranks_from_top(idx, hi)
      select = lambda k, vis=vis, rank=rank: vis & (rank < ns[k])
      parts.append(_block_rows(ab.astype(dtype), xh[:hi], select, ns, lo, cap=kmax,
                               inclusion=inclusion, bound=bound, row_block=1, top_idx=idx,
                               printed=printed, window=window, lean=lean,
                               shared=_cut(shared, lo, hi), rank=rank,
                               avg_dtype=avg_dtype, top_s=exact_top and not lean))
    return _reduce(parts, printed)

  return lax.map(per_head, (weights, top) if common is not None else (weights, x, top))


def _prepare(weights, x, ns, dtype):
  ns = [int(n) for n in ns]
  if not ns or min(ns) < 1:
    raise LimitsError(f"top-N sizes {ns} must be positive integers")
  w = np.asarray(weights, dtype=dtype or np.asarray(weights).dtype)
  B, H, L, _ = w.shape
  x = np.asarray(x, dtype=w.dtype)
  if x.ndim == 3:
    x = np.broadcast_to(x[:, None], (B, H) + x.shape[1:])
  return w, x, ns


def on_device(a):
  """``a`` as a device array: a JAX array as it is, a host array placed explicitly (no
  implicit transfer where the layer kernels run under ``jax.transfer_guard``)."""
  return a if isinstance(a, jax.Array) else jax.device_put(np.asarray(a))


def _device_arrays(weights, x, dtype):
  """(weights (B·H, L, L), x (B·H, L, d), (B, H, L), compute dtype) as device arrays: JAX
  arrays (e.g. a layer's records) stay on the device, NumPy arrays are placed explicitly.
  x is cast to the compute dtype (``dtype``, default the weights'); float32 (or narrower)
  weights stay float32 (exact: the kernel selects on them and casts after), wider ones are
  cast to the compute dtype. x (1, L, d) shared by the heads of one window comes back as
  (L, d), not broadcast (:func:`layer_kernel` then computes its per-head arrays once)."""
  weights, x = on_device(weights), on_device(x)
  compute = jnp.dtype(dtype or weights.dtype)
  narrow = jnp.issubdtype(weights.dtype, jnp.floating) and weights.dtype.itemsize <= 4
  w = weights.astype(jnp.float32 if narrow and compute.itemsize > 4 else compute)
  B, H, L, _ = w.shape
  x = x.astype(compute)
  if x.ndim == 3 and B == 1:
    return w.reshape(B * H, L, L), x[0], (B, H, L), compute
  if x.ndim == 3:
    x = jnp.broadcast_to(x[:, None], (B, H) + x.shape[1:])
  return w.reshape(B * H, L, L), x.reshape(B * H, L, x.shape[-1]), (B, H, L), compute


def top_k_size(n_max: int, L: int) -> int:
  """A bucketed static top-k size for a largest N of ``n_max``: the next power of two (at
  least 8), at most L. A larger k selects the same first N keys (values unchanged); Algorithm
  3's ascending scan (:mod:`limits.distance.scan`) sizes its kernel (N_max) and its kept
  selection order (the largest N asked so far) with it, so that batches with another maximum
  share a compile (~36 s each at L = 256, 4 heads of 256 dimensions, loaded machine; 0.16 s
  per call once compiled). :func:`layer_stats` (Algorithms 1-2, one call per layer and L with
  the same Ns) takes the exact max N: lax.top_k's time grows with k."""
  return int(min(max(8, 1 << (int(n_max) - 1).bit_length()), L))


def check_window(window) -> int:
  """A layer's sliding window as a static int: W > 0 local, 0 (or None) global."""
  w = 0 if window is None else int(window)
  if w < 0:
    raise LimitsError(f"sliding window {window} must be a positive number of keys, or 0 / None "
                      "for a global layer")
  return w


def _avg_name(avg_dtype, compute):
  """The averaged-only passes' dtype for layer_kernel: None unless narrower than compute."""
  if avg_dtype is None:
    return None
  avg = jnp.dtype(avg_dtype)
  return avg.name if avg.itemsize < compute.itemsize else None


class Pending:
  """A layer's statistics dispatched and not yet read back (:func:`layer_stats` with
  ``wait=False``): :meth:`result` waits for the device and returns what the call would have
  returned. A caller streaming layers (:meth:`limits.distance.model.ModelEvaluator.head_stats`)
  reads layer l back after dispatching layer l + 1 (two layers dispatched and waited for in
  worker threads, :func:`limits.records.streaming.in_threads`, :meth:`block_until_ready`), so
  the host's work between two kernels (reading and checking the next records, placing them,
  Algorithm 2's host top k) overlaps the device's instead of leaving it idle; the same arrays,
  read in the same order."""

  def __init__(self, out, shape, finish=None):
    self._out, self._shape, self._finish = out, shape, finish

  def block_until_ready(self) -> "Pending":
    """Waits for the device arrays, not for the host finish (``jax.block_until_ready`` calls
    it: ``records.streaming.in_threads`` waits in a worker thread, then :meth:`result` reads
    back on the caller's)."""
    jax.block_until_ready(self._out)
    return self

  def result(self):
    out = jax.device_get(self._out)
    out = jax.tree.map(lambda v: np.asarray(v).reshape(self._shape + v.shape[1:]), out)
    return out if self._finish is None else self._finish(out)


def _dispatch(weights, x, ns, *, inclusion, bound, dtype, sorted_rows, blocks, printed,
              window=0, lean=False, avg_dtype=None, finish=None) -> Pending:
  """Places the arrays and dispatches the layer kernel; no wait (:class:`Pending`)."""
  check_inclusion(inclusion)
  window = check_window(window)
  ns = [int(n) for n in ns]
  if not ns or min(ns) < 1:
    raise LimitsError(f"top-N sizes {ns} must be positive integers")
  nsj = jax.device_put(np.asarray(ns, np.int32))
  if sorted_rows is None and max(ns) <= TOPK_MAX:  # device path: no host round trip
    L = weights.shape[-1]
    kmax = min(max(ns), L)  # exact: no scan shares this compile, lax.top_k's time grows with k
    nb = default_blocks(L) if blocks is None else int(blocks)
    top = None
    if use_host_top(weights, kmax):  # before the device arrays: the NumPy rows as they are
      top = jax.device_put(host_top(weights.reshape((-1, L, L)), kmax, blocks=nb,
                                    window=window))
    wj, xj, (B, H, L), compute = _device_arrays(weights, x, dtype)
    out = layer_kernel(wj, xj, nsj, kmax=kmax, inclusion=inclusion, bound=bound, blocks=nb,
                       printed=printed, dtype=compute.name, window=window, top=top,
                       lean=lean and not printed, avg_dtype=_avg_name(avg_dtype, compute))
  else:
    w, x, ns = _prepare(weights, x, ns, dtype)
    B, H, L, _ = w.shape
    d = x.shape[-1]
    blocks = default_blocks(L) if blocks is None else int(blocks)
    wj, xj = jax.device_put(w.reshape(B * H, L, L)), jax.device_put(x.reshape(B * H, L, d))
    srt = sort_rows(w, window) if sorted_rows is None else sorted_rows
    th = thresholds_from_sorted(w, srt, ns, window)
    # The d_1 gather size is static: the largest N when the bound is computed; without the
    # bound nothing depends on it, so one compile serves every N.
    cap = max(1, min(max(ns), L)) if bound else 1
    out = _layer_kernel(wj, xj, jax.device_put(th.thr.reshape(B * H, L, -1)),
                        jax.device_put(th.cut.reshape(B * H, L, -1)), nsj,
                        cap=cap, inclusion=inclusion, bound=bound,
                        row_block=max(1, min(L, (1 << 21) // max(cap * L, 1))),
                        blocks=blocks, printed=printed, window=window, lean=lean)
  return Pending(out, (B, H), finish)


def layer_stats(weights, x, ns: Sequence[int], *, inclusion: str = "n_over_l_minus_1",
                bound: bool = True, dtype=None, sorted_rows=None,
                blocks: int | None = None, window: int | None = 0,
                lean: bool = False, avg_dtype=None, wait: bool = True) -> "HeadStats | Pending":
  """Per-head Theorem 1 statistics of one layer, fast path; same values as :func:`head_stats`.

  Args:
    weights: (B, H, L, L) causal attention weights (every query uses its causal prefix).
    x: (B, H, L, d) per-head vectors or (B, L, D) shared by the heads.
    ns: top-N sizes (each < L is counted only for queries with t > N).
    bound: also d_1, R_N, d_max (the verification of Eq. 9).
    dtype: compute dtype (float64 where a bound is verified; float32 suffices for KS).
    sorted_rows: rows already sorted by :func:`sort_rows` with the same ``window`` (reused
      between calls): selects the
      host-threshold path, as does max(ns) > :data:`TOPK_MAX`; else the device path
      (:func:`layer_kernel`).
    blocks: causal query blocks (:func:`causal_blocks`); default :func:`default_blocks` (L).
      The values do not depend on it (tests check 1 and 4 blocks against the row path).
    window: the layer's sliding window (the record's ``window``): W > 0 for a local layer,
      where each query's effective length is min(t + 1, W) and keys outside the window are not
      tokens of the row; 0 or None for a global (causal) layer.
    lean: the Jensen gap (``gap``) is left 0: for callers that read only d̃ and E (Algorithm
      3's KS search), one pass over the rows per N less.
    avg_dtype: a dtype narrower than ``dtype`` (float32) for the passes that only feed
      reported token averages (:data:`AVERAGED`: E); device path only (max(ns) <=
      TOPK_MAX, no ``sorted_rows``). None: everything in ``dtype``.
    wait: False returns a :class:`Pending` at once (the kernel dispatched, nothing read
      back); its ``result()`` is what this call returns with ``wait=True``.
  Returns:
    HeadStats with fields (B, H, K) (NumPy arrays).
  """
  pending = _dispatch(weights, x, ns, inclusion=inclusion, bound=bound, dtype=dtype,
                      sorted_rows=sorted_rows, blocks=blocks, printed=False, window=window,
                      lean=lean, avg_dtype=avg_dtype, finish=lambda out: out[0])
  return pending.result() if wait else pending


def _printed_means(out):
  """(HeadStats, printed sums (B, H, K, 3)) → (HeadStats, {name in PRINTED: token mean})."""
  st, sums = out
  cnt = st.count.astype(np.float64)
  return st, {name: np.where(cnt > 0, sums[..., i] / np.maximum(cnt, 1), np.nan)
              for i, name in enumerate(PRINTED)}


def layer_stats_printed(weights, x, ns: Sequence[int], *, inclusion: str = "n_over_l_minus_1",
                        bound: bool = True, dtype=None, blocks: int | None = None,
                        window: int | None = 0, avg_dtype=None, wait: bool = True):
  """:func:`layer_stats` and, from the same kernel (shared s, c and causal blocks), the token
  averages of the printed E and of the E with p = N/L (:func:`limits.distance.printed.head_expectations`
  averaged over counted queries): ``(HeadStats (B, H, K), {name in PRINTED: (B, H, K)})``.
  ``window``, ``avg_dtype``, ``wait``: as in :func:`layer_stats` (x̄ is then the mean of the
  query's window; the printed E are averaged-only: :data:`AVERAGED`)."""
  pending = _dispatch(weights, x, ns, inclusion=inclusion, bound=bound, dtype=dtype,
                      sorted_rows=None, blocks=blocks, printed=True, window=window,
                      avg_dtype=avg_dtype, finish=_printed_means)
  return pending.result() if wait else pending
