"""Assertions that kill survivors of seeded mutation samples of the rows group (issue 30, item 6;
``python tools/mutation_run.py --groups rows ...``, docs/mutation_survivors.md "## rows"):
limits/separability/rows.py, limits/distance/rows.py, limits/gradient/rows.py. Each test names
the mutant it kills, takes its expected values from an independent reference (closed form,
numpy, the tolerance tables the checks are specified by) and was seen red with the mutation
applied by hand and green without it. Small shapes: each test runs in well under 2 s.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import jacobians
from limits.gradient import rows as gradient_rows

# ---------------------------------------------------------------------------------------------
# Left over from the eleventh session's second sample (seed 12).


def _one_temperature(rows, dtype, violation_rtol=1e-6, per_row=False, **kw):
  """run_temperature at T = 0.5 on the given rows (the first is the exact row and the check
  row), dense, softmax, ε = 0.1, under x64; returns the summary (and the per-row records)."""
  T = 0.5
  mask = np.ones(rows.shape, bool)
  stats_in = {"n_exceed_lemma2": 0, "lemma2_finite": 1, "nonfinite": 0, "rows": 1,
              "n_exceed_paper": 0, "n_exceed_tight": 0, "max_norm": 1.0, "newton": 0}
  tol = {"exact": {"atol": 1e-5, "rtol": 1e-4}, "violation_rtol": violation_rtol}
  kw = {"g_vals": np.array([[1.0]]), "fd_idx": np.array([0]), **kw}
  with jax.enable_x64(True):
    summary, rows_out = gradient_rows.run_temperature(
        T, rows, mask, np.arange(1), np.array([0]), [0.1], "softmax", {}, all_stats=stats_in,
        dense=True, dtype_tol=tol, dtype=dtype, **kw)
  return (summary, rows_out) if per_row else summary


def test_run_temperature_checks_a_float32_run_in_float32_under_x64():
  """run_temperature's jacrev and central-difference checks run in the run's dtype, also when
  x64 is on and the rows come in float64 (``rows[check_idx].astype(dt)`` → ``.astype(None)``
  made them float64 there): a float32 run's checks record, and are judged by, float32's
  tolerances (``jacobians.EXACT_TOL``/``FD_TOL``: atol 1e-5/rtol 1e-4 and 2e-3/2e-2), not
  float64's (1e-12/1e-10 and 1e-7/1e-6), with float32's step 3e-3·T. (On this row the float64
  check of float32's step still passes, its truncation error ~5e-7 relative, so the verdict
  is the same; the recorded tolerances and errors are not.) The float64 run (the other side)
  gets float64's tolerances and step 1e-5·T."""
  rows = np.array([[0.3, -0.2, 1.0, 0.0]])  # float64
  f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
  c = _one_temperature(rows, np.float32)["checks"]
  assert (c["jacrev"]["atol"], c["jacrev"]["rtol"]) == (jacobians.EXACT_TOL[f32]["atol"],
                                                        jacobians.EXACT_TOL[f32]["rtol"])
  assert (c["fd"]["atol"], c["fd"]["rtol"]) == (2e-3, 2e-2)
  assert c["fd_eps"] == 3e-3 * 0.5 and c["fd"]["ok"] and c["jacrev"]["ok"]
  c = _one_temperature(rows, None)["checks"]
  assert (c["jacrev"]["atol"], c["fd"]["atol"]) == (jacobians.EXACT_TOL[f64]["atol"], 1e-7)
  assert c["fd_eps"] == 1e-5 * 0.5 and c["fd"]["ok"] and c["jacrev"]["ok"]


# ---------------------------------------------------------------------------------------------
# Survivors of a fresh sample of the rows group (twelfth session, seed 13):
# `python tools/mutation_run.py --groups rows --children 1 --sample 60 --seed 13`.


def _softmax_jacobian_norm(logits, visible, T):
  """‖(diag α − ααᵀ)/T‖₂ of α = softmax(l/T) over the visible keys, by numpy's SVD."""
  z = np.asarray(logits, float)[visible] / T
  a = np.exp(z - z.max())
  a /= a.sum()
  return np.linalg.norm((np.diag(a) - np.outer(a, a)) / T, 2)


