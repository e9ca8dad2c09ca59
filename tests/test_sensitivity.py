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


def test_g_rows_plain_softmax_path_equals_masked_softmax():
  """g_rows on normalizers.get("softmax") (−inf-masked logits, one reciprocal per row:
  gradient_rows._softmax_inf) against the generic path on the masked normalizers.softmax, same
  keys, float64, L = 300 with short, long, single-key and empty rows: 1e-12 relative plus
  1e-14/ε absolute (each weight within one rounding, ~1e-16, which dominates g on one-hot rows
  and at small ε). A temperature bound into the normalizer is not the plain path; a NaN logit
  gives NaN g on both paths, never a silent 0."""
  from limits.gradient import rows as gradient_rows

  plain = normalizers.get("softmax")
  assert gradient_rows._plain_softmax(plain)
  assert not gradient_rows._plain_softmax(normalizers.get("softmax", temperature=2.0))
  assert not gradient_rows._plain_softmax(normalizers.get("sparsemax"))
  masked = lambda z, mask=None: normalizers.softmax(z, mask=mask)
  with jax.enable_x64(True):
    rng = np.random.default_rng(11)
    L = 300
    l = rng.normal(size=(6, L)) * 4
    last = np.array([0, 5, 127, 200, 299, -1])  # the last row has no visible key
    m = np.arange(L)[None] <= last[:, None]
    Ts, eps = np.array([1e-3, 0.05, 1.0, 30.0]), np.array([1e-3, 0.1, 10.0])
    keys = jax.random.split(jax.random.key(3), 6)
    args = (jnp.asarray(l), jnp.asarray(m), jnp.asarray(Ts), jnp.asarray(eps), keys)
    got = np.asarray(gradient_rows.g_rows(plain, *args))
    want = np.asarray(gradient_rows.g_rows(masked, *args))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14 / eps.min())
    assert (got[5] == 0).all() and (got[1:5] > 1e-3).any()
    l[2, 3] = np.nan
    args = (jnp.asarray(l),) + args[1:]
    assert np.isnan(np.asarray(gradient_rows.g_rows(plain, *args))[2]).all()
    assert np.isnan(np.asarray(gradient_rows.g_rows(masked, *args))[2]).all()
