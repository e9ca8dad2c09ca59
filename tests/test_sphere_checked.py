"""The sphere Monte Carlo's fast form (limits.separability.sphere ``checked``): a float32 Gram
for delta certified by a float64 recheck, and the counts by the Gram identity with a rounding
margin (``rows.gram_margin``); a sample either form cannot vouch for is recomputed by the
float64 reference (direct differences, ``sample_stats``).

References: the reference path itself (``sample_stats``, direct differences in float64) and
scipy's ``pdist``. Counts (N_s/N) must be identical; the continuous statistics (r, delta,
bounds) within 1e-12 relative (r²: rounding of a length-d dot product, ~d·eps ≈ 1e-14, and
the lower bound 1 − Σξ/(N r) loses up to two digits to cancellation near 0).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import pdist

from limits.selection import sort_desc
from limits.separability import rows as sr
from limits.separability import sphere


def _setup(L, H, seed=0):
  key = jax.random.key(seed)
  alphas = jax.vmap(lambda k: sphere.synthetic_alpha("softmax", L, k))(
      jax.random.split(key, H))
  return key, alphas, sort_desc(alphas)


def _both(L, dim, H, ns, samples, seed=0, k=None):
  key, alphas, rank = _setup(L, H, seed)
  ns = jnp.asarray(ns, jnp.int32)
  idx = jnp.arange(samples, dtype=jnp.int32)
  M = jnp.float64(1.0)
  ref = sphere._chunk_stats_jit(key, idx, alphas, rank, ns, M, None, dim=dim, with_bounds=True,
                                rule="strict", checked=False)[0]
  fast, flag = sphere._chunk_stats_jit(key, idx, alphas, rank, ns, M, None, dim=dim,
                                       with_bounds=True, rule="strict", checked=True, k=k)
  return np.asarray(ref), np.asarray(fast), np.asarray(flag), (key, alphas, ns)


@pytest.mark.parametrize("k", [None, 64])   # the top keys: all L, or max(n) as the run uses
def test_fast_form_counts_equal_the_float64_reference_in_64_dimensions(k):
  with jax.enable_x64(True):
    ref, fast, flag, _ = _both(L=256, dim=64, H=4, ns=[1, 4, 16, 64], samples=24, k=k)
  assert not flag.any()  # no near tie at d = 64: every sample certified
  np.testing.assert_array_equal(fast[:, 0], ref[:, 0])            # N_s/N: identical
  np.testing.assert_array_equal(fast[:, 2], ref[:, 2])            # delta: same rows, same sums
  for s in (1, 3, 4, 5):                                          # r, lower, lower_raw, upper
    np.testing.assert_allclose(fast[:, s], ref[:, s], rtol=1e-12, atol=1e-14)


def test_low_dimension_near_ties_are_flagged_and_recomputed_exactly():
  # 512 points on the circle: the Gram identity in float32 cannot tell the nearest pairs
  # apart, so delta is not certified and the sample goes back to the reference path.
  with jax.enable_x64(True):
    ref, fast, flag, (key, alphas, ns) = _both(L=512, dim=2, H=2, ns=[1, 8], samples=6)
    assert flag.all()
    mc = sphere.monte_carlo_detail(key, alphas, [1, 8], 2, 1.0, samples=6, chunk=6)
  mean_ref = ref.mean(axis=0)                                     # (S, H, K)
  np.testing.assert_array_equal(mc.mean, mean_ref[0])
  np.testing.assert_array_equal(mc.mean_delta, mean_ref[2])
  np.testing.assert_array_equal(mc.mean_lower_raw, mean_ref[4])


def test_monte_carlo_equals_the_reference_per_sample_mean():
  with jax.enable_x64(True):
    ref, _, _, (key, alphas, ns) = _both(L=128, dim=16, H=3, ns=[1, 2, 32], samples=20)
    mc = sphere.monte_carlo_detail(key, alphas, [1, 2, 32], 16, 1.0, samples=20, chunk=8)
  mean_ref = ref.mean(axis=0)
  np.testing.assert_array_equal(mc.mean, mean_ref[0])
  np.testing.assert_allclose(mc.mean_r, mean_ref[1], rtol=1e-13)
  np.testing.assert_allclose(mc.mean_delta, mean_ref[2], rtol=1e-13)
  np.testing.assert_allclose(mc.mean_upper, mean_ref[5], rtol=1e-13)


def _points(pairs, dim=8, seed=1):
  """Unit vectors: far-apart random points, then pairs at the given squared distances."""
  rng = np.random.default_rng(seed)
  base = rng.normal(size=(40, dim))
  base /= np.linalg.norm(base, axis=1, keepdims=True)
  out = [base]
  for i, d2 in enumerate(pairs):
    u = np.zeros(dim)
    u[i % dim] = 1.0
    v = np.zeros(dim)
    v[(i + 1) % dim] = 1.0
    c = np.sqrt(1 - d2 / 4)        # |u c + v h|=1 and the pair's squared distance is d2
    h = np.sqrt(d2) / 2
    out.append(np.stack([c * u + h * v, c * u - h * v]))
  return np.concatenate(out)


@pytest.mark.parametrize("gap, certified", [(3e-2, True), (1e-6, False)])
def test_delta_certificate_on_both_sides_of_the_float32_margin(gap, certified):
  # Two close pairs whose squared distances differ by ``gap``; with one candidate row
  # (k = 1: the first pair's later row) the second pair is not rechecked, so the certificate
  # must hold only when the gap exceeds 2·tol32 (≈ 4e-5 for d = 8, |x| = 1).
  x = _points([0.02, 0.02 + gap])
  with jax.enable_x64(True):
    delta, ok = sphere._delta_checked(jnp.asarray(x), k=1)
  assert bool(ok) is certified
  np.testing.assert_allclose(float(delta), np.sqrt(0.02), rtol=1e-12)
  assert np.isclose(float(delta), pdist(x).min(), rtol=1e-12)


def test_delta_checked_equals_pdist_and_skips_duplicates():
  rng = np.random.default_rng(3)
  x = rng.normal(size=(300, 12))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  with jax.enable_x64(True):
    delta, ok = sphere._delta_checked(jnp.asarray(x))
    assert bool(ok)
    np.testing.assert_allclose(float(delta), pdist(x).min(), rtol=1e-12)
    dup = np.concatenate([x, x[:1]])      # an exact duplicate: excluded, as the reference does
    d2, ok2 = sphere._delta_checked(jnp.asarray(dup))
    want = float(sr.min_pairwise_distance(jnp.asarray(dup)))
  assert not bool(ok2) or float(d2) == pytest.approx(want, rel=1e-12)
  assert want == pytest.approx(pdist(x).min(), rel=1e-12)


@pytest.mark.parametrize("r2_over_margin, uncertain", [(0.4, True), (50.0, False)])
def test_gram_margin_flags_a_decision_inside_it_and_not_outside(r2_over_margin, uncertain):
  # n = 1: the selected key 0 has d_0 = 0 exactly; key 1 (same weight, not selected by the
  # tie rule) sits at squared distance r² = c·margin from it, so d_0 < r is decided inside
  # the margin when c < 1 and far outside it when c = 50.
  with jax.enable_x64(True):
    alpha = jnp.asarray([[0.4, 0.4, 0.2]])
    x0 = np.array([1.0, 0.0, 0.0])
    x2 = np.array([0.0, 0.0, 1.0])
    sel = jnp.asarray([[True, False, False]])
    margin = float(sr.gram_margin(alpha, sel, jnp.asarray(np.stack([x0, x0, x2])))[0])
    t = np.sqrt(r2_over_margin * margin) / 0.4          # |0.4 (x1 − x0)|² = c·margin
    x1 = np.array([np.sqrt(1 - t * t), t, 0.0])
    x = jnp.asarray(np.stack([x0, x1, x2]))
    st = sr.row_stats(alpha, sort_desc(alpha), jnp.ones((1, 3), bool), x, 1, 1.0, 0.5,
                      method="gram")
    direct = sr.row_stats(alpha, sort_desc(alpha), jnp.ones((1, 3), bool), x, 1, 1.0, 0.5,
                          method="direct")
  assert bool(st.uncertain[0]) is uncertain
  assert direct.uncertain is None
  if not uncertain:
    assert int(st.n_s[0]) == int(direct.n_s[0]) == 1


def _tie_points(gap):
  """x (3, 3) on the unit sphere and one weight row (0.5, 0.3, 0.2): with N = 2 the selected
  key 1 lies at distance 0.5 from s = 0.5 e1 + 0.3 e2, and the non-selected key 2 at
  r = sqrt(0.25 + gap) (so key 1 is inside iff gap > 0)."""
  s = np.array([0.5, 0.3, 0.0])
  c = (0.04 + s @ s - (0.25 + gap)) / (2 * 0.2)       # <x_2, s> for |0.2 x_2 - s|² = 0.25 + gap
  c /= np.linalg.norm(s)
  x2 = c * s / np.linalg.norm(s) + np.sqrt(1 - c * c) * np.array([0.0, 0.0, 1.0])
  return np.stack([np.eye(3)[0], np.eye(3)[1], x2]), np.array([[0.5, 0.3, 0.2]])


@pytest.mark.parametrize("gap, inside, uncertain", [
    (1e-9, True, False), (-1e-9, False, False),       # outside the margin: decided, exact
    (0.0, None, True), (1e-15, None, True), (-1e-15, None, True)])   # inside: sent back
def test_fast_counts_flag_a_decision_within_the_rounding_margin(gap, inside, uncertain):
  # the margin here is 8·(d + N + 4)·eps·B² ≈ 1.6e-14 (B ≈ 1): a selected key whose d² is
  # within it of r² is flagged (the caller recomputes the sample in float64); one 1e-9 away is
  # decided by the fast form as in exact arithmetic and as the float64 reference decides it.
  x, a = _tie_points(gap)
  with jax.enable_x64(True):
    x, a = jnp.asarray(x), jnp.asarray(a)
    rank = sort_desc(a)
    ns = jnp.asarray([2], jnp.int32)
    top = sphere._top_rows(a, rank, ns, 2)
    out, unc = sphere._stats_fast(x, jnp.float64(1.0), a, top, ns, 1.0)
    ref = sr.row_stats(a, rank, jnp.ones(a.shape, bool), x, 2, 1.0, 1.0, method="direct")
  assert bool(unc) is uncertain
  np.testing.assert_allclose(float(out[1, 0, 0]), np.sqrt(0.25 + gap), rtol=1e-12)   # r
  if inside is not None:
    assert float(out[0, 0, 0]) == (1.0 if inside else 0.5)      # N_s/N: key 0 always inside
    assert float(out[0, 0, 0]) == float(ref.frac[0])


def test_chunks_in_flight_do_not_change_the_monte_carlo(monkeypatch):
  # chunks computed by worker threads are merged in sample order: the same moments bit for
  # bit as one chunk at a time; the workers keep the caller's x64 (a thread-local setting).
  runs = []
  for flight in (1, 3):
    monkeypatch.setattr(sphere, "CHUNKS_IN_FLIGHT", flight)
    with jax.enable_x64(True):
      key, alphas, _ = _setup(128, 2)
      mc = sphere.monte_carlo_detail(key, alphas, [1, 4, 16], 8, 1.0, samples=22, chunk=4)
    runs.append(mc)
  for a, b in zip(runs[0], runs[1]):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