def test_row_norms_matfree_keeps_the_mask():
  """row_norms(how="matfree") of a masked row is the norm over its visible keys (numpy SVD,
  float64, rel 1e-9: 100 power-iteration steps converge at (σ₂/σ₁)^200 here), not over every
  key (``spectral_norm_matfree(..., iters, mask)`` → ``None`` or dropped: the two masked keys
  with large logits then carry most of the weight). The unmasked row (the other side) is the
  norm over all its keys."""
  T = 0.5
  logits = np.array([[1.0, -1.0, 0.2, 3.0, 3.0]])
  visible = np.array([[True, True, True, False, False]])
  with jax.enable_x64(True):
    got = gradient_rows.row_norms("softmax", {}, jnp.asarray(logits), T, jnp.asarray(visible),
                                  how="matfree")
    full = gradient_rows.row_norms("softmax", {}, jnp.asarray(logits), T, how="matfree")
  want = _softmax_jacobian_norm(logits[0], visible[0], T)
  want_full = _softmax_jacobian_norm(logits[0], np.ones(5, bool), T)
  assert abs(want - want_full) > 0.1 * want                  # the mask matters here
  np.testing.assert_allclose(float(got[0]), want, rtol=1e-9)
  np.testing.assert_allclose(float(full[0]), want_full, rtol=1e-9)


def test_top_n_terms_selects_among_the_visible_keys_only():
  """distance.rows.top_n_terms with a masked key of the largest weight: ᾱ_N, d_1 and R_N are
  those of the top N *visible* keys (numpy loops over the definitions of the module docstring),
  as is s (``_one(alpha, x, n, mask, ...)`` → ``_one(..., None, ...)`` selected the masked key
  for ᾱ, d_1 and R_N). Without the mask (the other side) the masked key is selected."""
  from limits.distance.rows import context_vector, top_n_terms
  alpha = np.array([0.2, 0.5, 0.1, 0.9])
  x = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0], [3.0, 3.0]])
  mask = np.array([True, True, True, False])

  def reference(vis, n):
    keys = [i for i in range(4) if vis[i]]
    top = sorted(keys, key=lambda i: -alpha[i])[:n]
    rest = [i for i in keys if i not in top]
    d1 = max(np.linalg.norm(x[i] - x[j]) for i in rest for j in top)
    return (sum(alpha[j] for j in top), d1, max(np.linalg.norm(x[j]) for j in top),
            sum(alpha[j] * x[j] for j in top))

  with jax.enable_x64(True):
    for vis in (mask, np.ones(4, bool)):
      got = top_n_terms(jnp.asarray(alpha), jnp.asarray(x), 1, jnp.asarray(vis))
      want = reference(vis, 1)
      for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12)
      # context_vector is the same s (seed 16: its mask dropped selected the masked key).
      np.testing.assert_allclose(np.asarray(context_vector(jnp.asarray(alpha), jnp.asarray(x),
                                                           1, jnp.asarray(vis))),
                                 want[3], rtol=1e-12)


def test_exact_row_blocks_cover_every_row_once():
  """gradient.rows._chunks (the blocks of exact rows run_temperature cuts, one row per block
  when L > 1448 on the dense path): consecutive slices of ``size`` rows (the last one shorter)
  that cover 0..n−1 exactly once, for block sizes 1 (the boundary: ``max(size, 1)`` →
  ``max(size, 2)`` stepped by 2 and skipped every other row) to 4 and 256."""
  from limits.gradient.rows import _chunks
  for size in (1, 2, 3, 4, 256):
    for n in range(8):
      got = [(s.start, s.stop) for s in _chunks(n, size)]
      want = [(lo, min(lo + size, n)) for lo in range(0, n, size)]
      assert got == want, (n, size)
      assert [i for a, b in got for i in range(a, b)] == list(range(n))


def test_plain_softmax_is_false_for_a_normalizer_without_a_name():
  """gradient.rows._plain_softmax on a normalizer with no ``__name__`` (a functools.partial, a
  hashable callable g_rows accepts as ``norm_fn``) is False, not an AttributeError
  (``getattr(norm_fn, "__name__", None)`` → ``getattr(norm_fn, "__name__", )``); the registry's
  softmax (the other side) is True."""
  import functools

  from limits import normalizers
  from limits.gradient.rows import _plain_softmax
  sm = normalizers.get("softmax")
  assert _plain_softmax(sm)
  assert not _plain_softmax(functools.partial(sm))


