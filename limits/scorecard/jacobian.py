"""Lemma 2 in the scorecard: exact Jacobian norms of each family's normalizer on the model's raw
score rows, the bound each is checked against, and g(T, ε)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from limits import normalizers
from limits.errors import LimitsError
from limits.scorecard.candidates import normalizer, ssmax_s0


def jacobian_bound(family: str, logits, mask, temperature: float, length: int):
  """Per-row bound on ‖∂α/∂l‖₂ for α = N(l/T) (float64 rows) and its name."""
  from limits import bounds

  T = float(temperature)
  if family == "softmax":
    return jnp.full(logits.shape[:-1], 1.0 / (2.0 * T)), "Cor. 3 tight 1/(2T)"
  if family == "ssmax":
    n = jnp.maximum(normalizers.visible_count(jnp.asarray(mask)), 1).astype(logits.dtype)
    return ssmax_s0(length) * jnp.log(n) / (2.0 * T), "s·ln t/(2T) (softmax at T/(s ln t))"
  if family in ("sparsemax", "entmax1.5", "entmax4/3"):
    return jnp.full(logits.shape[:-1], 1.0 / T), "1/T (J = diag(s) − ssᵀ/Σs, 0 ≤ s ≤ 1)"
  if family == "softplus":
    F = lambda l: jax.nn.softplus(l / T)
    dF = lambda l: jax.nn.sigmoid(l / T) / T
    return bounds.lemma2_bound(F, dF, logits, mask), "Lemma 2"
  raise LimitsError(f"unknown normalizer family {family!r}")


_JAC: dict = {}


def _jac_kernel(family: str, length: int):
  """jit(rows (R, L), masks (R, L), T) -> J (R, L, L) of l ↦ N(l/T): one compile per family
  and shape (T is traced)."""
  key = (family, int(length))
  fn = _JAC.get(key)
  if fn is None:
    norm = normalizer(family, length)
    jac = jax.jacfwd(lambda x, mm, T: norm(x / T, mm))
    fn = _JAC[key] = jax.jit(jax.vmap(jac, in_axes=(0, 0, None)))
  return fn


def jacobian_norms(family: str, logits, mask, temperature: float, length: int) -> np.ndarray:
  """Exact ‖∂N(l/T)/∂l‖₂ per row (R,) for the family's normalizer N: J by jacfwd, then
  √λ_max(J_t J_tᵀ) by LAPACK (NumPy eigvalsh) on the t×t block of the t visible keys (masked
  keys have zero rows and columns, so the cut is exact and a row costs O(t³), not O(L³))."""
  l = jnp.asarray(logits)
  m = np.asarray(mask, bool)
  J = np.asarray(_jac_kernel(family, length)(l, jnp.asarray(m), jnp.asarray(temperature, l.dtype)))
  out = np.zeros(m.shape[0], J.dtype)
  for i in range(m.shape[0]):
    t = int(np.max(np.nonzero(m[i])[0], initial=0)) + 1
    Ji = J[i, :t, :t]
    out[i] = math.sqrt(max(float(np.linalg.eigvalsh(Ji @ Ji.T)[-1]), 0.0))
  return out


def jacobian_metrics(family: str, rows, mask, temperature: float, length: int, *,
                     epsilon: float, seed: int) -> dict:
  """Lemma 2 on raw score rows (R, L) with causal masks (R, L), in float64: exact
  ‖∂N(l/T)/∂l‖₂ (:func:`jacobian_norms`), its bound (:func:`jacobian_bound`), and g(T, ε) with
  a random unit direction over the visible keys (``jax.random.key(seed)``)."""
  from limits import jacobians

  fn = normalizer(family, length)
  with jax.enable_x64(True):
    l = jnp.asarray(np.asarray(rows, np.float64))
    m = jnp.asarray(np.asarray(mask, bool))
    T = jnp.float64(temperature)
    f = lambda x, mm: fn(x / T, mm)
    norms = jacobian_norms(family, l, m, temperature, length)
    g = np.asarray(jacobians.fd_sensitivity(f, l, float(epsilon), jax.random.key(seed), mask=m))
    bound, name = jacobian_bound(family, l, m, temperature, length)
    bound = np.asarray(bound, np.float64)
  ratio = np.where(bound > 0, norms / np.where(bound > 0, bound, 1), np.where(norms > 0, np.inf, 0))
  return {"max_norm": float(norms.max()), "mean_norm": float(norms.mean()),
          "bound_name": name, "max_bound": float(np.max(bound)),
          "bound_violations": int(np.sum(norms > bound * (1 + 1e-9))),
          "max_norm_over_bound": float(ratio.max()),
          "g_mean": float(g.mean()), "g_max": float(g.max()), "epsilon": float(epsilon),
          "rows": int(norms.size)}
