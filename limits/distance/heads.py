"""Per-head Theorem 1 statistics: reductions of :class:`~limits.distance.rows.RowStats` over
the queries of a head (:class:`HeadStats`), the reference batched path :func:`head_stats` over
per-layer records (traceable: the sweep engine uses it under jit), and the sums over windows,
layers and token averages shared by every path (:mod:`limits.distance.kernels` gives the same
numbers faster).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from limits.distance.rows import RowStats, row_stats


# The per-row statistics a head sums over its counted queries: these fields of RowStats, by name.
SUMMED = ("d_sum", "d_norm", "expected", "gap", "dmax_sum", "dmax_norm")

HeadStats = NamedTuple("HeadStats", [("count", jax.Array)] + [(k, jax.Array) for k in SUMMED]
                       + [(k, jax.Array) for k in ("viol_sum", "viol_norm", "max_ratio_sum",
                                                   "max_ratio_norm")])
HeadStats.__doc__ = """Per head and N, summed over windows and counted queries (shape (H, K) after
reduce).

``count`` = number of counted queries (t > N); the :data:`SUMMED` fields (``d_sum``, ``d_norm``,
``expected``, ``gap``, ``dmax_sum``, ``dmax_norm``: :class:`RowStats`' fields of the same names)
divided by ``count`` are token averages (Algorithms 1-3). ``viol_*`` count rows with d̃ > d_max
(strict, exact comparison), ``max_ratio_*`` = max d̃/d_max over counted rows (0 where d_max = 0
and d̃ = 0).
"""


def _ratio(d, dmax):
  return jnp.where(dmax > 0, d / jnp.where(dmax > 0, dmax, 1.0), jnp.where(d > 0, jnp.inf, 0.0))


def reduce_rows(st: RowStats) -> HeadStats:
  """(Q, K) rows → (K,) per-head sums."""
  c = st.counted
  f = lambda v: jnp.sum(jnp.where(c, v, 0.0), axis=0)
  return HeadStats(
      count=jnp.sum(c, axis=0).astype(jnp.int32),
      **{k: f(getattr(st, k)) for k in SUMMED},
      viol_sum=jnp.sum(c & (st.d_sum > st.dmax_sum), axis=0).astype(jnp.int32),
      viol_norm=jnp.sum(c & (st.d_norm > st.dmax_norm), axis=0).astype(jnp.int32),
      max_ratio_sum=jnp.max(jnp.where(c, _ratio(st.d_sum, st.dmax_sum), 0.0), axis=0),
      max_ratio_norm=jnp.max(jnp.where(c, _ratio(st.d_norm, st.dmax_norm), 0.0), axis=0))


def _batch_sizes(L, n_cap, bound, d, budget=1 << 23):
  per_row = L * (max(n_cap, 8) if bound else 8) + L * 4 + (n_cap * d if bound else 0)
  q = max(1, min(L, budget // max(per_row, 1)))
  return q


@functools.partial(jax.jit, static_argnames=("n_cap", "inclusion", "bound", "query_batch",
                                             "window"))
def head_stats(weights, x, ns, *, n_cap: int, inclusion: str = "n_over_l_minus_1",
               bound: bool = True, valid_length=None, query_batch: int | None = None,
               window: int = 0):
  """Per-head Theorem 1 statistics for one layer, every query with its causal prefix.

  Args:
    weights: (B, H, L, L) attention weights, row = query t, column = key (causal).
    x: (B, H, L, d) per-head vectors (value vectors) or (B, L, D) shared by every head
      (hidden states / embeddings).
    ns: (K,) int top-N sizes (dynamic), each <= n_cap (static).
    valid_length: optional (B,) int number of real tokens per window (keys/queries beyond it
      are ignored); default all L.
    query_batch: queries per vmapped batch (memory vs speed); default from a size budget.
    window: static sliding window W > 0 of a local layer (query t sees keys t − W + 1 … t:
      the effective length min(t + 1, W)); 0 = global (causal).
  Returns:
    HeadStats with fields (B, H, K), summed over queries (see :func:`reduce_windows`).
  """
  B, H, L, _ = weights.shape
  if x.ndim == 3:
    x = jnp.broadcast_to(x[:, None], (B, H) + x.shape[1:])
  d = x.shape[-1]
  qb = query_batch or _batch_sizes(L, n_cap, bound, d)
  if valid_length is None:
    valid_length = jnp.full((B,), L, dtype=jnp.int32)
  vl = jnp.broadcast_to(jnp.asarray(valid_length, jnp.int32)[:, None], (B, H)).reshape(B * H)
  pos = jnp.arange(L)

  def per_head(args):
    w, xh, n_valid = args  # (L, L), (L, d), ()

    def per_row(rargs):
      row, tq = rargs
      mask = (pos <= tq) & (pos < n_valid) & (tq < n_valid)
      if window:
        mask = mask & (pos > tq - window)
      return row_stats(row, xh, ns, n_cap, mask, inclusion=inclusion, bound=bound)

    rows = lax.map(per_row, (w, pos), batch_size=qb)  # fields (L, K)
    return reduce_rows(rows)

  out = lax.map(per_head, (weights.reshape(B * H, L, L), x.reshape(B * H, L, d), vl))
  return jax.tree.map(lambda v: v.reshape((B, H) + v.shape[1:]), out)


def reduce_windows(st: HeadStats) -> HeadStats:
  """Sums (B, H, K) → (H, K) over windows (max for the ratios)."""
  out = {}
  for name, v in st._asdict().items():
    out[name] = jnp.max(v, axis=0) if name.startswith("max_ratio") else jnp.sum(v, axis=0)
  return HeadStats(**out)


def concat_heads(parts: Sequence[HeadStats]) -> HeadStats:
  """Stacks per-layer (H, K) stats into (n_layer·H, K) (layer-major head order)."""
  return HeadStats(*[jnp.concatenate(vs, axis=0) for vs in zip(*parts)])


def token_means(st: HeadStats) -> dict[str, jax.Array]:
  """Token-averaged per-head values (H, K): d_sum, d_norm, expected, gap, dmax_sum, dmax_norm.

  A head with no counted query (every t <= N) gives NaN.
  """
  cnt = st.count.astype(st.d_sum.dtype)
  safe = jnp.where(cnt > 0, cnt, 1.0)
  return {k: jnp.where(cnt > 0, getattr(st, k) / safe, jnp.nan) for k in SUMMED}


def combine(a: HeadStats, b: HeadStats) -> HeadStats:
  """Two stats of the same heads (e.g. two windows) as one: sums, max for the ratios."""
  return HeadStats(*[jnp.maximum(p, q) if name.startswith("max_ratio") else p + q
                     for name, p, q in zip(HeadStats._fields, a, b)])