def _theorem2_reference(alpha, x, n, M, delta):
  """N_s, r, ξ and Theorem 2's bounds of one row by numpy loops over the module docstring's
  definitions, ξ_i² in the pairwise form M²·Σ_{j∈I∖i} α_j² + (M² − δ²/2)·Σ_{j≠k∈I∖i} α_j α_k
  (the code uses the S1/S2 form)."""
  top = list(np.argsort(-alpha, kind="stable")[:n])
  s = sum(alpha[j] * x[j] for j in top)
  dist = np.array([np.linalg.norm(alpha[i] * x[i] - s) for i in range(len(alpha))])
  r = min(dist[i] for i in range(len(alpha)) if i not in top)
  xi = {}
  for i in top:
    o = [j for j in top if j != i]
    cross = sum(alpha[j] * alpha[k] for j in o for k in o if j != k)
    xi[i] = math.sqrt(M * M * sum(alpha[j] ** 2 for j in o) + (M * M - delta ** 2 / 2) * cross)
  lower = 1 - sum(xi.values()) / (n * r)
  upper = sum(math.exp(-max(xi[i] - r, 0) ** 2 / (2 * M * M)) for i in top) / n
  printed = sum(math.exp(-(r - xi[i]) ** 2 / (16 * M * M)) for i in top) / n
  return sum(dist[i] < r for i in top), r, xi, lower, upper, printed


