"""CLI tests of experiments/sweep.py in subprocesses: a run and its files, resuming, a run killed
with SIGKILL mid-sweep and resumed, and bad values (non-zero exit, one line, no traceback)."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from limits import sweep

REPO = Path(__file__).resolve().parent.parent
TOY = "x=linspace:-1:2:10;n=2,3"  # 20 cells in 2 static groups


def _env(**extra):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("LIMITS_SWEEP_TOY_DELAY", None)
  env.update(extra)
  return env


def _cli(*args, timeout=180, **env):
  return subprocess.run([sys.executable, "-m", "experiments.sweep", *args], cwd=REPO,
                        env=_env(**env), capture_output=True, text=True, timeout=timeout)


def _valid_lines(path):
  """All lines of a shard; asserts each complete line is a valid record."""
  data = Path(path).read_bytes()
  lines = data.split(b"\n")
  recs = [sweep.parse_record_line(l) for l in lines[:-1]]
  return data, recs, lines[-1]


def test_run_writes_results_and_resume_skips(tmp_path):
  out = tmp_path / "run"
  p = _cli("--experiment=toy", f"--grid={TOY}", f"--out_dir={out}", "--batch_size=3",
           "--seed=4")
  assert p.returncode == 0, p.stderr[-2000:]
  assert f"results in {out}" in p.stdout
  for name in ("sweep.json", "records.0.jsonl", "results.json", "records.csv"):
    assert (out / name).is_file(), name
  res = json.loads((out / "results.json").read_text())
  assert set(res) == {"experiment", "config", "env", "results"}
  assert res["experiment"] == "sweep" and res["config"]["seed"] == 4
  r = res["results"]
  assert (r["experiment"], r["n_cells"], r["complete"], r["computed"]) == ("toy", 20, True, 20)
  assert len(r["records"]) == 20
  # results.json, records.csv and the store agree, in grid order.
  recs = sweep.collect(out, complete=True)
  assert [x["id"] for x in r["records"]] == [x["id"] for x in recs]
  with open(out / "records.csv") as f:
    rows = list(csv.DictReader(f))
  assert [row["id"] for row in rows] == [x["id"] for x in recs]
  assert [float(row["square"]) for row in rows] == [x["result"]["square"] for x in recs]
  # Square of the grid values (closed form, float32 to 1 ulp).
  for row in rows:
    assert float(row["square"]) == pytest.approx(float(row["x"]) ** 2, rel=1e-6, abs=1e-12)
  # Same command again: nothing recomputed, same results.
  p2 = _cli("--experiment=toy", f"--grid={TOY}", f"--out_dir={out}", "--batch_size=3",
            "--seed=4")
  assert p2.returncode == 0, p2.stderr[-2000:]
  assert "0 cells computed, 20 already done" in p2.stdout
  assert sweep.collect(out, complete=True) == recs


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
  killed, clean = tmp_path / "killed", tmp_path / "clean"
  args = ["--experiment=toy", f"--grid={TOY}", "--batch_size=1", "--seed=9", "--noprogress",
          "--devices=1"]
  # Each step sleeps 0.25 s (20 steps = 5 s): kill once 3 records exist.
  proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep", *args,
                           f"--out_dir={killed}"], cwd=REPO,
                          env=_env(LIMITS_SWEEP_TOY_DELAY="0.25"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  shard = killed / "records.0.jsonl"
  deadline = time.time() + 120
  try:
    while time.time() < deadline:
      if shard.exists() and shard.read_bytes().count(b"\n") >= 3:
        break
      assert proc.poll() is None, "the sweep finished or failed before it could be killed"
      time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
  finally:
    proc.wait(timeout=30)
  assert proc.returncode == -signal.SIGKILL
  _, recs, tail = _valid_lines(shard)
  n_before = len(recs)
  # The kill really interrupted the run, and what it left is whole records (or a partial tail).
  assert 3 <= n_before < 20
  assert all(r is not None for r, _ in recs)
  assert not (killed / "results.json").exists()

  p = _cli(*args, f"--out_dir={killed}")
  assert p.returncode == 0, p.stderr[-2000:]
  if tail:
    assert "partial record" in p.stderr
  assert f"{20 - n_before} cells computed, {n_before} already done" in p.stdout
  # The uninterrupted reference, in-process with the same settings (seed 9, 1 device, batch 1).
  sweep.run_sweep("toy", sweep.parse_grid(TOY), clean, seed=9, batch_size=1, devices=1,
                  progress=False, log=None)
  # Identical final records (ids, cells, results bitwise) and no duplicate or partial line.
  assert sweep.collect(killed, complete=True) == sweep.collect(clean, complete=True)
  data, recs, tail = _valid_lines(shard)
  ids = [r["id"] for r, _ in recs]
  assert tail == b"" and len(ids) == 20 and len(set(ids)) == 20
  a = json.loads((killed / "results.json").read_text())["results"]["records"]
  assert [(x["id"], x["cell"], x["result"]) for x in a] == [
      (x["id"], x["cell"], x["result"]) for x in sweep.collect(clean)]


BAD = [
    (["--experiment=nope"], "unknown experiment"),
    (["--experiment=toy", "--grid=x=1,,2"], "empty value"),
    (["--experiment=toy", "--grid=x"], "is not NAME=v1,v2"),
    (["--experiment=toy", "--grid=y=1"], "unknown parameter"),
    (["--experiment=gradient", "--grid=temperature=0,1"], "temperature=0.0 must be > 0"),
    (["--experiment=toy", "--devices=4096"], "--devices=4096 but only"),
    (["--experiment=toy", "--devices=-1"], "--devices must be >= 0"),
    (["--experiment=toy", "--batch_size=0"], "--batch_size must be a positive integer"),
    (["--experiment=toy", "--seed=-1"], "--seed must be an integer in [0, 2**32)"),
    (["--experiment=toy", "--seed=4294967296"], "--seed must be an integer in [0, 2**32)"),
    (["--experiment=toy", "--grid=x=1", "--config=g.json"], "either --grid or --config"),
    (["--experiment=toy", "--config=/nonexistent/grid.json"], "cannot read grid file"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[m for _, m in BAD])
def test_bad_values_exit_nonzero_with_one_line(tmp_path, args, message):
  out = tmp_path / "run"
  p = _cli(*args, f"--out_dir={out}", timeout=120)
  assert p.returncode == 2  # flag errors and library errors alike
  assert "Traceback" not in p.stderr + p.stdout
  assert len(p.stderr.strip().splitlines()) == 1, p.stderr
  assert p.stderr.startswith("error:") and message in p.stderr, p.stderr
  assert not (out / "records.0.jsonl").exists()


def test_bad_config_json_and_mismatched_rerun(tmp_path):
  bad = tmp_path / "grid.json"
  bad.write_text("{not json")
  p = _cli("--experiment=toy", f"--config={bad}", f"--out_dir={tmp_path / 'a'}")
  assert p.returncode == 2 and "Traceback" not in p.stderr
  assert [l for l in p.stderr.splitlines() if l.startswith("error:")] == [
      f"error: grid file {str(bad)!r} is not valid JSON: Expecting property name enclosed in "
      "double quotes at line 1"]
  good = tmp_path / "good.json"
  good.write_text(json.dumps({"cells": [{"x": 1.0, "n": 2}, {"x": 3.0}]}))
  out = tmp_path / "b"
  p = _cli("--experiment=toy", f"--config={good}", f"--out_dir={out}")
  assert p.returncode == 0, p.stderr[-2000:]
  assert [r["cell"] for r in sweep.collect(out, complete=True)] == [{"x": 1.0, "n": 2},
                                                                    {"x": 3.0, "n": 3}]
  p = _cli("--experiment=toy", "--grid=x=1", f"--out_dir={out}")
  assert p.returncode == 2 and "Traceback" not in p.stderr
  err = [l for l in p.stderr.splitlines() if l.startswith("error:")]
  # Says exactly what differs: the cell count and the first differing cell (n's default is 3).
  assert len(err) == 1 and ("holds a different sweep with recorded cells: grid: 2 cells before, "
                            "1 now; first differing cell 0: n=2 before, 3 now") in err[0], p.stderr


def test_describe_lists_experiments_and_defaults():
  p = _cli("--describe", timeout=60)
  assert p.returncode == 0, p.stderr[-2000:]
  for name, exp in sweep.EXPERIMENTS.items():
    assert f"{name}: {exp.description}" in p.stdout
    for param, default in exp.defaults.items():
      assert f"  {param} = {default!r}" in p.stdout
