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


# ----------------------------------------------------------------------------- mutation survivors
# Assertions that kill the mutants of tools/mutation_run.py's "bounds" group the suite above let
# through (docs/mutation_survivors.md); each against a closed form or an independent loop.


def _exact_root(target, expr, start):
  """The float x near ``start`` (within 64 ulps) with expr(x) == target bit for bit."""
  for k in range(-64, 65):
    x = start + k * np.spacing(start)
    if expr(x) == target:
      return x
  raise AssertionError("no float hits the boundary exactly")


def test_lemma1_check_slack_is_exactly_1e12_on_both_sides():
  """A step F (1 on [-a_c, 0), s on [0, a_c]) gives C2 = s, C1 = 1/s exactly; its values y at
  -a and z at +a are tuned so that an extreme row's α·L = 2·f/(f_0 + f_1) (L = 2, rows = 0) hits
  the boundary C1·(1 - 1e-12) or C2·(1 + 1e-12) bit for bit: on it no violation, a few ulps
  beyond it one more per extreme row."""
  a, a_c = 1.0, 0.5

  def check(s, y, z):
    F = lambda x: np.where(x <= -a, y, np.where(x >= a, z, np.where(x < 0, 1.0, s)))
    res = B.lemma1_check(F, a, [2], rows=0, a_constants=a_c)
    assert (res["C1"], res["C2"]) == (1.0 / s, s)
    return res["violations"]

  # s = 1.5: C2 = 1.5, C1 = 1/1.5 (a value of s whose lower boundary a float y hits exactly).
  # Lower side: z = 1, 2y/(1 + y) = C1(1 - 1e-12); the other entry 2/(1 + y) = 4/3 < C2.
  t = (1.0 / 1.5) * (1 - 1e-12)
  low = lambda y: (2 * np.array([y]) / np.array([1.0 + y]))[0]
  y = _exact_root(t, low, t / (2 - t))
  assert check(1.5, y, 1.0) == 0
  assert check(1.5, y * (1 - 1e-15), 1.0) == 2   # a few ulps beyond: one per extreme row
  # Upper side: y = 1, 2z/(z + 1) = 1.5(1 + 1e-12); the low entries 2/(z + 1) = 0.5 are below
  # C1 = 2/3 in both rows (2 violations that do not move).
  u = 1.5 * (1 + 1e-12)
  high = lambda z: (2 * np.array([z]) / np.array([z + 1.0]))[0]
  z = _exact_root(u, high, u / (2 - u))
  assert check(1.5, 1.0, z) == 2
  assert check(1.5, 1.0, z * (1 + 1e-15)) == 4


def test_lemma1_check_rows_lengths_and_keys():
  a = 1.0
  e = np.exp
  # Keys and closed-form constants for F = exp: C2 = e^{2a}, C1 = e^{-2a}.
  res = B.lemma1_check(np.exp, a, [3], rows=0)
  assert set(res) == {"C1", "C2", "violations", "checked", "by_L"}
  assert res["C1"] == pytest.approx(e(-2 * a), rel=1e-12)
  assert res["C2"] == pytest.approx(e(2 * a), rel=1e-12)
  # L = 3, the two extreme rows (a, -a, -a) and (-a, a, a): the smallest α·L is the mirror
  # row's 3e^{-a}/(e^{-a} + 2e^{a}) (not the first row's 3e^{-a}/(e^{a} + 2e^{-a})).
  assert res["by_L"][3]["min_aL"] == pytest.approx(3 * e(-a) / (e(-a) + 2 * e(a)), rel=1e-12)
  assert res["by_L"][3]["max_aL"] == pytest.approx(3 * e(a) / (e(a) + 2 * e(-a)), rel=1e-12)
  # L = 1 is a legal length (α·L = 1 exactly); L = 0 is refused with its value.
  one = B.lemma1_check(np.exp, a, [1], rows=5)
  assert one["checked"] == 7 and one["violations"] == 0
  assert one["by_L"][1] == {"min_aL": 1.0, "max_aL": 1.0}
  with pytest.raises(LimitsError, match="L=0 is not allowed; lengths must be >= 1"):
    B.lemma1_check(np.exp, a, [2, 0])
  # Default 256 random rows (+ 2 extreme rows) per L; seeded (default seed 0), reproducible.
  d = B.lemma1_check(np.exp, 1.0, [4], a_constants=1e-3)
  assert d["checked"] == 258 * 4
  # With C2 = e^{1} (a_constants = a/2) only some random entries violate, so the count depends
  # on the draw: equal for the default and seed 0 (twice), different for seed 1.
  half = [B.lemma1_check(np.exp, 1.0, [4], a_constants=0.5, **kw)["violations"]
          for kw in ({}, {}, {"seed": 0}, {"seed": 1})]
  assert half[0] == half[1] == half[2] != half[3]
  # The random rows are spread over [-a, a]: with a band of half-width 2e-3 around 1 almost
  # every one of their 1024 entries is outside it (|Δ log α·L| > 2e-3 needs logits within
  # ~1e-3 of their log-mean-exp); the 8 extreme entries alone could not give more than 8.
  assert d["violations"] > 900
  # Violations add up over the lengths.
  parts = [B.lemma1_check(np.exp, a, [L], rows=0, a_constants=0.5)["violations"]
           for L in (2, 3)]
  assert min(parts) > 0
  assert B.lemma1_check(np.exp, a, [2, 3], rows=0, a_constants=0.5)["violations"] == sum(parts)


