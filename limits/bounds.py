"""The paper's bounds: Lemma 1, Corollary 1, Lemma 2, Corollary 3 (paper form and tight form).

- :func:`lemma1_constants` — Lemma 1: for a continuous positive F on [−a, a] and logits in
  [−a, a], C1/L ≤ α_i ≤ C2/L with C2 = max F / min F and C1 = 1/C2 (constants
  reconstructed from the proof; ``docs/claims.md``).
- :func:`lemma1_check` — Lemma 1 checked on synthetic bounded logits over a grid of L.
- :func:`corollary1_band` — Corollary 1 (softmax): e^{−2Δ/T}/L ≤ α_i ≤ e^{2Δ/T}/L with
  Δ = ‖q‖·max_i‖k_i‖ (AMBIG-2; the max makes it hold for every i).
- :func:`lemma2_bound` — Lemma 2, second line, for a general F:
  ‖∇α‖₂ ≤ (max|F'|/L)(1/min F + max F/(min F)²). :func:`softmax_lemma2_bound` is the same
  bound for F = e^{l/T} written without under/overflow of F itself.
- :func:`softmax_jacobian_bound` — Corollary 3 as printed, min{1/(4T), √2} (``form="paper"``),
  and the tight spectral bound 1/(2T) (``form="tight"``).
- :func:`corollary1_causal_check` — Corollary 1 over every query of a causal layer, in log space.

**The paper's form is not a bound on the spectral norm.** J = (diag α − ααᵀ)/T and
vᵀ(diag α − ααᵀ)v = Var_α(v) ≤ (max v − min v)²/4 ≤ 1/2 for a unit v, so ‖J‖₂ ≤ 1/(2T), with
equality for two tied top logits and everything else at zero weight (α = (½, ½, 0, …)): then
‖J‖₂ = 1/(2T) > min{1/(4T), √2} for every T > 0. Only each *entry* of J is ≤ 1/(4T), and √2 (the
diameter of the simplex) bounds finite differences ‖α(l + εv) − α(l)‖₂, i.e. g(T, ε) ≤ √2/ε,
not the Jacobian. :func:`tied_top_two` builds the counterexample.

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``; the claims checked are
listed in ``docs/claims.md``.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from limits import normalizers, numerics
from limits.errors import LimitsError

Array = jax.Array

SQRT2 = math.sqrt(2.0)


def _check_temperature(temperature) -> None:
  numerics.check_positive(temperature, "temperature")


# ----------------------------------------------------------------------------- Lemma 1


def lemma1_constants(F: Callable, a: float, grid: int = 4097) -> tuple[float, float]:
  """Lemma 1's (C1, C2) for F on [−a, a]: C2 = max F / min F, C1 = 1/C2.

  F is evaluated (float64) on a uniform grid of ``grid`` points including ±a, and each extremum
  is then refined by bounded scalar minimisation between the neighbouring grid points, so a
  monotone F is exact and a smooth non-monotone F is accurate to the optimiser's tolerance.
  LimitsError if a < 0 or F is not finite and positive on the grid or at the refined extrema
  (a dip to <= 0 between two grid points is not ignored; a NaN there can go unseen).
  """
  a = float(a)
  if not (math.isfinite(a) and a >= 0):
    raise LimitsError(f"a={a!r} is not allowed; the logit range [-a, a] needs a finite a >= 0")

  def f(x):
    return np.asarray(F(np.asarray(x, np.float64)), np.float64)

  xs = np.linspace(-a, a, max(int(grid), 2))
  ys = np.broadcast_to(f(xs), xs.shape)
  if not np.all(np.isfinite(ys)) or not np.all(ys > 0):
    raise LimitsError("F must be finite and positive on [-a, a] (Lemma 1's hypothesis)")
  lo, hi = float(ys.min()), float(ys.max())
  if a > 0:
    from scipy.optimize import minimize_scalar

    def refine(idx, sign):
      left, right = xs[max(idx - 1, 0)], xs[min(idx + 1, len(xs) - 1)]
      if right <= left:
        return None
      r = minimize_scalar(lambda x: sign * float(f(x)), bounds=(left, right), method="bounded",
                          options={"xatol": 1e-12 * max(a, 1.0)})
      v = sign * float(r.fun)
      if not (math.isfinite(v) and v > 0):  # F <= 0 (or inf) between two grid points
        raise LimitsError(f"F must be finite and positive on [-a, a] (Lemma 1's hypothesis); "
                          f"F({float(r.x)!r}) = {v!r}")
      return v

    v = refine(int(np.argmin(ys)), 1.0)
    lo = min(lo, v) if v is not None else lo
    v = refine(int(np.argmax(ys)), -1.0)
    hi = max(hi, v) if v is not None else hi
  C2 = hi / lo
  return 1.0 / C2, C2


def lemma1_check(F: Callable, a: float, lengths, *, rows: int = 256, seed: int = 0,
                 a_constants: float | None = None) -> dict:
  """Lemma 1 on synthetic bounded logits: C1/L <= α_i <= C2/L for every row, entry and L.

  For each L, ``rows`` logit rows uniform on [−a, a] plus the two extreme rows (one logit at +a,
  the rest at −a, and the mirror image) are normalised as α = F(l)/ΣF(l) in float64, and α·L is
  compared with Lemma 1's (C1, C2) of :func:`lemma1_constants` for [−a_constants, a_constants]
  (default a: the lemma itself; a smaller value shows the check can fail). Relative slack 1e-12
  (float64 rounding of a sum of L positive terms). The extreme rows make the check tight: their
  α·L tends to C2 (and C1) as L grows.

  Returns: {"C1", "C2", "violations", "checked", "by_L": {L: {"min_aL", "max_aL"}}}.
  """
  C1, C2 = lemma1_constants(F, a if a_constants is None else a_constants)
  rng = np.random.default_rng(seed)
  by_l, viol, checked = {}, 0, 0
  for L in [int(v) for v in lengths]:
    if L < 1:
      raise LimitsError(f"L={L} is not allowed; lengths must be >= 1")
    logits = rng.uniform(-a, a, size=(rows, L))
    extreme = np.full((2, L), -float(a))
    extreme[0, 0] = a
    extreme[1] = -extreme[0]
    f = np.asarray(F(np.concatenate([logits, extreme])), np.float64)   # (rows + 2, L)
    aL = L * f / f.sum(axis=-1, keepdims=True)
    viol += int(np.sum((aL < C1 * (1 - 1e-12)) | (aL > C2 * (1 + 1e-12))))
    checked += aL.size
    by_l[L] = {"min_aL": float(aL.min()), "max_aL": float(aL.max())}
  return {"C1": C1, "C2": C2, "violations": viol, "checked": checked, "by_L": by_l}


# ----------------------------------------------------------------------------- Corollary 1


def corollary1_band(q, k, temperature, mask=None) -> tuple[Array, Array]:
  """Corollary 1's band for softmax(qᵀk_i / T): (e^{−2Δ/T}/L, e^{2Δ/T}/L), Δ = ‖q‖·max_i‖k_i‖.

  q (..., d), k (..., L, d), optional mask (..., L); L = number of visible keys. Returns
  (lower, upper), each (...,). Δ uses the max over visible keys (AMBIG-2) so the band holds for
  every i. The upper end may be inf (a vacuous bound), never NaN.
  """
  _check_temperature(temperature)
  q = jnp.asarray(q)
  k = jnp.asarray(k)
  knorm = jnp.linalg.norm(k, axis=-1)  # (..., L)
  m = numerics.mask_like(knorm, mask)
  delta = jnp.linalg.norm(q, axis=-1) * jnp.max(jnp.where(m, knorm, 0), axis=-1)  # (...,)
  n = jnp.maximum(normalizers.visible_count(m), 1).astype(knorm.dtype)
  T = jnp.asarray(temperature, knorm.dtype)
  return jnp.exp(-2 * delta / T) / n, jnp.exp(2 * delta / T) / n


def corollary1_causal_check(scores, q, k, temperature, window: int = 0):
  """Corollary 1 on a causal attention layer, in log space: per (B, H), over every query t.

  ``window`` (static) W > 0: a local layer with a sliding window (Gemma 3), where query t sees
  only its last n_t = min(t, W) keys: the effective length, so the band checks α_i·n_t with
  Δ_t over those keys. 0 = the whole causal prefix (n_t = t).

  Checks e^{-2Δ_t/T} <= α_i·t <= e^{2Δ_t/T} with Δ_t = ‖q_t‖·max_{i<=t}‖k_i‖ (AMBIG-2) for the
  softmax weights α = softmax(scores/T) over the causal prefix, using log α_i = l_i/T −
  logsumexp(l/T), so neither an underflowed weight nor an overflowing band fakes a result.
  Same band as ``corollary1_band``. Also returns the last query's values (natural log).

  scores (B, H, L, L) raw q·k; q, k (B, H, L, d). Returns a dict of (B, H) arrays.
  """
  L = scores.shape[-1]
  vis = numerics.attention_mask(L, window)  # (L, L) query t sees keys <= t (the last W in a window)
  logits = jnp.where(vis, scores / temperature, -jnp.inf)
  lse = jax.nn.logsumexp(logits, axis=-1, keepdims=True)  # (B, H, L, 1)
  logw = logits - lse
  log_n = jnp.log(jnp.sum(vis, axis=-1).astype(logits.dtype))[:, None]  # (L, 1) n_t
  log_max = jnp.max(jnp.where(vis, logw, -jnp.inf), axis=-1, keepdims=True) + log_n
  log_min = jnp.min(jnp.where(vis, logw, jnp.inf), axis=-1, keepdims=True) + log_n
  knorm = jnp.linalg.norm(k, axis=-1)  # (B, H, L)
  # max over visible keys ‖k_i‖: the prefix max, or the max over the window.
  kmax = (jnp.max(jnp.where(vis, knorm[..., None, :], 0.0), axis=-1) if window
          else jax.lax.cummax(knorm, axis=knorm.ndim - 1))
  band = 2.0 * jnp.linalg.norm(q, axis=-1) * kmax / temperature  # (B, H, L) = 2Δ/T
  log_max, log_min = log_max[..., 0], log_min[..., 0]
  viol = (log_max > band) | (log_min < -band)
  return {"violations": jnp.sum(viol, axis=-1), "queries": jnp.full(viol.shape[:-1], L),
          "min_margin": jnp.min(jnp.minimum(band - log_max, log_min + band), axis=-1),
          "log_max_last": log_max[..., -1], "log_min_last": log_min[..., -1],
          "band_last": band[..., -1]}


# ----------------------------------------------------------------------------- Lemma 2


def lemma2_bound(F: Callable, dF: Callable, logits, mask=None) -> Array:
  """Lemma 2's bound (max_j|F'_j|/L)·(1/min_j F_j + max_j F_j/(min_j F_j)²), per row (...,).

  Maxima and minima run over the visible keys; L is their number. When min F underflows to 0
  the bound is +inf (vacuous), never NaN. Proof: ‖diag(F')/S‖₂ ≤ max|F'|/(L min F) and
  ‖F F'ᵀ‖₂/S² ≤ ‖F‖‖F'‖/S² ≤ max F max|F'|/(L (min F)²), with S ≥ L min F.
  """
  logits = jnp.asarray(logits)
  m = numerics.mask_like(logits, mask)
  li = jnp.where(m, logits, 0)
  f = F(li)
  df = jnp.abs(dF(li))
  fmin = jnp.min(jnp.where(m, f, jnp.inf), axis=-1)
  fmax = jnp.max(jnp.where(m, f, 0), axis=-1)
  dmax = jnp.max(jnp.where(m, df, 0), axis=-1)
  n = jnp.maximum(normalizers.visible_count(m), 1).astype(f.dtype)
  ok = fmin > 0
  safe = jnp.where(ok, fmin, 1)
  val = dmax / n * (1 / safe + fmax / safe**2)
  return jnp.where(ok, val, jnp.inf)


def softmax_lemma2_bound(logits, temperature, mask=None) -> Array:
  """Lemma 2 for F = e^{l/T}: (e^{r/T} + e^{2r/T})/(T·L) with r = max l − min l (visible).

  The same value as ``lemma2_bound(exp(l/T), exp(l/T)/T, l)`` (the bound is invariant to
  scaling F), written so that it is finite whenever it is representable.
  """
  _check_temperature(temperature)
  logits = jnp.asarray(logits)
  m = numerics.mask_like(logits, mask)
  r = (jnp.max(jnp.where(m, logits, -jnp.inf), axis=-1)
       - jnp.min(jnp.where(m, logits, jnp.inf), axis=-1))
  r = jnp.where(jnp.isfinite(r), r, 0)
  n = jnp.maximum(normalizers.visible_count(m), 1).astype(logits.dtype)
  return softmax_lemma2_from_range(r, n, jnp.asarray(temperature, logits.dtype))


def softmax_lemma2_from_range(r, n, T) -> Array:
  """:func:`softmax_lemma2_bound` from a row's visible range r = max l − min l and count n
  (n >= 1): (e^{r/T} + e^{2r/T})/(T·n), broadcast over r, n and T (inf where it overflows)."""
  return (jnp.exp(r / T) + jnp.exp(2 * r / T)) / (T * n)


# ----------------------------------------------------------------------------- Corollary 3


def softmax_jacobian_bound(temperature, form: str = "paper") -> Array:
  """Corollary 3: ``"paper"`` = min{1/(4T), √2} as printed; ``"tight"`` = 1/(2T).

  Only the tight form bounds ‖∂softmax(l/T)/∂l‖₂ (see the module docstring); the paper form is
  violated by :func:`tied_top_two` at every T.
  """
  _check_temperature(temperature)
  T = jnp.asarray(temperature)
  if not jnp.issubdtype(T.dtype, jnp.floating):
    T = T.astype(jnp.result_type(float))
  if form == "paper":
    return jnp.minimum(1 / (4 * T), SQRT2)
  if form == "tight":
    return 1 / (2 * T)
  raise LimitsError(f"form={form!r} is not allowed; use 'paper' or 'tight'")


def simplex_fd_bound(eps) -> Array:
  """√2/ε: g(T, ε) can never exceed it for a normalizer onto the simplex (its diameter is √2)."""
  numerics.check_positive(eps, "epsilon")
  return SQRT2 / jnp.asarray(eps, jnp.result_type(float))


def tied_top_two(length: int = 2, dtype=None) -> tuple[Array, Array]:
  """The counterexample to 1/(4T): logits (length,) = 0 with only the first two keys visible.

  softmax gives α = (½, ½, 0, …) at every T, and J = (diag α − ααᵀ)/T has eigenvalue 1/(2T)
  on the direction (1, −1, 0, …)/√2: ‖J‖₂ = 1/(2T) exactly. Returns (logits, mask).
  """
  if length < 2:
    raise LimitsError(f"length={length!r} is not allowed; the tied-top-two row needs length >= 2")
  dtype = dtype or jnp.result_type(float)
  mask = jnp.arange(length) < 2
  return jnp.zeros((length,), dtype), mask
