"""Algorithm 3's KS search per layer (the bisection over N up to L − 1), at the cost of the
rows it counts (issue 27).

Theorem 1's statistics count a query only when it sees more keys than N (t > N, AMBIG-8:
queries with t <= N have no non-selected key), so for the search's N near 0.8·L most rows of
a layer count for no N of a probe. :func:`search_stats` gives the same HeadStats as
:func:`limits.distance.kernels.layer_stats` with ``sorted_rows`` and ``lean`` (the host
thresholds path, :func:`limits.distance.kernels._layer_kernel`) but evaluates each causal
query block [lo, hi) only for the Ns that some of its rows count (N < the block's largest t:
hi, or min(hi, W) in a sliding-window layer); the block's rows for the other Ns are the zeros
the kernel's ``counted`` mask gives them. The per-row body is the kernel's own
(:func:`limits.distance.kernels._block_rows`, unchanged), and the rows are reduced as the
kernel reduces them (every block's rows, in order), so the sums are those of the full call
(tests/test_distance_search.py checks them against ``layer_stats``, ties and windows
included).

Blocks (:func:`search_blocks`): 4 causal blocks from L = 512, as the kernel
(:func:`limits.distance.kernels.default_blocks`): the search's later rounds (N near 0.8·L) then
read the last block's rows only. Each distinct list of per-block N counts is one compile (the
bisection's first round, then its later rounds near one N: usually two per L).
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from limits.distance import kernels
from limits.distance.heads import HeadStats
from limits.distance.rows import RowStats, check_inclusion
from limits.errors import LimitsError
from limits.selection import (Thresholds, select_thresholds, sort_rows,
                              thresholds_from_sorted)

# From this length the search and the scan split a layer into 4 causal query blocks (as the
# kernel's default_blocks). Not below: each block is its own copy of the per-N body
# (compile time), and short layers gain little (SmolLM2, one layer, 8 N, CPU s at L = 256:
# 0.043 -> 0.021; the --quick grids stop at 256 and are compile-bound).
SEARCH_BLOCKS_FROM = 512


def search_blocks(L: int) -> int:
  """Causal query blocks of Algorithm 3's search and scan (:mod:`limits.distance.scan`) at
  length L: 4 from :data:`SEARCH_BLOCKS_FROM`, else 1."""
  return 4 if L >= SEARCH_BLOCKS_FROM else 1


def block_counts(L: int, ns: Sequence[int], blocks: int, window: int = 0) -> tuple[int, ...]:
  """Per causal block [lo, hi) (:func:`limits.distance.kernels.causal_blocks`), how many of the
  ascending ``ns`` some row of it counts: N < max t = hi (min(hi, W) with a window W > 0)."""
  ns = [int(n) for n in ns]
  if any(b < a for a, b in zip(ns, ns[1:])):
    raise LimitsError(f"search Ns {ns} must be ascending")
  out = []
  for _, hi in kernels.causal_blocks(L, blocks):
    t_max = min(hi, window) if window else hi
    out.append(sum(n < t_max for n in ns))
  return tuple(out)


def _zero_rows(R: int, K: int, dt) -> RowStats:
  """Rows counted for no N: what ``_block_rows`` gives a row with t <= N (counted False,
  every field 0)."""
  return RowStats(jnp.zeros((R, K), bool), *[jnp.zeros((R, K), dt)
                                             for _ in RowStats._fields[1:]])


def _pad_rows(rows: RowStats, K: int) -> RowStats:
  """(R, K_b) rows → (R, K): the Ns beyond K_b not counted (False, 0)."""
  extra = K - rows.counted.shape[1]
  if not extra:
    return rows
  return RowStats(*[jnp.pad(v, ((0, 0), (0, extra))) for v in rows])


@functools.partial(jax.jit, static_argnames=("counts", "inclusion", "blocks", "window"))
def _search_kernel(weights, x, thr, cut, ns, *, counts: tuple, inclusion: str, blocks: int,
                   window: int = 0):
  """HeadStats (G, K) of the lean search (d̃ both forms, E; no bound): weights (G, L, L), x
  (G, L, d), thr/cut (G, L, K) from :func:`limits.selection.thresholds_from_sorted`, ns (K,)
  ascending; block b evaluated for its first ``counts[b]`` Ns only (static)."""
  L = weights.shape[-1]
  K = ns.shape[0]

  def per_head(args):
    a, xh, th, ct = args
    parts = []
    for (lo, hi), kb in zip(kernels.causal_blocks(L, blocks), counts):
      if kb == 0:
        parts.append((_zero_rows(hi - lo, K, a.dtype), None))
        continue
      ab = a[lo:hi, :hi]
      kpos = jnp.arange(hi)
      vis = kernels.block_visible(lo, hi - lo, hi, window)
      av = jnp.where(vis, ab, 0.0)
      tb, cb = th[lo:hi], ct[lo:hi]  # (R, K)
      select = lambda k, av=av, vis=vis, kpos=kpos, tb=tb, cb=cb: select_thresholds(
          av, tb[:, k], cb[:, k], vis, kpos)
      rows, _ = kernels._block_rows(ab, xh[:hi], select, ns[:kb], lo, cap=1,
                                    inclusion=inclusion, bound=False, row_block=1,
                                    window=window, lean=True)
      parts.append((_pad_rows(rows, K), None))
    return kernels._reduce(parts, False)

  return lax.map(per_head, (weights, x, thr, cut))[0]


def _first_counted_row(L: int, counts: Sequence[int], blocks: int) -> int:
  """The first row of the first causal block that counts some N (``counts`` of
  :func:`block_counts`, non-decreasing over the blocks: the blocks before it count none); L if
  none does."""
  for (lo, _), kb in zip(kernels.causal_blocks(L, blocks), counts):
    if kb:
      return lo
  return L


def _later_thresholds(w, ns: Sequence[int], window: int, first: int) -> Thresholds:
  """Thresholds (…, L, K) of rows ``first`` … L − 1 only (sorted here); the rows before
  ``first`` belong to blocks that count no N, which :func:`_search_kernel` never reads (thr 0,
  cut L there). The bisection's later rounds (N near 0.8·L) sort a quarter of the rows."""
  L = w.shape[-1]
  tail = w[..., first:, :]
  part = thresholds_from_sorted(tail, sort_rows(tail, window, row0=first), ns, window,
                                row0=first)
  if first == 0:
    return part
  thr = np.zeros(w.shape[:-1] + (len(ns),), part.thr.dtype)
  cut = np.full(thr.shape, L, np.int32)
  thr[..., first:, :] = part.thr
  cut[..., first:, :] = part.cut
  return Thresholds(thr, cut)


