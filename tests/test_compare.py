"""limits.claims.compare / experiments.compare: runs side by side from hand-made results.json."""

import json
import subprocess
import sys

import pytest

from limits.claims import compare
from limits.errors import LimitsError


def _rec(cid, verdict, label=None, kind="paper", measured="m", derived=(), sample=""):
  return {"id": cid, "kind": kind, "where": f"where {cid}", "verdict": verdict,
          "label": label or verdict, "measured": measured, "sample": sample,
          "derived_from": list(derived), "reason": ""}


def _write(tmp_path, name, recs):
  d = tmp_path / name
  d.mkdir()
  (d / "results.json").write_text(json.dumps({"results": {"claims": recs}}))
  return d


A = [_rec("a", "holds", "holds under every reading", sample="10 rows"),
     _rec("b", "fails", "fails under every reading"),
     _rec("c", "depends on an ambiguity", "depends on AMBIG-1: holds with x; fails with y"),
     _rec("d", "fails", derived=("b",)),
     _rec("f", "holds", kind="finding", measured="finding value")]
B = [_rec("a", "fails"), _rec("b", "fails"), _rec("c", "holds"), _rec("d", "holds", derived=("b",)),
     _rec("f", "fails", kind="finding")]


def test_tally_counts_paper_claims_once():
  # d is derived from b and f is a finding: neither is counted.
  assert compare.tally(A) == {"holds": 1, "fails": 1, "depends on an ambiguity": 1,
                              "not testable": 0, "not run": 0}
  assert compare.tally(B)["fails"] == 2 and compare.tally(B)["holds"] == 1


def test_primary_reading_records_name_the_flip_and_leave_other_evidence_uncounted():
  flip = {**_rec("a", "holds", "flips under AMBIG-7 (x_i = residual): fails, m"), "robust": False,
          "evidence": "empirical"}
  same = {**_rec("b", "fails", "same under every admissible reading"), "robust": True,
          "evidence": "empirical"}
  math_ = {**_rec("c", "holds", "single reading"), "robust": True, "evidence": "mathematical"}
  assert compare.short_verdict(flip) == "holds (flips under AMBIG-7)"
  assert compare.short_verdict(same) == "fails (every admissible reading)"
  assert compare.short_verdict(math_) == "holds; mathematical, not counted"
  assert compare.tally([flip, same, math_])["holds"] == 1   # the mathematical row is not counted


def test_short_verdicts():
  assert compare.short_verdict(A[0]) == "holds (every reading)"
  assert compare.short_verdict(A[2]) == "depends (AMBIG-1)"
  assert compare.short_verdict(A[3]) == "fails; derived, not counted"
  partial = _rec("x", "holds", "holds under every computable reading (2 of 6; not computable: z)")
  assert compare.short_verdict(partial) == "holds (2 of 6 readings computable, all holds)"


def test_side_by_side_columns_and_failing_lines(tmp_path):
  runs = [compare.load_run("Real", _write(tmp_path, "r", A)),
          compare.load_run("Toy", _write(tmp_path, "t", B[:-1]))]  # Toy lacks finding f
  text = compare.side_by_side(runs)
  rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
          for line in text.splitlines() if line.startswith("| `")}
  assert rows["`a`"] == ["where a", "m [10 rows]", "holds (every reading)", "m", "fails"]
  assert rows["`f`"][1:] == ["finding value", "holds", "not in this run", "—"]
  findings = text.split("**The suite's own findings**")[1]
  assert "`f`" in findings and "`a`" not in findings.split("**Claims")[0]
  assert "Real: 1 holds, 1 fails, 1 depends on an ambiguity" in text
  assert "Toy: 1 holds, 2 fails" in text
  fl = text.split("run by run**")[1]
  assert "- `b`: fails on every run." in fl
  assert "- `a`: fails on Toy (Real: holds (every reading))." in fl
  assert "- `c`: depends on a reading on Real (Toy: holds)." in fl
  assert "`d`" in fl  # derived claims are listed (fails on Real), though not counted


def test_bad_run_directories(tmp_path):
  with pytest.raises(LimitsError, match="no results.json"):
    compare.load_run("x", tmp_path)
  (tmp_path / "results.json").write_text("{}")
  with pytest.raises(LimitsError, match="not a reproduction results.json"):
    compare.load_run("x", tmp_path)


def test_cli_prints_and_fails_in_one_line(tmp_path):
  d = _write(tmp_path, "r", A)
  ok = subprocess.run([sys.executable, "-m", "experiments.compare", f"--run=R={d}"],
                      capture_output=True, text=True)
  assert ok.returncode == 0 and "| `a` | where a |" in ok.stdout
  for bad in ("--run=nolabel", f"--run=R={tmp_path / 'missing'}", "--width=3"):
    r = subprocess.run([sys.executable, "-m", "experiments.compare", bad],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)


