"""The claims registry: each criterion on hand-made summaries that must pass and must fail,
the borderline cases named in the paper's wording, robustness over readings, and the rule that
rewording a claim cannot change its verdict. Every expected verdict here is decided by hand
from the criterion's words, not by running the code under test."""

import dataclasses
import math
from pathlib import Path

import pytest

from limits import claims as C

H, F, NT, DEP = C.HOLDS, C.FAILS, C.NOT_TESTABLE, C.DEPENDS


def judge(cid, summary, **reading):
  claim = C.BY_ID[cid]
  full = {rd.ambig: rd.options[0][0] for rd in claim.readings}
  full.update(reading)
  return C.judge_safely(claim, summary, full).status


# --- registry shape -------------------------------------------------------------------------

def test_ids_unique_and_stable_shape():
  ids = [c.id for c in C.CLAIMS]
  assert len(ids) == len(set(ids))
  for c in C.CLAIMS:
    assert c.kind in (C.PAPER, C.FINDING)
    assert c.words and c.criterion and c.setting and c.step
    assert all(d in C.BY_ID and d != c.id for d in c.derived_from)
    assert c.judge.__doc__, c.id  # the threshold and why, in the docstring
    for rd in c.readings:
      assert rd.ambig in C.AMBIGUITIES


def test_the_two_missing_rows_exist_and_row_14_is_the_cap():
  assert "fig2a-linear-expected" in C.BY_ID and "fig2b-bound-tightens" in C.BY_ID
  assert C.BY_ID["sphere-cap"].kind == C.PAPER
  assert C.BY_ID["sphere-band"].kind == C.FINDING
  for fid in ("cor3-tight", "simplex-diameter", "thm2-upper-derived"):
    assert C.BY_ID[fid].kind == C.FINDING
  assert C.BY_ID["multihead-coverage"].derived_from == ("fig3-band",)


def test_docs_in_sync():
  doc = Path(__file__).resolve().parent.parent / "docs" / "claims.md"
  assert doc.read_text(encoding="utf-8") == C.render_docs(), (
      "docs/claims.md is stale: regenerate it with limits.claims.render_docs()")


# --- saturation (Fig. 2b plateau, Fig. 3 decline) ------------------------------------------

def vary_n(d_by_n, L=1024.0, **extra_cols):
  rows = []
  for n, d in d_by_n.items():
    row = {"L": L, "N": n, "d_sum_mean": d, "d_norm_mean": d, "dmax_sum_mean": 2 * d,
           "dmax_norm_mean": 2 * d, "expected_mean": d / 2, "gap_mean": d, "rows_checked": 10}
    for k, v in extra_cols.items():
      row[k] = v[n]
    rows.append(row)
  return {"rows": rows}


def test_plateau_x44_then_plus17_counts_as_saturating():
  # The curve: ×4.4 from N = 1 to 20, then +17 % from 20 to 100.
  s = vary_n({1: 1.0, 5: 2.5, 10: 3.5, 20: 4.4, 100: 4.4 * 1.17})
  assert judge("fig2b-plateau", s) == H


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_plateau_power_law_is_not_saturating(power):
  s = vary_n({n: n ** power for n in (1, 5, 10, 20, 100)})
  assert judge("fig2b-plateau", s) == F


def test_plateau_borderline_ratio_half():
  # before: ×4 over N 1→20 (slope ln4/ln20); after chosen so the slope ratio is exactly 0.5 / 0.55.
  before = math.log(4) / math.log(20)
  for ratio, want in ((0.5, H), (0.55, F)):
    d100 = 4 * math.exp(ratio * before * math.log(5))
    assert judge("fig2b-plateau", vary_n({1: 1.0, 20: 4.0, 100: d100})) == want, ratio


def test_plateau_needs_growth_first_and_n20():
  assert judge("fig2b-plateau", vary_n({1: 1.0, 20: 1.05, 100: 1.05})) == F  # < 10 % growth
  assert judge("fig2b-plateau", vary_n({1: 1.0, 10: 2.0, 100: 2.1})) == NT   # no N = 20