def test_theorem2_on_a_sphere_of_radius_other_than_one():
  """separability.rows on S²(M) with M = 2 and M = 0.5 (every mutant below is exact at M = 1,
  where the tests ran): ξ, r, N_s, the lower bound, the upper bound (its exponent
  −(ξ − r)₊²/(2M²) is active: ξ > r for the selected tokens here) and the printed upper bound
  (−(r − ξ)²/(16M²)) of ``row_stats`` and of the one-row ``xi``/``theorem2_bounds`` against
  numpy loops (float64, rel 1e-12). Kills ``(M * M - δ²/2)`` → ``(M / M - δ²/2)`` in ξ,
  ``2 * M * M`` → ``2 / M * M`` in the upper bound, and ``upper_p`` → ``None`` in RowStats."""
  from limits.selection import sort_desc
  from limits.separability import rows as sep
  alpha = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
  unit = np.array([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [0, -1.0, 0]])
  n, delta_over_m = 3, 0.7
  for M in (2.0, 0.5):
    x, delta = M * unit, delta_over_m * M
    n_s, r, xi, lower, upper, printed = _theorem2_reference(alpha, x, n, M, delta)
    assert max(xi.values()) > r > 0                          # the upper bound's gap is active
    with jax.enable_x64(True):
      a = jnp.asarray(alpha)[None]
      st = sep.row_stats(a, sort_desc(a), jnp.ones_like(a, bool), jnp.asarray(x), n, M, delta)
      xi_1 = np.asarray(sep.xi(jnp.asarray(alpha), n, M, delta))
      lo_1, up_1 = sep.theorem2_bounds(jnp.asarray(alpha), n, M, delta, r)
    assert int(st.n_s[0]) == n_s and int(st.n_eff[0]) == n
    np.testing.assert_allclose(float(st.r[0]), r, rtol=1e-12)
    np.testing.assert_allclose(xi_1, [xi.get(i, 0.0) for i in range(5)], rtol=1e-12)
    for got, want in ((st.lower_raw, lower), (st.lower, max(lower, 0)), (st.upper, upper),
                      (st.upper_printed, printed), (lo_1, max(lower, 0)), (up_1, upper)):
      np.testing.assert_allclose(float(np.ravel(got)[0]), want, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Survivors of a second fresh sample, after the tests above (twelfth session, seed 14):
# `python tools/mutation_run.py --groups rows --children 1 --sample 60 --seed 14`.


def test_synthetic_rows_have_the_requested_dtype_under_x64():
  """gradient.rows.synthetic_rows: scale × the standard normal draws of ``key`` in the requested
  dtype, float32 also when x64 is on (``jax.random.normal(key, shape, dtype)`` → dtype dropped
  gave JAX's default float64 there, a float32 run computed in float64); float64 (the other
  side) stays float64."""
  key = jax.random.key(3)
  with jax.enable_x64(True):
    for dt in (jnp.float32, jnp.float64):
      got = gradient_rows.synthetic_rows(key, 2, 3, 8.0, dt)
      assert got.dtype == dt and got.shape == (2, 3)
      np.testing.assert_array_equal(np.asarray(got),
                                    8.0 * np.asarray(jax.random.normal(key, (2, 3), dt)))


def test_counterexample_check_tolerance_is_in_ulps_of_the_runs_dtype(monkeypatch):
  """gradient.rows.counterexample: the numeric check is ``ok`` iff its relative error is within
  1e3 ulps of the run's dtype (float32: 1e3·2⁻²³ = 1.2e-4), on both sides: a jacfwd+SVD value
  500 float32 ulps off is ok, 2000 off is not (the numeric check patched to return those values).
  ``np.finfo(dtype)`` → ``np.finfo(None)`` judged a float32 run in float64 ulps (2.2e-13):
  every float32 check failed."""
  T, eps32 = 0.3, float(np.finfo(np.float32).eps)
  tight = 1 / (2 * T)
  for k, ok in ((500, True), (2000, False)):
    got = tight * (1 + k * eps32)
    monkeypatch.setattr(gradient_rows, "_exact_block", lambda *a, _g=got, **kw: (np.array([_g]),))
    c = gradient_rows.counterexample(T, 1 / (4 * T), tight, 1e-6, np.float32)
    assert c["numeric_check"]["rel_err"] == pytest.approx(k * eps32, rel=1e-9)
    assert c["numeric_check"]["ok"] is ok and c["numeric_check"]["jacfwd_svd_norm"] == got
    assert c["how"] == "closed form 1/(2T)"                 # the label the report prints


def test_g_statistics_keys_and_a_last_group_without_sampled_rows():
  """run_temperature's g statistics: each ε's entry has exactly the keys the report reads
  (``"eps"`` renamed → red), and the paper's statistic is the max over (layer, head) groups of
  their average g (numpy by hand), also when the last group has no sampled row
  (``np.bincount(gs, minlength=n_groups)`` → minlength dropped: counts shorter than the sums,
  a broadcast error) and when every group has one (the other side)."""
  rows = np.array([[0.3, -0.2, 1.0, 0.0]] * 4)
  g_vals = np.array([[1.0], [5.0], [2.0]])                  # fd rows 0, 1, 2
  for groups, stat, head in ((np.array([0, 1, 0, 2]), 5.0, 1),      # group 2: no sampled row
                             (np.array([0, 1, 2, 2]), 5.0, 1),      # every group sampled
                             (np.array([2, 0, 2, 1]), 5.0, 0)):     # group 1 empty, 2: 1.5
    s = _one_temperature(rows, None, g_vals=g_vals, fd_idx=np.array([0, 1, 2]), groups=groups,
                         n_groups=3)
    e = s["g"]["0.1"]
    assert set(e) == {"eps", "mean", "max", "n_rows", "n_above_paper_bound",
                      "n_above_sqrt2_over_eps", "paper_stat", "paper_stat_head"}
    assert e["eps"] == 0.1 and e["mean"] == pytest.approx(8 / 3) and e["max"] == 5.0
    assert (e["paper_stat"], e["paper_stat_head"]) == (stat, head), groups


def test_printed_upper_bound_of_an_empty_and_of_a_full_selection():
  """separability.rows.row_stats' printed upper bound (1/N)·Σ exp(−(r − ξ_i)²/(16M²)) is 1 for
  an empty selection (N = 0: r is finite, the nearest token to s = 0) as the other bounds are
  (the module's empty-selection convention), 1 when every token is selected (r = +inf), and the
  formula in between (N = 1: ξ = 0, r = ‖α_1x_1 − α_0x_0‖ = √0.34, numpy by hand). Kills
  ``(n_eff > 0) & finite`` → ``(n_eff > 0) | finite`` (0 at N = 0)."""
  from limits.selection import sort_desc
  from limits.separability import rows as sep
  a = jnp.array([[0.5, 0.3, 0.2]])
  x = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
  want_r = {0: 0.2, 1: math.sqrt(0.34), 3: math.inf}
  want_printed = {0: 1.0, 1: math.exp(-0.34 / 16), 3: 1.0}
  for n in (0, 1, 3):
    st = sep.row_stats(a, sort_desc(a), jnp.ones_like(a, bool), x, n, 1.0, 1.0)
    assert int(st.n_eff[0]) == n
    assert float(st.r[0]) == pytest.approx(want_r[n], rel=1e-6)
    assert float(st.upper_printed[0]) == pytest.approx(want_printed[n], rel=1e-6)
    assert float(st.upper[0]) == float(st.lower[0]) == float(st.frac[0]) == 1.0


# ---------------------------------------------------------------------------------------------
# Survivors of a third fresh sample, after the tests above (twelfth session, seed 15):
# `python tools/mutation_run.py --groups rows --children 1 --sample 60 --seed 15`.


def test_row_range_and_count_over_several_chunks():
  """gradient.rows.row_range_and_count with more rows than columns in chunks of 2 rows: every
  row's visible range and count (numpy by hand), the last chunk included (``range(0,
  rows.shape[0], chunk)`` → ``rows.shape[1]`` stopped after 3 of the 5 rows and left the rest
  at r = 0, n = 1); one chunk of every row (the default, the other side) gives the same."""
  from limits.gradient.rows import row_range_and_count
  rows = np.array([[0.0, 3.0, -1.0], [2.0, 5.0, 9.0], [1.0, 1.0, 4.0], [-2.0, 0.5, 0.0],
                   [7.0, -3.0, 1.0]])
  mask = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 1], [1, 1, 1]], bool)
  want_r = [3.0, 7.0, 3.0, 2.0, 10.0]
  want_n = [2.0, 3.0, 2.0, 2.0, 3.0]
  for chunk in (2, 8192):
    r, n = row_range_and_count(rows, mask, chunk)
    assert r[:, 0].tolist() == want_r and n[:, 0].tolist() == want_n, chunk


