"""Theorem 2 (§2.2, Algorithm 4) for rows of weights: the distinguishability count and bounds.

Notation (the paper, §2.2; AMBIG-n labels name the options of docs/ambiguities.md): weights
``alpha (L,)``, vectors ``x (L, d)`` on the sphere S^{d-1}(M) (Assumption 1), the top-N set I_N
(the N largest weights), the context vector ``s = sum_{i in I_N} alpha_i x_i`` (not
renormalised) and the per-token distance ``X_i = ||alpha_i x_i - s||``.

Decisions (AMBIG-10), each an explicit option:

- **Radius r** (Algorithm 4): ``r = min_{j not in I_N} ||alpha_j x_j - s||``, recomputed for every
  row / sample.
- **Counting rule** ``rule="strict"`` (default): N_s = #{i in I_N : X_i < r}. With r defined as
  the minimum non-selected distance, every non-selected token is automatically at distance
  >= r, so the second indicator of the paper's definition is implied by the strict inequality.
  ``rule="literal"`` is the paper's literal formula (closed ball ``X_i <= r`` *and* every
  non-selected ``> r``); with this r it is 0 whenever a non-selected token exists, because the
  token that sets r lies on the sphere of radius r. It is exposed only to show that.
- **All tokens selected** (N >= number of visible tokens): there is no non-selected token, so
  r = +inf, every selected token counts (N_s/N = 1) and both bounds equal 1. No NaN.
- **Empty selection** (a fully masked row): N_s/N, lower and upper are all defined as 1
  (vacuously true); no NaN.
- **Ties in alpha** are broken by position (lower index first, stable sort).
- **delta** (Assumption 2): the minimum pairwise distance among the visible tokens, excluding
  duplicates (pairs whose Gram-identity squared distance is within rounding of 0, i.e.
  <= 16 eps (|x_i|^2 + |x_j|^2)); +inf when fewer than two distinct tokens. Inside ``xi`` it is
  clipped to [0, 2M] (no two points of S^{d-1}(M) are farther than 2M apart).
- **Theorem 2** (AMBIG-5 default, §2 reconstruction):
  ``1 - sum_i xi_i / (N r) <= E[N_s]/N <= (1/N) sum_i exp(-(xi_i - r)_+^2 / (2 M^2))`` with
  ``xi_i^2 = (M^2 - delta^2/2) (sum_{j in I_N, j!=i} alpha_j)^2
  + (delta^2/2) sum_{j in I_N, j!=i} alpha_j^2`` (clipped at 0 before the square root).
  The lower bound is Markov + Cauchy-Schwarz for a *fixed* r; it is clipped at 0 by default
  (``clip=False`` returns the raw value). At r = 0 it is vacuous: the raw value is -inf and the
  clipped one 0. The upper bound is a heuristic envelope (AMBIG-5).

Synthetic weights, points on the sphere and the Monte Carlo: :mod:`limits.separability.sphere`;
a model's layers: :mod:`limits.separability.model`.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from limits.errors import LimitsError, check
from limits.numerics import mask_like
from limits.selection import select_sorted, top_n_mask

RULES = ("strict", "literal")


# --------------------------------------------------------------------------------------------
# Selection and the distinguishability count.
# --------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnames=("rule",))
def count_distinguishable(alpha, x, n, mask=None, *, rule: str = "strict"):
  """N_s and r of §2.2 for one row, by direct differences (the reference definition).

  Args:
    alpha: (L,) attention weights of one query.
    x: (L, d) vectors (on S^{d-1}(M) for Theorem 2; any vectors are accepted).
    n: top-N size (int, may be traced); capped at the number of visible tokens.
    mask: optional (L,) bool, True = visible (causal prefix).
    rule: "strict" (default, AMBIG-10) or "literal" (the paper's literal formula; always 0 when a
      non-selected token exists, see the module docstring).

  Returns:
    (n_s int32 scalar, r scalar); r = +inf when every visible token is selected.
  """
  check(rule in RULES, f"rule={rule!r} is not one of {RULES}")
  visible = mask_like(alpha, mask)
  sel = top_n_mask(alpha, n, mask)
  a = jnp.where(visible, alpha, 0)
  ax = a[:, None] * x                                     # (L, d)
  s = jnp.sum(jnp.where(sel[:, None], ax, 0), axis=0)     # (d,)
  diff = ax - s
  dist = jnp.sqrt(jnp.sum(diff * diff, axis=-1))          # (L,)
  nonsel = visible & ~sel
  r = jnp.min(jnp.where(nonsel, dist, jnp.inf))
  if rule == "strict":
    inside = sel & (dist < r)
  else:
    outside = jnp.all(jnp.where(nonsel, dist > r, True))
    inside = sel & (dist <= r) & outside
  return jnp.sum(inside).astype(jnp.int32), r


@functools.partial(jax.jit, static_argnames=("rule",))
def separable_fraction(alpha, x, n, mask=None, *, rule: str = "strict"):
  """N_s / N for one row, with N = min(n, visible tokens); 1 for an empty selection."""
  n_s, _ = count_distinguishable(alpha, x, n, mask, rule=rule)
  n_eff = jnp.sum(top_n_mask(alpha, n, mask))
  return jnp.where(n_eff > 0, n_s / jnp.maximum(n_eff, 1), 1.0)


# --------------------------------------------------------------------------------------------
# delta (Assumption 2).
# --------------------------------------------------------------------------------------------

def _pairwise_sq(x):
  """Squared distances by the Gram identity and the duplicate threshold. x (..., L, d)."""
  sq = jnp.sum(x * x, axis=-1)                                      # (..., L)
  gram = jnp.einsum("...id,...jd->...ij", x, x)                      # (..., L, L)
  d2 = jnp.maximum(sq[..., :, None] + sq[..., None, :] - 2 * gram, 0)
  eps = jnp.finfo(x.dtype).eps
  dup = d2 <= 16 * eps * (sq[..., :, None] + sq[..., None, :])
  return d2, dup


@jax.jit
def min_pairwise_distance(x, mask=None):
  """delta: min ||x_i - x_j|| over visible i != j, duplicates excluded; +inf if no pair.

  x (L, d), mask (L,) bool. Uses the Gram identity (one (L, L) matmul).
  """
  L = x.shape[-2]
  d2, dup = _pairwise_sq(x)
  ok = ~dup & ~jnp.eye(L, dtype=bool)
  if mask is not None:
    ok = ok & mask[:, None] & mask[None, :]
  return jnp.sqrt(jnp.min(jnp.where(ok, d2, jnp.inf)))


@jax.jit
def prefix_min_pairwise_distance(x):
  """delta_t for every causal prefix: (L,) with entry t = min distance among x_0..x_t.

  Entry 0 is +inf (a single token has no pair). x (L, d); duplicates excluded as in
  ``min_pairwise_distance``.
  """
  L = x.shape[-2]
  d2, dup = _pairwise_sq(x)
  lower = jnp.tril(jnp.ones((L, L), bool), k=-1)            # pairs (i, j) with j < i
  m = jnp.min(jnp.where(lower & ~dup, d2, jnp.inf), axis=-1)  # (L,) nearest earlier token
  return jnp.sqrt(jax.lax.cummin(m, axis=m.ndim - 1))


@functools.partial(jax.jit, static_argnames=("window",))
def window_min_pairwise_distance(x, window: int = 0):
  """delta_t for every query's window: (L,) with entry t = min distance among x_{t−W+1}..x_t
  (a local layer with sliding window W; W = 0: the causal prefix, as
  :func:`prefix_min_pairwise_distance`). +inf where the window holds one token; duplicates
  excluded as in ``min_pairwise_distance``.

  A pair (i, j), j < i, lies in query t's window iff i <= t and j > t − W; with
  P[t, j] = min_{j < i <= t} ‖x_i − x_j‖² (a cumulative min over i), delta_t² is the min of
  P[t, j] over j > t − W. x (L, d); O(L²) memory.
  """
  if not window:
    return prefix_min_pairwise_distance(x)
  L = x.shape[-2]
  d2, dup = _pairwise_sq(x)
  lower = jnp.tril(jnp.ones((L, L), bool), k=-1)            # (i, j) with j < i
  P = jax.lax.cummin(jnp.where(lower & ~dup, d2, jnp.inf), axis=0)  # (t, j)
  t = jnp.arange(L)
  in_window = jnp.arange(L)[None, :] > (t - window)[:, None]  # (t, j): j > t − W
  return jnp.sqrt(jnp.min(jnp.where(in_window, P, jnp.inf), axis=-1))


# --------------------------------------------------------------------------------------------
# Theorem 2.
# --------------------------------------------------------------------------------------------

def _leave_one_out_sum(v, product: bool = False):
  """sum_{j != i} v_j for every i, (..., L), without the subtraction sum(v) - v_i.

  Built from exclusive prefix and suffix sums, so a row with one non-zero entry gives exactly 0
  there. ``sum(v) - v`` does not: under jit XLA may contract it with the products that formed v
  into an FMA and return the rounding residual of v_i^2 (~1e-9), which the square root in xi
  turns into ~3e-5 (seen as a Theorem 2 lower bound of 0.99993 instead of 1 at N = 1).
  """
  if product:
    # One product with J − I (0/1 entries): every term is exact and the i-th is an exact 0, so
    # a row with one non-zero entry still gives exactly 0 (O(L²) per row: for short rows,
    # where XLA's CPU cumsum, an O(L²) reduce-window, costs more).
    L = v.shape[-1]
    return v @ (1 - jnp.eye(L, dtype=v.dtype))
  zero = jnp.zeros_like(v[..., :1])
  before = jnp.concatenate([zero, jnp.cumsum(v[..., :-1], axis=-1)], axis=-1)
  after = jnp.concatenate([jnp.cumsum(v[..., :0:-1], axis=-1)[..., ::-1], zero], axis=-1)
  return before + after


def _xi_from_selected(alpha, sel, M, delta, product: bool = False):
  """xi_i (..., L) from a selection mask; 0 outside I_N. delta broadcasts against alpha[..., 0]."""
  w = jnp.where(sel, alpha, 0)
  s1 = _leave_one_out_sum(w, product)  # sum over I_N \ {i} of alpha_j
  s2 = _leave_one_out_sum(w * w, product)  # sum over I_N \ {i} of alpha_j^2
  return xi_from_sums(s1, s2, sel, M, delta)


def xi_from_sums(s1, s2, sel, M, delta):
  r"""xi_i (..., P) from the leave-one-out sums s1 = Σ_{I_N \ i} α_j and s2 = Σ_{I_N \ i} α_j²
  at P places (every key, or only the selected ones); 0 where ``sel`` is False; delta clipped
  to [0, 2M] and broadcast against s1[..., 0]."""
  dtype = s1.dtype
  M = jnp.asarray(M, dtype)
  delta = jnp.clip(jnp.asarray(delta, dtype), 0, 2 * M)[..., None]
  xi2 = (M * M - delta * delta / 2) * s1 * s1 + (delta * delta / 2) * s2
  return jnp.where(sel, jnp.sqrt(jnp.maximum(xi2, 0)), 0)


@jax.jit
def xi(alpha, n, M, delta, mask=None):
  """xi_i of Theorem 2 for every token: (..., L), 0 for tokens outside I_N.

  xi_i^2 = M^2 sum_{j in I_N\\{i}} alpha_j^2 + (M^2 - delta^2/2) sum_{j != k in I_N\\{i}} alpha_j
  alpha_k, computed as (M^2 - delta^2/2) S1^2 + (delta^2/2) S2 (AMBIG-5 default).
  """
  return _xi_from_selected(alpha, top_n_mask(alpha, n, mask), M, delta)


def _bounds_from_selected(alpha, sel, M, delta, r, clip=True, printed=False, product=False):
  return bounds_from_xi(_xi_from_selected(alpha, sel, M, delta, product), sel, M, r, clip,
                        printed)


def bounds_from_xi(xis, sel, M, r, clip=True, printed=False):
  """Theorem 2's (lower, upper[, upper_printed]) (...) from xi (..., P) at P places and the
  selection ``sel`` (..., P) (every key, or only the selected places: the sums are over I_N)."""
  dtype = xis.dtype
  M = jnp.asarray(M, dtype)
  r = jnp.asarray(r, dtype)
  n_eff = jnp.sum(sel, axis=-1)
  nf = jnp.maximum(n_eff, 1).astype(dtype)
  xi_sum = jnp.sum(xis, axis=-1)
  safe_r = jnp.where(r > 0, r, 1)
  lower = jnp.where(r > 0, 1 - xi_sum / (nf * safe_r), -jnp.inf)
  lower = jnp.where(n_eff > 0, lower, 1)
  if clip:
    lower = jnp.maximum(lower, 0)
  gap = jnp.maximum(xis - r[..., None], 0)          # (xi_i - r)_+ ; 0 when r = +inf
  terms = jnp.where(sel, jnp.exp(-gap * gap / (2 * M * M)), 0)
  upper = jnp.where(n_eff > 0, jnp.sum(terms, axis=-1) / nf, 1)
  if not printed:
    return lower, upper
  # The printed form (1/N)·Σ exp[−(r − ξ_i)²/(16M²)] (no positive part; limits.separability.printed); 1 where
  # r = +inf (every token selected), as the derived form.
  finite = jnp.isfinite(r)
  d = jnp.where(finite[..., None], r[..., None] - xis, 0)
  pterms = jnp.where(sel, jnp.exp(-d * d / (16 * M * M)), 0)
  upper_printed = jnp.where((n_eff > 0) & finite, jnp.sum(pterms, axis=-1) / nf, 1)
  return lower, upper, upper_printed


@functools.partial(jax.jit, static_argnames=("clip",))
def theorem2_bounds(alpha, n, M, delta, r, mask=None, *, clip: bool = True):
  """Theorem 2 (Eq. 11, AMBIG-5 default) for a row (or rows) of weights.

  Args:
    alpha: (..., L) weights; n: top-N size; M: sphere radius; delta: (...) minimum pairwise
      distance; r: (...) tolerance radius (Algorithm 4 passes the data-dependent r).
    clip: if True (default) the lower bound is clipped at 0; False returns the raw value
      (-inf at r = 0, where the Markov bound is vacuous).

  Returns:
    (lower, upper), each (...). Both are 1 when r = +inf (all tokens selected).
  """
  return _bounds_from_selected(alpha, top_n_mask(alpha, n, mask), M, delta, r, clip)


# --------------------------------------------------------------------------------------------
# Batched rows (Gram identity): shared by the Monte Carlo and the model source.
# --------------------------------------------------------------------------------------------

class RowStats(NamedTuple):
  """Per-row results; every field has the row shape."""
  frac: Any            # N_s / N
  n_s: Any
  n_eff: Any           # min(n, visible)
  r: Any
  lower: Any           # clipped at 0
  lower_raw: Any       # unclipped
  upper: Any
  upper_printed: Any   # the paper's printed form (16M², no positive part)
  uncertain: Any = None  # method="gram": a decision within the rounding margin (gram_margin)


def gram_margin(a, sel, x):
  """(R,) the rounding margin of the Gram-identity squared distances of :func:`row_stats`.

  |fl(d²) − d²| for every key of a row, by either form ("gram" or "direct") and for the
  rounding of s = Σ_{I_N} α_j x_j itself, is at most γ_k·B² with B = max_j α_j |x_j| +
  Σ_{j ∈ I_N} α_j |x_j| (≥ α_i |x_i| + |s|) and k = d + |I_N| + 4 (a length-d dot product,
  an n-term sum and the three-term identity; γ_k = k·eps / (1 − k·eps), Higham's bound);
  the margin 8·k·eps·B² covers both forms' errors on d_i² and on r² with a factor 2 to spare.
  A decision d_i < r with |d_i² − r²| above it is the same in exact arithmetic and in
  either form. a (R, L) weights (0 where not visible), sel (R, L), x (L, d).
  """
  ax = a * jnp.sqrt(jnp.sum(x * x, axis=-1))                       # (R, L) α_j |x_j|
  B = jnp.max(ax, axis=-1) + jnp.sum(jnp.where(sel, ax, 0), axis=-1)
  return margin_from(B, jnp.sum(sel, axis=-1), x.shape[-1])


def margin_from(B, n_sel, d: int):
  """:func:`gram_margin` from its parts: 8·(d + |I_N| + 4)·eps·B² (B, n_sel (...))."""
  dtype = B.dtype
  return 8 * (d + n_sel.astype(dtype) + 4) * jnp.finfo(dtype).eps * B * B


def row_stats(alpha, sorted_desc, visible, x, n, M, delta, *, rule: str = "strict",
              method: str = "gram") -> RowStats:
  """N_s/N, r and both bounds for rows of weights over one shared set of vectors.

  Args:
    alpha: (R, L) weights; sorted_desc: (R, L) from ``sort_desc`` (computed once, reused for
      every n); visible: (R, L) bool.
    x: (L, d) vectors shared by all rows; n: top-N size (may be traced); M: radius;
    delta: (R,) or scalar minimum pairwise distance for the bounds.
    method: "gram" uses ||a_i x_i - s||^2 = a_i^2 |x_i|^2 - 2 a_i <x_i, s> + |s|^2 (two matmuls,
      no (R, L, d) array; loses accuracy when a distance is below ~sqrt(eps) times
      max(a_i |x_i|, |s|), e.g. thousands of points in 2-3 dimensions in float32); "direct"
      forms the (R, L, d) differences (exact up to rounding of each difference). With
      "gram", ``uncertain`` (R,) flags the rows where a decision d_i < r lies within
      :func:`gram_margin` (recompute those with "direct"); None with "direct".
  """
  sel = select_sorted(alpha, sorted_desc, visible, n)
  a = jnp.where(visible, alpha, 0)
  w = jnp.where(sel, a, 0)
  s = w @ x                                                     # (R, d)
  if method == "gram":
    xs = s @ x.T                                                # (R, L) <x_i, s>
    xx = jnp.sum(x * x, axis=-1)                                # (L,)
    ss = jnp.sum(s * s, axis=-1)                                # (R,)
    d2 = a * a * xx - 2 * a * xs + ss[:, None]
    dist = jnp.sqrt(jnp.maximum(d2, 0))                         # (R, L)
  elif method == "direct":
    diff = a[:, :, None] * x[None] - s[:, None, :]              # (R, L, d)
    dist = jnp.sqrt(jnp.sum(diff * diff, axis=-1))              # (R, L)
  else:
    raise LimitsError(f"method={method!r} is not 'gram' or 'direct'")
  nonsel = visible & ~sel
  r = jnp.min(jnp.where(nonsel, dist, jnp.inf), axis=-1)        # (R,)
  if rule == "strict":
    inside = sel & (dist < r[:, None])
  else:
    outside = jnp.all(jnp.where(nonsel, dist > r[:, None], True), axis=-1)
    inside = sel & (dist <= r[:, None]) & outside[:, None]
  n_s = jnp.sum(inside, axis=-1)
  n_eff = jnp.sum(sel, axis=-1)
  frac = jnp.where(n_eff > 0, n_s / jnp.maximum(n_eff, 1), 1.0).astype(alpha.dtype)
  delta = jnp.broadcast_to(jnp.asarray(delta, alpha.dtype), r.shape)
  lower_raw, upper, upper_p = _bounds_from_selected(a, sel, M, delta, r, clip=False,
                                                    printed=True)
  uncertain = None
  if method == "gram":  # a selected key's d² within the rounding margin of r² (r finite)
    tol = gram_margin(a, sel, x)[:, None]
    near = jnp.where(jnp.isfinite(r)[:, None], jnp.abs(d2 - r[:, None] ** 2) <= tol, False)
    uncertain = jnp.any(sel & near, axis=-1)
  return RowStats(frac, n_s, n_eff, r, jnp.maximum(lower_raw, 0), lower_raw, upper, upper_p,
                  uncertain)