def test_excluded_reading_cannot_change_the_verdict():
  # The norm of the sum is excluded for fig2b-plateau: a flip there changes nothing.
  rows = vary_n({1: 1.0, 20: 4.4, 100: 5.1})["rows"]
  for r in rows:
    r["d_norm_mean"] = float(r["N"])  # the other d̃ form grows linearly (would fail)
  a = C.assess(C.BY_ID["fig2b-plateau"], {"rows": rows},
               {("AMBIG-7", "hidden"): {"rows": rows}})   # the keys reading is excluded too
  assert a.verdict == H and a.robust is True and a.label == C.SAME
  assert [lab for lab, _ in a.excluded] == [
      lab for lab, v in a.readings if "‖Σ α_i x_i − s‖" in lab or "per-head key" in lab]
  assert any(v.status == F for lab, v in a.readings if "‖Σ α_i x_i − s‖" in lab)
  # The same flip under thm1-bound, where the norm of the sum is admissible, is named.
  claim = C.BY_ID["thm1-bound"]
  b = C.assess(claim, {"rows": [{"L": 32, "N": 5, "violations_sum": 0, "violations_norm": 3,
                                 "rows_checked": 10}]})
  assert (b.verdict, b.robust) == (H, False)
  assert b.label.startswith("flips under AMBIG-1 (d̃ = ‖Σ α_i x_i − s‖): fails")


def _two_axis_claim(flipper):
  """fig2b-converge-derived (readings AMBIG-1, AMBIG-3, AMBIG-4) with a judge that fails only
  when ``flipper`` takes its second option."""
  claim = C.BY_ID["fig2b-converge-derived"]
  second = {rd.ambig: rd.options[1][0] for rd in claim.readings}

  def judge(s, r):
    return C.Verdict(F if r[flipper] == second[flipper] else H, "measured")
  return dataclasses.replace(claim, judge=judge)


@pytest.mark.parametrize("flipper", ["AMBIG-1", "AMBIG-3", "AMBIG-4"])
def test_robustness_names_only_the_flipping_ambiguity(flipper):
  a = C.assess(_two_axis_claim(flipper), {})
  assert a.verdict == H and a.robust is False
  named = {x for x in ("AMBIG-1", "AMBIG-3", "AMBIG-4") if x in a.label}
  assert named == {flipper}, a.label
  # Two flipping combinations would be named if the flip needed both; here one suffices.
  assert a.label.count(flipper) == 1


def test_robustness_names_a_pair_only_when_the_pair_is_needed():
  claim = C.BY_ID["fig2b-converge-derived"]

  def judge(s, r):  # fails only with N/L and the Jensen bound together
    return C.Verdict(F if (r["AMBIG-3"], r["AMBIG-4"]) == ("L", "jensen") else H)
  a = C.assess(dataclasses.replace(claim, judge=judge), {})
  assert a.robust is False and "AMBIG-3 (N/L) with AMBIG-4 (main sum + Jensen bound)" in a.label
  assert "AMBIG-1" not in a.label


def test_registry_refuses_excluding_the_primary_reading():
  import tomllib
  from importlib import resources
  from limits.claims import registry
  from limits.errors import LimitsError
  data = tomllib.loads(resources.files("limits.claims").joinpath("claims.toml").read_text())
  entry = next(c for c in data["claim"] if c["id"] == "fig2b-plateau")
  entry["excluded"] = [["AMBIG-1", "sum", "no"]]
  with pytest.raises(LimitsError, match="primary reading"):
    registry.parse_registry(data)
  entry["excluded"] = [["AMBIG-1", "norm", " "]]
  with pytest.raises(LimitsError, match="without a reason"):
    registry.parse_registry(data)


def test_fig3_decline_then_saturates_and_still_declining():
  ns = [1, 2, 4, 8, 16, 32, 64, 128]
  sat = {"n": ns, "median": [1.0, 0.95, 0.9, 0.85, 0.8, 0.79, 0.785, 0.78]}
  still = {"n": ns, "median": [n ** -0.2 for n in ns]}  # one power law: no saturation
  assert judge("fig3-decline", sat) == H
  assert judge("fig3-decline", still) == F


# --- bands -----------------------------------------------------------------------------------