# --- value_diff: two runs' recorded values, file by file -------------------------------------

def _results(path, results, config=None, env=None):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"experiment": "x", "config": config or {"seed": 0},
                              "env": env or {}, "results": results}))


def _two_runs(tmp_path):
  a, b = tmp_path / "a", tmp_path / "b"
  for d, secs, commit in ((a, 3.0, "aaa"), (b, 5.0, "bbb")):
    _results(d / "results.json", {"claims": [], "steps": {"s1": {"log": f"{d}/s1/log.txt",
                                                                   "seconds": secs}}},
             env={"git_commit": commit})
  _results(a / "s1" / "results.json",
           {"x": 1.0, "y": [1, 2.0, float("nan")], "wall_s": 3.0, "per_N_seconds": {"1": 0.5},
            "path": "/checkout_a/model", "verdict": "holds", "zipf_s": 1.1, "n": 4})
  _results(b / "s1" / "results.json",
           {"x": 1.0 + 1e-12, "y": [1, 2.0, float("nan")], "wall_s": 9.0,
            "per_N_seconds": {"1": 0.7}, "path": "/checkout_b/model", "verdict": "fails",
            "zipf_s": 1.2, "n": "4"})
  _results(a / "s2" / "results.json", {"x": 1.0})
  return a, b


def test_value_diff_counts_numbers_and_leaves_out_timings_env_and_paths(tmp_path):
  from limits.claims import value_diff
  a, b = _two_runs(tmp_path)
  diffs = {d.name: d for d in value_diff.diff_runs(("A", a), ("B", b))}
  assert list(diffs) == ["results.json", "s1/results.json", "s2/results.json"]
  top = diffs["results.json"]  # seconds, env and the log path under each run dir: left out
  assert (top.numbers, top.differing, top.others) == (1, 0, ())  # config/seed
  s1 = diffs["s1/results.json"]
  # compared numbers: config/seed, x, y[0..2] (NaN = NaN), zipf_s (a Zipf exponent, not a time)
  assert (s1.numbers, s1.differing) == (6, 2)
  assert s1.max_key == "results/zipf_s" and s1.max_rel == pytest.approx(0.1 / 1.2, rel=1e-12)
  assert s1.others == ("results/n: 4 != '4'", "results/verdict: 'holds' != 'fails'")
  assert diffs["s2/results.json"].only_in == "A"
  text = value_diff.render(list(diffs.values()), ("A", "B"))
  assert "| s1/results.json | 6 | 2 | 8.3e-02 (results/zipf_s) |" in text
  assert "| s2/results.json | — | — | — | only in A |" in text
  assert text.rstrip().endswith("3 files, 7 numbers, 2 differing (largest relative difference "
                                "8.3e-02), 3 other differences.")


def test_value_diff_relative_difference_closed_forms():
  from limits.claims.value_diff import diff_trees, rel_diff
  inf, nan = float("inf"), float("nan")
  assert rel_diff(2.0, 1.0) == 0.5 and rel_diff(-1.0, 1.0) == 2.0 and rel_diff(1, 1.0) == 0.0
  assert rel_diff(nan, nan) == 0.0 and rel_diff(inf, inf) == 0.0
  assert rel_diff(inf, -inf) == inf and rel_diff(1.0, nan) == inf and rel_diff(0.0, 1e-300) == 1.0
  d = diff_trees("f", {"v": [1, 2], "b": True}, {"v": [1, 2, 3], "b": 1})
  assert d.numbers == 0 and len(d.others) == 2  # a list that changed length; bool vs int


def test_cli_values_table_and_its_one_line_errors(tmp_path):
  a, b = _two_runs(tmp_path)
  ok = subprocess.run([sys.executable, "-m", "experiments.compare", f"--run=A={a}",
                       f"--run=B={b}", "--values"], capture_output=True, text=True)
  assert ok.returncode == 0, ok.stderr
  assert "| s1/results.json | 6 | 2 | 8.3e-02 (results/zipf_s) |" in ok.stdout
  for bad in ([f"--run=A={a}", "--values"], [f"--run=A={a}", f"--run=C={tmp_path / 'no'}",
                                             "--values"]):
    r = subprocess.run([sys.executable, "-m", "experiments.compare", *bad],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)


def test_value_diff_truncated_file_is_one_line_naming_it(tmp_path):
  from limits.claims import value_diff
  a, b = _two_runs(tmp_path)
  (b / "s1" / "results.json").write_text('{"results": {"x": 1.')  # cut off mid-write
  with pytest.raises(LimitsError, match=r"s1/results.json: not valid JSON"):
    value_diff.diff_runs(("A", a), ("B", b))
