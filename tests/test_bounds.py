"""limits.bounds: the paper's inequalities hold where they are valid (property tests with a few
fixed shapes), the constants match closed forms, and Corollary 3's printed form min{1/(4T), √2}
is shown NOT to bound the Jacobian's spectral norm (tied top-two counterexample) while the tight
form 1/(2T) does."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from limits import bounds as B
from limits import jacobians as J
from limits import normalizers as N
from limits.errors import LimitsError

# Relative slack for float64 rounding in a bound check (a handful of ulps on O(1) quantities).
RTOL = 1e-12

# A small family of positive, L-independent F (Lemma 1/2 hypotheses) with derivatives.
FAMILY = {
    "exp": (lambda T: (lambda l: jnp.exp(l / T), lambda l: jnp.exp(l / T) / T)),
    "quadratic": (lambda T: (lambda l: 1 + (l / T)**2, lambda l: 2 * l / T**2)),
    "softplus": (lambda T: (lambda l: jax.nn.softplus(l / T) + 0.05,
                            lambda l: jax.nn.sigmoid(l / T) / T)),
}


# ----------------------------------------------------------------------------- Lemma 1


def test_lemma1_constants_closed_forms():
  T, a = 0.5, 3.0
  C1, C2 = B.lemma1_constants(lambda l: np.exp(l / T), a)
  assert C2 == pytest.approx(np.exp(2 * a / T), rel=1e-12)
  assert C1 == pytest.approx(np.exp(-2 * a / T), rel=1e-12)
  # Non-monotone F: 2 + sin(3l) on [-2, 2] reaches 1 and 3 in the interior.
  C1, C2 = B.lemma1_constants(lambda l: 2 + np.sin(3 * l), 2.0)
  assert C2 == pytest.approx(3.0, rel=1e-9)  # bounded-optimiser refinement, xatol 1e-12
  assert C1 == pytest.approx(1 / 3, rel=1e-9)
  assert B.lemma1_constants(lambda l: np.exp(l), 0.0) == (1.0, 1.0)


def test_lemma1_constants_errors():
  with pytest.raises(LimitsError, match="a="):
    B.lemma1_constants(np.exp, -1.0)
  with pytest.raises(LimitsError, match="positive"):
    B.lemma1_constants(lambda l: l, 1.0)


@functools.lru_cache(maxsize=None)
def _general(name, T):
  F, _ = FAMILY[name](T)
  return jax.jit(lambda l, m: N.general(l, F, m))


@settings(max_examples=25, deadline=None)
@given(u=hnp.arrays(np.float64, (3, 16), elements=st.floats(-1, 1)),
       a=st.floats(0.01, 5), name=st.sampled_from(sorted(FAMILY)),
       T=st.sampled_from([0.3, 1.0, 4.0]), n=st.sampled_from([2, 9, 16]))
def test_lemma1_band_holds(u, a, name, T, n):
  with jax.enable_x64(True):
    F, _ = FAMILY[name](T)
    C1, C2 = B.lemma1_constants(lambda l: np.asarray(F(jnp.asarray(l))), a)
    m = np.arange(16) < n  # L = n visible keys
    alpha = np.asarray(_general(name, T)(a * u, m))[:, :n]
    assert np.all(alpha >= C1 / n * (1 - RTOL))
    assert np.all(alpha <= C2 / n * (1 + RTOL))


# ----------------------------------------------------------------------------- Corollary 1


@settings(max_examples=25, deadline=None)
@given(q=hnp.arrays(np.float64, (2, 4), elements=st.floats(-2, 2)),
       k=hnp.arrays(np.float64, (2, 12, 4), elements=st.floats(-2, 2)),
       T=st.sampled_from([0.5, 2.0, 8.0]))
def test_corollary1_band_holds(q, k, T):
  with jax.enable_x64(True):
    lo, hi = B.corollary1_band(q, k, T)
    alpha = np.asarray(N.softmax(np.einsum("bd,bld->bl", q, k), T))
    assert np.all(alpha >= np.asarray(lo)[:, None] * (1 - RTOL))
    assert np.all(alpha <= np.asarray(hi)[:, None] * (1 + RTOL))


def test_corollary1_band_is_attained_in_the_limit_and_respects_masks():
  # Independent closed form: with k_1 = Δ-aligned and the rest anti-aligned the top weight is
  # e^{Δ/T}/(e^{Δ/T} + (L−1)e^{−Δ/T}) ≤ e^{2Δ/T}/L.
  with jax.enable_x64(True):
    q = np.array([1.0, 0.0])
    k = np.array([[1.0, 0.0]] + [[-1.0, 0.0]] * 5 + [[9.0, 0.0]])
    m = np.array([True] * 6 + [False])  # the masked key with a large norm must not count
    T = 1.0
    lo, hi = B.corollary1_band(q, k, T, m)
    assert float(hi) == pytest.approx(np.exp(2.0) / 6, rel=1e-14)
    assert float(lo) == pytest.approx(np.exp(-2.0) / 6, rel=1e-14)


# ----------------------------------------------------------------------------- Lemma 2


@functools.lru_cache(maxsize=None)
def _lemma2_kernel(name, T):
  F, dF = FAMILY[name](T)

  @jax.jit
  def k(l, m):
    Jc = J.general_closed_form(F, dF, l, m)
    return J.spectral_norm(Jc), B.lemma2_bound(F, dF, l, m)

  return k


@settings(max_examples=25, deadline=None)
@given(x=hnp.arrays(np.float64, (4, 10), elements=st.floats(-3, 3)),
       name=st.sampled_from(sorted(FAMILY)), T=st.sampled_from([0.5, 1.0, 3.0]),
       n=st.sampled_from([1, 4, 10]))
def test_lemma2_bound_holds(x, name, T, n):
  with jax.enable_x64(True):
    m = np.arange(10) < n
    norm, bound = (np.asarray(v) for v in _lemma2_kernel(name, T)(x, m))
    assert np.all(np.isfinite(bound))
    assert np.all(norm <= bound * (1 + RTOL))


def test_softmax_lemma2_bound_equals_general_form():
  with jax.enable_x64(True):
    x = np.random.default_rng(0).normal(size=(5, 7))
    T = 0.8
    F, dF = FAMILY["exp"](T)
    np.testing.assert_allclose(np.asarray(B.softmax_lemma2_bound(x, T)),
                               np.asarray(B.lemma2_bound(F, dF, x)), rtol=1e-12)
    # Underflowing F gives +inf (a vacuous bound), never NaN.
    assert np.isinf(np.asarray(B.lemma2_bound(F, dF, x * 1e4))).all()


# ----------------------------------------------------------------------------- Corollary 3


@pytest.mark.parametrize("T", [1e-4, 1e-2, 0.1, 1 / (4 * np.sqrt(2)), 1.0, 8.0, 1e3])
def test_tied_top_two_violates_paper_form_and_attains_tight_form(T):
  """The counterexample: ‖J‖₂ = 1/(2T) exactly, above min{1/(4T), √2} at every T."""
  with jax.enable_x64(True):
    l, m = B.tied_top_two(6)
    # Independent: jacfwd of the normalizer + dense SVD (no closed form involved).
    Jx = jax.jacfwd(lambda z: N.softmax(z, T, m))(l)
    norm = float(np.linalg.norm(np.asarray(Jx), 2))
    assert norm == pytest.approx(1 / (2 * T), rel=1e-12)
    assert norm > float(B.softmax_jacobian_bound(T, "paper")) * 1.4  # violated by ≥ 2x / 1.41x
    assert norm <= float(B.softmax_jacobian_bound(T, "tight")) * (1 + RTOL)
    # What IS true of 1/(4T): every entry of J is at most 1/(4T) in absolute value.
    assert np.abs(np.asarray(Jx)).max() <= 1 / (4 * T) * (1 + RTOL)


def test_tight_bound_on_random_rows_and_paper_form_exceeded():
  """2,000 random rows (PAPER.md §7.1): max T‖J‖ is just below ½, far above ¼."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    lengths = rng.integers(2, 33, 2000)
    scales = 10.0**rng.uniform(-1, 1.5, 2000)
    x = rng.normal(size=(2000, 32)) * scales[:, None]
    m = np.arange(32) < lengths[:, None]
    T = 1.0
    tn = np.asarray(jax.jit(J.softmax_closed_form_norm)(x, T, m)) * T
    # Cross-check the O(L) norm on a subset with an independent dense eigen-solve.
    a = np.asarray(N.softmax(x[:50], T, m[:50]))
    dense = np.array([np.linalg.eigvalsh(np.diag(r) - np.outer(r, r))[-1] for r in a])
    np.testing.assert_allclose(tn[:50], dense, rtol=1e-10, atol=1e-15)
    assert tn.max() <= 0.5 * (1 + RTOL)
    assert tn.max() > 0.49  # random rows come close to the tied case (§7.1: ≈ 0.4999)
    assert np.sum(tn > 0.25) > 100  # many rows exceed the paper's 1/(4T)