def sep(medians, maxima=None, ns=(1, 2, 4, 8, 16, 32, 64, 128)):
  return {"n": list(ns), "median": list(medians),
          "max": list(maxima if maxima is not None else medians)}


@pytest.mark.parametrize("level,want", [(0.70, H), (0.85, H), (0.80, H), (0.69, F), (0.86, F)])
def test_band_edges(level, want):
  s = sep([1, 0.9, 0.85, 0.8] + [level] * 4)
  assert judge("fig3-band", s) == want


@pytest.mark.parametrize("p,want", [(0.70, H), (0.8, H), (0.85, H), (0.60, F), (0.90, F)])
def test_multihead_on_the_papers_band(p, want):
  # p = 0.70 is inside the paper's own 0.70–0.85 band, although 1 − 0.3³ = 97.3 % < 99 %.
  assert judge("multihead-coverage", sep([1, 0.9, 0.85, 0.8] + [p] * 4)) == want


@pytest.mark.parametrize("top,want", [(0.85, H), (0.5, H), (0.86, F), (0.95, F)])
def test_sphere_cap(top, want):
  # Above the cap only at N < 16 does not count (N = 2 separates everything on any data).
  s = sep([1, 1, 0.9, 0.8, 0.4, 0.3, 0.3, 0.3], maxima=[1, 1, 0.97, 0.9, top, 0.3, 0.3, 0.3])
  assert judge("sphere-cap", s) == want


# --- inequalities and tracking ---------------------------------------------------------------

def per_head(rows):
  return {"per_head": [dict(zip(("n", "frac", "lower", "upper", "upper_printed", "stderr"), r))
                       for r in rows]}


def test_lower_bound_with_and_without_stderr():
  ok = per_head([(4, "0.5", "0.4", 1, 1, "0"), (8, "0.4", "0", 1, 1, "0")])
  bad = per_head([(4, "0.5", "0.6", 1, 1, "0")])
  noisy = per_head([(4, "0.5", "0.6", 1, 1, "0.04")])  # 0.1 below, 3 stderr = 0.12: not a violation
  assert judge("thm2-lower-model", ok) == H
  assert judge("thm2-lower-model", bad) == F
  assert judge("thm2-lower-sphere", noisy) == H


def test_upper_tracking_uses_its_own_column():
  rows = [(4, 0.6, 0, 0.65, 0.95, 0), (4, 0.3, 0, 0.9, 0.9, 0),   # max head: 0.6, bound 0.65 / 0.95
          (8, 0.5, 0, 0.60, 0.60, 0)]
  s = per_head(rows)
  assert judge("thm2-upper-derived", s) == H      # gap 0.05 at N = 4 (N = 8: max < 0.507)
  below = per_head([(4, 0.7, 0, 0.65, 0.7, 0)])
  assert judge("thm2-upper-derived", below) == F  # N_s/N above its bound
  # The printed bound is ≥ e^(−1/16) = 0.939 at M = 1: within 0.10 of a maximum below 0.839 it
  # cannot be (cannot hold), above a maximum ≥ 0.90 by more than 0.10 it cannot be (cannot
  # fail); only maxima in [0.839, 0.90) decide, and N = 1 never does.
  v = C.judge_safely(C.BY_ID["fig3-upper-tracks"], s, {})
  assert v.status == NT and "cannot hold" in v.reason
  tight = per_head([(1, 1.0, 0, 1, 0.97, 0), (4, 0.85, 0, 1, 0.949, 0), (8, 0.95, 0, 1, 0.99, 0)])
  loose = per_head([(4, 0.85, 0, 1, 0.96, 0)])    # gap 0.11
  over = per_head([(4, 0.85, 0, 1, 0.949, 0), (8, 0.96, 0, 1, 0.95, 0)])  # 0.96 > its bound
  assert judge("fig3-upper-tracks", tight) == H    # N = 1 (1.0 > 0.97) not counted
  v = C.judge_safely(C.BY_ID["fig3-upper-tracks"], tight, {})
  assert "N = 1" in v.vacuous and "cannot fail" in v.vacuous
  assert judge("fig3-upper-tracks", loose) == F
  assert judge("fig3-upper-tracks", over) == F


