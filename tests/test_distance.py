"""Theorem 1 / Corollary 2 quantities (limits.distance) against a plain per-row NumPy loop,
property tests of the bound, and a Monte-Carlo check of the expectation bracket."""

import itertools

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import distance
from limits.errors import LimitsError


# ---- independent NumPy reference: explicit loops over tokens and pairs, no Gram identities ----
def ref_row(alpha, x, n, valid, inclusion="n_over_l_minus_1"):
  """Direct transcription of PAPER.md §2 for one row (loops, explicit vector differences)."""
  alpha = np.asarray(alpha, np.float64)
  x = np.asarray(x, np.float64)
  vis = [i for i in range(len(alpha)) if valid[i]]
  t = len(vis)
  if t <= n:
    return None
  # top-N by weight, ties -> lower index first (stable sort on -alpha)
  order = sorted(vis, key=lambda i: (-alpha[i], i))
  sel = order[:n]
  rest = [i for i in vis if i not in sel]
  s = sum(alpha[j] * x[j] for j in sel)
  d_sum = sum(np.linalg.norm(alpha[i] * x[i] - s) for i in rest)
  d_norm = np.linalg.norm(sum(alpha[i] * x[i] for i in rest) - s)
  abar = sum(alpha[j] for j in sel)
  mass = sum(alpha[i] for i in vis)
  d1 = max(np.linalg.norm(x[i] - x[j]) for i in rest for j in sel)
  rn = max(np.linalg.norm(x[j]) for j in sel)
  dmax_sum = (mass - abar) * d1 + rn * sum(abs(abar - alpha[i]) for i in rest)
  dmax_norm = (mass - abar) * d1 + abs(mass - 2 * abar) * rn
  p = n / (t - 1) if inclusion == "n_over_l_minus_1" else n / t
  e = (t - n) / t * sum(
      np.linalg.norm(alpha[i] * x[i] - p * sum(alpha[j] * x[j] for j in vis if j != i))
      for i in vis)
  fac = (t - 1) / (t - 2) if t > 2 else 0.0
  gap = (t - n) / t * sum(
      np.sqrt(p * (1 - p) * fac * sum(alpha[j] ** 2 * x[j] @ x[j] for j in vis if j != i))
      for i in vis)
  return dict(d_sum=d_sum, d_norm=d_norm, abar=abar, d1=d1, rn=rn, dmax_sum=dmax_sum,
              dmax_norm=dmax_norm, expected=e, gap=gap, s=s)


def random_row(rng, L, d, sharp=1.0, scale=1.0):
  logits = rng.normal(size=L) * sharp
  a = np.exp(logits - logits.max())
  a /= a.sum()
  x = rng.normal(size=(L, d)) * scale
  return a, x


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


# Tolerance: float64 Gram forms vs explicit differences; relative rounding ~1e-15·‖x‖²/‖diff‖²,
# 1e-9 relative leaves ample room for the cancellation in ‖αx − s‖² on these O(1) sizes.
RTOL = 1e-9


@pytest.mark.parametrize("L,d,n", [(20, 5, 6)])  # N = 1 is covered by the multi-N test
def test_single_row_functions_match_numpy_loop(L, d, n):
  rng = np.random.default_rng(L * 100 + n)
  a, x = random_row(rng, L, d, sharp=2.0)
  valid = np.ones(L, bool)
  r = ref_row(a, x, n, valid)
  aj, xj = jnp.asarray(a), jnp.asarray(x)
  np.testing.assert_allclose(distance.cumulative_distance(aj, xj, n), r["d_sum"], rtol=RTOL)
  np.testing.assert_allclose(distance.cumulative_distance(aj, xj, n, form="norm"), r["d_norm"],
                             rtol=RTOL)
  np.testing.assert_allclose(distance.theorem1_bound(aj, xj, n), r["dmax_sum"], rtol=RTOL)
  np.testing.assert_allclose(distance.theorem1_bound(aj, xj, n, form="norm"), r["dmax_norm"],
                             rtol=RTOL)
  np.testing.assert_allclose(distance.expected_distance(aj, xj, n), r["expected"], rtol=RTOL)
  r2 = ref_row(a, x, n, valid, inclusion="n_over_l")
  np.testing.assert_allclose(distance.expected_distance(aj, xj, n, inclusion="n_over_l"),
                             r2["expected"], rtol=RTOL)
  np.testing.assert_allclose(distance.jensen_gap_bound(aj, xj, n), r["gap"], rtol=RTOL)
  tn = distance.top_n_terms(aj, xj, n)
  np.testing.assert_allclose(tn.alpha_bar, r["abar"], rtol=RTOL)
  np.testing.assert_allclose(tn.d1, r["d1"], rtol=RTOL)
  np.testing.assert_allclose(tn.r_n, r["rn"], rtol=RTOL)
  np.testing.assert_allclose(tn.s, r["s"], rtol=RTOL, atol=1e-12)


