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