def test_printed_upper_missing_is_not_testable_naming_the_field():
  s = {"per_head": [{"n": 4, "frac": 0.5, "lower": 0, "upper": 0.6}]}
  v = C.judge_safely(C.BY_ID["fig3-upper-tracks"], s, {})
  assert v.status == NT and "upper_printed" in v.reason


def test_thm1_bound_by_form():
  s = {"rows": [{"L": 32, "N": 5, "violations_sum": 0, "violations_norm": 3, "rows_checked": 9}]}
  assert judge("thm1-bound", s) == H
  assert judge("thm1-bound", s, **{"AMBIG-1": "norm"}) == F


def gradient(ts, cex, exceed=0, lemma2=0, g=None):
  return {"T": ts, "counterexample_norm": cex, "data_exceed_paper": exceed, "data_pairs": 100,
          "lemma2_exceed": lemma2, "g": g or {}}


def test_corollary3_printed_and_tight():
  ts = [0.01, 1.0, 10.0]
  tied = [1 / (2 * t) for t in ts]            # the tied top-two row: exactly 1/(2T)
  quarter = [min(1 / (4 * t), math.sqrt(2)) * 0.99 for t in ts]  # just below the bound
  assert judge("cor3-printed", gradient(ts, tied)) == F
  assert judge("cor3-printed", gradient(ts, quarter)) == H
  assert judge("cor3-printed", gradient(ts, quarter, exceed=1)) == F
  assert judge("cor3-tight", gradient(ts, tied)) == H
  assert judge("cor3-tight", gradient(ts, [0.51 / t for t in ts])) == F


def test_lemma2():
  assert judge("lemma2", gradient([1.0], [0.1], lemma2=0)) == H
  assert judge("lemma2", gradient([1.0], [0.1], lemma2=2)) == F


# --- Figure 4 and the logit convention -------------------------------------------------------

TS = [1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10, 30, 100]


def test_fig4_inverse_t():
  inv = {"1e-3": [1 / t for t in TS], "0.1": [2 / t for t in TS]}
  flat = {"1e-3": [1 / t for t in TS], "0.1": [5.0 for _ in TS]}
  assert judge("fig4-inverse-t", {"T": TS, "g": inv}) == H
  assert judge("fig4-inverse-t", {"T": TS, "g": flat}) == H  # ε = 0.1 at 5.0: impossible, left out
  flat["0.1"] = [0.5 for _ in TS]                     # 0.5·(30)^0.75 = 6.4 < √2/0.1: decidable
  assert judge("fig4-inverse-t", {"T": TS, "g": flat}) == F
  # T^-0.75 is at the edge (slope within 0.25 of −1), T^-0.7 is not.
  assert judge("fig4-inverse-t", {"T": TS, "g": {"a": [t ** -0.75 for t in TS]}}) == H
  assert judge("fig4-inverse-t", {"T": TS, "g": {"a": [t ** -0.7 for t in TS]}}) == F


def test_fig4_logit_convention_moves_the_threshold():
  # 1/T below T = 0.1 only, flat from 0.1 up: holds on raw T; with d_head = 1024 the scaled
  # reading's threshold is T < 0.1·32 = 3.2, where 3 of 8 points are flat (slope −0.6): fails.
  g = {"a": [1 / t if t < 0.1 else 10.0 for t in TS]}
  s = {"T": TS, "g": g, "d_head": 1024}
  assert judge("fig4-inverse-t", s) == H
  assert judge("fig4-inverse-t", s, **{"AMBIG-12": "scaled"}) == F
  a = C.assess(C.BY_ID["fig4-inverse-t"], s)
  assert a.verdict == H and a.robust is False
  assert a.label.startswith("flips under AMBIG-12 (T on q·k/√d_head): fails")