def test_exact_rows_go_in_blocks_of_at_most_4m_jacobian_entries(monkeypatch):
  """run_temperature's dense path hands the exact rows to ``_exact_block`` in blocks of
  max(1, 2²² // L²) rows, L the row length (shape[-1]), so an (B, L, L) Jacobian holds ~4M
  entries: 1 row per block at L = 1449 (2²² // 1449² = 1), 2 at L = 1448 (the other side).
  ``L = rows.shape[-1]`` → ``rows.shape[-2]`` (the row count, 3) put all three L = 1449 rows
  in one block: 6.3M entries, and far more for real runs. ``_exact_block`` is patched to
  record the blocks and return fixed norms (no Jacobian is built)."""
  seen = []

  def fake(l, m, T, **kw):
    seen.append(tuple(l.shape))
    ones = np.ones(l.shape[0])
    return ones, ones, 0 * ones, ones

  monkeypatch.setattr(gradient_rows, "_exact_block", fake)
  stats_in = {"n_exceed_lemma2": 0, "lemma2_finite": 3, "nonfinite": 0, "rows": 3,
              "n_exceed_paper": 0, "n_exceed_tight": 0, "max_norm": 1.0, "newton": 0}
  tol = {"exact": {"atol": 1e-5, "rtol": 1e-4}, "violation_rtol": 1e-6}
  for L, blocks in ((1449, [1, 1, 1]), (1448, [2, 1])):
    seen.clear()
    rows = np.zeros((3, L), np.float32)
    summary, per_row = gradient_rows.run_temperature(
        1.0, rows, np.ones((3, L), bool), np.arange(3), np.array([], int), [0.1], "softmax",
        {}, g_vals=np.array([[1.0]]), fd_idx=np.array([0]), all_stats=stats_in, dense=True,
        dtype_tol=tol)
    assert [b for b, w in seen if w == L] == blocks, L
    assert len(per_row) == 3 and summary["exact_rows"] == 3
  # The matrix-free path builds no Jacobian: blocks of 256 rows whatever L (seed 17:
  # ``if dense`` → ``if (dense) or True`` cut it to one row per block at L = 1449).
  seen.clear()
  tol["matfree"] = tol["exact"]
  gradient_rows.run_temperature(
      1.0, np.zeros((3, 1449), np.float32), np.ones((3, 1449), bool), np.arange(3),
      np.array([], int), [0.1], "softmax", {}, g_vals=np.array([[1.0]]), fd_idx=np.array([0]),
      all_stats=stats_in, dense=False, dtype_tol=tol)
  assert [b for b, w in seen if w == 1449] == [3]


