"""Bounds on λ_max(diag α − ααᵀ) that decide the gradient screen's comparisons without Newton.

λ = λ_max(M), M = diag α − ααᵀ, α a softmax row (Corollary 3: ‖J‖₂ = λ/T). Two tests, each
proved here and tested against dense ``eigvalsh`` in float64 (tests/test_gradient_screen.py):
:func:`bracket` (λ₀ ≤ λ ≤ λ¹ from α₁, α₂, ρ) and :func:`secular_decide` (the sign of the
secular equation at a threshold, from α₁, α₂ and q = Σ_{i≠(1)} α_i²). The screen
(:mod:`limits.gradient.screen`) computes their inputs in float32 in one pass over the rows and
widens them by :func:`margin`.

**The bracket** (proved here; tested against dense ``eigvalsh`` in float64). Let α₁ ≥ α₂ be the
two largest weights (α₂ taken over the keys other than one arg-max), ρ = 1 − α₁ = Σ_{i≠(1)} α_i.

- Lower: Rayleigh quotients. For a unit v, λ ≥ vᵀMv = Σα_i v_i² − (Σα_i v_i)². v = e_(1) gives
  α₁ρ; v = (e_(1) − e_(2))/√2 gives (α₁ + α₂ − (α₁ − α₂)²)/2 = (α₁ρ + α₂(1 + 2α₁ − α₂))/2.
  λ₀ is the larger. (It is ≥ α₂, the interlacing lower bound: the difference is
  (α₁ − α₂)(1 − α₁ + α₂)/2 ≥ 0.) Two visible keys, or tied top two: λ₀ = λ exactly.
- Upper 1: Weyl. M = diag α − ααᵀ with ααᵀ PSD, so λ_max(M) ≤ λ_max(diag α) = α₁.
- Upper 2: Gershgorin. Row i of M has diagonal α_i − α_i² = α_i(1 − α_i) and off-diagonal
  absolute sum α_i Σ_{j≠i} α_j = α_i(1 − α_i) (Σα = 1), so every eigenvalue is
  ≤ max_i 2α_i(1 − α_i). x(1 − x) increases on [0, ½] and every α_i with i ≠ (1) is ≤ α₂ ≤ ½,
  so that max is 2·max(α₁ρ, α₂(1 − α₂)). Since 2x(1 − x) ≤ ½, this also gives λ ≤ ½, the tight
  bound 1/(2T) (no pair can exceed it; the screen decides that comparison for every pair).
- λ¹ = min(α₁, 2·max(α₁ρ, α₂(1 − α₂))).

**Precision.** The bracket is computed in float32 (one exp per visible key and T, the whole
cost), from differences l_i − l_max taken in the rows' dtype and then rounded: with
u = 2⁻²⁴, each d_i = (l_i − l_max)·(1/T) has relative error ≤ 3u (the difference, 1/T and
the product each rounded once to float32), so e^{d_i} has relative error
≤ (3|d_i| + 2)u; keys with d_i < −87 (e^{d_i} below float32's normal range) change sums by
at most n·2⁻¹²⁵ in absolute terms. The sum over the ≤ w keys adds ≤ w·u, the division u, so
every α_i (and ρ) used has relative error ≤ (w + 270)u, and each bracket formula (products
and sums of positive terms in α₁, α₂, ρ) ≤ 3(w + 270)u + 4u. The margin is therefore
δ = 4(w + 270)·2⁻²⁴ relative (3.1e-4 at w = 1,024) plus 2⁻¹⁰⁰ absolute: λ₀(1 − δ) − 2⁻¹⁰⁰
and λ¹(1 + δ) + 2⁻¹⁰⁰ bracket the exact λ and also the reference's float64 Newton value (its
own error, ≤ 1e-12 relative, is far inside δ). A pair is decided only when the widened bracket
lies entirely on one side of the threshold; every pair within δ of a threshold is rechecked by
Newton in the run's dtype (float64 by default), so the decisions are those of the all-Newton
path. A non-finite bracket, or T outside [2⁻¹⁰⁰, 2¹⁰⁰], leaves the pair to Newton.
"""

from __future__ import annotations

ABS_SLACK = 2.0 ** -100  # absolute slack of the float32 bracket (see the module docstring)

def margin(width: int) -> float:
  """δ = 4(w + 270)·2⁻²⁴: the float32 bracket's relative margin for rows of ≤ w keys."""
  return 4.0 * (width + 270) * 2.0 ** -24


def bracket(a1, a2, rho):
  """(λ₀, λ¹) with λ₀ ≤ λ_max(diag α − ααᵀ) ≤ λ¹ from α₁ ≥ α₂ and ρ = 1 − α₁ (module docstring).

  Elementwise over any shape; a one-hot row (α₂ = 0) gives (0, 0), tied top two (α₁ = α₂)
  gives λ₀ = λ¹ = α₁ up to rounding.
  """
  import jax.numpy as jnp

  lo = jnp.maximum((a1 * rho + a2 * (1 + 2 * a1 - a2)) / 2, a1 * rho)
  hi = jnp.minimum(a1, 2 * jnp.maximum(a1 * rho, a2 * (1 - a2)))
  return lo, hi


