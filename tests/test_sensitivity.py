"""Algorithm 5's measurements: exact softmax Jacobian norms and g(T, ε) (closed forms and a
second method, not the code's own output). Figure 4's verdicts are judged in limits.claims
(tests/test_claims.py)."""

import numpy as np
import pytest

from limits.gradient import sensitivity

# ---- Algorithm 5 at scale: exact O(L) norms for every row, g on a seeded sample ----------------

import jax
import jax.numpy as jnp

from limits import normalizers


def _dense_norm(a, T):
  """λ_max((diag α − ααᵀ)/T) by numpy eigvalsh, the diagonal written α_i·Σ_{j≠i} α_j so a nearly
  one-hot row keeps its digits (α_i − α_i² cancels)."""
  L = a.shape[-1]
  off = a.sum(-1, keepdims=True) - a
  M = np.einsum("ri,ij->rij", a * off, np.eye(L)) - a[:, :, None] * a[:, None, :] * (1 - np.eye(L))
  return np.linalg.eigvalsh(M)[:, -1] / T


def test_softmax_norms_match_dense_eigensolver():
  """Newton on the secular equation against eigvalsh, every row × 26 temperatures, causal and
  full masks, scales 0.1…30. Tolerance 1e-12·(1/(2T)) absolute: eigvalsh is backward stable,
  its error is ~eps·‖M‖ ≤ eps/(2T)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    R, L = 200, 40
    l = rng.normal(size=(R, L)) * rng.choice([0.1, 1, 8, 30], size=(R, 1))
    mask = np.arange(L)[None, :] < rng.integers(1, L + 1, size=(R, 1))
    l[0, :2], mask[0] = 5.0, np.arange(L) < 2          # tied top two: T‖J‖ = 1/2 exactly
    l[1, 3] = l[1, 0] = l[1].max() + 1                 # tied top two among many
    Ts = np.logspace(-3, 2, 26)
    got = sensitivity.softmax_norms(l, Ts, mask)
    for k, T in enumerate(Ts):
      a = np.asarray(normalizers.softmax(jnp.asarray(l), T, jnp.asarray(mask)))
      np.testing.assert_allclose(got[:, k], _dense_norm(a, T), rtol=0, atol=1e-12 / (2 * T))
    np.testing.assert_allclose(got[0] * Ts, 0.5, rtol=1e-15)
    assert np.all(got * Ts <= 0.5 * (1 + 1e-15))


def test_softmax_norm_nearly_one_hot_against_mpmath():
  """A nearly one-hot row (λ ≈ 1e-16): 50-digit mpmath eigenvalues, relative 1e-12. Dense
  float64 solvers lose every digit here (measured: eigvalsh 1.86e-16 vs the true 2.78e-16)."""
  import mpmath as mp

  with jax.enable_x64(True):
    l = np.array([[0.0, -36.0, -37.5, -40.0, -36.0, -50.0]])
    T = 1.0
    got = sensitivity.softmax_norms(l, [T])[0, 0]
  mp.mp.dps = 50
  e = [mp.e ** mp.mpf(float(v)) for v in l[0]]
  a = [v / sum(e) for v in e]
  M = mp.matrix(len(a))
  for i in range(len(a)):
    for j in range(len(a)):
      M[i, j] = (a[i] if i == j else 0) - a[i] * a[j]
  want = float(max(mp.eigsy(M)[0]))
  assert got == pytest.approx(want, rel=1e-12)


def test_fd_batch_matches_per_temperature_loop():
  """g(T, ε) batched over T against jacobians.fd_sensitivity one T at a time with the same
  direction (float64: 1e-12 relative, plus 1e-14/ε absolute for the rounding of α itself,
  ~1e-16 per entry, which dominates on nearly one-hot rows)."""
  from limits import jacobians

  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    l = rng.normal(size=(5, 16)) * 4
    mask = np.arange(16)[None, :] <= np.array([[3], [15], [7], [0], [10]])
    Ts, eps = [0.01, 0.3, 5.0], [1e-3, 10.0]
    key = jax.random.key(7)
    got = sensitivity.fd_batch(normalizers.get("softmax"), l, mask, Ts, eps, key)  # (5, 3, 2)
    keys = jax.random.split(key, 5)
    for r in range(5):
      ke = jax.random.split(keys[r], 2)
      for k, T in enumerate(Ts):
        for e_i, e in enumerate(eps):
          want = jacobians.fd_sensitivity(lambda z, m, T=T: normalizers.softmax(z / T, mask=m),
                                          jnp.asarray(l[r]), e, ke[e_i], jnp.asarray(mask[r]))
          assert got[r, k, e_i] == pytest.approx(float(want), rel=1e-12, abs=1e-14 / e)


def test_sample_rows_is_seeded_stratified():
  groups = np.repeat(np.arange(4), [10, 3, 50, 0 + 7])
  a = sensitivity.sample_rows(groups, 5, seed=1)
  b = sensitivity.sample_rows(groups, 5, seed=1)
  np.testing.assert_array_equal(a, b)
  counts = np.bincount(groups[a], minlength=4)
  np.testing.assert_array_equal(counts, [5, 3, 5, 5])
  assert len(set(a.tolist())) == a.size
  assert not np.array_equal(a, sensitivity.sample_rows(groups, 5, seed=2))
