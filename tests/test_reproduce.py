"""experiments.reproduce end to end on a random-weight model and small text files, and the
pieces of limits.reproduction that decide whether a step's outputs can be trusted.

Checks: the report has one row per registered claim (by id), with a verdict, a reason when not
assessed and numbers when judged; the paper's tally and the findings table are separate; lengths
are clipped to the model's context; a rerun resumes; bad flags, a missing corpus and an
unwritable output folder fail with one line before anything is created; the plan's overrides
are fields of each experiment's config; a step whose results.json is missing, truncated,
unfinished or for other settings is rerun; a failed step marks its claims "not run",
prints its reason once at the end with its log, and makes the exit code non-zero; killing the
parent (SIGTERM or SIGKILL) ends the running step.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from limits import claims
from limits import reproduction as rp
from tests.cli_helpers import make_model_and_texts, pids_with, run_experiment, start_experiment

VERDICTS = {claims.HOLDS, claims.FAILS, claims.NOT_TESTABLE, claims.DEPENDS, claims.NOT_RUN}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("reproduce")
  root = make_model_and_texts(root, repeat=10, n_layer=2, n_head=2, n_embd=16, n_positions=64,
                              vocab_size=300, seed=3)
  (root / "short.txt").write_text("Too short for any window.\n", encoding="utf-8")
  return root


def common(root, out, text="text.txt"):
  return [f"--model={root / 'model'}", f"--text={root / text}", f"--out_dir={out}", "--quick"]


@pytest.mark.slow  # ~5 min on 2 cores; test_truncated_results_rerun_without_traceback resumes fast
def test_quick_end_to_end_and_resume(model_dir, tmp_path):
  out = tmp_path / "r"
  p = run_experiment("reproduce", common(model_dir, out), timeout=900)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  res = json.loads((out / "results.json").read_text())["results"]
  rows, steps = res["claims"], res["steps"]
  assert [r["id"] for r in rows] == [c.id for c in claims.CLAIMS]
  assert set(steps) == set(rp.STEP_NAMES)
  assert all(s["status"] == "ok" for s in steps.values()), steps
  # The steps shared their records through OUT/records (limits.records), removed after success.
  assert not (out / "records").exists()
  assert not any("records cache" in (out / n / "log.txt").read_text() for n in steps)
  for r in rows:
    assert r["verdict"] in VERDICTS, r
    if r["verdict"] in (claims.HOLDS, claims.FAILS):
      assert any(ch.isdigit() for ch in r["measured"]), r
    elif r["verdict"] == claims.NOT_TESTABLE:
      assert r["label"], r  # says why
  by_id = {r["id"]: r for r in rows}
  # Model-independent facts: the tied top-two row breaks 1/(4T) and meets 1/(2T) exactly.
  assert by_id["cor3-printed"]["verdict"] == claims.FAILS
  assert by_id["cor3-tight"]["verdict"] == claims.HOLDS
  # 2 layers × 2 heads = 4 per-head means per KS sample: the smallest attainable p-value is
  # 2/C(8, 4) = 0.029 > 0.01, so at α = 0.01 the critical-N claim cannot be tested.
  crit = {x["reading"]: x for x in by_id["fig2c-critical-n"]["readings"]}
  first = next(iter(crit.values()))
  assert first["verdict"] == claims.NOT_TESTABLE and "cannot reject" in first["reason"]
  # The AMBIG-7 reruns ran and were judged: no key / residual-stream reading is "not run", and
  # several claims get a verdict under them.
  alt = [(r["id"], x) for r in rows for x in r["readings"]
         if "AMBIG-7" in x["reading"] and "per-head value" not in x["reading"]]
  assert alt and all("not run" not in (x["reason"] or "") for _, x in alt), alt
  assert len({cid for cid, x in alt if x["verdict"] in (claims.HOLDS, claims.FAILS)}) >= 3, alt
  # The tally counts the paper's empirical claims only, each once.
  counted = [c for c in claims.CLAIMS if c.kind == claims.PAPER and not c.derived_from
             and c.evidence == claims.EMPIRICAL]
  assert sum(res["tally"].values()) == len(counted)
  # Every model step's lengths were clipped to n_positions = 64 and its N grids below L.
  model_steps = [s["command"].split() for s in steps.values() if "--model=" in s["command"]]
  assert len(model_steps) == 6 + 8  # and the AMBIG-7 key / hidden reruns of 4 of them
  for args in model_steps:
    for arg in args:
      name, _, value = arg.partition("=")
      if name in ("--length", "--lengths", "--ns", "--n_values"):
        assert all(int(v) <= 64 for v in value.split(",")), args
      if name in ("--ns", "--n_values"):
        assert all(int(v) < 64 for v in value.split(",")), args
  report = (out / "report.md").read_text()
  assert "## The paper's claims" in report and "## The suite's own findings" in report
  paper_rows = report.split("## The suite's own findings")[0]
  assert "`cor3-tight`" not in paper_rows and "`cor3-printed`" in paper_rows
  assert "n_positions = 64" in report and "AMBIG-17" in report

  again = run_experiment("reproduce", common(model_dir, out), timeout=300)
  assert again.returncode == 0, again.stderr
  assert again.stdout.count("done earlier, skipped") == len(rp.STEP_NAMES)
  rows2 = json.loads((out / "results.json").read_text())["results"]["claims"]
  assert [r["verdict"] for r in rows2] == [r["verdict"] for r in rows]


@pytest.mark.parametrize("args,needle", [
    (["--only=nope"], "--only has unknown step"),
    (["--model=/no/such/model"], "/no/such/model"),
    (["--windows=0"], "--windows must be a positive integer"),
    (["--data_dir=/no/such/folder"], "/no/such/folder"),
])
def test_bad_flags_one_line(tmp_path, args, needle):
  p = run_experiment("reproduce", [f"--out_dir={tmp_path / 'x'}", "--quick", *args])
  assert p.returncode != 0 and "Traceback" not in p.stderr
  # One line names the problem: "error: ..." from the guard, or absl's flag-validator line.
  hits = [ln for ln in p.stderr.splitlines() if needle in ln]
  assert len(hits) == 1 and hits[0].startswith(("error:", "FATAL Flags parsing error")), p.stderr
  assert not (tmp_path / "x").exists()  # nothing is created before the inputs are checked


def test_unwritable_out_dir_one_line(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a folder")
  p = run_experiment("reproduce", [f"--out_dir={blocker / 'sub'}", "--quick",
                                   "--only=gradient_synthetic"])
  assert p.returncode != 0 and "Traceback" not in p.stderr
  errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
  assert len(errors) == 1 and str(blocker) in errors[0], p.stderr
  assert "[gradient_synthetic]" not in p.stdout  # stopped before the first step


# --- trusting a step's outputs ---------------------------------------------------------------

def _config_class(module):
  from limits import vanishing
  from limits.distance import task as distance_task
  from limits.gradient import task as gradient
  from limits.separability import task as separability_task

  return {"experiments.gradient": gradient.GradientConfig,
          "experiments.vanishing": vanishing.VanishingConfig,
          "experiments.distance": distance_task.DistanceConfig,
          "experiments.separability": separability_task.SeparabilityConfig}[module]


@pytest.mark.parametrize("quick", [False, True])
def test_plan_overrides_are_fields_of_each_config(quick):
  settings = rp.Settings(model="m", quick=quick, windows=3, data_dir="d", text="t")
  for step in rp.STEPS:
    cls = _config_class(step.module)
    overrides = rp.step_overrides(step, settings, ctx=128)
    config = cls(**overrides)  # an unknown name is a TypeError here
    for k, v in overrides.items():
      assert type(getattr(cls(), k)) in (type(v), type(None)), (step.name, k, v)
      assert getattr(config, k) == v
    assert rp.step_args(step, settings, 128) == [f"--{k}={v}" for k, v in overrides.items()]
    assert step.config is cls  # the step names its config class
  rp.check_plan(rp.STEPS, settings)  # and the plan passes its check


def _distance_step(**full):
  import dataclasses

  return dataclasses.replace(next(s for s in rp.STEPS if s.module == "experiments.distance"),
                             full=full)


@pytest.mark.parametrize("full,line", [
    ({"lenghts": "32"}, "step distance_vary_length: 'lenghts' is not a setting of "
     "experiments.distance (DistanceConfig); allowed: avg_x64, batch, data_dir, form, "),
    ({"mode": "vary"}, "step distance_vary_length: mode='vary'; allowed: vary_length, vary_n, "
     "critical_n"),
    ({"batch": 0}, "step distance_vary_length: batch=0 must be a positive integer"),
    ({"ks_alpha": 1.0}, "step distance_vary_length: ks_alpha=1.0 must be in (0, 1)")])
def test_plan_refuses_a_bad_override_in_one_line(full, line):
  from limits.errors import LimitsError

  with pytest.raises(LimitsError) as e:
    rp.check_plan([_distance_step(**full)], rp.Settings())
  assert str(e.value).startswith(line) and "\n" not in str(e.value)


@pytest.mark.parametrize("full", [{"lengths": "32"}, {"mode": "vary_n"}, {"batch": 1},
                                  {"ks_alpha": 0.999}])
def test_plan_accepts_overrides_inside_the_bounds(full):
  rp.check_plan([_distance_step(**full)], rp.Settings())


def test_fit_to_context_clips_lengths_and_top_n():
  assert rp.fit_to_context({"length": 1024, "n_values": "1,2,64,128"}, 64) == {
      "length": 64, "n_values": "1,2"}
  assert rp.fit_to_context({"lengths": "32,64,128", "ns": "5,40,100"}, 48) == {
      "lengths": "32", "ns": "5"}
  assert rp.fit_to_context({"lengths": "512,1024", "ns": "1000"}, 256) == {
      "lengths": "256", "ns": "255"}
  assert rp.as_flags({"x64": False, "plot": True, "n": 2}) == ["--nox64", "--plot", "--n=2"]


def write_step(d, text):
  d.mkdir(parents=True, exist_ok=True)
  if text is not None:
    (d / "results.json").write_text(text)
  return d


GOOD = json.dumps({"experiment": "x", "config": {"mode": "vary_n", "seed": 0, "ks_alpha": 0.01},
                   "env": {}, "results": {"verdicts": []}})


@pytest.mark.parametrize("text,why", [
    (None, "missing"),
    (GOOD[: len(GOOD) // 2], "unreadable"),
    (json.dumps({"results": {"complete": False}}), "unfinished"),
    (json.dumps([1, 2]), "no 'results' block"),
])
def test_step_not_done_without_good_results(tmp_path, text, why):
  d = write_step(tmp_path / "s", text)
  ok, reason = rp.step_done(d, {})
  assert not ok and why in reason
  with pytest.raises(rp.Unreadable, match=why):
    rp.load_results(d)


def test_step_done_only_for_its_settings(tmp_path):
  d = write_step(tmp_path / "s", GOOD)
  assert rp.step_done(d, {"mode": "vary_n", "ks_alpha": 0.01}) == (True, "")
  ok, why = rp.step_done(d, {"mode": "vary_n", "seed": 1})
  assert not ok and "seed: 0 there, 1 now" in why
  ok, why = rp.step_done(d, {"lengths": "64"})  # a setting the run did not record
  assert not ok and "lengths: '<unset>' there, '64' now" in why


def test_unreadable_step_results_mark_claims_not_run(tmp_path):
  write_step(tmp_path / "gradient", GOOD[:20])
  status = {"gradient": {"status": "ok"}, "vanishing": {"status": "failed"}}
  by_id = {a.claim.id: a for a in rp.assess_all(tmp_path, status)}
  assert by_id["cor3-printed"].verdict == claims.NOT_RUN
  assert "unreadable" in by_id["cor3-printed"].label
  assert by_id["cor1-band"].label == "not run (step vanishing failed)"
  assert by_id["fig3-band"].label == "not run (step separability_model not run: --only)"


def _reproduce_in_process(out, only):
  """``experiments.reproduce --quick --only=ONLY --out_dir=OUT`` through the function its
  ``main`` calls, in this process (no model step, so no model or corpus); each step still runs
  as its own CLI subprocess. This process's signal handlers are back afterwards."""
  from limits.reproduction import runner

  steps = [s for s in rp.STEPS if s.name in only]
  handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
  _, status = runner.reproduce(steps, rp.Settings(quick=True), out, {}, identity={},
                               overwrite=False)
  assert {sig: signal.getsignal(sig) for sig in handlers} == handlers  # run_all restored them
  return status