def test_monte_carlo_distance_needs_two_samples_and_names_the_value():
  """distance.rows.monte_carlo_distance: samples = 1 is one line naming the value and what is
  allowed (``LimitsError(f"samples=…")`` → ``LimitsError(None)``); samples = 2 (the other
  side) runs: N = 1 of 2 keys, so each sample's d̃ is ‖α_j x_j − α_i x_i‖ of the pair, the
  same for either choice here (α = ½, ½; x = ±e₁): mean 1, standard error 0."""
  from limits.distance.rows import monte_carlo_distance
  from limits.errors import LimitsError
  a, x = jnp.array([0.5, 0.5]), jnp.array([[1.0, 0.0], [-1.0, 0.0]])
  with pytest.raises(LimitsError, match=r"^samples=1 must be at least 2$"):
    monte_carlo_distance(jax.random.key(0), a, x, 1, 1)
  est = monte_carlo_distance(jax.random.key(0), a, x, 1, 2)
  assert float(est.mean) == 1.0 and float(est.stderr) == 0.0


def test_softmax_inf_normalises_each_row_of_a_batch_on_its_own():
  """gradient.rows._softmax_inf on a (2, 2, 3) batch (g_rows passes (K, E, L)) of rows that are
  all non-empty: each row is softmax over its own finite entries (numpy, float64, rel 1e-14),
  summing to 1 (``jnp.sum(e, axis=-1, keepdims=True)`` → axis dropped normalised by the sum of
  the whole batch; the earlier test's second row was empty, contributing 0 to that sum)."""
  from limits.gradient.rows import _softmax_inf
  z = np.array([[[0.5, -1.0, 2.0], [1.0, 1.0, -np.inf]],
                [[-3.0, 0.0, 0.25], [4.0, -np.inf, -2.0]]])
  with jax.enable_x64(True):
    got = np.asarray(_softmax_inf(jnp.asarray(z)))
  e = np.exp(z - z.max(axis=-1, keepdims=True))
  np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=1e-14)
  np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# Survivors of a fourth fresh sample, after the tests above (twelfth session, seed 16):
# `python tools/mutation_run.py --groups rows --children 1 --sample 60 --seed 16`.


def test_pairwise_squared_distances_of_a_batch_of_point_sets():
  """separability.rows._pairwise_sq on x (B, L, d) = (2, 3, 2), the batched shape its docstring
  allows: each set's squared distances against numpy's differences (float64, abs 1e-12) and the
  duplicate flags (a repeated point, and the diagonal). ``jnp.sum(x * x, axis=-1)`` →
  ``axis=+1`` summed over the points instead of the coordinates (the same on (L, d), the
  callers' shape)."""
  from limits.separability.rows import _pairwise_sq
  x = np.array([[[1.0, 0.0], [0.0, 2.0], [1.0, 0.0]],
                [[3.0, 1.0], [-1.0, 0.5], [0.0, 0.0]]])
  with jax.enable_x64(True):
    d2, dup = _pairwise_sq(jnp.asarray(x))
  want = ((x[:, :, None, :] - x[:, None, :, :]) ** 2).sum(-1)  # (2, 3, 3)
  np.testing.assert_allclose(np.asarray(d2), want, atol=1e-12)
  assert (np.asarray(dup) == (want == 0)).all()