@settings(max_examples=20, deadline=None)
@given(x=hnp.arrays(np.float64, (4, 8), elements=st.floats(-1e4, 1e4)),
       logT=st.floats(-4, 3))
def test_tight_bound_holds_for_any_row(x, logT):
  with jax.enable_x64(True):
    T = 10.0**logT
    norm = np.asarray(_norm_kernel(x, T))
    assert np.all(np.isfinite(norm))
    assert np.all(norm <= 1 / (2 * T) * (1 + 1e-10))


@jax.jit
def _norm_kernel(x, T):
  return J.softmax_closed_form_norm(x, T)


def test_softmax_jacobian_bound_values_and_errors():
  assert float(B.softmax_jacobian_bound(1.0)) == 0.25
  assert float(B.softmax_jacobian_bound(1e-3)) == pytest.approx(np.sqrt(2))
  assert float(B.softmax_jacobian_bound(2.0, "tight")) == 0.25
  np.testing.assert_allclose(np.asarray(B.softmax_jacobian_bound(np.array([0.1, 10.0]))),
                             [np.sqrt(2), 0.025])
  for bad in (0.0, -1.0, float("nan")):
    with pytest.raises(LimitsError, match="temperature"):
      B.softmax_jacobian_bound(bad)
  with pytest.raises(LimitsError, match="form"):
    B.softmax_jacobian_bound(1.0, "loose")
  with pytest.raises(LimitsError, match="length"):
    B.tied_top_two(1)


def test_lemma1_check_holds_tightly_and_can_fail():
  """Lemma 1 on bounded logits: α·L in [C1, C2] for F = exp and F = softplus; the extreme rows
  approach C2 = e^{2a} (closed form L e^a / (e^a + (L-1) e^{-a})); constants for a smaller
  range than the logits are violated."""
  import math

  from limits import bounds

  a, lengths = 2.0, [2, 16, 256, 4096]
  res = bounds.lemma1_check(np.exp, a, lengths, rows=64)
  assert res["violations"] == 0 and res["checked"] == 66 * sum(lengths)
  assert res["C2"] == pytest.approx(math.exp(2 * a), rel=1e-12)
  for L in lengths:
    top = L * math.exp(a) / (math.exp(a) + (L - 1) * math.exp(-a))
    assert res["by_L"][L]["max_aL"] == pytest.approx(top, rel=1e-12)
  softplus = lambda x: np.log1p(np.exp(x))
  assert bounds.lemma1_check(softplus, a, lengths, rows=64)["violations"] == 0
  assert bounds.lemma1_check(np.exp, a, lengths, rows=64, a_constants=a / 2)["violations"] > 0
