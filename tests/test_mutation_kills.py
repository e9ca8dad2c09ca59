"""Assertions that kill the seven plausible one-line bugs the default suite let through (issue 30,
item 6). Each criterion is tested on both sides of its boundary with inputs whose answer is
known in closed form (exact ties, p = alpha, the 1/(4T) and sqrt(2) branches of Corollary 3, a
gap that widens under the 10 % line, ambiguities that do and do not flip a verdict, a lock seen
from another process). Each test names the mutation it kills; all were confirmed red with the
mutation applied by hand and green without it.
"""

import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import bounds, stats
from limits.runs import results
from limits.errors import LimitsError
from limits.claims import assessment
from limits.claims.core import FAILS, HOLDS, NOT_TESTABLE, Claim, Reading, Verdict
from limits.claims.judges_distance import judge_fig2b_converge_printed
from limits.claims.judges_gradient import judge_cor3_printed
from limits.selection import sort_desc
from limits.separability.rows import count_distinguishable, row_stats


# (a) bounds.lemma1_check: both sides C1/L <= alpha_i and alpha_i <= C2/L are counted. -----------

def _lemma1_extremes(a, a_c):
  """rows=0: only the two extreme rows at L = 2, whose alpha*L are 2/(1 + e^{∓2a}) (two
  entries each side); C2 = e^{2 a_c}, C1 = e^{-2 a_c} for F = exp."""
  return bounds.lemma1_check(np.exp, a, [2], rows=0, a_constants=a_c)


def test_lemma1_counts_the_lower_and_the_upper_side():
  a = 1.0
  hi, lo = 2 / (1 + math.exp(-2 * a)), 2 / (1 + math.exp(2 * a))  # 1.7616, 0.2384
  res = _lemma1_extremes(a, a)
  assert res["checked"] == 4 and res["violations"] == 0
  assert res["by_L"][2]["max_aL"] == pytest.approx(hi, rel=1e-12)
  assert res["by_L"][2]["min_aL"] == pytest.approx(lo, rel=1e-12)
  # a_c = 0.5: C2 = e = 2.72 > hi (upper side clean), C1 = 0.368 > lo: exactly the 2 low entries.
  assert _lemma1_extremes(a, 0.5)["violations"] == 2
  # The upper side alone switches on at a_c* = ln(hi)/2 (C2 = hi); C1 = 1/hi > lo throughout.
  a_star = math.log(hi) / 2
  assert _lemma1_extremes(a, a_star * (1 + 1e-6))["violations"] == 2  # lower only
  assert _lemma1_extremes(a, a_star * (1 - 1e-6))["violations"] == 4  # lower and upper
  # The lower side switches off at C1 = lo, i.e. a_c = -ln(lo)/2 (above it C1 < lo).
  a_low = -math.log(lo) / 2
  assert _lemma1_extremes(a, a_low * (1 - 1e-6))["violations"] == 2  # still 2 low entries
  assert _lemma1_extremes(a, a_low * (1 + 1e-6))["violations"] == 0


# (b) separability_rows.row_stats: strict N_s = #{selected i : dist_i < r} with an exact tie. -------

def _tied_row(far):
  """alpha = (1/2, 1/4, 1/4) over x = ((1,0), (far,0), (0,1)); N = 1 selects token 0, whose
  distance to s = x_0/2 is 0; token 1's is |far/4 - 1/2|: exactly 0 (a tie with r) at far = 2.
  Every number is a dyadic rational, so both the gram and the direct distance are exact."""
  alpha = jnp.array([[0.5, 0.25, 0.25]], jnp.float32)
  x = jnp.array([[1.0, 0.0], [far, 0.0], [0.0, 1.0]], jnp.float32)
  return alpha, x


@pytest.mark.parametrize("method", ["gram", "direct"])
@pytest.mark.parametrize("far, r, n_s", [(2.0, 0.0, 0), (3.0, 0.25, 1), (2.5, 0.125, 1)])
def test_batched_strict_count_with_an_exact_tie(method, far, r, n_s):
  alpha, x = _tied_row(far)
  visible = jnp.ones_like(alpha, bool)
  st = row_stats(alpha, sort_desc(alpha), visible, x, 1, 1.0, 1.0, method=method)
  assert float(st.r[0]) == r and int(st.n_s[0]) == n_s
  ref_n_s, ref_r = count_distinguishable(alpha[0], x, 1)  # the one-row reference definition
  assert (int(ref_n_s), float(ref_r)) == (n_s, r)
  # The literal rule (closed ball, every non-selected token strictly outside r) is always 0.
  lit = row_stats(alpha, sort_desc(alpha), visible, x, 1, 1.0, 1.0, method=method,
                  rule="literal")
  assert int(lit.n_s[0]) == 0  # r is the nearest non-selected distance: never strictly outside


# (c) stats: the KS test "does not reject" is p > alpha, strictly. ---------------------------------

def test_ks_decision_at_p_equal_alpha():
  assert not stats.indistinguishable(0.01, 0.01)
  assert stats.indistinguishable(np.nextafter(0.01, 1), 0.01)
  assert not stats.indistinguishable(np.nextafter(0.01, 0), 0.01)


@pytest.mark.parametrize("method", ["scan", "bisect"])
def test_critical_n_skips_ns_whose_p_equals_alpha(method):
  # p = alpha exactly for N <= 12, just above it from N = 13.
  p = lambda ns: [0.01 if n <= 12 else 0.010000001 for n in ns]
  assert stats.critical_n(p, 1, 40, alpha=0.01, method=method).n == 13


# (d) claims cor3-printed: ||J||_2 <= min{1/(4T), sqrt(2)} with both branches active. -------------

# min{1/(4T), √2} by hand: the 1/(4T) branch at T = 1 and 0.5, the √2 branch at T = 0.01.
@pytest.mark.parametrize("T, bound", [(1.0, 0.25), (0.5, 0.5), (0.01, math.sqrt(2))])
def test_cor3_printed_both_sides_of_each_branch(T, bound):
  for norm, status in ((bound * (1 - 1e-7), HOLDS), (bound * (1 + 1e-7), FAILS)):
    v = judge_cor3_printed({"T": [T], "counterexample_norm": [norm]}, {})
    assert v.status == status, (T, norm, v)
  # A row within the bound but a data pair above it still fails (the second condition).
  v = judge_cor3_printed({"T": [T], "counterexample_norm": [bound / 2], "data_exceed_paper": 1},
                         {})
  assert v.status == FAILS


# (e) claims fig2b-converge: the gap at the largest N is < 10 % AND smaller than at the first N. ---

def _converge(gap_first, gap_last):
  """Rows at one L with d̃ = 1 and E = 1 - gap (printed E, AMBIG-17 'output', d̃ 'sum')."""
  rows = [{"L": 64, "N": n, "d_sum_mean": 1.0, "expected_printed_output_mean": 1.0 - g}
          for n, g in ((1, gap_first), (50, (gap_first + gap_last) / 2), (100, gap_last))]
  return judge_fig2b_converge_printed({"rows": rows}, {"AMBIG-1": "sum", "AMBIG-17": "output"})


@pytest.mark.parametrize("first, last, status", [
    (0.5, 0.05, HOLDS), (0.5, 0.0999, HOLDS), (0.5, 0.1001, FAILS),  # the 10 % line
    (0.04, 0.05, FAILS), (0.05, 0.05, FAILS), (0.06, 0.05, HOLDS),  # the gap must close
])
def test_fig2b_converge_needs_a_small_and_closing_gap(first, last, status):
  assert _converge(first, last).status == status


# (f) claims assessment: the robustness column names exactly the ambiguities whose change flips
# the primary reading's verdict (issue 28: the verdict is the primary reading's, never "depends").

def _claim(judge):
  return Claim(id="t", kind="theorem", where="here", words="w", setting="s", step="step",
               criterion="c", judge=judge,
               readings=(Reading("AMBIG-A", (("a1", "A one"), ("a2", "A two"))),
                         Reading("AMBIG-B", (("b1", "B one"), ("b2", "B two")))))


def _flips(label):
  """The flipping changes named by a robustness label, e.g. {"AMBIG-A (A two)"}."""
  assert label.startswith("flips under "), label
  return {part.split(":", 1)[0] for part in label[len("flips under "):].split("; ")}


def test_robustness_names_only_the_ambiguity_that_flips():
  only_a = _claim(lambda s, r: Verdict(HOLDS if r["AMBIG-A"] == "a1" else FAILS))
  res = assessment.assess(only_a, {})
  assert res.verdict == HOLDS and res.robust is False  # the primary reading (a1, b1) holds
  assert _flips(res.label) == {"AMBIG-A (A two)"} and "AMBIG-B" not in res.label
  only_b = _claim(lambda s, r: Verdict(HOLDS if r["AMBIG-B"] == "b2" else FAILS))
  res = assessment.assess(only_b, {})
  assert res.verdict == FAILS and _flips(res.label) == {"AMBIG-B (B two)"}
  both = _claim(lambda s, r: Verdict(HOLDS if (r["AMBIG-A"], r["AMBIG-B"]) == ("a1", "b1")
                                     else FAILS))
  # Each change alone flips it: each is named alone, the pair (not minimal) is not.
  assert _flips(assessment.assess(both, {}).label) == {"AMBIG-A (A two)", "AMBIG-B (B two)"}
  neither = assessment.assess(_claim(lambda s, r: Verdict(HOLDS)), {})
  assert (neither.verdict, neither.label, neither.robust) == (HOLDS, assessment.SAME, True)


def test_robustness_names_a_pair_when_only_the_pair_is_computed_and_flips():
  table = {("a1", "b1"): HOLDS, ("a2", "b2"): FAILS}
  diag = _claim(lambda s, r: Verdict(table.get((r["AMBIG-A"], r["AMBIG-B"]), NOT_TESTABLE),
                                     reason="not computed"))
  res = assessment.assess(diag, {})
  assert res.verdict == HOLDS and res.robust is False
  assert _flips(res.label) == {"AMBIG-A (A two) with AMBIG-B (B two)"}


# (g) results.prepare_out_dir takes the run lock (seen from another process). ---------------------

_TRY_LOCK = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
             "try:\n"
             "  fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n"
             "  sys.exit(3)\n")


def _other_process_can_lock(directory) -> bool:
  rc = subprocess.run([sys.executable, "-c", _TRY_LOCK, str(directory / results.LOCK_FILE)],
                      timeout=60).returncode
  assert rc in (0, 3), rc
  return rc == 0


def test_prepare_out_dir_holds_the_run_lock(tmp_path):
  free = tmp_path / "free"
  free.mkdir()
  assert _other_process_can_lock(free)  # the probe can succeed
  run = results.prepare_out_dir(tmp_path / "run", "test", identity={"x": 1}, overwrite=False)
  assert results.is_locked(run)
  assert not _other_process_can_lock(run)


# Survivors of the mutmut run over stats.py (tools/mutation_run.py) that were not equivalent. -----

def test_ks_needs_two_non_empty_samples_and_accepts_a_single_value():
  import scipy.stats

  r = stats.ks_2samp([1.0, 2.0, 3.0], [0.5])  # one value is a sample: scipy's answer
  ref = scipy.stats.ks_2samp([1.0, 2.0, 3.0], [0.5])
  assert (r.statistic, r.pvalue) == (float(ref.statistic), float(ref.pvalue))
  for a, b in (([1.0], []), ([], [1.0]), ([np.nan], [1.0]), ([1.0, 2.0], [np.inf, np.nan])):
    with pytest.raises(LimitsError, match="non-empty samples"):
      stats.ks_2samp(a, b)


def test_fit_ratio_and_linear_fit_against_closed_forms():
  # Non-proportional points: c = Σ l·n / Σ l² = 13/14; the free line (numpy.polyfit) 1 + L/2.
  f = stats.fit_ratio([1, 2, 3], [1, 3, 2])
  slope, intercept = np.polyfit([1, 2, 3], [1, 3, 2], 1)
  assert f["ratio"] == pytest.approx(13 / 14, rel=1e-15) and f["points"] == 3
  assert f["slope"] == pytest.approx(slope, rel=1e-12)
  assert f["intercept"] == pytest.approx(intercept, rel=1e-12)
  assert f["r2"] == pytest.approx(np.corrcoef([1, 2, 3], [1, 3, 2])[0, 1] ** 2, rel=1e-12)
  # Non-finite points on either side are dropped: (1, 2), (2, 4) remain.
  g = stats.fit_ratio([1, 2, np.nan, 4, 5], [2, 4, 5, np.inf, -np.inf])
  assert (g["ratio"], g["points"], g["slope"], g["r2"]) == (2.0, 2, pytest.approx(2.0), 1.0)
  assert g["intercept"] == pytest.approx(0.0, abs=1e-12)
  empty = {"ratio": None, "slope": None, "intercept": None, "r2": None, "points": 0}
  assert stats.fit_ratio([], []) == empty and stats.fit_ratio([np.nan], [1.0]) == empty
  one = stats.fit_ratio([2.0], [3.0])
  assert one["ratio"] == 1.5 and one["points"] == 1 and one["slope"] is None
  assert stats.linear_fit([1, 3], [1, 2]) == {"slope": 0.5, "intercept": 0.5, "r2": 1.0}


def test_loglog_slope_keeps_only_finite_positive_points():
  line = ([0.01, 1, 10, 100], [0.01, 1, 10, 100])  # slope 1, including a point below 1
  assert stats.loglog_slope(*line) == pytest.approx(1.0, rel=1e-12)
  for x, y in ((0.0, 5.0), (-1.0, 5.0), (5.0, 0.0), (5.0, -1.0), (np.nan, 5.0), (5.0, np.inf),
               (np.inf, 5.0), (5.0, np.nan)):
    assert stats.loglog_slope(line[0] + [x], line[1] + [y]) == pytest.approx(1.0, rel=1e-12)
  assert stats.loglog_slope([1, 10], [1, 1000]) == pytest.approx(3.0, rel=1e-12)
  assert np.isnan(stats.loglog_slope([1, 0], [1, 5]))      # one positive point left
  assert np.isnan(stats.loglog_slope([3, 3], [1, 5]))      # every x equal


@pytest.mark.parametrize("method", ["scan", "bisect"])
def test_critical_n_contract(method):
  """Survivors of the stats.py run in critical_n/_summarise: range, alpha and N-range edges,
  probes only inside [n_min, n_max], the recorded method/alpha and both monotonicity flags."""
  probed = []

  def p(ns):
    probed.extend(ns)
    return [0.5 if n >= 7 else 0.001 for n in ns]

  res = stats.critical_n(p, 3, 20, alpha=0.01, method=method)
  assert (res.n, res.alpha, res.method) == (7, 0.01, method)
  assert min(probed) >= 3 and max(probed) <= 20 and sorted(res.evaluated) == sorted(set(probed))
  assert res.decisions_monotone and res.pvalues_monotone
  assert res.as_dict()["critical_n"] == 7 and res.as_dict()["method"] == method
  assert stats.critical_n(lambda ns: [0.5] * len(ns), 5, 5, method=method).n == 5  # one N
  assert stats.critical_n(lambda ns: [0.001] * len(ns), 5, 9, method=method).n is None
  # The last pair of probed N decides both flags (a non-monotone tail).
  last = stats.critical_n(lambda ns: [0.5 if n == 9 else 0.001 for n in ns], 1, 10,
                          method="scan")
  assert last.n == 9 and not last.decisions_monotone and not last.pvalues_monotone
  for kwargs, words in ((dict(alpha=0.0), r"alpha=0.0 must be in \(0, 1\)"),
                        (dict(alpha=1.0), r"alpha=1.0 must be in \(0, 1\)"),
                        (dict(batch=0), "batch=0 must be positive")):
    with pytest.raises(LimitsError, match=words):
      stats.critical_n(p, 3, 20, method=method, **kwargs)
  with pytest.raises(LimitsError, match=r"N range \[4, 3\] is empty"):
    stats.critical_n(p, 4, 3, method=method)
  with pytest.raises(ValueError, match="returned 0 values for"):
    stats.critical_n(lambda ns: [], 3, 20, method=method)


def test_critical_n_default_method_is_bisect():
  assert stats.critical_n(lambda ns: [0.5] * len(ns), 1, 50).method == "bisect"


def test_critical_n_bisect_probes_evenly_and_narrows_to_the_bracket():
  """The batch-ary search on [1, 9] (lo = 0, hi = 10) with batch 4 probes the four points that
  cut (0, 10) into five equal parts, 2, 4, 6, 8; with the crossing at 5, 6 and 8 pass and 4
  rejects, so the bracket becomes (4, 6) and the only point left is 5 (derived by hand)."""
  calls = []

  def p(ns):
    calls.append(list(ns))
    return [0.5 if n >= 5 else 0.001 for n in ns]

  r = stats.critical_n(p, 1, 9, alpha=0.01, method="bisect", batch=4)
  assert calls == [[2, 4, 6, 8], [5]] and r.n == 5
  # Crossing at 3: 2 rejects, 4 passes -> bracket (2, 4) -> probe 3.
  calls.clear()
  p3 = lambda ns: (calls.append(list(ns)), [0.5 if n >= 3 else 0.001 for n in ns])[1]
  assert stats.critical_n(p3, 1, 9, method="bisect", batch=4).n == 3
  assert calls == [[2, 4, 6, 8], [3]]


@pytest.mark.parametrize("method", ["scan", "bisect"])
def test_critical_n_never_probes_above_n_max(method):
  """p passes only above the range (N >= 10 on [5, 9]): nothing passes inside, so the answer is
  None, the method is recorded, and no N outside [5, 9] is ever handed to the p-value function."""
  probed = []

  def p(ns):
    probed.extend(ns)
    return [0.5 if n >= 10 else 0.001 for n in ns]

  r = stats.critical_n(p, 5, 9, alpha=0.01, method=method, batch=8)
  assert r.n is None and r.method == method and r.as_dict()["method"] == method
  assert set(probed) <= {5, 6, 7, 8, 9} and 9 in probed
  assert (r.decisions_monotone, r.pvalues_monotone) == (True, True)


def test_critical_n_as_dict_keys_and_values():
  r = stats.critical_n(lambda ns: [0.5 if n >= 2 else 0.001 for n in ns], 1, 3, alpha=0.05,
                       method="scan", batch=3)
  assert r.as_dict() == {"critical_n": 2, "alpha": 0.05, "method": "scan",
                         "evaluated": {1: 0.001, 2: 0.5, 3: 0.5},
                         "decisions_monotone": True, "pvalues_monotone": True}
  down = stats.critical_n(lambda ns: [0.5 if n == 1 else 0.001 for n in ns], 1, 2,
                          method="scan", batch=2).as_dict()
  assert (down["decisions_monotone"], down["pvalues_monotone"]) == (False, False)


def test_critical_n_names_the_bad_method():
  with pytest.raises(LimitsError, match=r"method='nope' is not one of \('scan', 'bisect'\)"):
    stats.critical_n(lambda ns: [0.5] * len(ns), 1, 4, method="nope")


# Survivors of the sampled "claims" run (tools/mutation_run.py --groups claims --sample 40). -----

from limits import claims as C  # noqa: E402


def _safe(judge, s, r=None):
  """A judge under judge_safely's contract (a missing/malformed field -> not testable)."""
  claim = Claim(id="t", kind="lemma", where="here", words="w", setting="s", step="step",
                criterion="c", judge=judge)
  return assessment.judge_safely(claim, s, r or {})


def test_not_run_labels_the_reason():
  claim = Claim(id="t", kind="lemma", where="here", words="w", setting="s", step="step",
                criterion="c", judge=lambda s, r: None)
  a = assessment.not_run(claim, "step 'gradient' failed: boom")
  assert (a.verdict, a.label, a.default.status) == (C.NOT_RUN, "step 'gradient' failed: boom",
                                                    C.NOT_RUN)
  assert a.default.reason == "step 'gradient' failed: boom"


def test_nonfinite_norms_are_named_in_the_reason():
  s = {"T": [0.01, 1.0], "counterexample_norm": [50.0, 0.5], "nonfinite_T": [0.001, 0.25]}
  for judge in (C.judge_cor3_printed, C.judge_cor3_tight):
    v = _safe(judge, s)
    assert v.status == NOT_TESTABLE and "non-finite at T = 0.001, 0.25" in v.reason, v