def test_lemma1_check_random_logits_stay_in_the_range():
  """F = e^x inside [-a, a] and 1e6 outside: a logit drawn outside the range would show as an
  α·L far above C2 (a violation); with a = 0.25 (not 1) and 256 rows none may appear."""
  a = 0.25
  F = lambda x: np.where(np.abs(x) <= a, np.exp(x), 1e6)
  res = B.lemma1_check(F, a, [16], rows=256)
  assert res["violations"] == 0 and res["by_L"][16]["max_aL"] <= res["C2"]


def test_lemma1_check_normalises_in_float64():
  """F = jnp.exp returns float32 (x64 off): α·L of the extreme rows must still be the float64
  value L·f_hi/(f_hi + (L - 1)·f_lo) of those float32 numbers (rel 1e-13; float32 arithmetic
  would be off by ~1e-7)."""
  a, L = 1.0, 3
  hi, lo = float(jnp.exp(jnp.float32(a))), float(jnp.exp(jnp.float32(-a)))
  res = B.lemma1_check(jnp.exp, a, [L], rows=0)
  assert res["by_L"][L]["max_aL"] == pytest.approx(L * hi / (hi + (L - 1) * lo), rel=1e-13)
  assert res["by_L"][L]["min_aL"] == pytest.approx(L * lo / (lo + (L - 1) * hi), rel=1e-13)


