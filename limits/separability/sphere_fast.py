"""The sphere Monte Carlo's fast form (Theorem 2, Algorithm 4 on S^{d-1}(M); the driver and
the float64 reference per sample: :mod:`limits.separability.sphere`).

Two parts, each with a certificate; a sample either cannot vouch for goes back to the
reference: delta from a float32 Gram of the lower triangle with a float64 recheck of the
nearest rows (:func:`_delta_checked`), and the counts, r and the bounds for every row and n at
once over each row's top max(n) keys by the Gram identity with the rounding margin of
:func:`limits.separability.rows.gram_margin` (:func:`_top_rows` once per run, :func:`_stats_fast`
per sample). Assumption: every key is visible (synthetic rows), rule "strict".
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from limits.selection import select_sorted
from limits.separability import rows
from limits.separability.rows import _leave_one_out_sum

DELTA_CANDIDATES = 8   # rows of the float32 Gram rechecked in float64 (_delta_checked)


def _delta_checked(x, k: int = DELTA_CANDIDATES, block: int = 128):
  """(delta, ok): the minimum pairwise distance of x (L, d) from a float32 Gram, certified.

  The float32 Gram identity gives every row's squared distance to its nearest *earlier* point,
  m_i = min_{j<i} d²_ij (the lower triangle in row blocks of ``block``: 56 % of a full Gram at
  L = 1,024, each block's product small enough to stay in cache); the k rows with the smallest
  m_i are recomputed in float64 against every point (the Gram identity of
  :func:`~limits.separability.rows.min_pairwise_distance`, duplicates excluded the same way),
  and their minimum is delta². A pair (i, j), j < i, whose row i is not among them has
  exact d²_ij ≥ m_i − tol32 ≥ (the (k+1)-th smallest m) − tol32, with tol32 the float32
  rounding bound 2·(d + 4)·eps32·(2·max|x|)² (the cast of x and a length-d dot product,
  γ_{d+4}, with a factor 2 to spare). ``ok`` is True when that lower bound exceeds the
  rechecked minimum by more than ``tol32``: delta then equals the full float64 search up to
  the rounding of one dot product. When it is False (near ties, near duplicates, L ≤ k) the
  caller recomputes delta the float64 way.
  """
  L, d = x.shape
  f32 = jnp.float32
  x32 = x.astype(f32)
  sq32 = jnp.sum(x32 * x32, axis=-1)                                   # (L,)
  mins = []
  for lo in range(0, L, block):                                         # lower triangle
    hi = min(lo + block, L)
    d2 = sq32[lo:hi, None] + sq32[None, :hi] - 2 * (x32[lo:hi] @ x32[:hi].T)   # (b, hi)
    earlier = jnp.arange(hi)[None, :] < jnp.arange(lo, hi)[:, None]
    mins.append(jnp.min(jnp.where(earlier, d2, jnp.inf), axis=-1))
  m = jnp.concatenate(mins)                                              # (L,); m_0 = +inf
  kk = min(k + 1, L)
  neg, rows = jax.lax.top_k(-m, kk)                                    # kk smallest minima
  cand = rows[: kk - 1] if kk > 1 else rows
  sq = jnp.sum(x * x, axis=-1)                                         # (L,) float64
  d2c = jnp.maximum(sq[cand][:, None] + sq[None, :] - 2 * (x[cand] @ x.T), 0)
  eps = jnp.finfo(x.dtype).eps
  dup = d2c <= 16 * eps * (sq[cand][:, None] + sq[None, :])
  self_ = cand[:, None] == jnp.arange(L)[None, :]
  best = jnp.min(jnp.where(self_ | dup, jnp.inf, d2c))
  tol32 = (2 * (d + 4) * jnp.finfo(f32).eps * 4 * jnp.max(sq)).astype(x.dtype)
  nxt = -neg[-1].astype(x.dtype)
  ok = (L > k) & jnp.isfinite(best) & (nxt - tol32 > best + tol32)
  return jnp.sqrt(best), ok


class _TopRows(NamedTuple):
  """What the fast form reads of the weights, the same for every sample (:func:`_top_rows`):
  each row's top ``k`` = max(n) keys in selection order and the Theorem 2 sums over them."""
  order: Any     # (R, k) int32 keys by decreasing weight, ties by position (I_N = first N)
  a_top: Any     # (R, k) their weights
  sel: Any       # (K, R, k) bool: place j of the order is in I_N for the n of that K index
  w_sel: Any     # (K, R, k) a_top where selected, else 0
  nonsel: Any    # (K, R, L) bool: key not in I_N (r is the minimum over these)
  s1: Any        # (K, R, k) Σ_{I_N \ i} α_j at each selected place (the reference's sums)
  s2: Any        # (K, R, k) Σ_{I_N \ i} α_j²


def _top_rows(alphas, rank, ns, k: int) -> _TopRows:
  """:class:`_TopRows` of weights (R, L) (all visible) for ns (K,) with max(ns) <= k.

  I_N is the reference's (``select_sorted``: the N largest, ties by position, which is the
  first N places of a stable descending sort), and the leave-one-out sums of Theorem 2's ξ are
  the reference's own dense sums (:func:`rows._leave_one_out_sum` over the L keys) gathered at
  the selected places, so ξ is bit-identical to the reference's for the same delta."""
  R, L = alphas.shape
  order = jnp.argsort(-alphas, axis=-1, stable=True)[:, :k].astype(jnp.int32)     # (R, k)
  a_top = jnp.take_along_axis(alphas, order, axis=-1)
  visible = jnp.ones(alphas.shape, bool)

  def per_n(n):
    sel = select_sorted(alphas, rank, visible, n)                                   # (R, L)
    w = jnp.where(sel, alphas, 0)
    at = lambda v: jnp.take_along_axis(v, order, axis=-1)                           # (R, k)
    return ~sel, at(_leave_one_out_sum(w)), at(_leave_one_out_sum(w * w))

  nonsel, s1, s2 = jax.vmap(per_n)(ns)
  sel = jnp.broadcast_to(jnp.arange(k)[None, None, :] < ns[:, None, None], s1.shape)
  return _TopRows(order, a_top, sel, jnp.where(sel, a_top[None], 0), nonsel, s1, s2)


def _stats_fast(x, delta, alphas, top: _TopRows, ns, M):
  """(stats (S, H, K), uncertain) of points x (L, d) for every row and n at once, over the top
  ``k`` keys of each row (:class:`_TopRows`): s_N = Σ_{I_N} α_j x_j from the k gathered
  points, ⟨x_i, s_N⟩ for every key by one product, r the minimum of the Gram-identity
  distance over the non-selected keys, the count (rule "strict") and Theorem 2's bounds over
  the selected places. ``uncertain`` is True when a selected key's d² lies within
  :func:`rows.gram_margin` of r² (the margin covers the rounding of s in any summation order,
  of ⟨x_i, s⟩ and of the identity): otherwise every count equals the exact one (and the float64
  reference's), and r and the bounds equal the reference's up to rounding.
  """
  dt = alphas.dtype
  dim = x.shape[-1]
  xx = jnp.sum(x * x, axis=-1)                                                   # (L,)
  xt = x[top.order]                                                              # (R, k, d)
  s = jnp.einsum("krj,rjd->krd", top.w_sel, xt)                                  # (K, R, d)
  xs = jnp.einsum("krd,ld->krl", s, x)                                           # (K, R, L)
  ss = jnp.sum(s * s, axis=-1)                                                   # (K, R)
  a = alphas
  d2 = (a * a * xx)[None] - 2 * a[None] * xs + ss[..., None]                    # (K, R, L)
  r = jnp.min(jnp.where(top.nonsel, jnp.sqrt(jnp.maximum(d2, 0)), jnp.inf), axis=-1)  # (K, R)
  d2_top = jnp.take_along_axis(d2, jnp.broadcast_to(top.order[None], top.sel.shape), axis=-1)
  inside = top.sel & (jnp.sqrt(jnp.maximum(d2_top, 0)) < r[..., None])          # (K, R, k)
  n_eff = jnp.sum(top.sel, axis=-1)
  nf = jnp.maximum(n_eff, 1).astype(dt)
  frac = jnp.where(n_eff > 0, jnp.sum(inside, axis=-1) / nf, 1.0).astype(dt)
  # Theorem 2's bounds and the rounding margin over the selected places (rows' own formulas)
  xis = rows.xi_from_sums(top.s1, top.s2, top.sel, M, jnp.where(jnp.isfinite(delta), delta, 0))
  lower_raw, upper = rows.bounds_from_xi(xis, top.sel, M, r, clip=False)
  nx = jnp.sqrt(xx)                                     # B = max_j α_j|x_j| + Σ_{I_N} α_j|x_j|
  B = jnp.max(a * nx, axis=-1)[None] + jnp.sum(top.w_sel * nx[top.order][None], axis=-1)
  tol = rows.margin_from(B, n_eff, dim)                                          # (K, R)
  near = jnp.isfinite(r)[..., None] & (jnp.abs(d2_top - (r * r)[..., None]) <= tol[..., None])
  out = jnp.stack([frac, r, jnp.broadcast_to(delta, r.shape), jnp.maximum(lower_raw, 0),
                   lower_raw, upper])                                            # (S, K, H)
  return jnp.swapaxes(out, 1, 2), jnp.any(top.sel & near)                        # (S, H, K)