def search_stats(weights, x, ns: Sequence[int], *, inclusion: str = "n_over_l_minus_1",
                 dtype=None, sorted_rows=None, window: int | None = 0,
                 blocks: int | None = None) -> HeadStats:
  """Per-head statistics of one layer for the KS search: the values of
  :func:`limits.distance.kernels.layer_stats` (``bound=False``, ``lean=True``, host
  thresholds) for the fields the search reads (count, d_sum, d_norm, expected; the others 0).

  weights (B, H, L, L); x (B, H, L, d) or (B, L, D); ns: any order (evaluated ascending,
  returned in the given order); sorted_rows: :func:`limits.selection.sort_rows` of the weights
  (same window); when None, the rows of the blocks that count some N are sorted here (the
  earlier blocks' rows are never read). Returns HeadStats (B, H, K), NumPy arrays.
  """
  check_inclusion(inclusion)
  window = kernels.check_window(window)
  ns = [int(n) for n in ns]
  if not ns or min(ns) < 1:
    raise LimitsError(f"top-N sizes {ns} must be positive integers")
  order = sorted(range(len(ns)), key=lambda i: ns[i])
  asc = [ns[i] for i in order]
  w, xv, _ = kernels._prepare(weights, x, asc, dtype)
  B, H, L, _ = w.shape
  blocks = search_blocks(L) if blocks is None else int(blocks)
  counts = block_counts(L, asc, blocks, window)
  if sorted_rows is None:
    th = _later_thresholds(w, asc, window, _first_counted_row(L, counts, blocks))
  else:
    th = thresholds_from_sorted(w, sorted_rows, asc, window)
  G = B * H
  out = _search_kernel(jax.device_put(w.reshape(G, L, L)),
                       jax.device_put(xv.reshape(G, L, xv.shape[-1])),
                       jax.device_put(th.thr.reshape(G, L, -1)),
                       jax.device_put(th.cut.reshape(G, L, -1)),
                       jax.device_put(np.asarray(asc, np.int32)),
                       counts=counts, inclusion=inclusion,
                       blocks=blocks, window=window)
  out = jax.device_get(out)
  inv = np.argsort(order)  # back to the given order
  return HeadStats(*[np.asarray(v)[:, inv].reshape(B, H, -1) for v in out])