def test_cor3_tight_reads_the_data_rows_max():
  """max T·‖J‖₂ over the counterexample (exactly 1/2 here) and the data rows' recorded max."""
  ts = [0.1, 1.0]
  s = {"T": ts, "counterexample_norm": [1 / (2 * t) for t in ts]}
  assert C.judge_cor3_tight(s, {}).status == HOLDS
  assert _safe(C.judge_cor3_tight, {**s, "max_T_norm": 0.4}).status == HOLDS
  v = _safe(C.judge_cor3_tight, {**s, "max_T_norm": 0.6})
  assert v.status == FAILS and v.measured == "max T·‖J‖₂ = 0.6"


def test_lemma2_overflow_is_not_testable_below_half_finite():
  base = {"lemma2_exceed": 0, "lemma2_pairs": 10}
  v = _safe(C.judge_lemma2, {**base, "lemma2_finite": 4})       # 2·4 < 10: constrains nothing
  assert v.status == NOT_TESTABLE
  assert "overflows to infinity on 6 of 10 (row, T) pairs" in v.reason
  assert _safe(C.judge_lemma2, {**base, "lemma2_finite": 5}).status == HOLDS   # 2·5 = 10
  assert _safe(C.judge_lemma2, {**base, "lemma2_exceed": 1, "lemma2_finite": 0}).status == FAILS


def test_simplex_judge_counts_rows_above_sqrt2_over_eps():
  assert C.judge_simplex({"sqrt2_exceed": {"0.1": 0, "1": 0}}, {}).status == HOLDS
  v = C.judge_simplex({"sqrt2_exceed": {"0.1": 0, "1": "2"}}, {})
  assert (v.status, v.measured) == (FAILS, "2 rows above √2/ε")


def test_lemma1_judges_report_what_they_read():
  v = C.judge_lemma1_model({"lemma1_slopes": {"softmax": 0.25}}, {})
  assert v.status == NOT_TESTABLE and v.measured == "softmax: 0.25"
  s = {"lemma1": {"exp": {"violations": 0, "checked": 1200, "C2": 54.6},
                  "note": "not a normalizer entry"}}
  v = C.judge_lemma1_bounded(s, {})
  assert (v.status, v.measured, v.sample) == (HOLDS, "exp: C2 = 54.6, 0 violations", "1,200 rows")
  s["lemma1"]["softplus"] = {"violations": 3, "checked": 10}
  v = C.judge_lemma1_bounded(s, {})
  assert v.status == FAILS and "softplus: C2 = nan, 3 violations" in v.measured
  assert v.sample == "1,210 rows"                           # rows checked add up over F


def test_fig2b_tightens_reads_the_norm_columns_under_the_norm_reading():
  """Sum form: d_max/d̃ falls from N = 20 to 100 (holds); norm form: it rises (fails)."""
  rows = [{"L": 64, "N": n, "d_sum_mean": 10.0, "dmax_sum_mean": {20: 30.0, 100: 20.0}[n],
           "d_norm_mean": 10.0, "dmax_norm_mean": {20: 20.0, 100: 30.0}[n]} for n in (20, 100)]
  assert C.judge_fig2b_tightens({"rows": rows}, {"AMBIG-1": "sum"}).status == HOLDS
  assert C.judge_fig2b_tightens({"rows": rows}, {"AMBIG-1": "norm"}).status == FAILS


def test_fig2c_shows_pass_windows_only_when_one_closed():
  """A single window still open at the last N scanned is not shown; one that closed before it
  is ("passes at N = 4–6")."""
  def summary(pvals, windows):
    entry = {"critical_n": 4, "alpha": 0.01, "evaluated": pvals, "windows": windows}
    return {"critical_scan": {"100": {"printed": entry, "reconstructed": entry}}, "heads": 144}

  r = {"AMBIG-18": "printed", "AMBIG-9": "0.01"}
  open_ = summary({str(n): (0.5 if n >= 4 else 0.001) for n in range(1, 7)}, [[4, 6]])
  v = C.judge_fig2c(open_, r)
  assert v.status == HOLDS and "passes at" not in v.measured, v
  closed = summary({str(n): (0.5 if 4 <= n <= 6 else 0.001) for n in range(1, 8)}, [[4, 6]])
  assert "(passes at N = 4–6)" in C.judge_fig2c(closed, r).measured


def test_upper_tracking_counts_stderr_and_states_the_gap():
  """A head 0.1 above its derived bound: within 3 standard errors of 0.04 (0.12) it is no
  violation, with 0.02 (0.06) or a non-finite stderr (read as 0) it is."""
  def s(err):
    return {"per_head": [{"n": 4, "frac": 0.8, "lower": 0, "upper": 0.7, "upper_printed": 0.95,
                          "stderr": err}]}

  v = C.judge_fig3_upper_derived(s("0.04"), {})
  assert v.status == HOLDS
  assert v.measured == "bound − max N_s/N up to -0.1; 0 of 1 decidable (head, N) cases above " \
                       "the bound", v.measured
  assert C.judge_fig3_upper_derived(s("0.02"), {}).status == FAILS
  assert C.judge_fig3_upper_derived(s("inf"), {}).status == FAILS


def test_sphere_cap_names_the_missing_grid():
  s = {"n": [1, 2, 4, 8], "max": [1.0, 0.9, 0.8, 0.7]}     # no N >= 16
  v = _safe(C.judge_sphere_cap, s)
  assert v.status == NOT_TESTABLE and "N ≥ 16 in the grid" in v.reason, v


# ---------------------------------------------------------------------------------------------
# Survivors of the full mutation run of limits/bounds.py (tenth session, 688 mutants; each test
# names the mutants it kills as `function: change`; docs/mutation_survivors.md lists the rest).

def test_bounds_errors_name_the_bad_argument_first():
  """_check_temperature / simplex_fd_bound / lemma1_constants: the message starts with the
  argument's own name (a renamed one, e.g. 'XXtemperatureXX=0.0', still contains the word)."""
  from limits import bounds as B
  with pytest.raises(LimitsError, match=r"^temperature=0\.0 is not allowed"):
    B.corollary1_band(np.ones(2), np.ones((3, 2)), 0.0)
  with pytest.raises(LimitsError, match=r"^epsilon=-1\.0 is not allowed"):
    B.simplex_fd_bound(-1.0)
  with pytest.raises(LimitsError, match=r"^F must be finite and positive on \[-a, a\] \(Lemma 1"):
    B.lemma1_constants(lambda x: x - 2.0, 1.0)


def test_lemma1_constants_evaluates_the_documented_grid():
  """lemma1_constants: `grid` points including ±a (default 4097, so 0 is on it; at least 2):
  the first call of F gets exactly np.linspace(-a, a, grid) (kills grid default 4097 -> 4098,
  `linspace(-a, a)` (50 points), `max(int(grid), 2)` -> 3)."""
  from limits import bounds as B
  for grid, a, want in ((None, 1.5, np.linspace(-1.5, 1.5, 4097)), (2, 1.0, [-1.0, 1.0]),
                        (1, 1.0, [-1.0, 1.0]), (3, 2.0, [-2.0, 0.0, 2.0])):
    calls = []

    def F(x):
      calls.append(np.array(x, copy=True))
      return np.exp(x)
    C1, C2 = B.lemma1_constants(F, a) if grid is None else B.lemma1_constants(F, a, grid)
    assert calls[0].dtype == np.float64
    np.testing.assert_array_equal(calls[0], want)
    assert C2 == pytest.approx(math.exp(2 * a), rel=1e-12) and C1 == pytest.approx(1 / C2)


def test_lemma1_constants_zero_or_dip_is_an_error_on_and_off_the_grid():
  """Lemma 1 needs F > 0 on [-a, a]. F = x² is 0 at the grid point 0 (kills `ys > 0` -> `>=`,
  which then divides by min F = 0). F = (x - c)² + 1 - d with c between grid points dips to 1 - d
  there: d = 0.5 is fine, C2 = F(-1)/(1 - d) in closed form; d = 1 (a zero off the grid) and
  d = 1 + 1e-9 (negative only within 3e-5 of c, no grid point) are errors (refinement checked:
  `v is not None and v > 0` -> `or`, `v >= 0`, `... or True`). Before this test the dip was
  ignored and a finite C2 returned (a silent wrong constant)."""
  from limits import bounds as B
  h = 2 / 4096
  c = 0.25 + h / 3  # not a grid point
  with pytest.raises(LimitsError, match="positive"):
    B.lemma1_constants(lambda x: x * x, 1.0)
  C1, C2 = B.lemma1_constants(lambda x: (x - c) ** 2 + 0.5, 1.0)
  assert C2 == pytest.approx(((1 + c) ** 2 + 0.5) / 0.5, rel=1e-10)
  assert C1 == pytest.approx(1 / C2)
  for d in (1.0, 1.0 + 1e-9):
    with pytest.raises(LimitsError, match="positive"):
      B.lemma1_constants(lambda x, d=d: (x - c) ** 2 + 1 - d, 1.0)


@pytest.mark.parametrize("end", [-1, 1])
def test_lemma1_constants_refines_the_first_and_last_grid_cell(end):
  """The minimum of F = 1 + (x - x*)² lies inside the first (last) grid cell, nearer the end
  point: the grid's argmin is the end point and only the refinement over [x_0, x_1] finds
  min F = 1 (F(x_0) = 1 + (0.3h)² ~ 1 + 2e-8). Kills `max(idx - 1, 0)` -> `max(idx - 1, 1)`
  and `min(idx + 1, len - 1)` -> `len - 2` (an empty bracket at the ends)."""
  from limits import bounds as B
  h = 2 / 4096
  xs = end * (1 - 0.3 * h)
  C1, C2 = B.lemma1_constants(lambda x: 1 + (x - xs) ** 2, 1.0)
  assert C2 == pytest.approx(1 + (2 - 0.3 * h) ** 2, rel=1e-12)


def test_lemma1_constants_at_a_subnormal_range():
  """a = 5e-324: the grid has only -a, 0, a, so the neighbours of the extreme grid points can
  coincide and the refinement is skipped (refine -> None): C = (1, 1) for F = exp. Kills the
  `lo = min(lo, v) if ... or True` / `hi = max(hi, v) if ... or True` mutants (min with None)."""
  from limits import bounds as B
  assert B.lemma1_constants(np.exp, 5e-324) == (1.0, 1.0)
  assert B.lemma1_constants(lambda x: 2 + np.sign(x), 5e-324) == pytest.approx((1 / 3, 3.0))


def test_corollary1_band_per_row_delta_and_keeps_dtype():
  """corollary1_band: Δ per row (max over that row's keys; `axis=-1` -> `axis=None` or no axis
  takes the max over the batch), and the band in the keys' dtype also for a NumPy float64
  temperature under x64 (`jnp.asarray(temperature, knorm.dtype)` -> no dtype)."""
  from limits import bounds as B
  with jax.enable_x64(True):
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    k = np.array([[[0.5, 0.0], [0.0, 0.25]], [[2.0, 0.0], [0.0, 1.0]]])  # row max 0.5, 2
    T = np.float64(4.0)
    lo, up = B.corollary1_band(q, k, T)
    np.testing.assert_allclose(np.asarray(up), [np.exp(0.25) / 2, np.exp(1.0) / 2], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(lo), [np.exp(-0.25) / 2, np.exp(-1.0) / 2], rtol=1e-12)
    lo32, up32 = B.corollary1_band(q.astype(np.float32), k.astype(np.float32), T)
    assert lo32.dtype == up32.dtype == jnp.float32
    # softmax_lemma2_bound likewise keeps the logits' dtype for a float64 temperature.
    assert B.softmax_lemma2_bound(np.zeros((2, 3), np.float32), T).dtype == jnp.float32


def test_corollary1_causal_check_default_window_and_dtype():
  """corollary1_causal_check: the default window is 0 (the whole causal prefix; `window=1`
  would see one key per query: no violation ever), and float32 records give float32 margins
  under x64 (`.astype(logits.dtype)` -> `.astype(None)` makes log n_t float64). q = k rows of
  norm 1 and scores = 3·q·k: the band 2Δ/T = 2 while the prefix weights violate it (closed form
  checked against a NumPy loop in tests/test_bounds.py; here: default == window 0 != window 1)."""
  from limits import bounds as B
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    L = 6
    q = rng.normal(size=(1, 1, L, 2))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k = q.copy()
    scores = 40.0 * np.einsum("bhtd,bhsd->bhts", q, k)
    default = B.corollary1_causal_check(scores, q, k, 1.0)
    w0 = B.corollary1_causal_check(scores, q, k, 1.0, window=0)
    w1 = B.corollary1_causal_check(scores, q, k, 1.0, window=1)
    assert int(w1["violations"].sum()) == 0
    assert int(default["violations"].sum()) == int(w0["violations"].sum()) > 0
    f32 = B.corollary1_causal_check(*(np.asarray(v, np.float32) for v in (scores, q, k)), 1.0)
    assert f32["min_margin"].dtype == f32["log_max_last"].dtype == jnp.float32


def test_lemma2_bound_per_row_over_visible_keys_closed_form():
  """lemma2_bound = (max|F'|/L)(1/min F + max F/(min F)²) over the visible keys, per row, for
  F = exp: a 1-D row (`axis=-1` -> `axis=+1` fails there), masked keys whose values are larger
  than the visible ones or whose padding would be 1 (`where(m, f, 0)` -> `1` for max F and
  max|F'|: visible F < 1 here), one visible key (L = 1: `maximum(count, 1)` -> `2`), and the
  dtype of float32 logits under x64 (`.astype(f.dtype)` -> `.astype(None)`)."""
  from limits import bounds as B
  with jax.enable_x64(True):
    def ref(v):
      return np.max(np.exp(v)) / len(v) * (1 / np.min(np.exp(v)) + np.max(np.exp(v))
                                           / np.min(np.exp(v)) ** 2)
    row = np.array([-3.0, -2.0, -1.0, 5.0])
    assert float(B.lemma2_bound(jnp.exp, jnp.exp, row)) == pytest.approx(ref(row), rel=1e-12)
    m = np.array([[True, True, True, False], [False, True, False, False]])
    got = np.asarray(B.lemma2_bound(jnp.exp, jnp.exp, np.stack([row, row]), m))
    np.testing.assert_allclose(got, [ref(row[:3]), ref(row[1:2])], rtol=1e-12)
    assert got[1] == pytest.approx(2.0, rel=1e-12)  # one key: |F'|/F·2 = 2 for exp
    assert B.lemma2_bound(jnp.exp, jnp.exp, row.astype(np.float32)).dtype == jnp.float32


def test_lemma2_bound_is_inf_not_nan_when_min_f_is_zero():
  """F = l², F' = 2l on an all-zero row: min F = 0 and max|F'| = 0; the bound is +inf (vacuous),
  not 0·inf = NaN (`ok = fmin > 0` -> `>=`); a row with min F > 0 stays finite (closed form)."""
  from limits import bounds as B
  with jax.enable_x64(True):
    got = np.asarray(B.lemma2_bound(lambda v: v * v, lambda v: 2 * v,
                                    np.array([[0.0, 0.0, 0.0], [1.0, 2.0, -1.0]])))
    assert got[0] == np.inf
    assert got[1] == pytest.approx(4 / 3 * (1 / 1 + 4 / 1), rel=1e-12)


def test_softmax_jacobian_and_simplex_bounds_dtypes():
  """softmax_jacobian_bound: an integer temperature is read as a float (`T = None` fails) and a
  float32 one stays float32 under x64 (negating or breaking the `issubdtype` test casts it);
  simplex_fd_bound: √2/ε in the default float (float64 under x64) also for a float32 ε, equal
  to √2/float64(ε) (the asarray dtype dropped keeps float32)."""
  from limits import bounds as B
  with jax.enable_x64(True):
    b = B.softmax_jacobian_bound(1)
    assert float(b) == 0.25 and b.dtype == jnp.float64
    b32 = B.softmax_jacobian_bound(np.float32(2.0))
    assert b32.dtype == jnp.float32 and float(b32) == 0.125
    eps = np.float32(0.1)
    s = B.simplex_fd_bound(eps)
    assert s.dtype == jnp.float64 and float(s) == math.sqrt(2) / float(eps)


def test_tied_top_two_defaults_length_and_dtype():
  """tied_top_two(): length 2 by default (α = (½, ½)), length 2 allowed and 1 not (`< 2` ->
  `<= 2` / `< 3`), and the dtype asked for is kept (float32 under x64; the `dtype or ...` line
  and the zeros' dtype)."""
  from limits import bounds as B
  with jax.enable_x64(True):
    logits, mask = B.tied_top_two()
    assert logits.shape == (2,) and mask.tolist() == [True, True]
    logits, mask = B.tied_top_two(2, jnp.float32)
    assert logits.dtype == jnp.float32 and mask.tolist() == [True, True]
    logits, mask = B.tied_top_two(4)
    assert logits.dtype == jnp.float64 and mask.tolist() == [True, True, False, False]
  with pytest.raises(LimitsError, match="length"):
    B.tied_top_two(1)


# ---------------------------------------------------------------------------------------------
# Survivors of a seeded sample of the claims group (tenth session, seed 10, 100 of 2,413).

def test_ks_min_pvalue_with_unequal_samples():
  """criteria.ks_min_pvalue(n, m) = 2 / C(n + m, n) (D = 1, fully separated samples): m is used
  when given (`m = n if m is None else m` -> always n), capped at 1."""
  from limits import claims as C
  assert C.ks_min_pvalue(2, 3) == pytest.approx(2 / math.comb(5, 2))  # 0.2
  assert C.ks_min_pvalue(3) == pytest.approx(2 / math.comb(6, 3))     # 0.1
  assert C.ks_min_pvalue(1, 1) == 1.0                                  # 2 / 2, capped


@pytest.mark.parametrize("rel, status", [(0.0, HOLDS), (5e-10, HOLDS), (2e-9, FAILS)])
def test_cor3_printed_slack_is_1e9_above_the_bound(rel, status):
  """judge_cor3_printed counts a norm as over min{1/(4T), √2} only beyond a relative 1e-9
  (float rounding of the counterexample): exactly at 1/(4T) and 5e-10 above hold, 2e-9 above
  fails (`(1 + 1e-9)` -> `(1 - 1e-9)` fails at the bound itself)."""
  v = judge_cor3_printed({"T": [1.0], "counterexample_norm": [0.25 * (1 + rel)]}, {})
  assert v.status == status, v


def _judge_verdict(cid, summary):
  from limits import claims as C
  claim = C.BY_ID[cid]
  full = {rd.ambig: rd.options[0][0] for rd in claim.readings}
  return C.judge_safely(claim, summary, full)


@pytest.mark.parametrize("p, pct", [(0.8, "99.2"), (0.7, "97.3")])
def test_multihead_states_three_heads_coverage(p, pct):
  """multihead-coverage reports 1 − (1 − p)³ for H = 3 heads (0.992 at p = 0.8, 0.973 at 0.7;
  `coverage(p, 4)` would say 99.8 / 99.2)."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  v = _judge_verdict("multihead-coverage", {"n": ns, "median": [1, 0.9, 0.85, 0.8] + [p] * 4,
                                            "max": [1, 0.9, 0.85, 0.8] + [p] * 4})
  assert v.status == HOLDS and f"3 heads cover {pct} % if independent" in v.measured, v


def test_fig3_decline_states_the_first_median():
  """fig3-decline's text names the median at the first N (1.0 at N = 1), not the second."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  v = _judge_verdict("fig3-decline", {"n": ns, "median": [1.0, 0.95, 0.9, 0.85, 0.8, 0.79,
                                                          0.785, 0.78]})
  assert v.status == HOLDS and v.measured.startswith("median 1 at N = 1, 0.8 at 16"), v


def test_linear_in_l_names_what_is_missing():
  """linear_in_l needs 3 lengths; with 2 the Missing message says so (the reason a report shows
  for a not-testable row)."""
  from limits.claims.core import Missing
  from limits.claims.judges_distance import linear_in_l
  with pytest.raises(Missing, match=r"^at least 3 lengths$"):
    linear_in_l([64, 128], [1.0, 2.0])
  ok, _ = linear_in_l([64, 128, 256], [1.0, 2.0, 4.0])
  assert ok


@pytest.mark.parametrize("r2,k,ok", [
    (0.95, 1.0, True), (math.nextafter(0.95, 0.0), 1.0, False),  # R² at its threshold
    (0.99, 0.8, True), (0.99, math.nextafter(0.8, 0.0), False),  # the exponent's edges
    (0.99, 1.2, True), (0.99, math.nextafter(1.2, 2.0), False)])