def test_ties_take_lower_index_first():
  # Three equal top weights, N = 2: the selected set must be {0, 1} (lax.top_k rule), so s
  # equals a·(x0 + x1); a different tie rule would give a different s.
  a = jnp.array([0.25, 0.25, 0.25, 0.125, 0.125])
  x = jnp.eye(5)
  s = distance.context_vector(a, x, 2)
  np.testing.assert_allclose(s, [0.25, 0.25, 0, 0, 0])


def test_mask_equals_truncated_row():
  # A causal prefix of t keys inside a length-L row must equal the length-t computation.
  rng = np.random.default_rng(3)
  L, t, d, n = 16, 9, 4, 3
  a, x = random_row(rng, L, d)
  a_t = a[:t] / a[:t].sum()
  a_full = np.concatenate([a_t, rng.uniform(size=L - t)])  # garbage beyond the prefix
  mask = np.arange(L) < t
  for fn in (distance.cumulative_distance, distance.theorem1_bound):
    for form in ("sum", "norm"):
      full = fn(jnp.asarray(a_full), jnp.asarray(x), n, form=form, mask=jnp.asarray(mask))
      short = fn(jnp.asarray(a_t), jnp.asarray(x[:t]), n, form=form)
      np.testing.assert_allclose(full, short, rtol=RTOL)
  full = distance.expected_distance(jnp.asarray(a_full), jnp.asarray(x), n, mask=mask)
  np.testing.assert_allclose(full, distance.expected_distance(a_t, x[:t], n), rtol=RTOL)


def test_row_stats_multi_n_matches_reference():
  rng = np.random.default_rng(11)
  L, d = 15, 3
  a, x = random_row(rng, L, d, sharp=3.0)
  ns = [1, 2, 5, 9]
  valid = np.arange(L) < 12
  st_ = distance.row_stats(jnp.asarray(a), jnp.asarray(x), jnp.array(ns), 10, jnp.asarray(valid))
  for k, n in enumerate(ns):
    r = ref_row(a, x, n, valid)
    for name, key in [("d_sum", "d_sum"), ("d_norm", "d_norm"), ("expected", "expected"),
                      ("gap", "gap"), ("dmax_sum", "dmax_sum"), ("dmax_norm", "dmax_norm")]:
      np.testing.assert_allclose(getattr(st_, name)[k], r[key], rtol=RTOL, err_msg=f"{name} N={n}")
    assert bool(st_.counted[k])