def test_truncated_results_rerun_without_traceback(tmp_path, capsys, monkeypatch):
  """Resuming and rerunning a step through the runner in this process (the CLI around it:
  test_failed_step_... and the kill tests below); the step itself runs as its CLI, so its
  recorded config is what the resume check reads."""
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # what the steps inherit, as run_experiment sets
  out = tmp_path / "r"
  first = _reproduce_in_process(out, ["gradient_synthetic"])
  assert first["gradient_synthetic"]["status"] == "ok", first
  assert "skipped" not in first["gradient_synthetic"]
  capsys.readouterr()
  again = _reproduce_in_process(out, ["gradient_synthetic"])  # resumes: the step is finished
  stdout = capsys.readouterr().out
  assert again["gradient_synthetic"]["skipped"] is True, again
  assert stdout.count("done earlier, skipped") == 1, stdout
  path = out / "gradient_synthetic" / "results.json"
  path.write_text(path.read_text()[:100])  # torn write
  again = _reproduce_in_process(out, ["gradient_synthetic"])
  stdout = capsys.readouterr().out
  assert again["gradient_synthetic"]["status"] == "ok", again
  assert "skipped" not in again["gradient_synthetic"], again
  assert "running it again" in stdout and "done earlier" not in stdout
  json.loads(path.read_text())  # whole again