def test_fig4_collapse():
  ts = [1, 3, 10, 30, 100]
  good = {"a": [1 / t for t in ts], "b": [1.5 / t for t in ts]}         # ×1.5 apart, 2 decades
  apart = {"a": [1 / t for t in ts], "b": [3 / t for t in ts]}          # ×3 apart
  shallow = {"a": [t ** -0.5 for t in ts], "b": [t ** -0.5 for t in ts]}  # drops 1 decade
  assert judge("fig4-collapse", {"T": ts, "g": good}) == H
  assert judge("fig4-collapse", {"T": ts, "g": apart}) == F
  assert judge("fig4-collapse", {"T": ts, "g": shallow}) == F
  assert judge("fig4-collapse", {"T": [1, 3, 10], "g": {"a": [1, .3, .1]}}) == NT  # 1 decade


# --- Figure 2a, 2b convergence and tightening, 2c -------------------------------------------

def vary_l(fn, key="d_sum_mean", ls=(32, 64, 128, 256, 512, 1024)):
  return {"rows": [{"L": L, "N": 5, key: fn(L), "d_norm_mean": 1.0, "rows_checked": 1}
                   for L in ls]}


def test_linear_in_l():
  assert judge("fig2a-linear-true", vary_l(lambda L: 3 * L)) == H
  assert judge("fig2a-linear-true", vary_l(lambda L: L ** 0.85)) == H
  assert judge("fig2a-linear-true", vary_l(lambda L: L ** 0.73)) == F
  assert judge("fig2a-linear-true", vary_l(lambda L: L, ls=(32, 64))) == NT


def test_printed_expectation_uses_the_xbar_reading():
  s = vary_l(lambda L: 2 * L, key="expected_printed_output_mean")
  for r in s["rows"]:
    r["expected_printed_xmean_mean"] = 1.0 + 0 * r["L"]
  assert judge("fig2a-linear-expected", s) == H
  assert judge("fig2a-linear-expected", s, **{"AMBIG-17": "mean"}) == F
  a = C.assess(C.BY_ID["fig2a-linear-expected"], s)
  assert a.verdict == H and a.robust is False and "AMBIG-17" in a.label


def test_converge_and_tightens():
  d = {1: 10.0, 5: 10.0, 10: 10.0, 20: 10.0, 100: 10.0}
  close = vary_n(d, expected_printed_output_mean={1: 2.0, 5: 4, 10: 6, 20: 8, 100: 9.5},
                 expected_printed_xmean_mean={1: 2.0, 5: 2, 10: 2, 20: 2, 100: 2})
  assert judge("fig2b-converge", close) == H                          # gap 0.05 at N = 100
  assert judge("fig2b-converge", close, **{"AMBIG-17": "mean"}) == F  # gap 0.8
  rows = vary_n(d)["rows"]
  for r in rows:
    r["dmax_sum_mean"] = 30.0 if r["N"] == 20 else (20.0 if r["N"] == 100 else 40.0)
  assert judge("fig2b-bound-tightens", {"rows": rows}) == H
  for r in rows:
    r["dmax_sum_mean"] = 30.0 if r["N"] == 20 else 35.0
  assert judge("fig2b-bound-tightens", {"rows": rows}) == F


def test_derived_expectation_jensen_reading():
  d = {1: 10.0, 20: 10.0, 100: 10.0}
  s = vary_n(d)
  for r in s["rows"]:  # main sum far, main + Jensen bound within 5 % at N = 100
    r["expected_mean"] = 5.0
    r["gap_mean"] = 4.5 if r["N"] == 100 else 0.0
  assert judge("fig2b-converge-derived", s) == F
  assert judge("fig2b-converge-derived", s, **{"AMBIG-4": "jensen"}) == H


def critical(by_l, alpha=0.01):
  return {L: {"critical_n": n, "alpha": alpha, "evaluated": ev} for L, (n, ev) in by_l.items()}


def scanned(printed, reconstructed):
  """A step summary with Algorithm 3's ascending scan for both E forms (L -> entry)."""
  return {"critical_scan": {L: {"printed": printed[L], "reconstructed": reconstructed[L]}
                            for L in printed}, "heads": 144}