def test_linear_in_l_thresholds_hold_at_their_edges(monkeypatch, r2, k, ok):
  """"Grows roughly linearly": R² ≥ 0.95 and the exponent in [0.8, 1.2], each edge included
  and one float beyond it excluded. No data gives a straight-line R² of exactly 0.95 in
  floating point, so the fit and the slope are
  replaced by their values here (the fits themselves: tests/test_stats.py
  `test_loglog_slope_and_the_criteria_fits`). Kills `r2 >= LINEAR_R2` → `>`
  (judges_distance.linear_in_l), the twelfth session's one claims survivor not killed."""
  from limits.claims import judges_distance as jd
  monkeypatch.setattr(jd, "linear_r2", lambda ls, ys: r2)
  monkeypatch.setattr(jd, "loglog_slope", lambda ls, ys: k)
  got, text = jd.linear_in_l([64, 128, 256], [1.0, 2.0, 4.0])
  assert got is ok, text


def test_assessment_labels_for_a_single_reading_and_a_not_testable_primary():
  """assess: a claim without ambiguities is labelled "single reading" (robust); a primary
  reading that is not testable and gives no reason is labelled "not testable", and the
  excluded combinations are still reported with it (not dropped to None)."""
  single = Claim(id="t1", kind="theorem", where="here", words="w", setting="s", step="step",
                 criterion="c", judge=lambda s, r: Verdict(HOLDS))
  res = assessment.assess(single, {})
  assert (res.verdict, res.label, res.robust, res.excluded) == (HOLDS, "single reading", True, ())
  untestable = Claim(id="t2", kind="theorem", where="here", words="w", setting="s",
                     step="step", criterion="c", judge=lambda s, r: Verdict(NOT_TESTABLE),
                     readings=(Reading("AMBIG-A", (("a1", "A one"), ("a2", "A two"))),),
                     excluded=(("AMBIG-A", "a2", "not what the paper means"),))
  res = assessment.assess(untestable, {})
  assert (res.verdict, res.label, res.robust) == (NOT_TESTABLE, "not testable", None)
  assert len(res.excluded) == 1 and res.excluded[0][1] == "AMBIG-A a2: not what the paper means"