_ALLOC_STEPS = r"""
import json, sys
from pathlib import Path
from limits import reproduction as rp
from limits.reproduction import runner
out = Path(sys.argv[1])
def step(mb, cpu):
  over = {"mb": mb, "cpu": cpu}
  return rp.Step(name=f"alloc{mb}", module="tests.alloc_step", full=over, quick=over,
                 uses_model=False)
print(json.dumps([runner.run_step(step(mb, cpu), out, rp.Settings(quick=True), None,
                                  resume=False) for mb, cpu in ((300, 0.6), (0, 0))]))
"""


def test_step_record_has_cpu_seconds_and_peak_memory(tmp_path):
  """The runner's ``wait4`` record of a step (what benchmarks.reproduce and report.md show):
  a step that touches 300 MB peaks at ≥ 300 MB, one that touches none stays < 100 MB; 0.6 s
  of CPU spun is ≥ 0.5 CPU s, none is < 0.5 (start-up is ~0.05 s). CPU time, not wall time:
  the test holds on a loaded machine. The runner runs in a fresh interpreter, as
  ``experiments.reproduce`` does: the kernel counts the launching process's resident
  high-water mark into the step's (the exec replaces its memory), so under pytest (hundreds
  of MB) the empty step would read as large as this process; there it is ~40 MB."""
  p = subprocess.run([sys.executable, "-c", _ALLOC_STEPS, str(tmp_path)], capture_output=True,
                     text=True, timeout=120, check=False,
                     cwd=Path(__file__).resolve().parent.parent)
  assert p.returncode == 0, p.stderr
  big, small = json.loads(p.stdout.strip().splitlines()[-1])
  assert big["peak_rss_mb"] >= 300 and 1 < small["peak_rss_mb"] < 100, (big, small)
  assert big["cpu_s"] >= 0.5 > small["cpu_s"] >= 0, (big, small)
  assert big["status"] == "failed" and big["error"].endswith("results.json is missing"), big
  report = rp.render_report([], {"alloc300": big}, rp.Settings(quick=True), 1.0, None,
                            {"hold": 0})
  line = next(ln for ln in report.splitlines() if ln.startswith("| alloc300 |"))
  assert f"| {big['cpu_s']:.1f} | {big['peak_rss_mb']:.0f} |" in line, line