def test_head_stats_equals_per_row_loop():
  """The batched per-layer helper against a NumPy loop over windows, heads and queries."""
  rng = np.random.default_rng(5)
  B, H, L, d = 2, 3, 10, 4
  logits = rng.normal(size=(B, H, L, L)) * 2
  causal = np.tril(np.ones((L, L), bool))
  logits = np.where(causal, logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  x = rng.normal(size=(B, H, L, d))
  ns = [1, 3]
  out = distance.head_stats(jnp.asarray(w), jnp.asarray(x), jnp.array(ns), n_cap=3,
                            query_batch=4)
  for b, h, (k, n) in itertools.product(range(B), range(H), enumerate(ns)):
    rows = [ref_row(w[b, h, q], x[b, h], n, causal[q]) for q in range(L)]
    rows = [r for r in rows if r is not None]
    assert int(out.count[b, h, k]) == len(rows) == L - n
    for name in ("d_sum", "d_norm", "expected", "gap", "dmax_sum", "dmax_norm"):
      np.testing.assert_allclose(out[distance.HeadStats._fields.index(name)][b, h, k],
                                 sum(r[name] for r in rows), rtol=RTOL)
    viol = sum(r["d_sum"] > r["dmax_sum"] for r in rows)
    assert int(out.viol_sum[b, h, k]) == viol == 0
  # Shared (B, L, D) vectors broadcast over heads equal explicitly repeated per-head vectors.
  xs = rng.normal(size=(B, L, 6))
  o1 = distance.head_stats(jnp.asarray(w), jnp.asarray(xs), jnp.array(ns), n_cap=3)
  o2 = distance.head_stats(jnp.asarray(w), jnp.asarray(np.repeat(xs[:, None], H, 1)),
                           jnp.array(ns), n_cap=3)
  jax.tree.map(lambda p, q: np.testing.assert_allclose(p, q, rtol=RTOL), o1, o2)
  means = distance.token_means(distance.reduce_windows(out))
  assert means["d_sum"].shape == (H, 2)


def test_valid_length_ignores_padding():
  rng = np.random.default_rng(8)
  H, L, d = 2, 8, 3
  logits = np.where(np.tril(np.ones((L, L), bool)), rng.normal(size=(1, H, L, L)), -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  x = rng.normal(size=(1, H, L, d))
  ns = jnp.array([2])
  full = distance.head_stats(jnp.asarray(w[..., :6, :6]), jnp.asarray(x[..., :6, :]), ns,
                             n_cap=2)
  pad = distance.head_stats(jnp.asarray(w), jnp.asarray(x), ns, n_cap=2,
                            valid_length=jnp.array([6]))
  jax.tree.map(lambda p, q: np.testing.assert_allclose(p, q, rtol=RTOL), full, pad)


# ---- Theorem 1 part 1: the bound holds (property test, float64, both forms) -----------------
@hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
@hypothesis.given(seed=st.integers(0, 2**31 - 1), sharp=st.floats(0.0, 30.0),
                  scale=st.floats(1e-3, 1e3), shift=st.floats(-5.0, 5.0),
                  n=st.integers(1, 11), t=st.integers(2, 24))
def test_theorem1_bound_holds(seed, sharp, scale, shift, n, t):
  rng = np.random.default_rng(seed)
  L, d = 24, 5  # fixed shapes (one compile); the causal prefix t varies through the mask
  a, x = random_row(rng, L, d, sharp=sharp, scale=scale)
  x = x + shift * scale  # vectors not centred at the origin
  mask = np.arange(L) < t
  a = np.where(mask, a, 0.0)
  a = a / a.sum()
  st_ = distance.row_stats(jnp.asarray(a), jnp.asarray(x), jnp.array([n]), 11, jnp.asarray(mask))
  if t <= n:
    assert not bool(st_.counted[0])
    return
  # The bound is an exact inequality; the only slack needed is float64 rounding of the Gram
  # forms, relative 1e-9 of the bound's scale.
  slack = 1e-9 * (float(st_.dmax_sum[0]) + scale)
  assert float(st_.d_sum[0]) <= float(st_.dmax_sum[0]) + slack
  assert float(st_.d_norm[0]) <= float(st_.dmax_norm[0]) + slack
  # Independent check of the quantities themselves on this example.
  r = ref_row(a, x, n, mask)
  np.testing.assert_allclose(st_.d_sum[0], r["d_sum"], rtol=1e-7, atol=1e-12 * scale)


def test_bound_is_not_vacuous_detector():
  """The violation counter must be able to fire: a deliberately too-small bound is caught."""
  rng = np.random.default_rng(2)
  a, x = random_row(rng, 12, 3)
  d = float(distance.cumulative_distance(jnp.asarray(a), jnp.asarray(x), 2))
  dmax = float(distance.theorem1_bound(jnp.asarray(a), jnp.asarray(x), 2))
  assert 0 < d <= dmax
  st_ = distance.reduce_rows(distance.RowStats(
      counted=jnp.array([[True]]), d_sum=jnp.array([[d]]), d_norm=jnp.array([[0.0]]),
      expected=jnp.zeros((1, 1)), gap=jnp.zeros((1, 1)), dmax_sum=jnp.array([[0.5 * d]]),
      dmax_norm=jnp.ones((1, 1)), alpha_bar=jnp.zeros((1, 1)), d1=jnp.zeros((1, 1)),
      r_n=jnp.zeros((1, 1))))
  assert int(st_.viol_sum[0]) == 1 and int(st_.viol_norm[0]) == 0


# ---- Theorem 1 part 2: E ≤ E[d̃] ≤ E + ε against Monte Carlo ---------------------------------
@pytest.mark.parametrize("L,d,n,sharp", [(30, 4, 3, 0.5), (25, 3, 10, 4.0)])
def test_expectation_brackets_monte_carlo(L, d, n, sharp):
  rng = np.random.default_rng(L + n)
  a, x = random_row(rng, L, d, sharp=sharp)
  aj, xj = jnp.asarray(a), jnp.asarray(x)
  main = float(distance.expected_distance(aj, xj, n))
  gap = float(distance.jensen_gap_bound(aj, xj, n))
  # 99.9% two-sided normal CI on 4000 samples: each of the two one-sided checks below fails
  # by chance with probability <= 0.05% if the bracket is true (false-failure rate <= 0.1% per
  # case, fixed seed so reruns are deterministic).
  mc = distance.monte_carlo_distance(jax.random.key(L * 7 + n), aj, xj, n, 4000,
                                     confidence=0.999)
  assert main <= float(mc.upper), (main, mc)
  assert float(mc.lower) <= main + gap, (main, gap, mc)
  # The bracket is informative: Jensen's gap is non-trivial (PAPER.md §7.3) but finite.
  assert gap > 0


def test_monte_carlo_exact_by_enumeration():
  """The MC estimator is unbiased: compare with the exact mean over all C(L, N) subsets."""
  rng = np.random.default_rng(4)
  L, d, n = 8, 3, 3
  a, x = random_row(rng, L, d, sharp=1.0)
  vals = []
  for sub in itertools.combinations(range(L), n):
    s = sum(a[j] * x[j] for j in sub)
    vals.append(sum(np.linalg.norm(a[i] * x[i] - s) for i in range(L) if i not in sub))
  exact = np.mean(vals)
  mc = distance.monte_carlo_distance(jax.random.key(0), jnp.asarray(a), jnp.asarray(x), n, 20000,
                                     confidence=0.999)
  # 99.9% CI: false-failure probability 0.1% (fixed key).
  assert float(mc.lower) <= exact <= float(mc.upper), (exact, mc)
  # E ≤ exact ≤ E + ε holds exactly (no sampling error here).
  main = float(distance.expected_distance(jnp.asarray(a), jnp.asarray(x), n))
  gap = float(distance.jensen_gap_bound(jnp.asarray(a), jnp.asarray(x), n))
  assert main <= exact + 1e-12 and exact <= main + gap + 1e-12


# ---- edge cases --------------------------------------------------------------------------------
def test_extreme_inputs_are_finite_forward_and_backward():
  L, d = 16, 4
  logits = jnp.array([1e4, -1e4] * 8) / 1e-4  # T = 1e-4 on ±1e4 logits: one-hot-ish weights
  a = jax.nn.softmax(logits)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(L, d))) * 1e3
  masks = jnp.stack([jnp.ones(L, bool), jnp.zeros(L, bool), jnp.arange(L) < 1])  # full/none/one

  def total(aa, xx):
    st_ = jax.vmap(lambda m: distance.row_stats(aa, xx, jnp.array([1, 4]), 4, m))(masks)
    return sum(jnp.sum(v) for v in st_[1:]), st_

  (_, st_), g = jax.jit(jax.value_and_grad(total, argnums=(0, 1), has_aux=True))(a, x)
  assert all(bool(jnp.all(jnp.isfinite(v))) for v in st_)
  assert all(bool(jnp.all(jnp.isfinite(v))) for v in g)
  st_ = distance.row_stats(a, x, jnp.array([1]), 1, jnp.zeros(L, bool))
  assert not bool(st_.counted[0]) and float(st_.d_sum[0]) == 0.0


