"""limits.jacobians: jacfwd vs jacrev vs closed forms vs central differences (float64) for every
normalizer, the O(L) softmax norm vs dense SVD / NumPy, the matrix-free norm vs dense, and the
paper's g(T, ε) against an independent evaluation and its √2/ε ceiling."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from limits import jacobians as J
from limits import normalizers as N
from limits.errors import LimitsError

L = 7


def _rows(seed, shape, scale=2.0):
  return np.random.default_rng(seed).normal(size=shape) * scale


def _mask(shape, seed):
  """Random visible sets, including one fully masked row and one single-key row."""
  rng = np.random.default_rng(seed)
  m = rng.random(shape) < 0.7
  m[0] = False
  m[1] = False
  m[1, 3] = True
  return m


@functools.lru_cache(maxsize=None)
def _jac_kernel(name):
  """Jitted (jacfwd, jacrev, central differences, closed form) of l ↦ normalizer(l / T)."""
  fn = N.get(name)
  cf = J.closed_form(name)

  @jax.jit
  def k(l, m, T):
    f = lambda x, mm: fn(x / T, mm)
    return (J.exact(f, l, "fwd", m), J.exact(f, l, "rev", m),
            J.finite_difference(f, l, J.FD_EPS[np.dtype(np.float64)] * T, m),
            cf(l / T, m) / T)

  return k


@pytest.mark.parametrize("T", [0.3, 5.0])
@pytest.mark.parametrize("name", N.NAMES)
def test_exact_matches_jacrev_closed_form_and_central_differences(name, T):
  with jax.enable_x64(True):
    x = _rows(0, (6, L), scale=0.5 * T)  # z = l/T of unit-ish scale: sparse supports of 2+ keys
    m = _mask(x.shape, 1)
    Jf, Jr, Jd, Jc = _jac_kernel(name)(x, m, T)
    # Tolerances: module constants (EXACT_TOL: rounding only; FD_TOL: O(h²) truncation with
    # h = 1e-5·T on a function that varies on scale T, plus eps/h rounding). Sparse normalizers
    # have kinks; random rows are ~1e-3 away from one, far beyond h.
    r = J.compare_arrays(Jf, Jr, Jc, Jd, fd_eps=1e-5 * T)
    assert r["ok"], r
    assert np.all(np.asarray(Jf)[0] == 0)  # fully masked row: zero Jacobian
    assert np.abs(np.asarray(Jf)).max() > 1e-3  # not trivially zero


def test_compare_reports_failure_for_a_wrong_closed_form():
  with jax.enable_x64(True):
    x = _rows(2, (3, 5))
    f = lambda l: N.softmax(l, 1.0)
    wrong = lambda l: J.softmax_closed_form(l, 2.0)  # wrong temperature
    r = J.compare(f, x, closed=wrong)
    assert not r["closed"]["ok"] and r["rev"]["ok"] and r["fd"]["ok"]
    assert r["closed"]["max_abs"] > 1e-2


def test_general_closed_form_lemma2_first_line_with_non_exponential_F():
  with jax.enable_x64(True):
    x = _rows(3, (4, 6))
    m = _mask(x.shape, 4)
    F = lambda l: 1 + l**2 + 0.1 * jnp.sin(l)
    dF = lambda l: 2 * l + 0.1 * jnp.cos(l)
    f = lambda l, mm: N.general(l, F, mm)
    Jf = jax.jit(lambda l, mm: J.exact(f, l, "fwd", mm))(x, m)
    Jc = J.general_closed_form(F, dF, x, m)
    np.testing.assert_allclose(np.asarray(Jc), np.asarray(Jf), atol=1e-12)  # rounding only


def test_finite_difference_of_a_linear_map_is_the_matrix():
  with jax.enable_x64(True):
    A = _rows(5, (5, 5))
    got = J.finite_difference(lambda l: l @ A.T, _rows(6, (2, 5)))
    np.testing.assert_allclose(np.asarray(got), np.broadcast_to(A, (2, 5, 5)), atol=1e-9)


# ----------------------------------------------------------------------------- norms


def test_softmax_closed_form_norm_matches_svd_and_numpy():
  with jax.enable_x64(True):
    x = _rows(7, (64, 9), scale=3.0)
    x[2, :2] = 5.0  # exact tie at the top
    x[3] = 0.0  # uniform row: norm = 1/L
    m = np.ones(x.shape, bool)
    m[4, 1:] = False  # single visible key: norm 0
    m[5] = False
    m[6, 2:] = False  # two visible tied keys: 1/(2T)
    x[6, :2] = 1.0
    T = 0.7
    fast = np.asarray(jax.jit(J.softmax_closed_form_norm)(x, T, m))
    a = np.asarray(N.softmax(x, T, m))
    ref = np.array([np.linalg.norm((np.diag(r) - np.outer(r, r)) / T, 2) for r in a])
    np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=1e-14)  # 100-step bisection
    np.testing.assert_allclose(np.asarray(J.spectral_norm(J.softmax_closed_form(x, T, m))), ref,
                               rtol=1e-12, atol=1e-14)
    assert fast[6] == pytest.approx(1 / (2 * T), rel=1e-14)
    assert fast[4] == 0 and fast[5] == 0


@pytest.mark.parametrize("name", ["softmax", "entmax", "sa_softmax"])
def test_matrix_free_norm_matches_dense(name):
  with jax.enable_x64(True):
    x = _rows(8, (8, 40))
    m = np.ones(x.shape, bool)
    m[1, 20:] = False
    fn = N.get(name)
    dense = J.spectral_norm(jax.jit(lambda l, mm: J.exact(fn, l, "fwd", mm))(x, m))
    free = jax.jit(lambda l, mm: J.spectral_norm_matfree(fn, l, 300, mm))(x, m)
    # Power iteration converges linearly, at (σ2/σ1)² per step: with close top singular values
    # one row of this seed is still 4e-6 low after 300 steps, so 1e-4 relative; it is a lower
    # bound and must never exceed the dense norm.
    np.testing.assert_allclose(np.asarray(free), np.asarray(dense), rtol=1e-4)
    assert np.all(np.asarray(free) <= np.asarray(dense) * (1 + 1e-12))


def test_spectral_norm_matches_numpy():
  A = _rows(9, (3, 6, 6))
  np.testing.assert_allclose(np.asarray(J.spectral_norm(A)),
                             [np.linalg.norm(a, 2) for a in A], rtol=1e-5)  # float32 SVD


# ----------------------------------------------------------------------------- g(T, eps)


def test_random_directions_are_unit_and_visible_only():
  with jax.enable_x64(True):
    m = _mask((50, 8), 10)
    v = np.asarray(J.random_directions(jax.random.key(0), m.shape, m, jnp.float64))
    assert np.all(v[~m] == 0)
    norms = np.linalg.norm(v, axis=-1)
    np.testing.assert_allclose(norms[m.any(-1)], 1, atol=1e-14)
    assert np.all(norms[~m.any(-1)] == 0)


def test_fd_sensitivity_matches_independent_evaluation_and_linearisation():
  with jax.enable_x64(True):
    x = _rows(11, (20, 10))
    m = _mask(x.shape, 12)
    T = 0.5
    f = lambda l, mm: N.softmax(l, T, mm)
    key = jax.random.key(3)
    v = np.asarray(J.random_directions(key, x.shape, m, jnp.float64))
    for eps in (1e-6, 1e-1):
      g = np.asarray(J.fd_sensitivity(f, x, eps, key, m))
      ref = np.linalg.norm(np.asarray(f(x + eps * v, m)) - np.asarray(f(x, m)), axis=-1) / eps
      np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-14)
    # For small eps, g → ‖J v‖ (first-order expansion; error O(eps/T²) ≈ 1e-5 here).
    jv = np.einsum("rij,rj->ri", np.asarray(J.softmax_closed_form(x, T, m)), v)
    g = np.asarray(J.fd_sensitivity(f, x, 1e-6, key, m))
    np.testing.assert_allclose(g, np.linalg.norm(jv, axis=-1), atol=1e-5)


_G = {}


@settings(max_examples=20, deadline=None)
@given(x=hnp.arrays(np.float64, (4, 6), elements=st.floats(-1e4, 1e4)),
       logT=st.floats(-4, 2), eps=st.sampled_from([1e-3, 1e-1, 10.0, 1e3]),
       name=st.sampled_from(sorted(N.SIMPLEX)), seed=st.integers(0, 2**31 - 1))
def test_fd_sensitivity_never_exceeds_sqrt2_over_eps(x, logT, eps, name, seed):
  with jax.enable_x64(True):
    if name not in _G:
      fn = N.get(name)
      _G[name] = jax.jit(lambda l, T, e, k: J.fd_sensitivity(lambda z: fn(z / T), l, e, k))
    g = np.asarray(_G[name](x, 10.0**logT, eps, jax.random.key(seed)))
    assert np.all(np.isfinite(g))
    # The simplex has diameter √2; 1e-12 relative slack for rounding of the two weight vectors.
    assert np.all(g <= np.sqrt(2) / eps * (1 + 1e-12))


# ----------------------------------------------------------------------------- bad input edges


@pytest.mark.parametrize("call, needle", [
    (lambda f, x: J.finite_difference(f, x, eps=0.0), "eps=0.0"),
    (lambda f, x: J.finite_difference(f, x, eps=-1e-3), "eps=-0.001"),
    (lambda f, x: J.finite_difference(f, x, eps=float("nan")), "eps=nan"),
    (lambda f, x: J.fd_sensitivity(f, x, 0.0, jax.random.key(0)), "epsilon=0.0"),
    (lambda f, x: J.spectral_norm_matfree(f, x, iters=0), "iters=0"),
    (lambda f, x: J.spectral_norm_matfree(f, x, iters=-3), "iters=-3"),
    (lambda f, x: J.exact(f, jnp.float32(2.0)), "scalar"),
    (lambda f, x: J.finite_difference(f, jnp.zeros((2, 0))), "L = 0"),
])
def test_degenerate_parameters_are_one_line_errors(call, needle):
  # Before: eps = 0 returned NaN and iters = 0 the norm along the random start vector (a
  # wrong number), both without complaint.
  f = N.get("softmax")
  with pytest.raises(LimitsError) as e:
    call(f, jnp.array([0.3, -1.0, 2.0]))
  assert needle in str(e.value) and "\n" not in str(e.value)


def test_one_power_iteration_is_a_lower_bound_of_the_svd_norm():
  # iters = 1 is allowed and never exceeds the exact norm (a Rayleigh-quotient bound).
  x = jnp.array([[0.3, -1.0, 2.0, 0.0], [1.0, 1.0, -0.5, 0.2]])
  f = N.get("softmax")
  dense = np.linalg.svd(np.asarray(J.softmax_closed_form(x, 1.0)), compute_uv=False)[:, 0]
  one = np.asarray(J.spectral_norm_matfree(f, x, iters=1))
  assert (one <= dense * (1 + 1e-5)).all() and (one > 0).all()


# JAX's own gradient checker beside the comparisons above: forward and reverse mode of every
# normalizer against its central differences (``jax.test_util.check_grads``, float64; its
# default per-dtype tolerances). Smooth normalizers to second order; the piecewise ones
# (sparsemax, entmax15_exact and the bisection entmax have kinks where the support changes) to first order at
# generic points, where the support is stable within the difference step.
_SMOOTH = ("softmax", "ssmax", "sa_softmax")


@pytest.mark.parametrize("name", N.NAMES)
def test_check_grads_of_every_normalizer(name):
  from jax.test_util import check_grads

  with jax.enable_x64(True):
    fn = N.get(name)
    x = jnp.asarray(_rows(31, (3, L)))
    m = jnp.asarray(_mask((3, L), 32)).at[0].set(True)  # check_grads needs a visible key
    w = jnp.asarray(np.random.default_rng(33).normal(size=(3, L)))
    f = jax.jit(lambda l: jnp.sum(fn(l, m) * w))  # jitted: one compile per derivative
    order = 2 if name in _SMOOTH else 1
    check_grads(f, (x,), order=order, modes=("fwd", "rev"))