def test_softmax_lemma2_bound_masks_and_short_rows():
  """(e^{r/T} + e^{2r/T})/(T·L) over the visible keys only: r = max - min and L of the visible
  ones; one visible key gives 2/T; a row with none gives the same finite value (r = 0, L = 1)."""
  T = 0.5
  with jax.enable_x64(True):
    x = np.array([[0.3, -0.2, 9.0, 0.1], [5.0, -5.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    m = np.array([[True, True, False, True], [False, False, True, False], [False] * 4])
    got = np.asarray(B.softmax_lemma2_bound(x, T, m))
    r = 0.3 - (-0.2)
    np.testing.assert_allclose(got[0], (np.exp(r / T) + np.exp(2 * r / T)) / (T * 3), rtol=1e-12)
    np.testing.assert_allclose(got[1:], [2 / T, 2 / T], rtol=1e-12)
    assert np.asarray(B.softmax_lemma2_bound(np.array([[1.0]]), T))[0] == pytest.approx(2 / T)
    # The result keeps the logits' dtype (float32 in, float32 out, also with x64 on).
    assert B.softmax_lemma2_bound(np.zeros((2, 3), np.float32), T).dtype == jnp.float32


def test_simplex_fd_bound():
  """√2/ε (the simplex's diameter over ε); ε must be positive."""
  with jax.enable_x64(True):
    np.testing.assert_allclose(np.asarray(B.simplex_fd_bound(np.array([0.5, 1e-3]))),
                               [2 * np.sqrt(2), 1000 * np.sqrt(2)], rtol=1e-15)
  assert float(B.simplex_fd_bound(2.0)) == pytest.approx(np.sqrt(2) / 2, rel=1e-6)
  for bad in (0.0, -1.0):
    with pytest.raises(LimitsError, match="epsilon"):
      B.simplex_fd_bound(bad)


def _causal_reference(scores, q, k, T, window):
  """Corollary 1 per query with plain numpy loops: visible keys i <= t (the last W if W > 0),
  α = softmax(scores/T) over them, n_t their number, Δ_t = ‖q_t‖·max ‖k_i‖ over them."""
  Bn, H, L, _ = q.shape
  out = {key: np.zeros((Bn, H)) for key in ("violations", "min_margin", "log_max_last",
                                            "log_min_last", "band_last")}
  for b in range(Bn):
    for h in range(H):
      margins, viol = [], 0
      for t in range(L):
        vis = [i for i in range(t + 1) if not window or i > t - window]
        z = scores[b, h, t, vis] / T
        logw = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        lmax, lmin = logw.max() + np.log(len(vis)), logw.min() + np.log(len(vis))
        band = 2 * np.linalg.norm(q[b, h, t]) * max(np.linalg.norm(k[b, h, i]) for i in vis) / T
        viol += int(lmax > band or lmin < -band)
        margins.append(min(band - lmax, lmin + band))
      out["violations"][b, h] = viol
      out["min_margin"][b, h] = min(margins)
      out["log_max_last"][b, h], out["log_min_last"][b, h], out["band_last"][b, h] = (
          lmax, lmin, band)
  return out


@pytest.mark.parametrize("window", [0, 3])
@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_corollary1_causal_check_against_a_loop(window, scale):
  """Every output of the log-space check against the per-query numpy loop (float64, rtol
  1e-10); scale 40 puts scores far from q·k so some (not all) queries violate the band."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(3 + window)
    Bn, H, L, d, T = 2, 2, 7, 3, 1.5
    q = rng.normal(size=(Bn, H, L, d)) * 0.4
    k = rng.normal(size=(Bn, H, L, d)) * 0.4
    k[..., 1, :] *= 5.0  # a long key early on: inside the window of early queries only
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    got = B.corollary1_causal_check(jnp.asarray(scores), jnp.asarray(q), jnp.asarray(k), T,
                                    window=window)
    ref = _causal_reference(scores, q, k, T, window)
    assert set(got) == set(ref) | {"queries"}
    np.testing.assert_array_equal(np.asarray(got["queries"]), np.full((Bn, H), L))
    np.testing.assert_array_equal(np.asarray(got["violations"]), ref["violations"])
    for key in ("min_margin", "log_max_last", "log_min_last", "band_last"):
      np.testing.assert_allclose(np.asarray(got[key]), ref[key], rtol=1e-10, atol=1e-12)
    if scale == 1.0:
      assert (ref["violations"] == 0).all() and (ref["min_margin"] > 0).all()
    else:
      assert 0 < ref["violations"].sum() < Bn * H * L


def test_corollary1_band_masks_and_dtype():
  """(e^{-2Δ/T}/L, e^{2Δ/T}/L) with Δ = ‖q‖·max ‖k_i‖ and L over the visible keys only: a masked
  long key does not count, short visible keys (norm < 1) do; one visible key gives L = 1. The
  band keeps the keys' dtype (float32 with x64 on)."""
  T = 2.0
  with jax.enable_x64(True):
    q = np.array([[0.6, 0.8], [0.6, 0.8]])                          # ‖q‖ = 1
    k = np.array([[[0.3, 0.0], [0.0, 0.4], [9.0, 0.0]]] * 2)       # norms 0.3, 0.4, 9
    m = np.array([[True, True, False], [False, True, False]])
    lo, up = (np.asarray(v) for v in B.corollary1_band(q, k, T, m))
    np.testing.assert_allclose(lo, [np.exp(-0.4) / 2, np.exp(-0.4)], rtol=1e-12)
    np.testing.assert_allclose(up, [np.exp(0.4) / 2, np.exp(0.4)], rtol=1e-12)
    lo32, up32 = B.corollary1_band(q.astype(np.float32), k.astype(np.float32), T, m)
    assert lo32.dtype == up32.dtype == jnp.float32


def test_lemma1_constants_refines_a_kinked_minimum_to_1e12():
  """F = 1 + |x − 0.3|^1.5 on [−1, 1]: min F = 1 at 0.3 (between grid points, a kink where
  parabolic steps help little), max F = 1 + 1.3^1.5 at −1: C2 = 1 + 1.3^1.5 to rel 1e-12 needs
  the refinement's own tolerance (scipy's default xatol 1e-5 leaves ~1e-9)."""
  C1, C2 = B.lemma1_constants(lambda x: 1 + np.abs(x - 0.3) ** 1.5, 1.0)
  assert C2 == pytest.approx(1 + 1.3 ** 1.5, rel=1e-12)
  assert C1 == pytest.approx(1 / (1 + 1.3 ** 1.5), rel=1e-12)


def test_corollary1_causal_check_at_a_zero_band():
  """q = 0: every band is e^0 = 1 (2Δ/T = 0) and the weights are uniform, α_i·n_t = 1 exactly
  in log space (−log t + log t): on the boundary of both sides, which counts as inside."""
  with jax.enable_x64(True):
    Bn, H, L, d = 1, 1, 5, 2
    q = jnp.zeros((Bn, H, L, d))
    k = jnp.asarray(np.random.default_rng(0).normal(size=(Bn, H, L, d)))
    out = B.corollary1_causal_check(jnp.zeros((Bn, H, L, L)), q, k, 1.0)
    assert int(out["violations"].sum()) == 0 and float(out["min_margin"].min()) == 0.0


def test_softmax_lemma2_bound_on_a_3d_batch():
  """(B, R, L) logits: r = max − min along the key axis of each row (closed form per row)."""
  T = 1.5
  with jax.enable_x64(True):
    x = np.random.default_rng(7).normal(size=(2, 3, 4))
    r = x.max(-1) - x.min(-1)
    np.testing.assert_allclose(np.asarray(B.softmax_lemma2_bound(x, T)),
                               (np.exp(r / T) + np.exp(2 * r / T)) / (T * 4), rtol=1e-12)
