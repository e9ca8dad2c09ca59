"""limits.distance.printed and limits.separability.printed against direct NumPy loops written from the formulas' text, plus hand values.

Each expected value is computed here by a plain loop over i (and j), not by the module.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits.distance import printed
from limits.separability import printed as sep_printed



@pytest.fixture(autouse=True)
def x64():
  """Float64 for every test here (tolerance 1e-12 relative against the loops)."""
  with jax.enable_x64(True):
    yield


def _row(seed, L=9, d=3, visible=None):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=L) * 2
  mask = np.ones(L, bool) if visible is None else np.arange(L) < visible
  w = np.where(mask, np.exp(logits - logits.max()), 0.0)
  return w / w.sum(), rng.normal(size=(L, d)), mask


def loop_printed(alpha, x, n, mask, reading):
  idx = [i for i in range(len(alpha)) if mask[i]]
  L = len(idx)
  if reading == "output":
    xb = sum(alpha[j] * x[j] for j in idx)
  else:
    xb = sum(x[j] for j in idx) / L
  total = 0.0
  for i in idx:
    total += math.sqrt(sum(((alpha[i] + n / (L - 1)) * x[i][k] - xb[k]) ** 2
                           for k in range(x.shape[1])))
  return (L - n) / L * total


def loop_reconstructed(alpha, x, n, mask, inclusion):
  idx = [i for i in range(len(alpha)) if mask[i]]
  L = len(idx)
  p = n / (L - 1) if inclusion == "L-1" else n / L
  total = 0.0
  for i in idx:
    other = sum(alpha[j] * x[j] for j in idx if j != i)
    total += np.linalg.norm(alpha[i] * x[i] - p * other)
  return (L - n) / L * total


@pytest.mark.parametrize("reading", printed.XBAR_READINGS)
@pytest.mark.parametrize("visible", [None, 5])
def test_expected_printed_matches_loop(reading, visible):
  alpha, x, mask = _row(1, visible=visible)
  got = printed.expected_printed(jnp.asarray(alpha), jnp.asarray(x), 2,
                                 None if visible is None else jnp.asarray(mask), reading)
  np.testing.assert_allclose(float(got), loop_printed(alpha, x, 2, mask, reading), rtol=1e-12)


@pytest.mark.parametrize("inclusion", printed.INCLUSION_READINGS)
@pytest.mark.parametrize("visible", [None, 6])
def test_expected_reconstructed_matches_loop(inclusion, visible):
  alpha, x, mask = _row(2, visible=visible)
  got = printed.expected_reconstructed(jnp.asarray(alpha), jnp.asarray(x), 3,
                                       None if visible is None else jnp.asarray(mask), inclusion)
  np.testing.assert_allclose(float(got), loop_reconstructed(alpha, x, 3, mask, inclusion),
                             rtol=1e-12)


def test_the_two_xbar_readings_differ():
  alpha, x, _ = _row(3)
  a = printed.expected_printed(jnp.asarray(alpha), jnp.asarray(x), 2, xbar_reading="output")
  b = printed.expected_printed(jnp.asarray(alpha), jnp.asarray(x), 2, xbar_reading="mean")
  assert abs(float(a) - float(b)) > 1e-3


def test_expected_vmaps_over_causal_prefixes():
  L = 7
  alpha, x, _ = _row(4, L=L)
  alphas = np.stack([_row(10 + t, L=L, visible=t + 1)[0] for t in range(2, L)])
  masks = np.stack([np.arange(L) <= t for t in range(2, L)])
  f = jax.vmap(lambda a, m: printed.expected_printed(a, jnp.asarray(x), 1, m, "output"))
  got = np.asarray(f(jnp.asarray(alphas), jnp.asarray(masks)))
  want = [loop_printed(a, x, 1, m, "output") for a, m in zip(alphas, masks)]
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_expected_printed_by_hand():
  # L = 2, N = 1, x = e1, e2, alpha = (0.75, 0.25), x̄ = output = (0.75, 0.25).
  # i = 1: (0.75 + 1)·e1 − x̄ = (1.0, −0.25) → √1.0625; i = 2: (1.25)·e2 − x̄ = (−0.75, 1.0) → 1.25.
  got = printed.expected_printed(jnp.array([0.75, 0.25]), jnp.eye(2), 1)
  assert float(got) == pytest.approx(0.5 * (math.sqrt(1.0625) + 1.25), rel=1e-12)


def loop_xi(a, M, delta):
  out = []
  for i in range(len(a)):
    s = sum(a[j] for j in range(len(a)) if j != i)
    q = sum(a[j] ** 2 for j in range(len(a)) if j != i)
    out.append(math.sqrt(max((M ** 2 - delta ** 2 / 2) * s ** 2 + delta ** 2 / 2 * q, 0.0)))
  return out


def test_xi_and_upper_bounds_match_loops():
  a = np.array([0.4, 0.2, 0.1, 0.05])
  M, delta, r = 1.3, 0.7, 0.2
  xi = sep_printed.xi_values(jnp.asarray(a), M, delta)
  np.testing.assert_allclose(np.asarray(xi), loop_xi(a, M, delta), rtol=1e-12)
  xs = loop_xi(a, M, delta)
  want_printed = sum(math.exp(-(r - v) ** 2 / (16 * M ** 2)) for v in xs) / len(xs)
  want_derived = sum(math.exp(-max(v - r, 0.0) ** 2 / (2 * M ** 2)) for v in xs) / len(xs)
  assert float(sep_printed.theorem2_upper_printed(xi, r, M)) == pytest.approx(want_printed, rel=1e-12)
  assert float(sep_printed.theorem2_upper_derived(xi, r, M)) == pytest.approx(want_derived, rel=1e-12)


def test_printed_upper_has_no_positive_part():
  # r above every ξ_i: the derived form is exactly 1, the printed one is below 1.
  xi = jnp.array([0.1, 0.2])
  assert float(sep_printed.theorem2_upper_derived(xi, 2.0)) == 1.0
  assert float(sep_printed.theorem2_upper_printed(xi, 2.0)) < 1.0


def test_printed_upper_vmaps():
  xis = jnp.array([[0.1, 0.5], [0.9, 1.5]])
  rs = jnp.array([0.3, 0.2])
  got = jax.vmap(sep_printed.theorem2_upper_printed)(xis, rs)
  want = [np.mean(np.exp(-(r - np.asarray(x)) ** 2 / 16)) for x, r in zip(xis, rs)]
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def test_bad_reading_is_refused():
  with pytest.raises(ValueError, match="xbar reading"):
    printed.xbar(jnp.ones(2) / 2, jnp.eye(2), reading="median")
  with pytest.raises(ValueError, match="inclusion"):
    printed.expected_reconstructed(jnp.ones(2) / 2, jnp.eye(2), 1, inclusion="N")


def test_expected_printed_rows_per_causal_query():
  L, n = 6, 2
  rng = np.random.default_rng(7)
  logits = rng.normal(size=(L, L))
  causal = np.tril(np.ones((L, L), bool))
  w = np.where(causal, np.exp(logits), 0.0)
  w /= w.sum(axis=1, keepdims=True)
  x = rng.normal(size=(L, 4))
  got = np.asarray(printed.expected_printed_rows(jnp.asarray(w), jnp.asarray(x), n, "mean"))
  for t in range(L):
    if t + 1 <= n:
      assert np.isnan(got[t])  # no non-selected key: skipped
    else:
      want = loop_printed(w[t], x, n, causal[t], "mean")
      assert got[t] == pytest.approx(want, rel=1e-12)


def test_head_expectations_match_the_per_row_forms():
  """The matrix (Gram) form equals the per-row printed and reconstructed forms on every causal
  prefix (float64: the Gram identity cancels at ~1e-12 relative here)."""
  import jax
  import numpy as np

  from limits.distance import printed

  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    L, d, ns = 12, 5, (1, 3, 7)
    logits = rng.normal(size=(L, L)) * 2
    vis = np.tri(L, dtype=bool)
    w = np.where(vis, np.exp(logits), 0.0)
    w /= w.sum(-1, keepdims=True)
    x = rng.normal(size=(L, d))
    po, pm, rn = (np.asarray(a) for a in printed.head_expectations(
        jax.numpy.asarray(w), jax.numpy.asarray(x), jax.numpy.asarray(ns)))
    for t in range(L):
      for k, n in enumerate(ns):
        if t + 1 <= n:
          assert np.isnan(po[t, k]) and np.isnan(pm[t, k]) and np.isnan(rn[t, k])
          continue
        a, xs = w[t, :t + 1], x[:t + 1]
        np.testing.assert_allclose(po[t, k], printed.expected_printed(a, xs, n, None, "output"),
                                   rtol=1e-9)
        np.testing.assert_allclose(pm[t, k], printed.expected_printed(a, xs, n, None, "mean"),
                                   rtol=1e-9)
        np.testing.assert_allclose(rn[t, k], printed.expected_reconstructed(a, xs, n, None, "L"),
                                   rtol=1e-9)
    means = printed.layer_expectation_means(w[None], x[None], ns)
    np.testing.assert_allclose(means["expected_printed_output"][0], np.nanmean(po, axis=0))