def test_critical_n_band_and_alpha_reading():
  # L = 100: p-values by N; at α = 0.01 critical N = 6 (0.06 L, holds); at α = 0.05 the last
  # N evaluated with p <= 0.05 is 15 and the first above is 20: N_crit in 16..20 (0.16–0.20 L,
  # outside [0.03, 0.12]: fails).
  ev = {"3": 0.001, "5": 0.005, "6": 0.02, "10": 0.03, "15": 0.04, "20": 0.2}
  s = {"critical": critical({"100": (6, ev)}), "heads": 144}
  rec = {"AMBIG-18": "reconstructed"}
  assert judge("fig2c-critical-n", s, **rec) == H            # the bisection (a run before #28)
  assert judge("fig2c-critical-n", s, **rec, **{"AMBIG-9": "0.05"}) == F
  assert judge("fig2c-critical-n", s) == NT   # the printed E needs the ascending scan
  both = scanned(critical({"100": (6, ev)}), critical({"100": (6, ev)}))
  a = C.assess(C.BY_ID["fig2c-critical-n"], both)
  assert (a.verdict, a.robust) == (H, False) and a.label.startswith("flips under AMBIG-9")
  assert "AMBIG-18" not in a.label


def test_critical_n_e_form_reading_and_pass_window():
  # Printed E: passes at N = 4–6 then rejects again (a non-monotone window), first pass 4 of
  # L = 100 (0.04 L: holds). Reconstructed E: first pass at 80 (0.8 L: fails).
  pr = {str(n): (0.5 if 4 <= n <= 6 else 0.001) for n in range(1, 10)}
  rc = {str(n): (0.5 if n >= 80 else 0.001) for n in range(1, 81)}
  s = scanned({"100": {"critical_n": 4, "alpha": 0.01, "evaluated": pr, "windows": [[4, 6]]}},
              {"100": {"critical_n": 80, "alpha": 0.01, "evaluated": rc, "windows": [[80, 80]]}})
  v = C.judge_safely(C.BY_ID["fig2c-critical-n"], s, {"AMBIG-18": "printed", "AMBIG-9": "0.01"})
  assert v.status == H and "passes at N = 4–6" in v.measured, v
  assert judge("fig2c-critical-n", s, **{"AMBIG-18": "reconstructed"}) == F
  a = C.assess(C.BY_ID["fig2c-critical-n"], s)
  assert a.verdict == H and a.label.startswith("flips under AMBIG-18 (E reconstructed")


def _capped_scan(first, L, n_max, stop=None):
  """A scan entry (printed E) over N = 1 … stop (default n_max) with its first pass at
  ``first`` (None: rejects everywhere), as limits.distance.task records it."""
  stop = n_max if stop is None else stop
  ev = {str(n): (0.5 if first is not None and n >= first else 0.001) for n in range(1, stop + 1)}
  return {"critical_n": first, "alpha": 0.01, "evaluated": ev, "n_max": n_max,
          "windows": [[first, stop]] if first else []}