def test_bad_arguments_raise_limits_error():
  a = jnp.ones(5) / 5
  x = jnp.ones((5, 2))
  with pytest.raises(LimitsError):
    distance.cumulative_distance(a, x, 5)
  with pytest.raises(LimitsError):
    distance.cumulative_distance(a, x, 0)
  with pytest.raises(LimitsError):
    distance.cumulative_distance(a, x, 2, form="bogus")
  with pytest.raises(LimitsError):
    distance.expected_distance(a, x, 2, inclusion="bogus")


def test_vmap_over_rows():
  rng = np.random.default_rng(9)
  a = np.stack([random_row(rng, 10, 3)[0] for _ in range(4)])
  x = rng.normal(size=(10, 3))
  got = jax.vmap(lambda r: distance.cumulative_distance(r, jnp.asarray(x), 2))(jnp.asarray(a))
  want = [ref_row(r, x, 2, np.ones(10, bool))["d_sum"] for r in a]
  np.testing.assert_allclose(got, want, rtol=RTOL)


def test_selection_terms_against_numpy_with_unselected_and_masked_keys():
  """selection_terms on an arbitrary selected set (float64): s = Σ_sel α_i x_i, the summed and
  the norm form of d̃ over the visible unselected keys, and ᾱ = Σ_sel α_i, each against numpy
  (rel 1e-12; the summed form's Gram expansion at RTOL), with unselected and masked keys
  present (a masked key's weight counts nowhere)."""
  rng = np.random.default_rng(3)
  L, d = 7, 3
  alpha = rng.dirichlet(np.ones(L))
  x = rng.normal(size=(L, d))
  selected = np.array([1, 0, 1, 0, 0, 1, 0], bool)
  mask = np.array([1, 1, 1, 1, 0, 1, 1], bool)
  with jax.enable_x64(True):
    d_sum, d_norm, s, abar = distance.selection_terms(
        jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(selected), jnp.asarray(mask))
  sel, rest = selected & mask, mask & ~selected
  s_ref = (alpha[sel, None] * x[sel]).sum(0)
  np.testing.assert_allclose(np.asarray(s), s_ref, rtol=1e-12)
  assert float(abar) == pytest.approx(alpha[sel].sum(), rel=1e-12)
  assert float(d_sum) == pytest.approx(
      np.linalg.norm(alpha[rest, None] * x[rest] - s_ref, axis=-1).sum(), rel=RTOL)
  assert float(d_norm) == pytest.approx(
      np.linalg.norm((alpha[rest, None] * x[rest]).sum(0) - s_ref), rel=1e-12)