@pytest.mark.parametrize("upper, status", [(0.8, HOLDS), (0.8 + 2e-12, FAILS)])
def test_upper_tracking_gap_of_exactly_a_tenth(upper, status):
  """_tracks: the bound of the top head may be up to 0.10 above its N_s/N, with 1e-12 slack for
  the float difference (0.8 − 0.7 = 0.1000000000000001 holds; `TRACK_TOL - 1e-12` fails it);
  2e-12 beyond fails."""
  s = {"per_head": [{"n": 4, "frac": 0.7, "lower": 0, "upper": upper, "upper_printed": 0.95}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == status, v


def test_upper_tracking_names_the_vacuous_parts():
  """_tracks' texts: N = 1 (decided by definition) and a maximum >= 0.90 (cannot fail) are named
  in `vacuous` (N = 4 only, not N = 1); with no gap left the measured text says so; when nothing
  is decidable the Missing message lists every vacuous part joined by '; '."""
  from limits.claims.core import Missing
  s = {"per_head": [{"n": 1, "frac": 1.0, "lower": 0, "upper": 1.0, "upper_printed": 0.95},
                    {"n": 4, "frac": 0.95, "lower": 0, "upper": 0.97, "upper_printed": 0.97}],
       "heads": 2, "windows": 1}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == HOLDS and v.sample == "2 heads, 1 window(s)"
  assert v.measured == ("no N with max N_s/N < 0.90; 0 of 1 decidable (head, N) cases above the "
                        "bound"), v.measured
  assert v.vacuous.startswith("N = 1: N_s/N = 1 by definition and ξ = 0, so the bound is "), v
  assert "; 0.10 above the maximum at N = 4: maximum N_s/N ≥ 0.90 and the bound" in v.vacuous
  low = {"per_head": [{"n": 4, "frac": 0.3, "lower": 0, "upper": 0.7, "upper_printed": 0.95}]}
  with pytest.raises(Missing, match=r"\(cannot hold\); above the bound: 1 of 1 \(head, N\)"):
    C.judge_fig3_upper_derived(low, {})


def test_fig3_band_states_the_median_range():
  """fig3-band's measured text: the range of the head medians at N >= 16 (0.78–0.8)."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  med = [1, 0.9, 0.85, 0.8, 0.8, 0.79, 0.78, 0.8]
  v = _judge_verdict("fig3-band", {"n": ns, "median": med, "max": med})
  assert v.status == HOLDS and v.measured == "median over heads 0.78–0.8 for N ≥ 16", v


def _e_rows(e_of_l, nl_of_l, n):
  return [{"L": L, "N": n, "expected_mean": e_of_l(L), "expected_nl_mean": nl_of_l(L),
           "gap_mean": 0.0} for L in (64, 128, 256, 512)]


def test_fig2a_expected_derived_reads_ambig3_at_the_fitted_n():
  """judge_fig2a_expected_derived: E against "linear in L" at N = 5 when the grid has it (not the
  first N), from `expected_nl_mean` under AMBIG-3 = L and `expected_mean` otherwise, with the
  local/global split read from each kind's own rows. At N = 5 E is linear (0.01 L) and the
  L-inclusive E quadratic; at N = 1 the other way round."""
  lin, quad = (lambda L: 0.01 * L), (lambda L: 1e-4 * L * L)
  rows = _e_rows(quad, lin, 1) + _e_rows(lin, quad, 5)
  s = {"rows": rows, "by_layer_kind": {"global": {"rows": _e_rows(lin, quad, 5), "heads": 2}}}
  v = C.judge_fig2a_expected_derived(s, {"AMBIG-3": "other", "AMBIG-4": "main"})
  assert v.status == HOLDS, v
  assert "; global layers, 2 heads: " in v.measured, v.measured
  assert C.judge_fig2a_expected_derived(s, {"AMBIG-3": "L", "AMBIG-4": "main"}).status == FAILS


def test_fig2c_reads_the_printed_scan_by_default_over_several_lengths():
  """judge_fig2c with no AMBIG-18 in the reading uses the printed scan; several L sorted by
  value; an entry without its own alpha is read at the reading's α (its pass windows shown);
  an L where every evaluated N was rejected is named as not found. c = (100·4 + 200·8) /
  (100² + 200²) = 0.04, inside [0.03, 0.12]. The sample line names the KS power."""
  def entry(pvals, windows):
    return {"evaluated": {str(n): p for n, p in pvals.items()}, "windows": windows}

  scan = {"300": {"printed": entry({n: 0.001 for n in range(1, 9)}, [])},
          "200": {"printed": entry({n: (0.5 if n >= 8 else 0.001) for n in range(1, 11)},
                                   [[8, 10]])},
          "100": {"printed": entry({n: (0.5 if 4 <= n <= 6 else 0.001) for n in range(1, 8)},
                                   [[4, 6]])}}
  v = C.judge_fig2c({"critical_scan": scan, "heads": 144}, {"AMBIG-9": "0.01"})
  assert v.status == HOLDS, v
  assert v.measured == ("N_crit ≈ 0.04·L (L = 100: 4 (passes at N = 4–6); L = 200: 8); "
                        "not found at L = 300 (no pass for N ≤ 8)"), v.measured
  assert v.sample.startswith("KS on 144 per-head means per sample; smallest attainable p = ")


def test_fig2c_bracket_straddling_the_band_is_not_testable():
  """Only N = 1 (rejected) and N = 8 (passes) evaluated at L = 100: N_crit in [2, 8], i.e. c in
  [0.02, 0.08] across the band's lower edge 0.03: not testable, with that reason."""
  scan = {"100": {"printed": {"evaluated": {"1": 0.001, "8": 0.5}, "windows": [[8, 8]]}}}
  v = C.judge_fig2c({"critical_scan": scan, "heads": 144}, {"AMBIG-9": "0.01"})
  assert v.status == NOT_TESTABLE
  assert v.reason == "the N_crit bracket left by the recorded p-values straddles the band edge"
  assert v.measured.startswith("N_crit ≈ 0.02–0.08·L (L = 100: 2–8")
  assert v.sample.startswith("KS on 144 per-head means per sample; smallest attainable p = ")


def test_fig3_decline_flat_medians_fail_without_a_slope_ratio():
  """Medians flat at 0.8 over every N: no decline (fails), and the slope before the knee is 0,
  so the ratio after/before is shown as '—' (not a division by zero)."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  v = _judge_verdict("fig3-decline", {"n": ns, "median": [0.8] * 8})
  assert v.status == FAILS and v.measured.endswith("slope ratio after/before —"), v


def test_fig2b_tightens_reads_the_largest_l_only():
  """fig2b-tightens compares d_max/d̃ at N = 20 and the largest N at the largest L (128: 2 then
  1.5, tightens); the rows at L = 64 (1 then 5) must not enter either series."""
  rows = [{"L": 64, "N": 20, "d_sum_mean": 2.0, "dmax_sum_mean": 2.0},
          {"L": 64, "N": 40, "d_sum_mean": 2.0, "dmax_sum_mean": 10.0},
          {"L": 128, "N": 20, "d_sum_mean": 1.0, "dmax_sum_mean": 2.0},
          {"L": 128, "N": 40, "d_sum_mean": 1.0, "dmax_sum_mean": 1.5}]
  v = C.judge_fig2b_tightens({"rows": rows}, {"AMBIG-1": "sum"})
  assert v.status == HOLDS and v.measured == "d_max/d̃ N = 20: 2, N = 40: 1.5", v


def test_fig4_inverse_t_names_the_epsilons_that_cannot_follow():
  """ε = 10: g ≤ √2/10 = 0.141 at every T, but a T^−0.75 rise from g = 0.1 at T = 0.05 down to
  T = 0.01 would need 0.334: no ε left, and the Missing reason names that ε."""
  from limits.claims.core import Missing
  with pytest.raises(Missing, match=r"^an ε whose curve could follow 1/T \(ε = 10: a 1/T trend "
                                    r"is impossible"):
    C.judge_fig4_inverse_t({"T": [0.01, 0.05, 1.0], "g": {"10": [0.1, 0.1, 0.1]}}, {})


@pytest.mark.parametrize("shares, status", [([0.2, 0.5], HOLDS), ([0.2, 0.49], FAILS)])
def test_attention_sinks_at_every_length(shares, status):
  """judge_attention_sinks: holds iff at every L some layer has a sink share >= 0.5 (both sides
  of 0.5 at L = 128), and the measured text counts such layers per L and lists the last L's
  shares."""
  s = {"sinks": {"eps": 0.3, "by_L": [{"L": 64, "share_by_layer": [0.75, 0.5, 0.0]},
                                      {"L": 128, "share_by_layer": shares, "pairs": 1200}]}}
  v = C.judge_attention_sinks(s, {})
  k = 1 if status == HOLDS else 0
  assert v.status == status
  assert v.measured == (f"layers with Sink_ε ≥ 0.5: L = 64: 2 of 3, L = 128: {k} of 2; at "
                        f"L = 128 by layer 0.20 {shares[1]:.2f}"), v.measured
  assert v.sample == "ε = 0.3, 1,200 head-windows per L"


def test_lemma1_model_reports_the_per_kind_slopes():
  """judge_lemma1_model: not testable (the lemma's bounded-logit hypothesis), and the text shows
  the slopes, with each layer kind's max and min slopes between consecutive lengths."""
  part = {"rows": [{}], "heads": 3, "windows": [4],
          "slopes_between": [{"L": [64, 128], "loglog_slope_median_max_aL": 0.5,
                              "loglog_slope_median_min_aL": -0.25}]}
  v = C.judge_lemma1_model({"lemma1_slopes": {"max": 0.5}, "by_layer_kind": {"local": part}}, {})
  assert v.status == NOT_TESTABLE
  assert v.measured == ("max: 0.5; local layers (W = 4), 3 heads: log-log slopes of the median "
                        "max/min α·n_t, 64→128: max 0.5, min -0.25"), v.measured


# ---------------------------------------------------------------------------------------------
# Survivors of a seeded sample of the rows group (tenth session, seed 10).

def test_lemma2_all_rows_is_inf_where_float32_overflows():
  """gradient.rows.lemma2_all_rows keeps the rows' dtype: for float32 rows, (e^{r/T} +
  e^{2r/T})/(T·n) is inf where it exceeds float32's range (r = 50 at T = 1: e^100 ~ 2.7e43),
  finite and equal to the closed form elsewhere (`.astype(rows.dtype)` -> `.astype(None)`
  returns float64 and a finite 2.7e43)."""
  from limits.gradient import rows as gradient_rows
  rows = np.array([[0.0, 50.0, 1.0], [0.0, 1.0, 0.5]], np.float32)
  mask = np.ones(rows.shape, bool)
  got = gradient_rows.lemma2_all_rows(rows, mask, [1.0])
  assert got.dtype == np.float32 and got[0, 0] == np.inf
  assert got[1, 0] == pytest.approx((math.e + math.e ** 2) / 3, rel=1e-6)


def test_min_pairwise_distance_excludes_duplicates_at_the_origin():
  """separability.rows: two zero vectors are duplicates (d² = 0 <= 16·eps·(0 + 0), the `<=` at
  its boundary; `<` would count them and give δ = 0); the next pair is at distance 1, and two
  zero vectors alone leave no pair (+inf). A pair 0.5 apart stays a pair."""
  from limits.separability.rows import min_pairwise_distance
  x = jnp.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
  assert float(min_pairwise_distance(x)) == 1.0
  assert float(min_pairwise_distance(x[:2])) == np.inf
  assert float(min_pairwise_distance(jnp.array([[0.0, 0.0], [0.5, 0.0]]))) == 0.5


def test_fig2c_rejected_everywhere_is_not_testable_with_the_power_line():
  """Every evaluated N rejected at every L: not testable, with that reason and the KS power line
  (the sample of this return was dropped by a survivor)."""
  scan = {"100": {"printed": {"evaluated": {"1": 0.001, "8": 0.001}, "windows": []}}}
  v = C.judge_fig2c({"critical_scan": scan, "heads": 144}, {"AMBIG-9": "0.01"})
  assert v.status == NOT_TESTABLE
  assert v.reason == ("the KS test rejected at every N searched (α = 0.01): 100 (no pass for "
                      "N ≤ 8)")
  assert v.sample.startswith("KS on 144 per-head means per sample; smallest attainable p = ")


# Survivors of a fresh seeded sample of the claims group (eleventh session, seed 11, 60 of
# 2,518): `python tools/mutation_run.py --groups claims --children 1 --sample 60 --seed 11`.

def test_saturation_slopes_from_a_first_n_other_than_one():
  """criteria.saturation's log-log slopes against the closed form when the grid starts at
  N = 2 (every other test starts at N = 1, where log(knee/n0) = log(knee·n0)): y = N^0.5 up to
  the knee 16, then N^0.1 · 16^0.4."""
  from limits.claims.criteria import saturation
  ns = [2, 4, 16, 64]
  ys = [n ** 0.5 if n <= 16 else n ** 0.1 * 16 ** 0.4 for n in ns]
  sat = saturation(ns, ys, 16)
  assert sat["before"] == pytest.approx(0.5, rel=1e-12)
  assert sat["after"] == pytest.approx(0.1, rel=1e-12)
  assert sat["change_before"] == pytest.approx(math.sqrt(8) - 1, rel=1e-12)
  assert (sat["first"], sat["last"]) == (2, 64)


def test_distance_sample_line_joins_its_parts_with_commas():
  """The sample line of a distance judge names heads, windows and rows, joined by ', '."""
  s = {"heads": 12, "windows": 2, "rows": [{"L": 64, "N": 4, "violations_sum": 0,
                                            "rows_checked": 1500}]}
  v = C.judge_thm1_bound(s, {"AMBIG-1": "sum"})
  assert v.status == HOLDS and v.measured == "0 violations in 1,500 rows", v
  assert v.sample == "12 heads, 2 window(s) per L, 1,500 (head, query) rows", v.sample


def test_fig2c_hides_the_pass_windows_of_a_scan_run_at_another_alpha():
  """The pass windows a scan recorded belong to its own α: judged at AMBIG-9 = 0.01, an entry
  scanned at α = 0.05 is read from its p-values (N_crit = 4 at both levels here) and its windows
  are not shown; the same entry at α = 0.01 shows them."""
  pvals = {str(n): (0.5 if 4 <= n <= 6 else 0.001) for n in range(1, 8)}

  def summary(alpha):
    entry = {"alpha": alpha, "evaluated": pvals, "windows": [[4, 6]]}
    return {"critical_scan": {"100": {"printed": entry}}, "heads": 144}

  r = {"AMBIG-9": "0.01"}
  same = C.judge_fig2c(summary(0.01), r)
  assert same.status == HOLDS and "(passes at N = 4–6)" in same.measured, same
  other = C.judge_fig2c(summary(0.05), r)
  assert other.status == HOLDS and other.measured.startswith("N_crit ≈ 0.04·L (L = 100: 4)"), other
  assert "passes at" not in other.measured, other


def test_fig2c_default_level_is_0_01():
  """Without AMBIG-9 in the reading, fig2c judges at α = 0.01: a p-value of 0.02 at N = 3 then
  passes (at 0.05 it would not), so N_crit = 3, c = 0.03, the band's lower edge."""
  pvals = {"1": 0.001, "2": 0.001, "3": 0.02, "4": 0.5, "5": 0.5}
  s = {"critical_scan": {"100": {"printed": {"evaluated": pvals}}}, "heads": 144}
  v = C.judge_fig2c(s, {})
  assert v.status == HOLDS and v.measured.startswith("N_crit ≈ 0.03·L (L = 100: 3"), v
  assert C.judge_fig2c(s, {"AMBIG-9": "0.05"}).measured.startswith("N_crit ≈ 0.04·L"), v


def test_separability_sample_line_names_the_point_sets():
  """fig3-band's sample line: heads, point sets per head and windows, joined by ', '."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  s = {"n": ns, "median": [1.0, 0.95, 0.9, 0.85, 0.8, 0.79, 0.785, 0.78], "heads": 12,
       "samples": 50, "windows": 3}
  v = C.judge_fig3_band(s, {})
  assert v.status == HOLDS and v.sample == "12 heads, 50 point sets per head, 3 window(s)", v


def test_upper_tracking_checks_every_head_after_one_below_the_floor():
  """_tracks counts every head at an N: a first head at or below the bound's floor is skipped,
  and the next one, 0.2 above its derived bound, is still a violation (`continue` -> `break`
  would stop at the first); the vacuous text counts the one skipped case of the two (2 − 1)."""
  s = {"per_head": [{"n": 4, "frac": 0.5, "lower": 0, "upper": 0.7, "upper_printed": 0.95},
                    {"n": 4, "frac": 0.85, "lower": 0, "upper": 0.65, "upper_printed": 0.95}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == FAILS and v.measured.endswith("; 1 of 1 decidable (head, N) cases above "
                                                   "the bound"), v
  assert "above the bound: 1 of 2 (head, N) cases at N > 1 have N_s/N ≤ 0.607" in v.vacuous, v


def test_fig3_decline_states_the_slope_ratio():
  """fig3-decline's text ends with the ratio of the log-log slopes after/before N = 16, here
  from closed forms: median N^−0.1 up to 16, then ∝ N^−0.02 (ratio 0.02/0.1 = 0.2)."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  med = [n ** -0.1 if n <= 16 else 16 ** -0.08 * n ** -0.02 for n in ns]
  v = _judge_verdict("fig3-decline", {"n": ns, "median": med})
  assert v.status == HOLDS, v
  ratio = float(v.measured.rsplit("slope ratio after/before ", 1)[1])
  assert ratio == pytest.approx(0.2, rel=1e-3), v.measured


def test_cor1_band_sample_line_is_empty_without_a_query_count():
  """cor1-band: the sample line states the queries checked when recorded, and is empty (no
  placeholder text) when they are not."""
  from limits.claims.judges_vanishing import judge_cor1_band
  assert judge_cor1_band({"band_violations": 0, "band_queries": 12345}, {}).sample == \
      "12,345 queries"
  v = judge_cor1_band({"band_violations": 2}, {})
  assert v.status == FAILS and v.sample == "" and v.measured == "2 queries outside the band", v


def test_sphere_band_is_fig3_band_on_the_sphere_data():
  """judge_sphere_band applies fig3-band's test to the sphere summary: medians at N >= 16 in
  [0.70, 0.85] hold, one at 0.9 fails (no test called this judge before)."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  inside = {"n": ns, "median": [1.0, 0.95, 0.9, 0.85, 0.8, 0.79, 0.785, 0.78]}
  v = C.judge_sphere_band(inside, {})
  assert v.status == HOLDS and v.measured == "median over heads 0.78–0.8 for N ≥ 16", v
  above = {"n": ns, "median": [1.0, 0.95, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]}
  assert C.judge_sphere_band(above, {}).status == FAILS


# Survivors of a second fresh sample of the claims group, after the tests above (eleventh
# session, seed 12, 100 of 2,518): `... --groups claims --sample 100 --seed 12`.

def test_assessment_lists_every_reading_it_could_not_compute():
  """assess: when no admissible reading flips the verdict and two cannot be computed, the label
  lists both reasons, sorted and joined by '; '."""
  def judge(s, r):
    return {"a1": Verdict(HOLDS), "a2": Verdict(NOT_TESTABLE, reason="no x"),
            "a3": Verdict(NOT_TESTABLE, reason="no y")}[r["AMBIG-A"]]
  claim = Claim(id="t3", kind="theorem", where="here", words="w", setting="s", step="step",
                criterion="c", judge=judge,
                readings=(Reading("AMBIG-A", (("a1", "one"), ("a2", "two"), ("a3", "three"))),))
  res = assessment.assess(claim, {})
  assert res.verdict == HOLDS
  assert res.label == ("same under every computable admissible reading (1 of 3; not computable: "
                       "no x; no y)"), res.label


@pytest.mark.parametrize("change, moved", [(0.1, True), (0.1 * (1 - 2e-12), False)])
def test_saturates_needs_a_tenth_with_a_1e12_slack(change, moved):
  """criteria.saturates: the first move must be >= 10 % (relative slack 1e-12 below): exactly
  0.1 counts, 2e-12 below does not (`min_change / (1 - 1e-12)` rejects exactly 0.1)."""
  from limits.claims.criteria import saturates
  assert saturates({"change_before": change, "before": 1.0, "after": 0.1}, +1) is moved


def test_saturation_needs_a_positive_value_at_the_knee():
  """criteria.saturation: a value <= 0 at the knee (first and last positive) is Missing with
  its one line, not a math domain error of log(0)."""
  from limits.claims.core import Missing
  from limits.claims.criteria import saturation
  with pytest.raises(Missing, match="positive values at the first N, the knee and the last N"):
    saturation([1, 16, 64], [1.0, 0.0, 2.0], 16)


def _distance_rows(d_by_n, L=1024.0):
  return [{"L": L, "N": n, "d_sum_mean": d, "d_norm_mean": d, "dmax_sum_mean": 2 * d,
           "dmax_norm_mean": 2 * d, "expected_printed_output_mean": e,
           "expected_mean": e, "rows_checked": 10} for n, (d, e) in d_by_n.items()]


def test_fig2b_converge_text_names_the_first_and_last_n_and_the_sample():
  """_converge's text: the gap at the first N (1) and the last N (100); the sample line of
  the converge and plateau judges names the heads."""
  rows = _distance_rows({1: (1.0, 0.5), 20: (4.4, 4.0), 100: (5.1, 5.0)})
  s = {"rows": rows, "heads": 12}
  v = C.judge_fig2b_converge_printed(s, {})
  assert v.status == HOLDS, v
  assert v.measured == "relative gap 0.5 at N = 1, 0.01961 at N = 100", v.measured
  assert v.sample == "12 heads", v.sample
  p = C.judge_fig2b_plateau(s, {})
  assert p.status == HOLDS and p.sample == "12 heads", p


def test_fig2a_true_states_its_sample():
  """_linear_verdict (fig2a-true) keeps the sample line."""
  rows = [{"L": L, "N": 5, "d_sum_mean": 0.01 * L} for L in (64, 128, 256)]
  v = C.judge_fig2a_true({"rows": rows, "heads": 9}, {})
  assert v.status == HOLDS and v.sample == "9 heads", v
  assert v.measured == "log-log exponent 1, straight-line R² 1", v


def test_fig2b_tightens_with_a_zero_distance_at_the_knee():
  """fig2b-tightens: d̃ = 0 at N = 20 gives the ratio inf there (not a ZeroDivisionError), and a
  finite ratio at the largest N is below it: tightens."""
  rows = [{"L": 64, "N": 20, "d_sum_mean": 0.0, "dmax_sum_mean": 2.0},
          {"L": 64, "N": 40, "d_sum_mean": 1.0, "dmax_sum_mean": 1.5}]
  v = C.judge_fig2b_tightens({"rows": rows}, {})
  assert v.status == HOLDS and v.measured == "d_max/d̃ N = 20: inf, N = 40: 1.5", v


def test_fig2c_states_the_default_scan_range():
  """fig2c's text names the scan range "scan N = 1…⌈L/4⌉" when every L used the default N_max."""
  pvals = {str(n): (0.5 if n >= 4 else 0.001) for n in range(1, 26)}
  s = {"critical_scan": {"100": {"printed": {"evaluated": pvals, "n_max": 25}}}, "heads": 144}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.01"})
  assert v.status == HOLDS and v.measured == "N_crit ≈ 0.04·L (L = 100: 4); scan N = 1…⌈L/4⌉", v


def test_fig4_collapse_with_exactly_two_temperatures_and_its_texts():
  """fig4-collapse needs 2 temperatures >= 1 (exactly 2 suffice: T = 1 and 100); its text ends
  with " decades"; a grid that stops below 100·T0 is Missing with the temperature it lacks."""
  from limits.claims.core import Missing
  from limits.claims.judges_gradient import judge_fig4_collapse
  s = {"T": [0.1, 1.0, 100.0], "g": {"0.1": [50.0, 10.0, 0.1], "1": [40.0, 12.0, 0.12]}}
  v = judge_fig4_collapse(s, {})
  assert v.status == HOLDS and v.measured.endswith(" decades"), v
  assert v.measured.startswith("spread 0.07918 decades; drop ε = "), v.measured
  with pytest.raises(Missing, match=r"^a temperature up to 100 in its grid \(two decades above "
                                    r"1\)$"):
    judge_fig4_collapse({"T": [1.0, 10.0], "g": {"1": [1.0, 0.1]}}, {})


def test_lemma2_states_the_pairs_checked():
  from limits.claims.judges_gradient import judge_lemma2
  v = judge_lemma2({"lemma2_exceed": 0, "lemma2_rows": 1234}, {})
  assert v.status == HOLDS and v.sample == "1,234 (row, T) pairs", v
  assert judge_lemma2({"lemma2_exceed": 1}, {}).sample == ""


def test_fig3_decline_states_the_last_median():
  """fig3-decline's text names the median at the largest N (0.78 at N = 128), not the one
  before it."""
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  v = _judge_verdict("fig3-decline", {"n": ns, "median": [1.0, 0.95, 0.9, 0.85, 0.8, 0.79,
                                                          0.785, 0.78]})
  assert "0.8 at 16, 0.78 at N = 128; slope ratio" in v.measured, v


def test_sphere_cap_interval_is_the_worst_heads_own():
  """sphere-cap's interval uses the standard error of the head whose N_s/N is the worst one
  (0.8, stderr 0.01: ± 0.0196), not another head's (0.5, stderr 0.1); a per-head row without
  "frac" is skipped, not a TypeError."""
  s = {"n": [1, 16, 32], "max": [1.0, 0.8, 0.7],
       "per_head": [{"n": 16, "stderr": 0.05},
                    {"n": 16, "frac": 0.5, "stderr": 0.1},
                    {"n": 16, "frac": 0.8, "stderr": 0.01}]}
  v = C.judge_sphere_cap(s, {})
  assert v.status == HOLDS
  assert v.measured == ("largest head mean N_s/N for N ≥ 16: 0.8 (95 % CI ± 0.0196 from the "
                        "Monte Carlo standard error)"), v.measured


def test_thm2_lower_counts_a_bound_of_exactly_zero_as_clipped():
  """thm2-lower: a lower bound of exactly 0 is clipped (vacuous) like a negative one: 1 of 2."""
  s = {"per_head": [{"n": 4, "frac": 0.8, "lower": 0.0, "upper": 1, "upper_printed": 1},
                    {"n": 8, "frac": 0.8, "lower": 0.5, "upper": 1, "upper_printed": 1}]}
  v = C.judge_thm2_lower(s, {})
  assert v.status == HOLDS
  assert v.measured == "0 of 2 (head, N) cases below the bound; 50 % of bounds clipped to 0", v


def test_lemma1_bounded_without_a_checked_count_and_its_missing_line():
  """lemma1-bounded: an F without a "checked" count still gives its verdict (no sample line),
  and with no F recorded the Missing line names the key pattern lemma1.<F>.violations."""
  from limits.claims.core import Missing
  from limits.claims.judges_vanishing import judge_lemma1_bounded
  v = judge_lemma1_bounded({"lemma1": {"softmax": {"violations": 0, "C2": 2.0}}}, {})
  assert v.status == HOLDS and v.sample == "" and v.measured == "softmax: C2 = 2, 0 violations"
  with pytest.raises(Missing, match=r"^lemma1\.<F>\.violations$"):
    judge_lemma1_bounded({"lemma1": {"softmax": {"C2": 2.0}}}, {})


# Survivors of a second fresh sample of the rows group (eleventh session, seed 12, 40 of 1,628).

def test_distance_top_n_size_that_is_not_an_integer_names_the_value():
  """cumulative_distance with n = "abc": one line naming the value and what is allowed."""
  from limits import distance
  a, x = jnp.full((4,), 0.25), jnp.eye(4)
  with pytest.raises(LimitsError, match=r"^top-N size n='abc' must be a positive integer$"):
    distance.cumulative_distance(a, x, "abc")


def test_plain_softmax_is_only_the_registry_softmax_without_parameters():
  """gradient.rows._plain_softmax: the registry's softmax is; a function that is merely named
  softmax and has no ``params`` is not (False, not an AttributeError)."""
  from limits import normalizers
  from limits.gradient.rows import _plain_softmax

  def softmax(z):  # noqa: ARG001
    return z

  assert _plain_softmax(normalizers.get("softmax"))
  assert not _plain_softmax(softmax)


def test_softmax_inf_against_numpy_with_masked_entries_and_an_empty_row():
  """gradient.rows._softmax_inf: softmax over the visible (finite) entries against numpy
  (float64, rel 1e-14), 0 on the −inf entries, and an all −inf row gives zeros."""
  from limits.gradient.rows import _softmax_inf
  z = np.array([[0.5, -1.0, 2.0, -np.inf], [-np.inf] * 4])
  with jax.enable_x64(True):
    got = np.asarray(_softmax_inf(jnp.asarray(z)))
  e = np.exp(z[0, :3] - 2.0)
  np.testing.assert_allclose(got[0, :3], e / e.sum(), rtol=1e-14)
  assert got[0, 3] == 0.0 and (got[1] == 0.0).all()


def test_counterexample_exceeds_only_strictly_and_reports_its_error():
  """gradient.rows.counterexample: with violation rtol 0 the tied-top-two norm 1/(2T) equals the
  tight bound and does not exceed it (`>`), while it exceeds the printed 1/(4T); the numeric
  check reports a relative error within its 1e3 ulps."""
  from limits.gradient.rows import counterexample
  T = 0.25
  with jax.enable_x64(True):
    c = counterexample(T, 1 / (4 * T), 1 / (2 * T), 0.0, np.float64)
  assert c["norm"] == 2.0 and c["exceeds_paper"] and not c["exceeds_tight"]
  assert 0 <= c["numeric_check"]["rel_err"] <= 1e3 * np.finfo(np.float64).eps
  assert c["numeric_check"]["ok"]


def test_row_range_and_count_keep_the_rows_dtype():
  """gradient.rows.row_range_and_count: r and n in the rows' dtype (float32 rows: no float64
  copy of a 1.1M-row count), with the visible range and count per row."""
  from limits.gradient.rows import row_range_and_count
  rows = np.array([[0.0, 3.0, -1.0], [2.0, 5.0, 9.0]], np.float32)
  mask = np.array([[True, True, False], [False, False, False]])
  with np.errstate(over="ignore"):  # the empty row's span is −big − big before it is set to 0
    r, n = row_range_and_count(rows, mask)
  assert r.dtype == n.dtype == np.float32
  assert r[:, 0].tolist() == [3.0, 0.0] and n[:, 0].tolist() == [2.0, 1.0]


def test_min_pairwise_distance_float32_duplicates_by_float32_rounding():
  """separability.rows: the duplicate threshold is 16 eps of the points' own dtype. Two float32
  points 1e-3 apart at norm 1 have a Gram-identity d² of 1e-6 ± float32 rounding (~2e-7),
  below 16·eps32·2 = 3.8e-6: duplicates, and δ is the next pair's distance (√2). With eps of
  float64 (`jnp.finfo(None)` with x64 on, where the default float is not the points' dtype)
  they would count as a pair 1e-3 apart."""
  from limits.separability.rows import min_pairwise_distance
  pts = [[1.0, 0.0], [1.0 + 1e-3, 0.0], [0.0, 1.0]]
  for x64 in (False, True):
    with jax.enable_x64(x64):
      x = jnp.array(pts, jnp.float32)
      assert float(min_pairwise_distance(x)) == pytest.approx(math.sqrt(2), rel=1e-3), x64


def test_row_norms_secular_forms_no_jacobian(monkeypatch):
  """gradient.rows.row_norms(how="secular") is the O(L) closed form: it never builds the L×L
  Jacobian (``jacobian`` patched to fail) and equals numpy's SVD norm (float64, rel 1e-12)."""
  from limits.gradient import rows as gradient_rows

  def no_jacobian(*args, **kwargs):
    raise AssertionError("the secular path built an L x L Jacobian")

  monkeypatch.setattr(gradient_rows, "jacobian", no_jacobian)
  T, logits = 0.5, np.array([[0.3, -0.2, 1.0, 0.0]])
  with jax.enable_x64(True):
    got = float(gradient_rows.row_norms("softmax", {}, jnp.asarray(logits), T, how="secular")[0])
  a = np.exp(logits[0] / T - (logits[0] / T).max())
  a /= a.sum()
  assert got == pytest.approx(np.linalg.norm((np.diag(a) - np.outer(a, a)) / T, 2), rel=1e-12)


@pytest.mark.parametrize("stderr,status", [("nan", FAILS), ("inf", FAILS), (0.02, HOLDS),
                                           (0.01, FAILS)])
def test_thm2_lower_reads_a_non_finite_stderr_as_no_margin(stderr, status):
  """thm2-lower (claims seed-13 survivor, ``else 0.0`` → ``else 1.0``): a head whose Monte Carlo
  standard error is not finite gets no margin (0.45 < 0.5: below its bound), not a margin of
  3 × 1; a finite one gets its 3 standard errors, on both sides of the edge (0.45 vs
  0.5 − 3·0.02 = 0.44: holds; 0.5 − 3·0.01 = 0.47: fails)."""
  s = {"per_head": [{"n": 4, "frac": 0.45, "lower": 0.5, "stderr": stderr}]}
  assert C.judge_thm2_lower(s, {}).status == status


def test_fig4_collapse_drop_ends_at_two_decades_not_at_the_grid_end():
  """fig4-collapse (claims seed-13 survivor, the end's ``key=lambda …`` → ``key=None``): the drop
  is measured from the first T ≥ 1 to 100 times it, not to the grid's last T. Here the curves
  fall exactly 2 decades to T = 100 (holds) and 4 decades to T = 10⁴, which is outside
  2 ± 0.5 (the grid's last T would fail it)."""
  from limits.claims.judges_gradient import judge_fig4_collapse
  s = {"T": [1.0, 10.0, 100.0, 1e4],
       "g": {"0.1": [10.0, 1.0, 0.1, 1e-3], "1": [10.0, 1.0, 0.1, 1e-3]}}
  v = judge_fig4_collapse(s, {})
  assert v.status == HOLDS, v
  assert v.measured == "spread 0 decades; drop ε = 0.1: 2, ε = 1: 2 decades", v.measured


def test_fig2a_expected_printed_fits_only_the_rows_at_n_5():
  """fig2a-expected, printed E (claims seed-13 survivor, ``N=n`` dropped from its series): the
  fit takes the rows at N = 5 only. Here E grows linearly at N = 5 and is flat at N = 20; with
  both N in the series the L values repeat and the fit is not the N = 5 curve's."""
  rows = ([{"L": L, "N": 5, "expected_printed_output_mean": 0.01 * L} for L in (64, 128, 256)]
          + [{"L": L, "N": 20, "expected_printed_output_mean": 3.0} for L in (64, 128, 256)])
  v = C.judge_fig2a_expected_printed({"rows": rows, "heads": 9}, {})
  assert v.status == HOLDS, v
  assert v.measured == "log-log exponent 1, straight-line R² 1", v.measured


def test_tracks_counts_the_floor_cases_at_n_above_1_only():
  """fig3-upper, derived bound (claims seed-13 survivor, ``n != 1.0`` → ``n != 2.0`` in the
  count of cases at N > 1): of the two N = 2 cases one is at or below the bound's floor
  e^(−1/2) (cannot fail), so the note says 1 of 2; the N = 1 case is not counted."""
  s = {"per_head": [{"n": 1, "frac": 1.0, "upper": 1.0},
                    {"n": 2, "frac": 0.5, "upper": 0.9},
                    {"n": 2, "frac": 0.85, "upper": 0.9}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == HOLDS, v
  assert ("above the bound: 1 of 2 (head, N) cases at N > 1 have N_s/N ≤ 0.607, the bound's "
          "floor at M = 1 (cannot fail)") in v.vacuous, v.vacuous


def test_missing_lines_name_what_is_missing():
  """The Missing lines a report prints for a step without the data (claims seed-13 survivors:
  the texts replaced or upper-cased): fig2b-tightens without N = 20, attention-sinks with an
  empty per-L list, fig4-inverse-T with one temperature below 0.1."""
  from limits.claims.core import Missing
  from limits.claims.judges_distance import judge_fig2b_tightens
  from limits.claims.judges_gradient import judge_fig4_inverse_t
  from limits.claims.judges_vanishing import judge_attention_sinks
  rows = [{"L": 64, "N": n, "d_sum_mean": 1.0, "dmax_sum_mean": 2.0} for n in (1, 5, 10)]
  with pytest.raises(Missing, match=r"^N = 20 and a larger N$"):
    judge_fig2b_tightens({"rows": rows}, {})
  with pytest.raises(Missing, match=r"^sinks\.by_L$"):
    judge_attention_sinks({"sinks": {"by_L": []}}, {})
  with pytest.raises(Missing, match=r"^2 temperatures below T = 0\.1$"):
    judge_fig4_inverse_t({"T": [0.05, 1.0], "g": {"0.1": [1.0, 0.1]}}, {})


def test_fig2c_sample_lines_and_the_above_band_text():
  """fig2c (claims seed-13 survivors: the sample line dropped in the not-testable and the
  above-the-band returns, "passes: " upper-cased, the searched N's default): with 4 heads the
  KS test cannot reach α = 0.01 and the verdict says so, with its power line; with 144 heads an
  L with no pass up to N_max = 8 ≥ 0.12·32 is above the band, and the L that passes is listed
  after "passes: "; an L whose scan evaluated nothing is "no pass for N ≤ 0"."""
  low = {"critical_scan": {"64": {"printed": {"evaluated": {"1": 0.5}, "n_max": 16}}},
         "heads": 4}
  v = C.judge_fig2c(low, {"AMBIG-9": "0.01"})
  assert v.status == NOT_TESTABLE, v
  assert v.sample.startswith("KS on 4 per-head means per sample; smallest attainable p = "), v
  never = {str(n): 0.001 for n in range(1, 9)}
  passes = {str(n): (0.5 if n >= 4 else 0.001) for n in range(1, 26)}
  s = {"critical_scan": {"32": {"printed": {"evaluated": never, "n_max": 8}},
                         "100": {"printed": {"evaluated": passes, "n_max": 25}}}, "heads": 144}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.01"})
  assert v.status == FAILS, v
  assert v.measured == ("above the band at L = 32 (no pass for N ≤ 8): N_crit/L > 0.12; "
                        "passes: L = 100: 4; scan N = 1…⌈L/4⌉"), v.measured
  assert v.sample.startswith("KS on 144 per-head means per sample; smallest attainable p = "), v
  empty = {"critical_scan": {"64": {"printed": {"evaluated": {}, "n_max": 16}}}, "heads": 144}
  v = C.judge_fig2c(empty, {"AMBIG-9": "0.01"})
  assert v.status == NOT_TESTABLE and v.reason.endswith(": 64 (no pass for N ≤ 0)"), v


def test_cor3_lemma2_and_plateau_texts():
  """Texts of three judges (claims seed-13 survivors): cor3-printed's sample line names the
  (row, T) pairs checked; lemma2's not-testable reason ends "it constrains nothing there";
  fig2b-plateau's change from N = 20 to the largest N is in per cent (1.0 → 1.1: +10 %)."""
  v = judge_cor3_printed({"T": [1.0], "counterexample_norm": [0.1], "data_pairs": 1234}, {})
  assert v.status == HOLDS and v.sample == "1,234 (row, T) pairs", v
  from limits.claims.judges_gradient import judge_lemma2
  v = judge_lemma2({"lemma2_exceed": 0, "lemma2_pairs": 10, "lemma2_finite": 2}, {})
  assert v.status == NOT_TESTABLE
  assert v.reason == ("the bound overflows to infinity on 8 of 10 (row, T) pairs: it "
                      "constrains nothing there"), v.reason
  rows = [{"L": 64, "N": n, "d_sum_mean": y} for n, y in ((1, 0.1), (20, 1.0), (100, 1.1))]
  v = C.judge_fig2b_plateau({"rows": rows}, {})
  assert " then +10 % to N = 100; " in v.measured, v.measured


def test_lemma1_model_kind_slopes_and_tracks_texts():
  """Joined lists in two judges' texts (claims seed-13 survivors: the ", " joiners replaced,
  ``far`` emptied): lemma1-model's per-kind slopes between consecutive L; fig3-upper's N where
  the maximum is ≥ 0.9 (two of them) and the N where the bound sits more than 0.10 above it."""
  part = {"rows": [{"L": 32}], "heads": 2, "windows": [8],
          "slopes_between": [{"L": [32, 64], "loglog_slope_median_max_aL": 0.5,
                              "loglog_slope_median_min_aL": -1.0},
                             {"L": [64, 128], "loglog_slope_median_max_aL": 0.25,
                              "loglog_slope_median_min_aL": -2.0}]}
  v = C.judge_lemma1_model({"lemma1_slopes": {"softmax": 0.1}, "by_layer_kind": {"local": part}},
                           {})
  assert v.measured == ("softmax: 0.1; local layers (W = 8), 2 heads: log-log slopes of the "
                        "median max/min α·n_t, 32→64: max 0.5, min -1, 64→128: max 0.25, "
                        "min -2"), v.measured
  s = {"per_head": [{"n": 2, "frac": 0.95, "upper": 1.0}, {"n": 4, "frac": 0.92, "upper": 1.0},
                    {"n": 8, "frac": 0.7, "upper": 0.85}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == FAILS, v
  assert v.measured == ("bound − max N_s/N up to 0.15 (> 0.10 at N = 8); 0 of 3 decidable "
                        "(head, N) cases above the bound"), v.measured
  assert v.vacuous.startswith("0.10 above the maximum at N = 2, 4: maximum N_s/N ≥ 0.90"), v


def test_fig4_collapse_scaled_labels_and_sphere_cap_row_without_n():
  """Two more claims seed-13 survivors: fig4-collapse's drop text under the scaled-logit
  reading (AMBIG-12) labels each ε in that reading's units (raw ε / √d_head) — the text must
  read d_head from the step, not from nothing; sphere-cap skips a per-head row without "n"
  (it is no N ≥ 16 row) instead of raising."""
  from limits.claims.judges_gradient import judge_fig4_collapse
  s = {"T": [2.0, 200.0], "d_head": 4, "g": {"0.1": [10.0, 0.1], "1": [10.0, 0.1]}}
  v = judge_fig4_collapse(s, {"AMBIG-12": "scaled"})
  assert v.status == HOLDS, v
  assert v.measured == ("spread 0 decades; drop ε = 0.05 (raw 0.1): 2, ε = 0.5 (raw 1): 2 "
                        "decades"), v.measured
  cap = {"n": [16], "max": [0.8], "per_head": [{"frac": 0.8, "stderr": 0.01},
                                               {"n": 16, "frac": 0.8, "stderr": 0.02}]}
  v = C.judge_sphere_cap(cap, {})
  assert v.status == HOLDS and "± 0.0392 from" in v.measured, v.measured


# Survivors of the fourth fresh sample of the claims group (seed 14, 100 of 2,518; examined in
# the twelfth session). Expected values written by hand from the judges' wording.

def test_reading_label_of_a_claim_without_and_with_ambiguities():
  """assess' per-reading labels: "single reading" for a claim without ambiguities (the label of
  its only row, not only the robustness column), "AMBIG-A A two" for one option."""
  single = Claim(id="t1", kind="theorem", where="here", words="w", setting="s", step="step",
                 criterion="c", judge=lambda s, r: Verdict(HOLDS))
  assert [label for label, _ in assessment.assess(single, {}).readings] == ["single reading"]
  two = Claim(id="t2", kind="theorem", where="here", words="w", setting="s", step="step",
              criterion="c", judge=lambda s, r: Verdict(HOLDS),
              readings=(Reading("AMBIG-A", (("a1", "A one"), ("a2", "A two"))),))
  assert [label for label, _ in assessment.assess(two, {}).readings] == ["AMBIG-A A one",
                                                                         "AMBIG-A A two"]


def test_fig2b_converge_reads_the_largest_l_only():
  """_converge_verdict takes d̃ at the largest L only (the L filter dropped mixes both lengths'
  rows into the N series): at L = 1024 the gap is 0.5 at N = 1 and 0.1/5.1 at N = 100 (holds);
  the rows at L = 512 (gap 0.9 at N = 100) must not enter."""
  rows = (_distance_rows({1: (1.0, 0.5), 100: (5.1, 5.0)})
          + _distance_rows({1: (2.0, 1.0), 100: (10.0, 1.0)}, L=512.0))
  v = C.judge_fig2b_converge_printed({"rows": rows}, {})
  assert v.status == HOLDS, v
  assert v.measured == "relative gap 0.5 at N = 1, 0.01961 at N = 100", v.measured
  rows = (_distance_rows({1: (1.0, 0.5), 100: (10.0, 1.0)})
          + _distance_rows({1: (1.0, 0.5), 100: (5.1, 5.0)}, L=512.0))
  v = C.judge_fig2b_converge_printed({"rows": rows}, {})
  assert v.status == FAILS and v.measured == "relative gap 0.5 at N = 1, 0.9 at N = 100", v


def test_fig2c_takes_the_recorded_critical_n_at_the_steps_own_alpha():
  """_critical_n: an entry that recorded critical_n at the asked α is exact (no p-values
  needed: N_crit = 5 at L = 100); at another α the p-values are needed, and an entry without
  them is Missing "evaluated"."""
  from limits.claims.core import Missing
  s = {"critical": {"100": {"critical_n": 5, "alpha": 0.01, "method": "bisect"}}, "heads": 144}
  r = {"AMBIG-18": "reconstructed", "AMBIG-9": "0.01"}
  v = C.judge_fig2c(s, r)
  assert v.status == HOLDS and v.measured == "N_crit ≈ 0.05·L (L = 100: 5)", v
  with pytest.raises(Missing, match="^evaluated$"):
    C.judge_fig2c(s, {**r, "AMBIG-9": "0.05"})


def test_fig2c_states_a_scan_range_other_than_the_default():
  """fig2c's scan range text when an L used another N_max: "scan N = 1…N_max (L = 100: 10)"
  (closing parenthesis included)."""
  pvals = {str(n): (0.5 if n >= 4 else 0.001) for n in range(1, 11)}
  s = {"critical_scan": {"100": {"printed": {"evaluated": pvals, "n_max": 10}}}, "heads": 144}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.01"})
  assert v.status == HOLDS, v
  assert v.measured == "N_crit ≈ 0.04·L (L = 100: 4); scan N = 1…N_max (L = 100: 10)", v.measured


def test_fig2c_above_the_band_with_an_l_not_found():
  """fig2c fails where an L has no pass up to N_max ≥ 0.12·L, and names beside it an L whose
  shorter scan (N ≤ 5 < 0.12·64) found none: both lists in one text."""
  never8 = {str(n): 0.001 for n in range(1, 9)}
  never5 = {str(n): 0.001 for n in range(1, 6)}
  s = {"critical_scan": {"32": {"printed": {"evaluated": never8, "n_max": 8}},
                         "64": {"printed": {"evaluated": never5, "n_max": 5}}}, "heads": 144}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.01"})
  assert v.status == FAILS, v
  assert v.measured == ("above the band at L = 32 (no pass for N ≤ 8): N_crit/L > 0.12; "
                        "not found at L = 64 (no pass for N ≤ 5); "
                        "scan N = 1…N_max (L = 32: 8, L = 64: 5)"), v.measured


def test_fig2c_rejected_everywhere_states_the_scan_range():
  """fig2c's not-testable return (every N searched rejected, below 0.12·L) keeps the scan range
  as its measured text."""
  never5 = {str(n): 0.001 for n in range(1, 6)}
  s = {"critical_scan": {"64": {"printed": {"evaluated": never5, "n_max": 5}}}, "heads": 144}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.01"})
  assert v.status == NOT_TESTABLE and v.measured == "scan N = 1…N_max (L = 64: 5)", v


def test_fig2c_without_a_head_count_has_no_power_line():
  """fig2c on a summary without "heads": no KS power line (sample ""), the verdict as usual."""
  pvals = {str(n): (0.5 if n >= 4 else 0.001) for n in range(1, 26)}
  s = {"critical_scan": {"100": {"printed": {"evaluated": pvals, "n_max": 25}}}}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.01"})
  assert v.status == HOLDS and v.sample == "", v
  assert v.measured == "N_crit ≈ 0.04·L (L = 100: 4); scan N = 1…⌈L/4⌉", v.measured


@pytest.mark.parametrize("ratio, status", [(2.0, HOLDS), (2.0 * (1 + 1e-10), FAILS)])
def test_fig4_collapse_spread_of_exactly_a_factor_two(ratio, status):
  """fig4-collapse: curves exactly a factor 2 apart collapse (log10 2 ≤ log10 2 + 1e-12);
  a factor 2·(1 + 1e-10) does not. Both drop exactly 2 decades."""
  from limits.claims.judges_gradient import judge_fig4_collapse
  s = {"T": [1.0, 100.0], "g": {"0.1": [ratio, ratio / 100], "1": [1.0, 0.01]}}
  v = judge_fig4_collapse(s, {})
  assert v.status == status, v
  assert v.measured.startswith("spread 0.301 decades; drop ε = 0.1: 2, ε = 1: 2"), v.measured


def test_tracks_names_a_maximum_below_the_floor_minus_a_tenth():
  """_tracks, derived bound (floor e^(−1/2) = 0.607): a maximum of 0.4 at N = 4 is below
  0.607 − 0.10 = 0.507, so "0.10 above" cannot hold there; the text names 0.507 and 0.607."""
  s = {"per_head": [{"n": 2, "frac": 0.7, "upper": 0.75}, {"n": 4, "frac": 0.4, "upper": 0.9}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == HOLDS, v
  assert ("0.10 above the maximum at N = 4: maximum N_s/N < 0.507 while the bound is ≥ its "
          "floor 0.607 (cannot hold)") in v.vacuous, v.vacuous


@pytest.mark.parametrize("upper, far", [(0.8, ""), (0.8 + 2e-12, " (> 0.10 at N = 4)")])
def test_upper_tracking_names_n_only_beyond_a_tenth(upper, far):
  """_tracks' text names an N as "> 0.10" only beyond the 1e-12 slack: a gap of 0.8 − 0.7
  (0.1000000000000001) is not named, 2e-12 more is."""
  s = {"per_head": [{"n": 4, "frac": 0.7, "upper": upper}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.measured == (f"bound − max N_s/N up to 0.1{far}; 0 of 1 decidable (head, N) cases "
                        "above the bound"), v.measured


def test_multihead_states_its_sample():
  """multihead-coverage keeps the separability sample line (heads, point sets)."""
  ns = [1, 16, 32]
  v = _judge_verdict("multihead-coverage", {"n": ns, "median": [1, 0.8, 0.8], "max": [1, 1, 1],
                                            "heads": 9, "samples": 20})
  assert v.status == HOLDS and v.sample == "9 heads, 20 point sets per head", v


# Survivors of a full mutation run of the claims group (twelfth session, 2,518 mutants at
# 95a7b68, `--work /tmp/s12full-claims`), given tests in bulk: one exact Verdict per judge path
# (status, text, reason, sample, vacuous parts) written by hand from the judges' wording.

def _paper_claim(cid, kind="paper", derived_from=(), evidence="empirical"):
  return Claim(id=cid, kind=kind, where="here", words="w", setting="s", step="step",
               criterion="c", judge=lambda s, r: Verdict(HOLDS), derived_from=derived_from,
               evidence=evidence)


def test_count_verdicts_counts_only_the_papers_own_empirical_claims():
  """count_verdicts: the paper's own claims (not derived) with empirical evidence or none (a
  record from before issue 28, a 3-tuple) count, per verdict, a verdict outside the four
  included; findings, derived claims and other evidence classes do not."""
  from limits.claims.core import DEPENDS, MATHEMATICAL, NOT_RUN
  entries = [("paper", (), HOLDS), ("paper", (), HOLDS, "empirical"), ("paper", (), FAILS),
             ("paper", (), HOLDS, MATHEMATICAL), ("paper", ("x",), FAILS, "empirical"),
             ("finding", (), FAILS, "empirical"), ("paper", (), DEPENDS, "empirical"),
             ("paper", (), NOT_RUN, None)]
  assert assessment.count_verdicts(entries) == {HOLDS: 2, FAILS: 1, NOT_TESTABLE: 0, NOT_RUN: 1,
                                                DEPENDS: 1}


def test_robust_count_over_the_counted_judged_claims():
  """robust_count: of the paper's own empirical claims that hold or fail (5 here), those robust
  under every admissible reading (robust is True: 3; False and None are not); a not-testable
  verdict, a derived claim, a finding and a mathematical claim are left out."""
  def a(claim, verdict, robust):
    return assessment.Assessment(claim, verdict, "", Verdict(verdict), robust=robust)

  p = _paper_claim("p")
  counted = [a(p, HOLDS, True), a(p, FAILS, True), a(p, HOLDS, True), a(p, FAILS, False),
             a(p, HOLDS, None)]
  left_out = [a(p, NOT_TESTABLE, True), a(_paper_claim("d", derived_from=("p",)), HOLDS, True),
              a(_paper_claim("f", kind="finding"), HOLDS, True),
              a(_paper_claim("m", evidence="mathematical"), FAILS, True)]
  assert assessment.robust_count(counted + left_out) == (3, 5)
  assert assessment.robust_count(left_out) == (0, 0)


def test_multihead_plateau_mean_union_and_missing_line():
  """multihead-coverage: p is the mean median over N ≥ 16 (N = 16 included: (0.7 + 0.8)/2 =
  0.75, 1 − 0.25³ = 98.4 %), the measured union is appended; without N ≥ 16 the Missing line."""
  from limits.claims.core import Missing
  from limits.claims.judges_separability import judge_multihead
  s = {"n": [1, 16, 32], "median": [1.0, 0.7, 0.8], "coverage_union": "0.95"}
  v = judge_multihead(s, {})
  assert v == Verdict(HOLDS, "p = 0.75: 3 heads cover 98.4 % if independent; measured union of "
                             "a layer's heads: 0.95"), v
  assert judge_multihead({"n": [16], "median": [0.9]}, {}) == Verdict(
      FAILS, "p = 0.9: 3 heads cover 99.9 % if independent")
  with pytest.raises(Missing, match="^N ≥ 16 in the grid$"):
    judge_multihead({"n": [1, 8], "median": [1.0, 0.9]}, {})


@pytest.mark.parametrize("knee, status", [(0.93, FAILS), (0.88, HOLDS)])
def test_fig3_decline_needs_a_tenth_and_states_its_sample(knee, status):
  """fig3-decline needs a fall of at least 10 % to N = 16 (7 %: fails; 12 %: holds), then a
  nearly flat curve (−1 % from 16 to 64); the sample line names heads, point sets and windows."""
  s = {"n": [1, 16, 64], "median": [1.0, knee, 0.99 * knee], "heads": 9, "samples": 20,
       "windows": 2}
  v = C.judge_fig3_decline(s, {})
  ratio = (math.log(0.99) / math.log(4)) / (math.log(knee) / math.log(16))  # ≈ 0.16 and 0.22
  assert v == Verdict(status, f"median 1 at N = 1, {knee:g} at 16, {0.99 * knee:.4g} at N = 64; "
                              f"slope ratio after/before {ratio:.4g}",
                      sample="9 heads, 20 point sets per head, 2 window(s)"), v


def test_thm2_lower_without_stderr_has_no_margin_and_counts_strictly():
  """thm2-lower: a row without a standard error gets no margin (0.45 < 0.5 is below the bound),
  one exactly at its bound (0.5 = 0.5) is not below it; the text counts 1 of 2; the sample
  line is kept."""
  rows = [{"n": 4, "frac": 0.5, "lower": 0.5}, {"n": 8, "frac": 0.45, "lower": 0.5}]
  v = C.judge_thm2_lower({"per_head": rows, "heads": 3}, {})
  assert v == Verdict(FAILS, "1 of 2 (head, N) cases below the bound; 0 % of bounds clipped to 0",
                      sample="3 heads"), v
  v = C.judge_thm2_lower({"per_head": rows[:1], "heads": 3}, {})
  assert v == Verdict(HOLDS, "0 of 1 (head, N) cases below the bound; 0 % of bounds clipped to "
                             "0", sample="3 heads"), v


@pytest.mark.parametrize("scale, status", [(1.0, HOLDS), (1 + 1e-12, FAILS)])
def test_cor3_tight_at_exactly_its_slack(scale, status):
  """cor3-tight holds at max T·‖J‖₂ = 0.5·(1 + 1e-6) exactly (≤) and fails just above."""
  from limits.claims.judges_gradient import judge_cor3_tight
  worst = 0.5 * (1 + 1e-6) * scale
  v = judge_cor3_tight({"T": [1.0], "counterexample_norm": [0.25], "max_T_norm": worst}, {})
  assert v.status == status and v.measured == "max T·‖J‖₂ = 0.5", v


def test_lemma1_model_texts_and_a_kind_without_slopes():
  """lemma1-model: not testable with its reason; the per-normalizer slopes joined by ", "; a
  layer kind without slopes between two lengths is named with its Missing line."""
  s = {"lemma1_slopes": {"softmax": 0.1, "relu": -0.5},
       "by_layer_kind": {"local": {"rows": [{"L": 32}], "heads": 2, "windows": [8]}}}
  v = C.judge_lemma1_model(s, {})
  assert v == Verdict(NOT_TESTABLE, "softmax: 0.1, relu: -0.5; local layers (W = 8): missing "
                                    "by_layer_kind slopes (two lengths)",
                      reason="Lemma 1 assumes logits bounded by a fixed a; a model's logit range "
                             "changes with L"), v


def _collapse(ts, g, r=None, **extra):
  from limits.claims.judges_gradient import judge_fig4_collapse
  return judge_fig4_collapse({"T": ts, "g": g, **extra}, r or {})


@pytest.mark.parametrize("ts, ok", [
    ([1 - 1e-9, 100 * (1 - 1e-9)], True),    # T0 read with its 1e-9 slack (>=)
    ([1 - 2e-9, 100 * (1 - 2e-9)], False),   # below the slack: one T >= 1 only
    ([1.0, 100 * (1 + 1e-9)], True),          # the end may overshoot 100·T0 by 1e-9 (<=)
    ([1.0, 100 * (1 - 1e-9)], True),          # ... or fall short by 1e-9 (not <)
    ([1.0, 100 * (1 - 2e-9)], False),         # shorter: no T two decades up
    ([1 - 5e-10, 1e4], False)])               # T0 just below 1: 1e4 is past 100·T0, no end
def test_fig4_collapse_grid_edges(ts, ok):
  """fig4-collapse's grid rules on both sides of each 1e-9 slack: the first T ≥ 1 and the end
  at 100 times it. Two curves drop exactly 2 decades over the grid (holds) or the step is
  Missing a temperature."""
  from limits.claims.core import Missing
  g = {"0.1": [10.0, 0.1], "1": [10.0, 0.1]}
  if ok:
    assert _collapse(ts, g).status == HOLDS
  else:
    with pytest.raises(Missing):
      _collapse(ts, g)


def test_fig4_collapse_ends_at_the_last_t_up_to_100_t0():
  """The drop ends at T = 100 (100·T0), not at 100.5 (≤ 101·T0 or 200·T0) nor at 1,000
  (100 times the second T): 2 decades (holds), where the later T give 4 or 5."""
  v = _collapse([1.0, 10.0, 100.0, 100.5, 1000.0], {"1": [10.0, 1.0, 0.1, 1e-3, 1e-4]})
  assert v == Verdict(HOLDS, "spread 0 decades; drop ε = 1: 2 decades"), v


def test_fig4_collapse_scaled_t0_and_its_missing_line():
  """Under the scaled reading with d_head = 4, T0 = 1·√4 = 2 (not 1/√4): the drop runs from
  T = 2 to 200 (10 → 0.1: 2 decades), not from 0.5 to 50; a grid with one T ≥ 2 is Missing
  "2 temperatures at or above T = 2"."""
  from limits.claims.core import Missing
  v = _collapse([0.5, 2.0, 50.0, 200.0], {"1": [100.0, 10.0, 2.0, 0.1]}, {"AMBIG-12": "scaled"},
                d_head=4)
  assert v == Verdict(HOLDS, "spread 0 decades; drop ε = 0.5 (raw 1): 2 decades"), v
  with pytest.raises(Missing, match=r"^2 temperatures at or above T = 2$"):
    _collapse([1.0, 10.0], {"1": [1.0, 0.1]}, {"AMBIG-12": "scaled"}, d_head=4)


def test_fig4_collapse_missing_end_names_100_t0():
  """The Missing line for a grid that stops short names 100·T0 and T0 (3 significant digits)."""
  from limits.claims.core import Missing
  with pytest.raises(Missing, match=r"^a temperature up to 100 in its grid \(two decades above "
                                    r"1\)$"):
    _collapse([1 - 5e-10, 1e4], {"1": [1.0, 0.01]})


@pytest.mark.parametrize("bump, status", [(0, HOLDS), (1, FAILS)])
def test_fig4_collapse_spread_at_its_1e12_slack(bump, status):
  """Spread exactly log10(2) + 1e-12 (the ratio 2.000000000004605 gives it to the last bit)
  still collapses (≤); one ulp more does not."""
  r = 2.000000000004605 + bump * np.spacing(2.000000000004605)
  assert math.log10(2.000000000004605) == math.log10(2) + 1e-12
  v = _collapse([1.0, 100.0], {"0.1": [r, 0.01], "1": [1.0, 0.01]})
  assert v.status == status, v


@pytest.mark.parametrize("top, status", [(10 ** 2.5, HOLDS), (10 ** 2.5 * 1.001, FAILS),
                                         (10 ** 1.5, HOLDS), (10 ** 1.5 / 1.001, FAILS)])
def test_fig4_collapse_drop_of_exactly_two_and_a_half_decades(top, status):
  """The drop may be 2 ± 0.5 decades, both ends included: 2.5 and 1.5 hold, beyond fails."""
  assert _collapse([1.0, 100.0], {"1": [top, 1.0]}).status == status


def test_sphere_cap_missing_line_and_an_empty_stderr_cell():
  """sphere-cap: the Missing line "N ≥ 16 in the grid"; a per-head row whose stderr is an empty
  CSV cell gives no interval (skipped, not a float("") error)."""
  from limits.claims.core import Missing
  with pytest.raises(Missing, match="^N ≥ 16 in the grid$"):
    C.judge_sphere_cap({"n": [1, 8], "max": [1.0, 0.9]}, {})
  s = {"n": [16], "max": [0.8], "per_head": [{"n": 16, "frac": 0.8, "stderr": ""}]}
  assert C.judge_sphere_cap(s, {}) == Verdict(HOLDS, "largest head mean N_s/N for N ≥ 16: 0.8")


def test_thm2_lower_all_bounds_clipped_is_100_percent():
  """thm2-lower: every bound ≤ 0 is 100 % clipped (1 of 1)."""
  s = {"per_head": [{"n": 4, "frac": 0.5, "lower": -0.2}]}
  assert C.judge_thm2_lower(s, {}) == Verdict(
      HOLDS, "0 of 1 (head, N) cases below the bound; 100 % of bounds clipped to 0")


def test_thm1_bound_without_row_counts():
  """thm1-bound on rows that record no rows_checked: 0 rows counted (not 1 per row, not a
  TypeError), no sample line."""
  rows = [{"violations_sum": 0}, {"violations_sum": 0}]
  assert C.judge_thm1_bound({"rows": rows}, {}) == Verdict(HOLDS, "0 violations in 0 rows")
  rows = [{"violations_sum": 2, "rows_checked": 1500}, {"violations_sum": 0}]
  assert C.judge_thm1_bound({"rows": rows, "heads": 3}, {}) == Verdict(
      FAILS, "2 violations in 1,500 rows", sample="3 heads, 1,500 (head, query) rows")


@pytest.mark.parametrize("worst, status", [(0.85 + 1e-12, HOLDS), (0.85 + 2e-12, FAILS)])
def test_sphere_cap_at_its_1e12_slack_with_its_sample(worst, status):
  """sphere-cap: a largest mean of 0.85 + 1e-12 is at most 0.85 with the slack (holds), 2e-12
  more is above it; the sample line names heads and point sets."""
  v = C.judge_sphere_cap({"n": [16], "max": [worst], "heads": 6, "samples": 10}, {})
  assert v == Verdict(status, "largest head mean N_s/N for N ≥ 16: 0.85",
                      sample="6 heads, 10 point sets per head"), v


def test_sphere_cap_interval_from_the_head_within_1e9_only():
  """sphere-cap takes the standard error of a head whose N_s/N is within 1e-9 of the worst,
  strictly: a head exactly 1e-9 below it (1e-9 vs 2e-9, exact in binary) is not the worst's."""
  s = {"n": [16], "max": [2e-9], "per_head": [{"n": 16, "frac": 1e-9, "stderr": 0.1},
                                               {"n": 16, "frac": 2e-9, "stderr": 0.01}]}
  assert 2e-9 - 1e-9 == 1e-9
  v = C.judge_sphere_cap(s, {})
  assert v.measured == ("largest head mean N_s/N for N ≥ 16: 2e-09 (95 % CI ± 0.0196 from the "
                        "Monte Carlo standard error)"), v.measured


def _top_class(frac, column="upper"):
  """How _tracks classes the top head at N = 2: "gap" (within reach of "0.10 above"), "cannot
  fail" (maximum ≥ 0.90) or "cannot hold" (maximum below the floor − 0.10); a second N (4,
  frac 0.85, bound 0.9) keeps the judge decidable."""
  judge = C.judge_fig3_upper_derived if column == "upper" else C.judge_fig3_upper_printed
  s = {"per_head": [{"n": 2, "frac": frac, column: min(1.0, frac + 0.05)},
                    {"n": 4, "frac": 0.85, column: 0.9}]}
  parts = judge(s, {}).vacuous.split("; ")
  if any(p.startswith("0.10 above the maximum at N = 2: maximum N_s/N ≥ 0.90") for p in parts):
    return "cannot fail"
  if any(p.startswith("0.10 above the maximum at N = 2: maximum N_s/N < ") for p in parts):
    return "cannot hold"
  return "gap"


_LOW_EDGE = math.exp(-1 / 2) - 0.1 - 1e-12   # derived floor − 0.10, with the 1e-12 slack
_HIGH_EDGE = (1 - 0.1) - 1e-12               # 0.90, with the 1e-12 slack


@pytest.mark.parametrize("frac, column, cls", [
    (math.exp(-1 / 2) - 0.1, "upper", "gap"),
    (_LOW_EDGE, "upper", "gap"),
    (np.nextafter(_LOW_EDGE, 0), "upper", "cannot hold"),
    (np.nextafter(_HIGH_EDGE, 0), "upper", "gap"),
    (_HIGH_EDGE, "upper", "cannot fail"),
    (1 - 0.1, "upper", "cannot fail"),
    (0.95, "upper_printed", "cannot fail"),
    (0.8, "upper_printed", "cannot hold"),
    (0.85, "upper_printed", "gap")])
def test_tracks_classes_the_top_head_on_both_sides_of_each_edge(frac, column, cls):
  """_tracks' "0.10 above the maximum" is decidable for a maximum in [floor − 0.10, 0.90) with
  1e-12 slack at both ends (derived floor e^(−1/2), printed e^(−1/16) = 0.939); at and above
  0.90 it cannot fail (under both bounds), below floor − 0.10 it cannot hold."""
  assert _top_class(float(frac), column) == cls


def test_tracks_floor_and_bound_are_not_crossed_when_touched():
  """_tracks: a head exactly at the derived floor e^(−1/2) cannot exceed its bound (not
  counted as decidable: "1 of 2 … cannot fail"); a head exactly at its bound is not above it
  (0 violations); with every case decidable no such note is added."""
  floor = math.exp(-1 / 2)
  s = {"per_head": [{"n": 2, "frac": floor, "upper": 0.7}, {"n": 4, "frac": 0.8, "upper": 0.8}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.status == HOLDS, v
  assert v.measured.endswith("; 0 of 1 decidable (head, N) cases above the bound"), v.measured
  assert v.vacuous == ("above the bound: 1 of 2 (head, N) cases at N > 1 have N_s/N ≤ 0.607, "
                       "the bound's floor at M = 1 (cannot fail)"), v.vacuous
  v = C.judge_fig3_upper_derived({"per_head": [{"n": 4, "frac": 0.8, "upper": 0.8}]}, {})
  assert v == Verdict(HOLDS, "bound − max N_s/N up to 0; 0 of 1 decidable (head, N) cases above "
                             "the bound"), v


def test_tracks_joins_low_ns_and_names_an_all_vacuous_step():
  """_tracks: two N whose maximum is below the floor − 0.10 are joined "2, 4"; a step whose only
  case is N = 1 has nothing to decide: Missing with every vacuous part."""
  from limits.claims.core import Missing
  s = {"per_head": [{"n": 2, "frac": 0.3, "upper": 0.7}, {"n": 4, "frac": 0.2, "upper": 0.7},
                    {"n": 8, "frac": 0.7, "upper": 0.75}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v.vacuous.startswith("0.10 above the maximum at N = 2, 4: maximum N_s/N < 0.507 while"), v
  msg = ("a case the data could decide (every part is vacuous: N = 1: N_s/N = 1 by definition "
         "and ξ = 0, so the bound is exp(−r²/16M²) < 1 (printed: cannot hold) or 1 (derived: "
         "cannot fail))")
  with pytest.raises(Missing) as e:
    C.judge_fig3_upper_derived({"per_head": [{"n": 1, "frac": 1.0, "upper": 1.0}]}, {})
  assert str(e.value) == msg


def test_tracks_joins_the_far_ns():
  """_tracks names every N where the bound sits more than 0.10 above the maximum, joined
  "2, 4"."""
  s = {"per_head": [{"n": 2, "frac": 0.7, "upper": 0.9}, {"n": 4, "frac": 0.7, "upper": 0.85}]}
  v = C.judge_fig3_upper_derived(s, {})
  assert v == Verdict(FAILS, "bound − max N_s/N up to 0.2 (> 0.10 at N = 2, 4); 0 of 2 decidable "
                             "(head, N) cases above the bound"), v


def test_cor1_band_holds_only_without_violations():
  """cor1-band: 0 queries outside the band holds (with the query count), 1 fails."""
  from limits.claims.judges_vanishing import judge_cor1_band
  assert judge_cor1_band({"band_violations": 0, "band_queries": 1500}, {}) == Verdict(
      HOLDS, "0 queries outside the band", sample="1,500 queries")
  assert judge_cor1_band({"band_violations": 1, "band_queries": 1500}, {}) == Verdict(
      FAILS, "1 queries outside the band", sample="1,500 queries")


def test_thm1_bound_reads_its_form_and_states_the_full_sample():
  """thm1-bound counts the violations of the d̃ form AMBIG-1 names (norm: 1, sum: 5) over all
  rows; the sample line names heads, windows per L and the rows checked."""
  rows = [{"violations_norm": 0, "violations_sum": 5, "rows_checked": 1000},
          {"violations_norm": 1, "violations_sum": 0, "rows_checked": 500}]
  s = {"rows": rows, "heads": 12, "windows": 2}
  sample = "12 heads, 2 window(s) per L, 1,500 (head, query) rows"
  assert C.judge_thm1_bound(s, {"AMBIG-1": "norm"}) == Verdict(
      FAILS, "1 violations in 1,500 rows", sample=sample)
  assert C.judge_thm1_bound(s, {"AMBIG-1": "sum"}) == Verdict(
      FAILS, "5 violations in 1,500 rows", sample=sample)


@pytest.mark.parametrize("reading, status, text", [
    ({}, FAILS, "relative gap 0.5 at N = 1, 0.2 at N = 100"),
    ({"AMBIG-3": "L"}, FAILS, "relative gap 0.4 at N = 1, 0.1 at N = 100"),
    ({"AMBIG-3": "L", "AMBIG-4": "jensen"}, HOLDS, "relative gap 0.3 at N = 1, 0.05 at N = 100"),
    ({"AMBIG-4": "jensen"}, FAILS, "relative gap 0.4 at N = 1, 0.15 at N = 100")])
def test_fig2b_converge_derived_reads_ambig3_and_ambig4(reading, status, text):
  """The reconstructed E: expected_mean (default) or expected_nl_mean (AMBIG-3 = L), plus the
  Jensen gap under AMBIG-4 = jensen. d̃ = 1 and 5; E = 0.5/4, 0.6/4.5, +0.1/+0.25: gaps by
  hand; 0.1 exactly is not below 0.10."""
  rows = [{"L": 1024, "N": 1, "d_sum_mean": 1.0, "expected_mean": 0.5, "expected_nl_mean": 0.6,
           "gap_mean": 0.1},
          {"L": 1024, "N": 100, "d_sum_mean": 5.0, "expected_mean": 4.0, "expected_nl_mean": 4.5,
           "gap_mean": 0.25}]
  v = C.judge_fig2b_converge_derived({"rows": rows}, reading)
  assert (v.status, v.measured) == (status, text), v


def test_kinds_text_per_layer_kind_in_order():
  """kinds_text: local layers first (their windows and heads), then global; a kind with too few
  lengths is named with its Missing line; an empty kind is left out; no split, no text."""
  def rows(ls):
    return [{"L": L, "N": 5, "d_sum_mean": 0.01 * L} for L in ls]

  split = {"global": {"rows": rows((64, 128, 256)), "heads": 4},
           "local": {"rows": rows((64, 128)), "heads": 2, "windows": [512, 1024]},
           "other": {"rows": rows((64, 128, 256))}}
  v = C.judge_fig2a_true({"rows": rows((64, 128, 256)), "by_layer_kind": split}, {})
  assert v.measured == ("log-log exponent 1, straight-line R² 1; local layers (W = 512, 1024): "
                        "missing at least 3 lengths; global layers, 4 heads: log-log exponent 1, "
                        "straight-line R² 1"), v.measured
  split["local"] = {"rows": []}
  v = C.judge_fig2a_true({"rows": rows((64, 128, 256)), "by_layer_kind": split}, {})
  assert v.measured.endswith("R² 1; global layers, 4 heads: log-log exponent 1, straight-line "
                             "R² 1"), v.measured
  v = C.judge_fig2a_true({"rows": rows((64, 128, 256)), "by_layer_kind": "none"}, {})
  assert v.measured == "log-log exponent 1, straight-line R² 1"


def test_fig2b_plateau_text_and_no_growth():
  """fig2b-plateau: 0.1 → 1 (×10) from N = 1 to 20, then +10 % to 100, slope ratio
  (ln 1.1/ln 5)/(ln 10/ln 20) ≈ 0.077: holds; equal values at N = 1 and 20: "no growth"."""
  rows = [{"L": 64, "N": n, "d_sum_mean": y} for n, y in ((1, 0.1), (20, 1.0), (100, 1.1))]
  ratio = (math.log(1.1) / math.log(5)) / (math.log(10) / math.log(20))
  v = C.judge_fig2b_plateau({"rows": rows, "heads": 3}, {})
  assert v == Verdict(HOLDS, f"×10 from N = 1 to 20, then +10 % to N = 100; slope ratio "
                             f"after/before {ratio:.4g}", sample="3 heads"), v
  rows = [{"L": 64, "N": n, "d_sum_mean": y} for n, y in ((1, 1.0), (20, 1.0), (100, 2.0))]
  assert C.judge_fig2b_plateau({"rows": rows}, {}) == Verdict(FAILS, "no growth before N = 20")


@pytest.mark.parametrize("dmax_last, status", [(6.0, HOLDS), (8.0, FAILS)])
def test_fig2b_tightens_strictly_below_its_value_at_20(dmax_last, status):
  """fig2b-tightens: d_max/d̃ = 3, 2, 1.5 at N = 1, 20, 100 tightens; 2 at N = 100 (equal to
  N = 20) does not (strict)."""
  rows = [{"L": 64, "N": n, "d_sum_mean": d, "dmax_sum_mean": b}
          for n, d, b in ((1, 1.0, 3.0), (20, 2.0, 4.0), (100, 4.0, dmax_last))]
  v = C.judge_fig2b_tightens({"rows": rows, "heads": 3}, {})
  shown = "1.5" if status == HOLDS else "2"
  assert v == Verdict(status, f"d_max/d̃ N = 1: 3, N = 20: 2, N = 100: {shown}",
                      sample="3 heads"), v


def test_separability_missing_lines():
  """The Missing lines of the separability judges: per_head.csv (thm2-lower without per-head
  rows) and "N ≥ 16 in the grid" (fig3-band below the knee)."""
  from limits.claims.core import Missing
  with pytest.raises(Missing, match=r"^per_head\.csv$"):
    C.judge_thm2_lower({"per_head": []}, {})
  with pytest.raises(Missing, match="^N ≥ 16 in the grid$"):
    C.judge_fig3_band({"n": [1, 8], "median": [1.0, 0.9]}, {})


def test_lemma1_bounded_sums_the_violations_of_every_f():
  """lemma1-bounded: one violation in the first F (by name) and none in the second still
  fails: the violations add up over F."""
  from limits.claims.judges_vanishing import judge_lemma1_bounded
  s = {"lemma1": {"a_first": {"violations": 1, "C2": 2.0, "checked": 10},
                  "b_second": {"violations": 0, "C2": 3.0, "checked": 5}}}
  assert judge_lemma1_bounded(s, {}) == Verdict(
      FAILS, "a_first: C2 = 2, 1 violations; b_second: C2 = 3, 0 violations", sample="15 rows")


@pytest.mark.parametrize("asked, exact", [("1e-12", False), ("1.5e-12", True)])
def test_fig2c_recorded_critical_n_only_within_1e12_of_its_alpha(asked, exact):
  """_critical_n uses the recorded N_crit only when the asked α is within 1e-12 of the step's,
  strictly: 2e-12 vs 1e-12 (a difference of exactly 1e-12) needs the p-values (Missing here),
  2e-12 vs 1.5e-12 does not."""
  from limits.claims.core import Missing
  assert 2e-12 - 1e-12 == 1e-12
  s = {"critical": {"100": {"critical_n": 5, "alpha": 2e-12}}}
  r = {"AMBIG-18": "reconstructed", "AMBIG-9": asked}
  if exact:
    assert C.judge_fig2c(s, r) == Verdict(HOLDS, "N_crit ≈ 0.05·L (L = 100: 5)")
  else:
    with pytest.raises(Missing, match="^evaluated$"):
      C.judge_fig2c(s, r)


def test_fig2a_true_fits_only_the_rows_at_n_5():
  """fig2a-true fits d̃ at N = 5 only (linear in L there; flat at N = 20)."""
  rows = ([{"L": L, "N": 5, "d_sum_mean": 0.01 * L} for L in (64, 128, 256)]
          + [{"L": L, "N": 20, "d_sum_mean": 3.0} for L in (64, 128, 256)])
  v = C.judge_fig2a_true({"rows": rows}, {})
  assert v == Verdict(HOLDS, "log-log exponent 1, straight-line R² 1"), v


@pytest.mark.parametrize("median, status", [
    (0.7 - 1e-12, HOLDS), (np.nextafter(0.7 - 1e-12, 0), FAILS),
    (0.85 + 1e-12, HOLDS), (np.nextafter(0.85 + 1e-12, 1), FAILS)])
def test_fig3_band_edges_with_their_1e12_slack(median, status):
  """in_band: the closed band [0.70, 0.85] with 1e-12 slack at each end, on both sides."""
  v = C.judge_fig3_band({"n": [16, 32], "median": [float(median), 0.8]}, {})
  assert v.status == status, v


def test_attention_sinks_last_length_and_defaults():
  """attention-sinks: the by-layer shares shown are the last L's (of three); without "eps" and
  "pairs" the sample line reads ε = nan and 0 head-windows."""
  s = {"sinks": {"by_L": [{"L": 64, "share_by_layer": [0.75]}, {"L": 128, "share_by_layer": [0.6]},
                          {"L": 256, "share_by_layer": [0.5]}]}}
  v = C.judge_attention_sinks(s, {})
  assert v == Verdict(HOLDS, "layers with Sink_ε ≥ 0.5: L = 64: 1 of 1, L = 128: 1 of 1, L = 256: "
                             "1 of 1; at L = 256 by layer 0.50",
                      sample="ε = nan, 0 head-windows per L"), v


def test_fig2c_a_p_value_equal_to_alpha_is_a_rejection():
  """_critical_n: p = α at N = 2 rejects (a pass needs p > α), so N_crit is 3, exact (N = 2
  counts as below it)."""
  s = {"critical_scan": {"100": {"printed": {"evaluated": {"1": 0.001, "2": 0.01, "3": 0.5}}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(HOLDS, "N_crit ≈ 0.03·L (L = 100: 3)")


def test_fig2c_default_scan_range_at_a_short_length():
  """The default N_max rule at L = 4 is max(1, min(⌈4/4⌉, 3)) = 1: a scan to N = 1 is the default
  range (N_crit = 1 there: 0.25·L, above the band)."""
  s = {"critical_scan": {"4": {"printed": {"evaluated": {"1": 0.5}, "n_max": 1}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(
      FAILS, "N_crit ≈ 0.25·L (L = 4: 1); scan N = 1…⌈L/4⌉")


def test_fig2c_missing_lines_per_form():
  """fig2c's Missing lines: the printed form needs a non-empty critical_scan, the reconstructed
  form the bisection's "critical" (or a scan)."""
  from limits.claims.core import Missing
  with pytest.raises(Missing, match=r"^critical_scan \(the ascending scan with the printed E\)$"):
    C.judge_fig2c({"critical_scan": {}, "heads": 144}, {"AMBIG-9": "0.01"})
  with pytest.raises(Missing, match="^critical$"):
    C.judge_fig2c({"heads": 144}, {"AMBIG-9": "0.01", "AMBIG-18": "reconstructed"})


@pytest.mark.parametrize("heads, testable", [(3, True), (2, False)])
def test_fig2c_smallest_p_equal_to_alpha_is_testable(heads, testable):
  """fig2c: with 3 heads the smallest KS p is 2/C(6, 3) = 0.1, which reaches α = 0.1 (not
  above it): testable; with 2 heads it is 2/C(4, 2) = 1/3: not testable, with its exact texts."""
  pvals = {str(n): (0.5 if n >= 4 else 0.001) for n in range(1, 26)}
  s = {"critical_scan": {"100": {"printed": {"evaluated": pvals, "n_max": 25}}}, "heads": heads}
  v = C.judge_fig2c(s, {"AMBIG-9": "0.1"})
  power = f"KS on {heads} per-head means per sample; smallest attainable p = " + \
          ("0.1" if testable else "0.33")
  if testable:
    assert v == Verdict(HOLDS, "N_crit ≈ 0.04·L (L = 100: 4); scan N = 1…⌈L/4⌉", sample=power), v
  else:
    assert v == Verdict(NOT_TESTABLE, "", reason="with 2 heads per sample the KS test cannot "
                        "reject at α = 0.1 (smallest p = 0.33)", sample=power), v


def test_fig2c_lengths_in_numeric_order():
  """fig2c lists the lengths in numeric order (64 before 100, not as strings); the fitted ratio
  is (64·3 + 100·4)/(64² + 100²) = 592/14096 = 0.042."""
  def entry(n_crit):
    return {"printed": {"evaluated": {str(n): (0.5 if n >= n_crit else 0.001)
                                      for n in range(1, n_crit + 1)}}}

  s = {"critical_scan": {"100": entry(4), "64": entry(3)}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(
      HOLDS, "N_crit ≈ 0.042·L (L = 64: 3; L = 100: 4)")


def _never(n_max):
  return {str(n): 0.001 for n in range(1, n_max + 1)}


def _first_pass(n_crit, n_max):
  return {str(n): (0.5 if n >= n_crit else 0.001) for n in range(1, n_max + 1)}


@pytest.mark.parametrize("searched, status", [(12, FAILS), (11, NOT_TESTABLE)])
def test_fig2c_no_pass_up_to_exactly_0_12_l_is_above_the_band(searched, status):
  """An L with no pass up to N = 12 = 0.12·100 is above the band (≥): fails; up to 11 it is
  not found (the scan stopped inside the band)."""
  s = {"critical_scan": {"100": {"printed": {"evaluated": _never(searched)}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}).status == status


def test_fig2c_above_the_band_lists_every_part():
  """fig2c's failing text with two L above the band, two passing L and two L not found, each
  list joined in order, then the scan range per L (not the default at 64 and 80)."""
  scan = {"32": (_never(8), 8), "40": (_never(10), 10), "64": (_never(5), 5),
          "80": (_never(5), 5), "100": (_first_pass(4, 25), 25), "200": (_first_pass(8, 50), 50)}
  s = {"critical_scan": {L: {"printed": {"evaluated": ev, "n_max": m}}
                         for L, (ev, m) in scan.items()}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(FAILS, (
      "above the band at L = 32 (no pass for N ≤ 8), 40 (no pass for N ≤ 10): N_crit/L > 0.12; "
      "passes: L = 100: 4; L = 200: 8; not found at L = 64 (no pass for N ≤ 5), 80 (no pass for "
      "N ≤ 5); scan N = 1…N_max (L = 32: 8, L = 40: 10, L = 64: 5, L = 80: 5, L = 100: 25, "
      "L = 200: 50)"))
  s = {"critical_scan": {"32": {"printed": {"evaluated": _never(8), "n_max": 8}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(
      FAILS, "above the band at L = 32 (no pass for N ≤ 8): N_crit/L > 0.12; scan N = 1…⌈L/4⌉")


def test_fig2c_pass_windows_joined_and_at_most_three():
  """The pass windows: a single N shown as "9", ranges as "4–6", joined by ", ", at most three
  (a fourth, N = 13, is left out)."""
  passes = {4, 5, 6, 9, 11, 13}
  ev = {str(n): (0.5 if n in passes else 0.001) for n in range(1, 15)}
  wins = [[4, 6], [9, 9], [11, 11], [13, 13]]
  s = {"critical_scan": {"100": {"printed": {"evaluated": ev, "windows": wins}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(
      HOLDS, "N_crit ≈ 0.04·L (L = 100: 4 (passes at N = 4–6, 9, 11))")


def test_fig2c_windows_of_a_recorded_critical_n_without_p_values():
  """An entry with its recorded N_crit, windows and no p-values: two windows are shown; one
  window is not (nothing says it closed before the last N searched)."""
  def s(wins):
    entry = {"critical_n": 4, "alpha": 0.01, "windows": wins}
    return {"critical": {"100": entry}}

  r = {"AMBIG-9": "0.01", "AMBIG-18": "reconstructed"}
  assert C.judge_fig2c(s([[4, 6], [9, 9]]), r) == Verdict(
      HOLDS, "N_crit ≈ 0.04·L (L = 100: 4 (passes at N = 4–6, 9))")
  assert C.judge_fig2c(s([[4, 6]]), r) == Verdict(HOLDS, "N_crit ≈ 0.04·L (L = 100: 4)")


@pytest.mark.parametrize("asked, shown", [("1e-12", ""), ("1.5e-12", " (passes at N = 4–6)")])
def test_fig2c_windows_only_within_1e12_of_the_scans_alpha(asked, shown):
  """The pass windows belong to the α the scan ran at (2e-12): shown for an asked α within
  1e-12 of it, strictly (1.5e-12), hidden at exactly 1e-12 away."""
  ev = {str(n): (0.5 if 4 <= n <= 6 else 1e-13) for n in range(1, 9)}
  s = {"critical_scan": {"100": {"printed": {"evaluated": ev, "windows": [[4, 6]],
                                             "alpha": 2e-12}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": asked}) == Verdict(
      HOLDS, f"N_crit ≈ 0.04·L (L = 100: 4{shown})")


@pytest.mark.parametrize("n_crit, status", [(2, FAILS), (3, HOLDS), (12, HOLDS), (13, FAILS)])
def test_fig2c_band_edges_are_inside(n_crit, status):
  """N_crit/L = 0.03 and 0.12 (N_crit 3 and 12 at L = 100) are inside the closed band; 0.02
  and 0.13 are outside."""
  s = {"critical_scan": {"100": {"printed": {"evaluated": _first_pass(n_crit, 25)}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}).status == status


def test_fig2c_lists_two_lengths_not_found():
  """Two L not found are joined by ", " beside a passing L, and in the not-testable reason when
  no L passes."""
  s = {"critical_scan": {"64": {"printed": {"evaluated": _never(5)}},
                         "80": {"printed": {"evaluated": _never(5)}},
                         "100": {"printed": {"evaluated": _first_pass(4, 25)}}}}
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(
      HOLDS, "N_crit ≈ 0.04·L (L = 100: 4); not found at L = 64 (no pass for N ≤ 5), 80 (no pass "
             "for N ≤ 5)")
  del s["critical_scan"]["100"]
  assert C.judge_fig2c(s, {"AMBIG-9": "0.01"}) == Verdict(
      NOT_TESTABLE, "", reason="the KS test rejected at every N searched (α = 0.01): 64 (no pass "
                               "for N ≤ 5), 80 (no pass for N ≤ 5)")


def test_ks_min_pvalue_is_at_most_one():
  """ks_min_pvalue: 2/C(n + m, n), capped at 1 (a p-value): 1 for n = m = 1 and for an empty
  second sample (2/C(3, 3) = 2 capped), 0.1 for n = m = 3."""
  from limits.claims.criteria import ks_min_pvalue
  assert ks_min_pvalue(1) == 1.0 and ks_min_pvalue(3, 0) == 1.0 and ks_min_pvalue(3) == 0.1


def _ambig_claim(judge, readings, excluded=()):
  return Claim(id="t", kind="paper", where="here", words="w", setting="s", step="stepx",
               criterion="c", judge=judge, readings=readings, excluded=excluded)


_A = Reading("AMBIG-A", (("a1", "A one"), ("a2", "A two"), ("a3", "A three")))
_B = Reading("AMBIG-B", (("b1", "B one"), ("b2", "B two")))


def test_assess_labels_a_flip_its_readings_and_exclusions():
  """assess: the flipping reading named with its option label, status and measured text; an
  excluded reading (a3) judged and listed but not counted; the readings in order."""
  def judge(s, r):
    return Verdict(s[r["AMBIG-A"]], f"x = {r['AMBIG-A']}")

  claim = _ambig_claim(judge, (_A,), (("AMBIG-A", "a3", "no reading"),))
  res = assessment.assess(claim, {"a1": HOLDS, "a2": FAILS, "a3": FAILS})
  assert (res.verdict, res.label, res.robust) == (HOLDS, "flips under AMBIG-A (A two): fails, "
                                                         "x = a2", False)
  assert [(label, v.status) for label, v in res.readings] == [
      ("AMBIG-A A one", HOLDS), ("AMBIG-A A two", FAILS), ("AMBIG-A A three", FAILS)]
  assert res.excluded == (("AMBIG-A A three", "AMBIG-A a3: no reading"),)
  res = assessment.assess(_ambig_claim(lambda s, r: Verdict(s[r["AMBIG-A"]]), (_A,)),
                          {"a1": HOLDS, "a2": HOLDS, "a3": FAILS})
  assert res.label == "flips under AMBIG-A (A three): fails", res.label


def test_assess_names_a_pair_and_the_robust_labels():
  """assess: a flip that needs both ambiguities changed is named "AMBIG-A (…) with AMBIG-B
  (…)"; all the same: "same under every admissible reading"; every other option excluded:
  "single admissible reading"."""
  def judge(s, r):
    return Verdict(FAILS if (r["AMBIG-A"], r["AMBIG-B"]) == ("a2", "b2") else HOLDS)

  res = assessment.assess(_ambig_claim(judge, (_A, _B)), {})
  assert (res.label, res.robust) == ("flips under AMBIG-A (A two) with AMBIG-B (B two): fails",
                                     False)
  same = assessment.assess(_ambig_claim(lambda s, r: Verdict(HOLDS), (_A,)), {})
  assert (same.label, same.robust) == ("same under every admissible reading", True)
  only = assessment.assess(_ambig_claim(lambda s, r: Verdict(FAILS), (_A,),
                                        (("AMBIG-A", "a2", "no"), ("AMBIG-A", "a3", "no"))), {})
  assert (only.verdict, only.label, only.robust) == (FAILS, "single admissible reading", True)


@pytest.mark.parametrize("error, reason", [
    (KeyError("k"), "step stepx's summary is malformed (KeyError: 'k')"),
    (TypeError("t"), "step stepx's summary is malformed (TypeError: t)"),
    (ValueError("v"), "step stepx's summary is malformed (ValueError: v)"),
    (ZeroDivisionError("z"), "step stepx's summary is malformed (ZeroDivisionError: z)"),
    (IndexError("i"), "step stepx's summary is malformed (IndexError: i)")])
def test_judge_safely_turns_each_malformed_summary_into_not_testable(error, reason):
  """judge_safely: each of the five errors a malformed summary raises gives not testable with
  the step and the error; a not-testable primary labels the assessment with its reason."""
  def judge(s, r):
    raise error

  claim = _ambig_claim(judge, ())
  assert assessment.judge_safely(claim, {}, {}) == Verdict(NOT_TESTABLE, reason=reason)
  res = assessment.assess(claim, {})
  assert (res.verdict, res.label, res.robust) == (NOT_TESTABLE, reason, None)


def test_assess_untested_readings_and_by_step_alternates():
  """A by-step reading is judged on its own step's summary; without one it is not testable
  ("no outputs for …" or the reason given), which makes the robustness column "same under
  every computable admissible reading (k of n; not computable: …)"."""
  from limits.claims.core import Missing
  b = Reading("AMBIG-B", (("b1", "B one"), ("b2", "B two"), ("b3", "B three")), by_step=True)

  def judge(s, r):
    if s.get("missing"):
      raise Missing("field")
    return Verdict(s["v"])

  claim = _ambig_claim(judge, (b,))
  alts = {("AMBIG-B", "b2"): {"v": FAILS}}
  res = assessment.assess(claim, {"v": HOLDS}, alts)
  assert res.label == "flips under AMBIG-B (B two): fails", res.label
  assert res.readings[2][1] == Verdict(NOT_TESTABLE, reason="no outputs for the AMBIG-B reading "
                                                            "'b3'")
  alts = {("AMBIG-B", "b2"): {"v": HOLDS}, ("AMBIG-B", "b3"): "step b3 failed"}
  res = assessment.assess(claim, {"v": HOLDS}, alts)
  assert (res.label, res.robust) == ("same under every computable admissible reading (2 of 3; "
                                     "not computable: step b3 failed)", None)
  alts = {("AMBIG-B", "b2"): {"missing": 1}, ("AMBIG-B", "b3"): {"v": HOLDS}}
  res = assessment.assess(claim, {"v": HOLDS}, alts)
  assert res.label == ("same under every computable admissible reading (2 of 3; not computable: "
                       "step stepx did not record field)"), res.label


def test_fig4_inverse_t_exact_texts_with_a_vacuous_epsilon():
  """fig4-inverse-T: the slope over the T below 0.1 (0.01 and 0.05; T = 0.1 itself is not
  below), ε = 0.01 falls ×5 over ×5 in T: slope −1 (holds); ε = 10 cannot follow (g ≤ √2/10 =
  0.1414, a T^−0.75 rise from 0.1 at T = 0.05 needs 0.1·5^0.75 at T = 0.01) and is named."""
  from limits.claims.core import Missing
  from limits.claims.judges_gradient import judge_fig4_inverse_t
  ts = [0.01, 0.05, 0.1, 1.0]
  g = {"0.01": [1.0, 0.2, 5.0, 5.0], "10": [0.1, 0.1, 0.1, 0.1]}
  vac = (f"ε = 10: a 1/T trend is impossible (g ≤ √2/ε = 0.1414 raw at every T, a T^−0.75 rise "
         f"from T = 0.05 would need {0.1 * 5 ** 0.75:.4g} at T = 0.01)")
  assert judge_fig4_inverse_t({"T": ts, "g": g}, {}) == Verdict(
      HOLDS, "log-log slopes ε = 0.01: -1 (T < 0.1)", vacuous=vac)
  g["0.01"] = [0.4, 0.2, 5.0, 5.0]      # slope ln(1/2)/ln 5 = −0.43: not a 1/T trend
  v = judge_fig4_inverse_t({"T": ts, "g": g}, {})
  assert (v.status, v.measured) == (FAILS, f"log-log slopes ε = 0.01: "
                                           f"{math.log(0.5) / math.log(5):.4g} (T < 0.1)"), v
  with pytest.raises(Missing) as e:
    judge_fig4_inverse_t({"T": ts, "g": {"10": g["10"]}}, {})
  assert str(e.value) == f"an ε whose curve could follow 1/T ({vac})"


def test_fig4_inverse_t_scaled_labels_and_threshold():
  """Under the scaled reading (d_head = 4) the threshold is 0.1·√4 = 0.2 (T = 0.1 now counts)
  and ε = 0.01 is labelled 0.005 (raw 0.01); a non-numeric ε keeps its name."""
  from limits.claims.judges_gradient import judge_fig4_inverse_t
  s = {"T": [0.02, 0.1, 1.0], "d_head": 4, "g": {"0.01": [1.0, 0.2, 0.1], "x": [1.0, 0.2, 0.1]}}
  v = judge_fig4_inverse_t(s, {"AMBIG-12": "scaled"})
  assert v == Verdict(HOLDS, "log-log slopes ε = 0.005 (raw 0.01): -1, ε = x: -1 (T < 0.2)"), v


def test_gradient_judges_counts_and_texts():
  """cor3-printed counts the T whose tied-top-two norm is above min{1/(4T), √2} (0.25 at T = 1
  is not; 1.5 at T = 0.1 is above √2) and the data pairs; Missing names the non-finite T;
  lemma2 is testable while the bound is finite on at least half the pairs; simplex adds up the
  rows over ε; cor3-tight reads max T·‖J‖ from the rows without a data maximum."""
  from limits.claims.core import Missing
  from limits.claims.judges_gradient import (judge_cor3_tight, judge_lemma2, judge_simplex)
  s = {"T": [1.0, 0.1], "counterexample_norm": [0.25, 1.5], "data_exceed_paper": 3}
  assert judge_cor3_printed(s, {}) == Verdict(
      FAILS, "tied top-two row exceeds it at 1 of 2 T; 3 data (row, T) pairs exceed it")
  with pytest.raises(Missing, match=r"^finite Jacobian norms \(non-finite at T = 0\.5, 1\)$"):
    judge_cor3_printed({**s, "nonfinite_T": ["0.5", 1]}, {})
  assert judge_lemma2({"lemma2_exceed": 0, "lemma2_pairs": 10, "lemma2_finite": 5}, {}) == \
      Verdict(HOLDS, "0 rows above the bound")
  assert judge_lemma2({"lemma2_exceed": 0, "lemma2_pairs": 10, "lemma2_finite": 4}, {}).status \
      == NOT_TESTABLE
  assert judge_lemma2({"lemma2_exceed": 3, "lemma2_pairs": 10, "lemma2_finite": 0}, {}) == \
      Verdict(FAILS, "3 rows above the bound")
  assert judge_simplex({"sqrt2_exceed": {"0.1": 0, "1": "2"}}, {}) == Verdict(
      FAILS, "2 rows above √2/ε")
  assert judge_simplex({"sqrt2_exceed": {"0.1": 0}}, {}) == Verdict(HOLDS, "0 rows above √2/ε")
  assert judge_cor3_tight({"T": [1.0, 0.1], "counterexample_norm": [0.25, 4.0]}, {}) == Verdict(
      HOLDS, "max T·‖J‖₂ = 0.4")
  assert judge_cor3_tight({"T": [0.1], "counterexample_norm": [6.0]}, {}) == Verdict(
      FAILS, "max T·‖J‖₂ = 0.6")


def test_fig2a_fits_the_first_n_when_there_is_no_n_5():
  """_n_fit: without N = 5 the fit takes the smallest N (2: linear in L), not the next (10:
  flat) nor a missing N = 5."""
  rows = ([{"L": L, "N": 2, "d_sum_mean": 0.01 * L} for L in (64, 128, 256)]
          + [{"L": L, "N": 10, "d_sum_mean": 3.0} for L in (64, 128, 256)])
  assert C.judge_fig2a_true({"rows": rows}, {}) == Verdict(
      HOLDS, "log-log exponent 1, straight-line R² 1")


def test_kinds_text_of_a_split_without_rows_is_empty():
  """kinds_text: a by_layer_kind map whose kinds have no rows adds nothing to the text."""
  rows = [{"L": L, "N": 5, "d_sum_mean": 0.01 * L} for L in (64, 128, 256)]
  v = C.judge_fig2a_true({"rows": rows, "by_layer_kind": {"local": {"rows": []}}}, {})
  assert v.measured == "log-log exponent 1, straight-line R² 1", v.measured


@pytest.mark.parametrize("after, direction, change, ok", [
    (0.5, +1, 0.5, True), (0.5 * (1 + 2e-12), +1, 0.5, False),   # ratio edge with its slack
    (-0.5, +1, 0.5, True), (-0.5 * (1 + 2e-12), +1, 0.5, False),  # |after|
    (0.5, -1, -0.5, True), (0.5, -1, 0.5, False), (0.5, +1, -0.5, False)])
def test_saturates_ratio_edge_in_absolute_values(after, direction, change, ok):
  """criteria.saturates: |after| ≤ 0.5·|before| (before = −1 here) with a 1e-12 relative slack,
  on both sides; the move must go in ``direction``."""
  from limits.claims.criteria import saturates
  sat = {"change_before": change, "before": -1.0, "after": after}
  assert saturates(sat, direction) is ok


def test_saturation_missing_lines_and_values():
  """criteria.saturation: a knee that is not strictly inside the grid, or absent, is Missing
  "values at N = 20 and on both sides of it"; otherwise the slopes by hand (y = 1, 4, 4.4 at
  N = 1, 20, 100: ln 4/ln 20 and ln 1.1/ln 5) and the change to the knee (×4: 3)."""
  from limits.claims.core import Missing
  from limits.claims.criteria import linear_r2, saturation
  for ns in ([1, 20], [20, 100], [1, 10, 100]):
    with pytest.raises(Missing, match="^values at N = 20 and on both sides of it$"):
      saturation(ns, [1.0] * len(ns), 20)
  sat = saturation([100, 1, 20], [4.4, 1.0, 4.0], 20)      # unsorted input
  assert sat == {"before": pytest.approx(math.log(4) / math.log(20), rel=1e-14),
                 "after": pytest.approx(math.log(1.1) / math.log(5), rel=1e-14),
                 "change_before": pytest.approx(3.0, rel=1e-14), "first": 1, "last": 100}
  assert math.isnan(linear_r2([1, 1, 1], [1, 2, 3]))
  assert linear_r2([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0, rel=1e-14)


def test_distance_judges_missing_lines_and_keys():
  """The distance judges' Missing lines (no rows: "summary"; a row without the d̃ column: that
  column) and the columns each reading names: d_norm_mean under AMBIG-1 = norm, the x̄ form of
  the printed E under AMBIG-17 = mean."""
  from limits.claims.core import Missing
  for s in ({}, {"rows": []}):
    with pytest.raises(Missing, match="^summary$"):
      C.judge_fig2a_true(s, {})
  with pytest.raises(Missing, match="^d_sum_mean$"):
    C.judge_fig2a_true({"rows": [{"L": 64, "N": 5, "d_norm_mean": 1.0}]}, {})
  lin = [{"L": L, "N": 5, "d_norm_mean": 0.01 * L, "d_sum_mean": 1.0,
          "expected_printed_xmean_mean": 0.01 * L, "expected_printed_output_mean": 1.0}
         for L in (64, 128, 256)]
  assert C.judge_fig2a_true({"rows": lin}, {"AMBIG-1": "norm"}).status == HOLDS
  assert C.judge_fig2a_true({"rows": lin}, {"AMBIG-1": "sum"}).status == FAILS
  assert C.judge_fig2a_expected_printed({"rows": lin}, {"AMBIG-17": "mean"}).status == HOLDS
  assert C.judge_fig2a_expected_printed({"rows": lin}, {"AMBIG-17": "output"}).status == FAILS


def test_fig2a_expected_derived_adds_the_jensen_gap_at_n_5_only():
  """fig2a-expected-derived under AMBIG-4 = jensen adds the gap of the same (L, N) row: at N = 5
  E = 0.01·L and gap = 0.001·L (sum 0.011·L: exponent 1, R² 1); the N = 20 rows' zero gap must
  not be mixed in."""
  rows = ([{"L": L, "N": 5, "expected_mean": 0.01 * L, "gap_mean": 0.001 * L}
           for L in (64, 128, 256)]
          + [{"L": L, "N": 20, "expected_mean": 3.0, "gap_mean": 0.0} for L in (64, 128, 256)])
  assert C.judge_fig2a_expected_derived({"rows": rows}, {"AMBIG-4": "jensen"}) == Verdict(
      HOLDS, "log-log exponent 1, straight-line R² 1")


@pytest.mark.parametrize("power, ok", [(0.7, False), (0.9, True), (1.1, True), (1.3, False)])
def test_linear_in_l_exponent_window(power, ok):
  """linear_in_l: y = L^k over L = 64…1024 has log-log exponent k; 0.9 and 1.1 are inside
  [0.8, 1.2], 0.7 and 1.3 outside (R² of the straight line ≥ 0.95 for all four, numpy's)."""
  from limits.claims.judges_distance import linear_in_l
  ls = [64, 128, 256, 512, 1024]
  ys = [L ** power for L in ls]
  assert np.corrcoef(ls, ys)[0, 1] ** 2 >= 0.95
  got, text = linear_in_l(ls, ys)
  assert got is ok
  assert text.startswith(f"log-log exponent {power:.4g}, straight-line R² "), text


def test_linear_in_l_needs_a_straight_line():
  """linear_in_l: an exponent of 1 is not enough; y ∝ L with one length far off the line
  (R² < 0.95 by numpy) fails."""
  from limits.claims.judges_distance import linear_in_l
  ls, ys = [64, 128, 256, 512], [64.0, 400.0, 100.0, 512.0]
  assert np.corrcoef(ls, ys)[0, 1] ** 2 < 0.95
  assert linear_in_l(ls, ys)[0] is False


def test_converge_gap_at_a_zero_distance_and_a_gap_that_does_not_close():
  """_converge: d̃ = 0 at the first N gives gap inf there (not a ZeroDivisionError), and 0.05 at
  N = 100 closes it (holds); equal gaps (0.0625 twice) do not close (fails)."""
  s = {"rows": _distance_rows({1: (0.0, 0.5), 100: (5.0, 4.75)})}
  assert C.judge_fig2b_converge_printed(s, {}) == Verdict(
      HOLDS, "relative gap inf at N = 1, 0.05 at N = 100")
  s = {"rows": _distance_rows({1: (4.0, 3.75), 100: (8.0, 7.5)})}     # exact in binary
  v = C.judge_fig2b_converge_printed(s, {})
  assert (v.status, v.measured) == (FAILS, "relative gap 0.0625 at N = 1, 0.0625 at N = 100"), v


def test_fig2b_tightens_needs_an_n_above_20_and_plateau_reads_ambig1():
  """fig2b-tightens with N = 20 as the largest N is Missing; fig2b-plateau reads d_norm_mean
  under AMBIG-1 = norm (here a plateau, while d_sum_mean grows linearly)."""
  from limits.claims.core import Missing
  rows = [{"L": 64, "N": n, "d_sum_mean": 1.0, "dmax_sum_mean": 2.0} for n in (1, 20)]
  with pytest.raises(Missing, match="^N = 20 and a larger N$"):
    C.judge_fig2b_tightens({"rows": rows}, {})
  rows = [{"L": 64, "N": n, "d_norm_mean": y, "d_sum_mean": float(n)}
          for n, y in ((1, 0.1), (20, 1.0), (100, 1.1))]
  assert C.judge_fig2b_plateau({"rows": rows}, {"AMBIG-1": "norm"}).status == HOLDS
  assert C.judge_fig2b_plateau({"rows": rows}, {"AMBIG-1": "sum"}).status == FAILS


def test_scaled_reading_needs_d_head_and_cor3_tight_needs_finite_norms():
  """_t_scale: the scaled reading (AMBIG-12) needs d_head (Missing "d_head"); cor3-tight is
  Missing where a norm was not finite."""
  from limits.claims.core import Missing
  from limits.claims.judges_gradient import judge_cor3_tight
  with pytest.raises(Missing, match="^d_head$"):
    _collapse([1.0, 100.0], {"1": [1.0, 0.01]}, {"AMBIG-12": "scaled"})
  with pytest.raises(Missing, match=r"^finite Jacobian norms \(non-finite at T = 2\)$"):
    judge_cor3_tight({"T": [2.0], "counterexample_norm": [0.1], "nonfinite_T": [2]}, {})


def test_combinations_and_not_run():
  """combinations: every option product, the default first ([{}] without readings); not_run:
  the reason as label and verdict text."""
  from limits.claims.core import NOT_RUN
  claim = _ambig_claim(lambda s, r: Verdict(HOLDS), (_B, _A))
  assert assessment.combinations(claim) == [
      {"AMBIG-B": b, "AMBIG-A": a} for b in ("b1", "b2") for a in ("a1", "a2", "a3")]
  assert assessment.combinations(_ambig_claim(lambda s, r: Verdict(HOLDS), ())) == [{}]
  a = assessment.not_run(claim, "step x failed: boom")
  assert a == assessment.Assessment(claim, NOT_RUN, "step x failed: boom",
                                    Verdict(NOT_RUN, reason="step x failed: boom"))


@pytest.mark.parametrize("power, ok", [(0.8, True), (0.79, False), (1.2, True), (1.21, False)])
def test_linear_in_l_exponent_edges_are_inside(power, ok):
  """linear_in_l: exponents exactly 0.8 and 1.2 are inside the window (y = 10^(k·i) at
  L = 1, 10, 100 gives the slope k to the last bit), 0.79 and 1.21 are not."""
  from limits.claims.judges_distance import linear_in_l
  ys = [10 ** (power * i) for i in range(3)]
  assert linear_in_l([1, 10, 100], ys)[0] is ok


def test_fig2b_plateau_largest_l_direction_and_percent():
  """fig2b-plateau reads the largest L only (L = 32 rows would break the N series), needs a
  growth of 10 % (15 % to N = 20 then flat holds), and states the change after N = 20 in per
  cent (×2: +100 %)."""
  def rows(L, ys):
    return [{"L": L, "N": n, "d_sum_mean": y} for n, y in zip((1, 20, 100), ys)]

  s = {"rows": rows(64, (1.0, 1.15, 1.15)) + rows(32, (5.0, 1.0, 9.0))}
  v = C.judge_fig2b_plateau(s, {})
  assert v == Verdict(HOLDS, "×1.15 from N = 1 to 20, then +0 % to N = 100; slope ratio "
                             "after/before 0"), v
  ratio = (math.log(2) / math.log(5)) / (math.log(10) / math.log(20))
  v = C.judge_fig2b_plateau({"rows": rows(64, (0.1, 1.0, 2.0))}, {})
  assert v == Verdict(FAILS, f"×10 from N = 1 to 20, then +100 % to N = 100; slope ratio "
                             f"after/before {ratio:.4g}"), v


def test_fig2b_converge_derived_reads_the_largest_l_only():
  """fig2b-converge-derived takes the reconstructed E at the largest L only."""
  rows = [{"L": L, "N": n, "d_sum_mean": d, "expected_mean": e}
          for L, n, d, e in ((1024, 1, 1.0, 0.5), (1024, 100, 5.0, 4.75),
                             (512, 1, 1.0, 0.1), (512, 100, 5.0, 1.0))]
  assert C.judge_fig2b_converge_derived({"rows": rows}, {}) == Verdict(
      HOLDS, "relative gap 0.5 at N = 1, 0.05 at N = 100")


@pytest.mark.parametrize("ys", [[0.0, 1.0, 2.0], [1.0, 2.0, 0.0], [1.0, -1.0, 2.0]])
def test_saturation_needs_positive_values_at_each_of_the_three_points(ys):
  """criteria.saturation: a value ≤ 0 at the first N, the knee or the last N is Missing with
  exactly its one line (a log of it would be a math error)."""
  from limits.claims.core import Missing
  from limits.claims.criteria import saturation
  with pytest.raises(Missing) as e:
    saturation([1, 16, 64], ys, 16)
  assert str(e.value) == "positive values at the first N, the knee and the last N"


def test_fig2b_tightens_norm_reading_reads_both_norm_columns():
  """fig2b-tightens under AMBIG-1 = norm: d_max/d̃ from d_norm_mean and dmax_norm_mean (4/2,
  3/2 at N = 20, 100), not from the sum columns."""
  rows = [{"L": 64, "N": n, "d_norm_mean": 2.0, "dmax_norm_mean": b, "d_sum_mean": 1.0,
           "dmax_sum_mean": 8.0} for n, b in ((20, 4.0), (100, 3.0))]
  assert C.judge_fig2b_tightens({"rows": rows}, {"AMBIG-1": "norm"}) == Verdict(
      HOLDS, "d_max/d̃ N = 20: 2, N = 100: 1.5")


@pytest.mark.parametrize("sat, ok", [
    ({"change_before": 0.1 * (1 - 1e-12), "before": 1.0, "after": 0.1}, True),
    ({"change_before": 0.5, "before": -1.0, "after": 0.5 * (1 + 1e-12)}, True)])
def test_saturates_at_exactly_its_slacks(sat, ok):
  """criteria.saturates: a move of exactly 0.1·(1 − 1e-12) and a slope ratio of exactly
  0.5·(1 + 1e-12) still count (≥ and ≤ at the slack itself)."""
  from limits.claims.criteria import saturates
  assert saturates(sat, +1) is ok


@pytest.mark.parametrize("norm, status", [(0.25 * (1 + 1e-9), HOLDS),
                                          (np.nextafter(0.25 * (1 + 1e-9), 1), FAILS)])
def test_cor3_printed_exactly_at_its_slack(norm, status):
  """cor3-printed: a norm of exactly 1/(4T)·(1 + 1e-9) at T = 1 is not above the bound; the next
  float is."""
  s = {"T": [1.0], "counterexample_norm": [float(norm)]}
  assert judge_cor3_printed(s, {}).status == status


def test_assess_single_reading_and_not_testable_records_in_full():
  """assess returns the whole record: for a claim without ambiguities its claim, the primary
  Verdict as default and its one labelled reading; for a not-testable primary the same, with
  robust None."""
  v = Verdict(HOLDS, "m")
  single = _ambig_claim(lambda s, r: v, ())
  assert assessment.assess(single, {}) == assessment.Assessment(
      single, HOLDS, "single reading", v, (("single reading", v),), True, ())
  nt = Verdict(NOT_TESTABLE, reason="why")
  claim = _ambig_claim(lambda s, r: nt, (_B,))
  assert assessment.assess(claim, {}) == assessment.Assessment(
      claim, NOT_TESTABLE, "why", nt, (("AMBIG-B B one", nt), ("AMBIG-B B two", nt)), None, ())


def test_assess_flip_untested_and_same_records_in_full():
  """assess' three judged outcomes as whole records (default Verdict, labelled readings and the
  excluded reading a3 kept): a flip under a2, a2 not computable, and the same verdict."""
  from limits.claims.core import Missing

  def judge(s, r):
    if s[r["AMBIG-A"]] is None:
      raise Missing("f")
    return Verdict(s[r["AMBIG-A"]])

  claim = _ambig_claim(judge, (_A,), (("AMBIG-A", "a3", "no reading"),))
  excl = (("AMBIG-A A three", "AMBIG-A a3: no reading"),)

  def record(a2, label, robust):
    s = {"a1": HOLDS, "a2": a2, "a3": FAILS}
    v2 = Verdict(a2) if a2 else Verdict(NOT_TESTABLE, reason="step stepx did not record f")
    return (assessment.assess(claim, s), assessment.Assessment(
        claim, HOLDS, label, Verdict(HOLDS), (("AMBIG-A A one", Verdict(HOLDS)),
                                               ("AMBIG-A A two", v2),
                                               ("AMBIG-A A three", Verdict(FAILS))), robust, excl))

  got, want = record(FAILS, "flips under AMBIG-A (A two): fails", False)
  assert got == want
  got, want = record(None, "same under every computable admissible reading (1 of 2; not "
                           "computable: step stepx did not record f)", None)
  assert got == want
  got, want = record(HOLDS, "same under every admissible reading", True)
  assert got == want


def test_distance_series_of_a_nan_length_is_missing():
  """_series: a hand-edited length "nan" makes the largest L nan, which matches no row: Missing
  "summary rows with {'L': nan}"."""
  from limits.claims.core import Missing
  rows = [{"L": "nan", "N": n, "d_sum_mean": 1.0} for n in (1, 20, 100)]
  with pytest.raises(Missing, match=r"^summary rows with \{'L': nan\}$"):
    C.judge_fig2b_plateau({"rows": rows}, {})


def test_fig4_inverse_t_checks_every_epsilon_and_its_cap_edge():
  """fig4-inverse-T: after an ε that cannot follow 1/T (10, first) the next ε is still judged;
  an ε whose needed rise reaches √2/ε exactly (g = √2/8 at T = 2^-6, ×16^0.75 = ×8) is not
  vacuous (only above the cap is)."""
  from limits.claims.judges_gradient import judge_fig4_inverse_t
  g = {"10": [0.1, 0.1, 0.1, 0.1], "0.01": [1.0, 0.2, 5.0, 5.0]}
  v = judge_fig4_inverse_t({"T": [0.01, 0.05, 0.1, 1.0], "g": g}, {})
  assert (v.status, v.measured) == (HOLDS, "log-log slopes ε = 0.01: -1 (T < 0.1)"), v
  assert v.vacuous.startswith("ε = 10: a 1/T trend is impossible"), v
  c = math.sqrt(2) / 8
  assert c * (2 ** -6 / 2 ** -10) ** 0.75 == math.sqrt(2)
  v = judge_fig4_inverse_t({"T": [2 ** -10, 2 ** -6], "g": {"1": [16 * c, c]}}, {})
  assert v == Verdict(HOLDS, "log-log slopes ε = 1: -1 (T < 0.1)"), v


def test_fig4_inverse_t_joins_two_vacuous_epsilons():
  """fig4-inverse-T: two ε that cannot follow 1/T are joined by "; ", in the vacuous note and in
  the Missing line when no ε is left."""
  from limits.claims.core import Missing
  from limits.claims.judges_gradient import judge_fig4_inverse_t
  ts, flat = [0.01, 0.05], [0.1, 0.1]
  v = judge_fig4_inverse_t({"T": ts, "g": {"10": flat, "20": flat, "0.01": [1.0, 0.2]}}, {})
  parts = v.vacuous.split("; ")
  assert len(parts) == 2 and parts[0].startswith("ε = 10: ") and parts[1].startswith("ε = 20: ")
  with pytest.raises(Missing) as e:
    judge_fig4_inverse_t({"T": ts, "g": {"10": flat, "20": flat}}, {})
  assert str(e.value) == f"an ε whose curve could follow 1/T ({v.vacuous})"