def test_critical_n_scan_cap_pass_at_011_l_holds_no_pass_to_l_over_4_fails():
  # Both sides of the band's upper edge with the scan capped at ⌈L/4⌉: first pass at 0.11·L at
  # every L holds; no pass up to L/4 at one L is above the band there (fails), neither dropped
  # nor fitted as a number; the row states the scan range.
  ls = (100, 200, 400)
  ok = {str(L): _capped_scan(round(0.11 * L), L, L // 4) for L in ls}
  rec = {str(L): _capped_scan(None, L, L // 4) for L in ls}
  v = C.judge_safely(C.BY_ID["fig2c-critical-n"], scanned(ok, rec), {"AMBIG-18": "printed",
                                                                     "AMBIG-9": "0.01"})
  assert v.status == H and "0.11·L" in v.measured and "scan N = 1…⌈L/4⌉" in v.measured, v
  bad = dict(ok, **{"400": _capped_scan(None, 400, 100)})
  v = C.judge_safely(C.BY_ID["fig2c-critical-n"], scanned(bad, rec), {"AMBIG-18": "printed",
                                                                      "AMBIG-9": "0.01"})
  assert v.status == F and "above the band at L = 400 (no pass for N ≤ 100)" in v.measured, v
  assert "L = 100: 11" in v.measured and "scan N = 1…⌈L/4⌉" in v.measured
  # A scan asked to stop below 0.12·L (N_max = 10 at L = 400) leaves that L not found: the
  # fit of the other Ls decides (0.11: holds), the L is named.
  short = dict(ok, **{"400": _capped_scan(None, 400, 10)})
  v = C.judge_safely(C.BY_ID["fig2c-critical-n"], scanned(short, rec), {"AMBIG-18": "printed",
                                                                        "AMBIG-9": "0.01"})
  assert v.status == H and "not found at L = 400 (no pass for N ≤ 10)" in v.measured, v
  assert "L = 400: 10" in v.measured   # N_max per L, not the default rule


def test_critical_n_reconstructed_e_reads_the_bisection_beside_a_capped_scan():
  # The scan stops at L/4 (no reconstructed pass there); the bisection found 80 at L = 100.
  s = scanned({"100": _capped_scan(5, 100, 25)}, {"100": _capped_scan(None, 100, 25)})
  s["critical"] = critical({"100": (80, {"80": 0.5, "79": 0.001})})
  v = C.judge_safely(C.BY_ID["fig2c-critical-n"], s, {"AMBIG-18": "reconstructed",
                                                      "AMBIG-9": "0.01"})
  assert v.status == F and "0.8·L" in v.measured and "above the band" not in v.measured, v
  assert judge("fig2c-critical-n", s) == H   # printed: 5 of 100


def test_critical_n_bracket_straddling_the_band_is_not_testable():
  ev = {"2": 0.001, "30": 0.2}   # at α = 0.05 N_crit is anywhere in 3..30 for L = 100
  s = {"critical": critical({"100": (None, ev)}), "heads": 144}
  assert judge("fig2c-critical-n", s, **{"AMBIG-9": "0.05", "AMBIG-18": "reconstructed"}) == NT


def test_ks_power():
  # Exact two-sided KS, n = m: smallest p is 2/C(2n, n). Hand values: n = 4 → 2/70.
  assert C.ks_min_pvalue(4) == pytest.approx(2 / 70)
  assert C.ks_min_pvalue(144) < 1e-80
  ev = {"1": 0.5}
  s = {"critical": critical({"64": (1, ev)}), "heads": 4}   # 2/70 = 0.029 > 0.01
  v = C.judge_safely(C.BY_ID["fig2c-critical-n"], s, {"AMBIG-9": "0.01",
                                                       "AMBIG-18": "reconstructed"})
  assert v.status == NT and "cannot reject" in v.reason
  # At α = 0.05 the test can reject with 4 heads: judged (N_crit = 1 at L = 64: 0.016 L, fails).
  assert judge("fig2c-critical-n", s, **{"AMBIG-9": "0.05", "AMBIG-18": "reconstructed"}) == F


# --- rewording, malformed input, tally -------------------------------------------------------

SAMPLES = {
    "fig2b-plateau": vary_n({1: 1.0, 5: 2.5, 10: 3.5, 20: 4.4, 100: 5.1}),
    "fig3-band": sep([1, 0.9, 0.85, 0.8, 0.75, 0.74, 0.73, 0.72]),
    "cor3-printed": gradient([1.0], [0.5]),
}


@pytest.mark.parametrize("cid", sorted(SAMPLES))
def test_rewording_cannot_change_the_verdict(cid):
  claim = C.BY_ID[cid]
  reworded = dataclasses.replace(claim, words="completely different words",
                                 where="elsewhere", criterion="reworded", setting="other")
  a, b = C.assess(claim, SAMPLES[cid]), C.assess(reworded, SAMPLES[cid])
  assert (a.verdict, a.label, a.default) == (b.verdict, b.label, b.default)


def test_summaries_are_read_by_key_not_by_claim_text():
  results = {"band": {"violating_queries": 0, "queries_checked": 12},
             "summary": [{"L": 32, "violations": 0}, {"L": 64, "violations": 2}]}
  s = C.summarize("vanishing", results)
  assert s["band_violations"] == 2 and s["band_queries"] == 12
  assert judge("cor1-band", s) == F
  # An old run's verdict records are not read (issue 26: verdicts live in limits/claims only).
  old = {"verdicts": [{"claim": "x", "verdict": "holds", "measured": {"queries_checked": 12,
                                                                     "exp": {"violations": 0}}}]}
  assert "band_queries" not in C.summarize("vanishing", old)
  assert "lemma1" not in C.summarize("vanishing", old)


@pytest.mark.parametrize("summary", [{}, {"rows": [{"L": "x", "N": 5}]}, {"rows": "garbage"}])
def test_malformed_or_missing_summary_is_not_testable(summary):
  for cid in ("fig2b-plateau", "thm1-bound", "fig2a-linear-true"):
    v = C.judge_safely(C.BY_ID[cid], summary, {})
    assert v.status == NT and v.reason, (cid, v)


def test_tally_counts_paper_claims_once():
  def fake(cid, verdict):
    return C.Assessment(C.BY_ID[cid], verdict, verdict, C.Verdict(verdict))

  t = C.tally([fake("fig3-band", F), fake("multihead-coverage", F), fake("cor3-tight", H),
               fake("cor3-printed", F), fake("lemma2", H), fake("fig2a-linear-true", H)])
  # derived multihead, the finding cor3-tight and the mathematical cor3-printed and lemma2
  # are not counted; they are listed under their class.
  assert t[F] == 1 and t[H] == 1
  listed = C.by_evidence([fake("cor3-printed", F), fake("lemma2", H), fake("sphere-cap", H),
                          fake("fig2a-linear-expected", H), fake("fig3-band", F)])
  assert {k: [a.claim.id for a in v] for k, v in listed.items()} == {
      C.MATHEMATICAL: ["cor3-printed", "lemma2"], C.BY_CONSTRUCTION: ["fig2a-linear-expected"],
      C.MODEL_FREE: ["sphere-cap"]}


def test_sphere_cap_reports_a_confidence_interval():
  s = sep([1, 1, 0.9, 0.8, 0.4, 0.3, 0.3, 0.3], maxima=[1, 1, 0.97, 0.9, 0.6, 0.3, 0.3, 0.3])
  s["per_head"] = [{"n": "16", "frac": "0.6", "stderr": "0.01"}]
  v = C.judge_safely(C.BY_ID["sphere-cap"], s, {})
  assert v.status == H and "± 0.0196" in v.measured


def test_rejudge_reads_a_stored_report_under_the_primary_reading():
  """A report before issue 28: fig2b-plateau 'depends' only through the norm of the sum (now
  excluded) and the keys (excluded): re-read, it holds and is robust; a hand-made verdict under
  the residual stream that differs is named."""
  from limits.claims import rejudge
  text = "\n".join([
      "| 7 | `fig2b-plateau` | Fig. 2b | w | c | m1 | **depends on an ambiguity**: x | f |",
      "- `fig2b-plateau`:",
      "  - AMBIG-1 d̃ = Σ‖α_i x_i − s‖; AMBIG-7 x_i = per-head value vectors: **holds**, m1",
      "  - AMBIG-1 d̃ = Σ‖α_i x_i − s‖; AMBIG-7 x_i = per-head key vectors: **fails**, m2",
      "  - AMBIG-1 d̃ = Σ‖α_i x_i − s‖; AMBIG-7 x_i = the layer's normalised residual stream: "
      "**holds**, m3",
      "  - AMBIG-1 d̃ = ‖Σ α_i x_i − s‖; AMBIG-7 x_i = per-head value vectors: **fails**, m4",
      "- `fig3-band`:",
      "  - AMBIG-7 x_i = per-head value vectors: **fails**, m5",
      "  - AMBIG-7 x_i = per-head key vectors: **holds**, m6",
      "  - AMBIG-7 x_i = the layer's normalised residual stream: **holds**, m7",
  ])
  got = {a.claim.id: a for a in rejudge.rejudge(text)}
  a = got["fig2b-plateau"]
  assert (a.verdict, a.robust, a.label) == (H, True, C.SAME)
  b = got["fig3-band"]
  assert (b.verdict, b.robust) == (F, False)
  assert b.label.startswith("flips under AMBIG-7 (x_i = the layer's normalised residual stream)")
  assert got["fig2c-critical-n"].verdict == NT   # the printed E's scan needs a rerun