def test_lemma2_all_rows_uses_the_given_range_and_count(monkeypatch):
  """gradient.rows.lemma2_all_rows with ``range_count`` given (computed once for every
  temperature of 1.1M rows) does not recompute it (``row_range_and_count`` patched to fail;
  ``range_count is not None`` → ``(…) and False`` recomputed it at every T), and gives
  (e^{r/T} + e^{2r/T})/(T·n) by hand."""
  rows = np.array([[0.0, 1.0, 3.0], [2.0, 2.5, 0.0]])
  mask = np.array([[True, True, True], [True, True, False]])
  rc = gradient_rows.row_range_and_count(rows, mask)

  def no_recount(*args, **kwargs):
    raise AssertionError("row_range_and_count recomputed")

  monkeypatch.setattr(gradient_rows, "row_range_and_count", no_recount)
  got = gradient_rows.lemma2_all_rows(rows, mask, [0.5, 2.0], range_count=rc)
  want = [[(math.exp(r / T) + math.exp(2 * r / T)) / (T * n) for T in (0.5, 2.0)]
          for r, n in ((3.0, 3), (0.5, 2))]
  np.testing.assert_allclose(got, want, rtol=1e-14)


def test_jacobian_jacfwd_is_autodiff_not_the_closed_form(monkeypatch):
  """gradient.rows.jacobian(how="jacfwd") differentiates the normalizer (the closed form it is
  checked against in ``_exact_block`` must come from elsewhere): with
  ``jacobians.closed_form`` patched to fail it still returns (diag α − ααᵀ)/T (numpy, float64,
  abs 1e-12), while how="closed" (the other side) reaches the closed form. ``how == "jacfwd"``
  → ``how == "XXjacfwdXX"`` sent jacfwd to the closed form: the dense closed-form check then
  compared the closed form with itself (max_abs 0 whatever the closed form's error)."""
  from limits import jacobians as jac_module

  def no_closed_form(*args, **kwargs):
    raise AssertionError("closed form used")

  T, logits = 0.5, np.array([[0.3, -0.2, 1.0, 0.0]])
  monkeypatch.setattr(jac_module, "closed_form", no_closed_form)
  with jax.enable_x64(True):
    got = np.asarray(gradient_rows.jacobian("softmax", {}, jnp.asarray(logits), T, how="jacfwd"))
    with pytest.raises(AssertionError, match="closed form used"):
      gradient_rows.jacobian("softmax", {}, jnp.asarray(logits), T, how="closed")
  a = np.exp(logits[0] / T - (logits[0] / T).max())
  a /= a.sum()
  np.testing.assert_allclose(got[0], (np.diag(a) - np.outer(a, a)) / T, atol=1e-12)


def test_exceeds_paper_needs_more_than_the_violation_tolerance():
  """run_temperature counts an exact row over Corollary 3's printed bound only when its norm
  exceeds paper·(1 + rtol): the tied-top-two row (norm 1/(2T) = 1 at T = 0.5, twice the printed
  min{1/(4T), √2} = 0.5) exceeds it at rtol 0.5 (0.75) and not at rtol 1.5 (1.25), on both
  sides. ``paper * (1 + rtol)`` → ``paper / (1 + rtol)`` counted it at 1.5 (0.2)."""
  rows = np.array([[0.0, 0.0, -40.0, -40.0]])  # α = (½, ½, e⁻⁸⁰, e⁻⁸⁰)
  for vrtol, over in ((0.5, True), (1.5, False)):
    summary, per_row = _one_temperature(rows, None, violation_rtol=vrtol, per_row=True)
    assert summary["paper_bound"] == 0.5 and per_row[0]["norm"] == pytest.approx(1.0, rel=1e-12)
    assert summary["n_exceed_paper"] == int(over) and per_row[0]["exceeds_paper"] is over


# Survivor of a fifth fresh sample (twelfth session, seed 17, after every test above).


def test_monte_carlo_distance_samples_only_visible_keys():
  """distance.rows.monte_carlo_distance with a masked key of the largest weight: N = 1 of the two
  visible keys (α = ½, ½; x = ±e₁), so every sample's d̃ is exactly 1 (mean 1, standard error
  0); ``mask_like(alpha, mask)`` → ``mask_like(alpha, None)`` drew subsets with the masked key."""
  from limits.distance.rows import monte_carlo_distance
  a = jnp.array([0.5, 0.5, 0.9])
  x = jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0]])
  est = monte_carlo_distance(jax.random.key(0), a, x, 1, 64, mask=jnp.array([True, True, False]))
  assert float(est.mean) == 1.0 and float(est.stderr) == 0.0