# --- a failed step and an interrupted parent -------------------------------------------------

def test_failed_step_marks_rows_prints_reason_once_and_exits_nonzero(model_dir, tmp_path):
  out = tmp_path / "r"
  p = run_experiment("reproduce", common(model_dir, out, text="short.txt") + ["--only=vanishing"],
                     timeout=600)
  assert p.returncode == 1, p.stdout + p.stderr
  assert "Traceback" not in p.stderr
  log = out / "vanishing" / "log.txt"
  step_error = next(ln for ln in log.read_text().splitlines() if ln.startswith("error:"))
  both = p.stdout + p.stderr
  assert both.count(step_error) == 1, both  # the step's reason, once, at the end
  lines = p.stderr.strip().splitlines()
  assert lines[0].startswith("error: 1 of 1 steps failed")
  assert str(log) in lines[-1] and lines[-1].strip().startswith("vanishing:")
  res = json.loads((out / "results.json").read_text())["results"]
  for r in res["claims"]:
    if r["step"] == "vanishing":
      assert r["verdict"] == claims.NOT_RUN and r["label"] == "not run (step vanishing failed)"
  assert not rp.step_done(out / "vanishing", {})[0]


def _wait_for(cond, timeout):
  end = time.monotonic() + timeout
  while time.monotonic() < end:
    if cond():
      return True
    time.sleep(0.2)
  return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_parent_ends_the_running_step(tmp_path, sig):
  out = tmp_path / "r"
  needle = f"--out_dir={out / 'gradient_synthetic'}"
  proc = start_experiment("reproduce", [f"--out_dir={out}", "--quick",
                                        "--only=gradient_synthetic,separability_sphere"])
  try:
    assert _wait_for(lambda: pids_with(needle), 120), proc.communicate(timeout=5)
    time.sleep(1.0)  # the step is past its start-up
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert _wait_for(lambda: not pids_with(needle), 30), pids_with(needle)
  finally:
    if proc.poll() is None:
      proc.kill()
    for pid in pids_with(needle):
      os.kill(pid, signal.SIGKILL)
  if sig == signal.SIGTERM:
    assert proc.returncode == 130
    report = (out / "report.md").read_text()
    assert "interrupted" in report  # what was done is reported; the step is marked
    # The step after it was asked for but never started: "not reached", not "--only".
    rows = json.loads((out / "results.json").read_text())["results"]["claims"]
    sphere = [r for r in rows if r["step"] == "separability_sphere"]
    assert sphere and all(r["label"] == "not run (step separability_sphere not reached)"
                          for r in sphere), [r["label"] for r in sphere]
    assert "- separability_sphere: the reproduction was interrupted before it\n" in report


def test_reports_name_each_checkpoint_as_it_is():
  """Issue 28 item 6: the instruction-tuned SmolLM2 and its quantisation, Gemma 3's base
  checkpoint and its quantisation, the embedded model; anything else as the user gave it."""
  from limits import reproduction as rp

  assert rp.model_name("smollm2") == "SmolLM2-135M-Instruct (GGUF, Q4_1 weights)"
  assert rp.model_name("gemma3-270m") == "Gemma 3 270M, base (GGUF, Q4_K_M weights)"
  assert rp.model_name("tiny") == "the embedded 4-layer model"
  assert rp.model_name("/some/dir") == "`/some/dir`"
