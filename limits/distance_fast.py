"""Theorem 1 per layer, fast path (Algorithms 1-3 on a model): same values as
:func:`limits.distance_heads.head_stats`.

Every causal row is sorted once on the host (:func:`sort_rows`; NumPy's sort is ~20× XLA's on
CPU), each N becomes a threshold with an index cut for ties at the N-th place
(:func:`thresholds_from_sorted`, the same lower-index-first rule), and the per-N work of all
queries of a head is two (L, L)·(L, d) products through the Gram identities:

  s_N = A_N X (L, d),  c_N = s_N Xᵀ (L, L),  ‖α_i x_i − s‖² = α_i²‖x_i‖² − 2α_i c_i + ‖s‖².

d_1 is computed only when the bound is verified, from the per-head distance matrix by gathering
the rows of the ≤ N selected keys (in causal query blocks). Same semantics as ``head_stats``
(causal prefix, ties to the lower index, t <= N skipped); tests/test_distance_fast.py checks it
against ``head_stats`` (1e-12 relative, float64, ties included).
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from limits.distance_heads import HeadStats, reduce_rows
from limits.distance_rows import RowStats, check_inclusion, sqrt0
from limits.errors import LimitsError
from limits.selection import (Thresholds, select_thresholds, sort_rows,  # noqa: F401
                              thresholds, thresholds_from_sorted)


def _block_rows(a, x, thr, cut, ns, lo, *, caps: tuple, inclusion: str, bound: bool,
                row_block: int) -> RowStats:
  """RowStats (R, K) of the queries lo … lo + R − 1 of one head (Theorem 1, matrix form).

  a: (R, C) their causal weights over the keys 0 … C − 1 they can see (C = lo + R: a causal
  block reads only its prefix); x: (C, d); thr, cut: (R, K); ns: (K,); caps: static (K,) upper
  bounds of the N values (the size of the d_1 gather).
  """
  R, C = a.shape
  dt = a.dtype
  kpos = jnp.arange(C)
  qpos = lo + jnp.arange(R)
  vis = kpos[None, :] <= qpos[:, None]  # (R, C)
  a = jnp.where(vis, a, 0.0)
  t = (qpos + 1).astype(dt)  # (R,) visible keys per query
  n2 = jnp.sum(x * x, axis=-1)  # (C,)
  w2 = a * a * n2[None, :]  # (R, C) α_i²‖x_i‖²
  m = jnp.sum(a, axis=-1)  # (R,) row mass
  s_all = a @ x  # (R, d)
  c_all = s_all @ x.T  # (R, C) ⟨x_i, s_all⟩
  q_all = jnp.sum(s_all * s_all, axis=-1)  # (R,)
  nf = ns.astype(dt)  # (K,)
  if inclusion == "n_over_l_minus_1":
    p = nf[None, :] / jnp.maximum(t - 1.0, 1.0)[:, None]
  else:
    p = nf[None, :] / t[:, None]
  p = jnp.clip(p, 0.0, 1.0)  # (R, K)
  pref = (t[:, None] - nf[None, :]) / t[:, None]  # (R, K)
  ratio = jnp.where(t > 2, (t - 1.0) / jnp.maximum(t - 2.0, 1.0), 0.0)  # (R,)
  w2_tot = jnp.sum(w2, axis=-1)  # (R,)
  if bound:
    gram = x @ x.T
    dist2 = n2[:, None] + n2[None, :] - 2.0 * gram  # (C, C) ‖x_j − x_i‖²
  cols = []
  for k in range(ns.shape[0]):
    sel = select_thresholds(a, thr[:, k], cut[:, k], vis, kpos)  # (R, C)
    rest = vis & ~sel
    a_sel = jnp.where(sel, a, 0.0)
    s = a_sel @ x  # (R, d)
    c = s @ x.T  # (R, C)
    s2 = jnp.sum(s * s, axis=-1)  # (R,)
    d_sum = jnp.sum(jnp.where(rest, sqrt0(w2 - 2.0 * a * c + s2[:, None]), 0.0), axis=-1)
    u = s_all - 2.0 * s  # Σ_{rest} α_i x_i − s
    d_norm = sqrt0(jnp.sum(u * u, axis=-1))
    alpha_bar = jnp.sum(a_sel, axis=-1)
    pk = p[:, k:k + 1]  # (R, 1)
    e_terms = (1 + pk) ** 2 * w2 - 2 * pk * (1 + pk) * a * c_all + pk * pk * q_all[:, None]
    expected = pref[:, k] * jnp.sum(jnp.where(vis, sqrt0(e_terms), 0.0), axis=-1)
    var = (p[:, k] * (1 - p[:, k]) * ratio)[:, None] * (w2_tot[:, None] - w2)
    gap = pref[:, k] * jnp.sum(jnp.where(vis, sqrt0(var), 0.0), axis=-1)
    if bound:
      r_n = sqrt0(jnp.max(jnp.where(sel, n2[None, :], 0.0), axis=-1))
      d1 = sqrt0(_d1_sq(sel, rest, dist2, cap=min(caps[k], C), row_block=row_block))
      spread = jnp.sum(jnp.where(rest, jnp.abs(alpha_bar[:, None] - a), 0.0), axis=-1)
      dmax_sum = (m - alpha_bar) * d1 + r_n * spread
      dmax_norm = (m - alpha_bar) * d1 + jnp.abs(m - 2.0 * alpha_bar) * r_n
    else:
      d1 = r_n = dmax_sum = dmax_norm = jnp.zeros_like(d_sum)
    cols.append((d_sum, d_norm, expected, gap, dmax_sum, dmax_norm, alpha_bar, d1, r_n))
  counted = t[:, None] > nf[None, :]  # (R, K)
  fields = [jnp.stack(f, axis=-1) for f in zip(*cols)]  # each (R, K)
  fields = [jnp.where(counted, f, 0.0) for f in fields]
  return RowStats(counted, *fields)


def _d1_sq(sel, rest, dist2, *, cap: int, row_block: int):
  """d_1² per row: max ‖x_i − x_j‖² over selected j and non-selected visible i. (R,)

  sel, rest: (R, C); dist2: (C, C). The ≤ cap selected keys of each row are compacted to
  indices and their rows of the distance matrix gathered: cap·C work per query instead of C².
  """
  C = sel.shape[-1]
  pos = jnp.arange(C, dtype=jnp.int32)

  def one(args):
    srow, rrow = args  # (C,) bool
    slot = jnp.cumsum(srow) - 1
    idx = jnp.zeros((cap,), jnp.int32).at[jnp.where(srow, slot, cap)].set(pos, mode="drop")
    ok = jnp.arange(cap) < jnp.sum(srow)
    v = jnp.where(ok[:, None] & rrow[None, :], dist2[idx], -jnp.inf)  # (cap, C)
    best = jnp.max(v)
    return jnp.where(jnp.isfinite(best), best, 0.0)

  return lax.map(one, (sel, rest), batch_size=max(1, min(sel.shape[0], row_block)))


# Below this length a layer is one block: the work saved is negligible and every block is
# compiled as its own copy of the per-N code (4 blocks: ~4× the compile time of 1).
BLOCKS_FROM_LENGTH = 128


def default_blocks(L: int) -> int:
  """Causal query blocks used for an L × L layer: 1 below BLOCKS_FROM_LENGTH, else 4."""
  return 1 if L < BLOCKS_FROM_LENGTH else 4


def causal_blocks(L: int, blocks: int = 4) -> list[tuple[int, int]]:
  """Query blocks [lo, hi) of a causal L × L layer; block b reads only keys < hi, so the
  per-row work is Σ_b (hi − lo)·hi ≈ 0.62·L² for 4 blocks instead of L²."""
  edges = sorted({0, L} | {round(L * (b + 1) / blocks) for b in range(blocks)})
  return list(zip(edges[:-1], edges[1:]))


@functools.partial(jax.jit, static_argnames=("caps", "inclusion", "bound", "row_block",
                                             "blocks"))
def _layer_kernel(weights, x, thr, cut, ns, *, caps: tuple, inclusion: str, bound: bool,
                  row_block: int, blocks: int):
  """HeadStats (G, K) for G heads: weights (G, L, L), x (G, L, d), thr/cut (G, L, K)."""
  L = weights.shape[-1]

  def per_head(args):
    a, xh, th, ct = args
    parts = [_block_rows(a[lo:hi, :hi], xh[:hi], th[lo:hi], ct[lo:hi], ns, lo, caps=caps,
                         inclusion=inclusion, bound=bound, row_block=row_block)
             for lo, hi in causal_blocks(L, blocks)]
    rows = RowStats(*[jnp.concatenate(f, axis=0) for f in zip(*parts)])
    return reduce_rows(rows)

  return lax.map(per_head, (weights, x, thr, cut))


def layer_stats(weights, x, ns: Sequence[int], *, inclusion: str = "n_over_l_minus_1",
                bound: bool = True, dtype=None, sorted_rows=None,
                blocks: int | None = None) -> HeadStats:
  """Per-head Theorem 1 statistics of one layer, fast path; same values as :func:`head_stats`.

  Args:
    weights: (B, H, L, L) causal attention weights (every query uses its causal prefix).
    x: (B, H, L, d) per-head vectors or (B, L, D) shared by the heads.
    ns: top-N sizes (each < L is counted only for queries with t > N).
    bound: also d_1, R_N, d_max (the verification of Eq. 9).
    dtype: compute dtype (float64 where a bound is verified; float32 suffices for KS).
    sorted_rows: rows already sorted by :func:`sort_rows` (reused between calls).
    blocks: causal query blocks (:func:`causal_blocks`); default :func:`default_blocks` (L).
      The values do not depend on it (tests check 1 and 4 blocks against the row path).
  Returns:
    HeadStats with fields (B, H, K) (NumPy arrays).
  """
  check_inclusion(inclusion)
  ns = [int(n) for n in ns]
  if not ns or min(ns) < 1:
    raise LimitsError(f"top-N sizes {ns} must be positive integers")
  w = np.asarray(weights, dtype=dtype or np.asarray(weights).dtype)
  B, H, L, _ = w.shape
  x = np.asarray(x, dtype=w.dtype)
  if x.ndim == 3:
    x = np.broadcast_to(x[:, None], (B, H) + x.shape[1:])
  srt = sort_rows(w) if sorted_rows is None else sorted_rows
  th = thresholds_from_sorted(w, srt, ns)
  # The d_1 gather size is static: the Ns themselves when the bound is computed (Alg. 1-2 use
  # a few fixed Ns); without the bound nothing depends on it, so one compile serves every N.
  caps = tuple(max(1, min(n, L)) for n in ns) if bound else (1,) * len(ns)
  d = x.shape[-1]
  out = _layer_kernel(jnp.asarray(w.reshape(B * H, L, L)), jnp.asarray(x.reshape(B * H, L, d)),
                      jnp.asarray(th.thr.reshape(B * H, L, -1)),
                      jnp.asarray(th.cut.reshape(B * H, L, -1)), jnp.asarray(ns, jnp.int32),
                      caps=caps, inclusion=inclusion, bound=bound,
                      row_block=max(1, min(L, (1 << 21) // max(max(caps) * L, 1))),
                      blocks=default_blocks(L) if blocks is None else int(blocks))
  return jax.tree.map(lambda v: np.asarray(v).reshape((B, H) + v.shape[1:]), out)