SECULAR_ETA = 1e-9  # relative gap the secular test leaves around a threshold for Newton's error


def secular_decide(a, b, q, theta, delta: float):
  """Decides λ ≤ θ or λ > θ for λ = λ_max(diag α − ααᵀ) from α₁, α₂ and q = Σ_{i≠(1)} α_i²
  alone, where the bracket cannot (the secular equation; proved here, tested against dense
  ``eigvalsh`` in float64). a, b, q: float32 values with relative error ≤ ``delta`` (the
  screen's margin δ: α₁ and α₂ are within (w + 270)u, q = Σe²/S² within (3w + 1055)u, both
  below δ = 4(w + 270)u; plus 2⁻¹⁰⁰ absolute for the keys whose e^{d} underflows), cast to the
  run's dtype; θ the threshold in λ units (thr·T); any broadcastable shapes. Returns
  (below, above) bool: λ ≤ θ(1 − η), λ > θ(1 + η) with η = :data:`SECULAR_ETA`, so Newton's
  float64 value (error ≤ 1e-12 relative, far inside η) is on the same side of θ.

  With α₁ > α₂ > 0 the top eigenvalue is the root in (α₂, α₁) of
  F(λ) = α₁²/(α₁ − λ) − ψ(λ) − 1, ψ(λ) = Σ_{i≠(1)} α_i²/(λ − α_i) (det(D − λ − ααᵀ) = 0),
  and F increases on (α₂, α₁) from −∞ to +∞. For θ in (α₂, α₁), since
  α_i ≤ α₂ < θ for i ≠ (1):

  - ψ(θ) ≤ q/(θ − α₂), so F(θ) ≥ α₁²/(α₁ − θ) − q/(θ − α₂) − 1; if that is ≥ 0, λ ≤ θ;
  - ψ(θ) ≥ α₂²/(θ − α₂) + (q − α₂²)/θ, so F(θ) ≤ α₁²/(α₁ − θ) − α₂²/(θ − α₂) − (q − α₂²)/θ − 1;
    if that is < 0, λ > θ.

  Outside: λ ≤ α₁ (Weyl) decides θ ≥ α₁; λ ≥ α₂ (interlacing) decides θ < α₂. The inputs'
  errors are taken at their worst: each of α₁, α₂, q is replaced by the end of its interval
  [x(1 − δ) − 2⁻¹⁰⁰, x(1 + δ) + 2⁻¹⁰⁰] that makes the test hardest (α₁²/(α₁ − θ) ≥
  α₁lo²/(α₁hi − θ); α₂²/(θ − α₂) increases with α₂; q − α₂² ≥ qlo − α₂hi²), and the float64
  evaluation must clear zero by 1e-12 of its terms' size. NaN inputs decide nothing.
  """
  import jax.numpy as jnp

  lo = lambda x: jnp.maximum(x * (1 - delta) - ABS_SLACK, 0)
  hi = lambda x: x * (1 + delta) + ABS_SLACK
  a_lo, a_hi, b_lo, b_hi, q_lo, q_hi = lo(a), hi(a), lo(b), hi(b), lo(q), hi(q)
  t_lo, t_hi = theta * (1 - SECULAR_ETA), theta * (1 + SECULAR_ETA)
  slack = 1e-12
  with_safe = lambda ok, x: jnp.where(ok, x, 1.0)  # no division by 0 where the branch is off

  # λ ≤ t_lo: α₁ ≤ t_lo, or F(t_lo) ≥ 0 by the lower bound of F.
  inside = (b_hi < t_lo) & (t_lo < a_lo)
  f1 = a_lo * a_lo / with_safe(inside, a_hi - t_lo)
  f2 = q_hi / with_safe(inside, t_lo - b_hi)
  below = (a_hi <= t_lo) | (inside & (f1 - f2 - 1 >= slack * (f1 + f2 + 1)))

  # λ > t_hi: α₂ > t_hi, or F(t_hi) < 0 by the upper bound of F.
  inside = (b_hi < t_hi) & (t_hi < a_lo)
  g1 = a_hi * a_hi / with_safe(inside, a_lo - t_hi)
  g2 = b_lo * b_lo / with_safe(inside, t_hi - b_lo)
  g3 = jnp.maximum(q_lo - b_hi * b_hi, 0) / t_hi
  above = (b_lo > t_hi) | (inside & (g1 - g2 - g3 - 1 < -slack * (g1 + g2 + g3 + 1)))
  ok = jnp.isfinite(a) & jnp.isfinite(b) & jnp.isfinite(q) & jnp.isfinite(theta)
  return below & ok, above & ok
