"""Abuse tests: bad flag values for every CLI, write failures (full disk, read-only folder),
corrupt files, an interrupted sweep, two writers on one folder, and a second run's results
mixed into another run's folder.

Every case asserts what a user sees: a non-zero exit code (2 for a bad input or environment,
130 for Ctrl-C), exactly one line on stderr naming the problem, no traceback, and no partial
file presented as a result. CLIs run as subprocesses, as a user runs them (an uninterrupted
reference sweep to compare with runs in this process). A full disk or a read-only folder is
simulated inside the subprocess by a ``sitecustomize`` written here (the machine runs tests as
root, so permissions cannot make a folder unwritable): opening a file for writing under the
chosen folder raises the chosen ``OSError``. Expected values come from the test's own set-up (an
uninterrupted run, the flag values it passed), never from the output under test alone.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from limits import sweep
from limits.runs import interrupts
from limits.runs import results
from limits.errors import LimitsError
from tests.cli_helpers import interruptible

REPO = Path(__file__).resolve().parent.parent
TOY = "x=linspace:-1:2:10;n=2,3"  # 20 cells in 2 static groups

# ---------------------------------------------------------------------------------------------
# Running CLIs, with optional write faults.

FAULT_HOOK = textwrap.dedent('''
    """Test-only fault injection: opening a file for writing whose path matches
    LIMITS_TEST_FAULT_GLOB raises OSError(LIMITS_TEST_FAULT_ERRNO)."""
    import builtins, errno, fnmatch, io, os

    _GLOB = os.environ.get("LIMITS_TEST_FAULT_GLOB")
    _ERR = getattr(errno, os.environ.get("LIMITS_TEST_FAULT_ERRNO", "ENOSPC"))
    _WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def _hit(path):
      try:
        p = os.path.abspath(os.fsdecode(path))
      except TypeError:
        return False
      return _GLOB is not None and fnmatch.fnmatch(p, _GLOB)

    def _fail(path):
      raise OSError(_ERR, os.strerror(_ERR), os.fsdecode(path))

    _os_open, _open = os.open, builtins.open

    def os_open(path, flags, *a, **k):
      if flags & _WRITE_FLAGS and _hit(path):
        _fail(path)
      return _os_open(path, flags, *a, **k)

    def open_(file, mode="r", *a, **k):
      if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+") and _hit(file):
        _fail(file)
      return _open(file, mode, *a, **k)

    if _GLOB:
      os.open, builtins.open, io.open = os_open, open_, open_
''')


@pytest.fixture(scope="module")
def fault_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("fault_hook")
  (d / "sitecustomize.py").write_text(FAULT_HOOK)
  return d


def _env(fault=None, fault_dir=None, **extra):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  for k in ("LIMITS_DATA_DIR", "LIMITS_SWEEP_TOY_DELAY", "LIMITS_TEST_FAULT_GLOB"):
    env.pop(k, None)
  if fault is not None:
    glob, err = fault
    env.update(LIMITS_TEST_FAULT_GLOB=str(glob), LIMITS_TEST_FAULT_ERRNO=err,
               PYTHONPATH=os.pathsep.join([str(fault_dir), str(REPO)]))
  env.update(extra)
  return env


def cli(module, *args, timeout=240, **kw):
  """``python -m experiments.<module> *args``; CompletedProcess."""
  return subprocess.run([sys.executable, "-m", f"experiments.{module}", *map(str, args)],
                        cwd=REPO, env=_env(**kw), capture_output=True, text=True,
                        timeout=timeout)


def one_error_line(p, *needles, code=2) -> str:
  """Asserts exit ``code``, no traceback and exactly one stderr line, starting ``error:`` and
  containing every needle (case-insensitive); returns it."""
  assert p.returncode == code, (p.returncode, p.stderr[-3000:])
  assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
  lines = p.stderr.strip().splitlines()
  assert len(lines) == 1, p.stderr[-3000:]
  assert lines[0].startswith("error: "), lines[0]
  for n in needles:
    assert n.lower() in lines[0].lower(), (n, lines[0])
  return lines[0]


# ---------------------------------------------------------------------------------------------
# Bad flag values, every CLI (table-driven). Before: flag errors exited 1 with two lines
# ("FATAL Flags parsing error" + a help hint), library errors 2; a seed of 2**32 equalled seed 0
# in separability and gradient accepted -1.

SEED_MSG = "--seed must be an integer in [0, 2**32)"
CLIS = ("gradient", "vanishing", "distance", "separability", "sweep", "train_tiny", "reproduce")
BAD_FLAGS = [(m, a, n) for m in CLIS for a, n in (
    ("--seed=-1", SEED_MSG), ("--seed=4294967296", SEED_MSG),
    ("--seed=abc", "--seed=abc"), ("--no_such_flag=1", "no_such_flag"))] + [
    ("gradient", "--temperatures=0.1,abc", "--temperatures"),
    ("vanishing", "--windows=0", "--windows must be a positive integer"),
    ("vanishing", "--lemma1_a=1e9", "--lemma1_a must be in [0, 300]"),
    ("distance", "--mode=sideways", "--mode"),
    ("separability", "--source=moon", "--source"),
    ("sweep", "--experiment=nope", "unknown experiment"),
    ("sweep", "--batch_size=0", "--batch_size must be a positive integer"),
    ("train_tiny", "--steps=0", "--steps must be a positive integer"),
    ("train_tiny", "--n_embd=30", "--n_embd must be divisible by --n_head"),
    ("reproduce", "--only=nope", "--only has unknown step"),
]


@pytest.mark.parametrize("module, arg, needle", BAD_FLAGS,
                         ids=[f"{m}:{a}" for m, a, _ in BAD_FLAGS])
def test_bad_flag_value_is_one_line_exit_2(module, arg, needle, tmp_path):
  out = tmp_path / "out"
  p = cli(module, arg, f"--out_dir={out}", timeout=60)
  one_error_line(p, needle)
  assert not out.exists()  # nothing is created before the flags are checked


def test_seed_rule_accepts_its_bounds(tmp_path):
  # The upper bound 2**32 - 1 is a valid seed (flag parsing passes: --describe exits 0).
  p = cli("sweep", "--seed=4294967295", "--describe", timeout=60)
  assert p.returncode == 0, p.stderr


# ---------------------------------------------------------------------------------------------
# Write failures. Before: prepare_out_dir never checked the folder could be written, so a full
# disk or a read-only mount crashed with an OSError traceback after the whole computation.

@pytest.mark.parametrize("err, words", [("ENOSPC", "disk full"), ("EROFS", "read-only")])
def test_unwritable_out_dir_fails_before_the_computation(err, words, tmp_path, fault_dir):
  out = tmp_path / "out"
  t0 = time.perf_counter()
  p = cli("sweep", "--experiment=toy", f"--grid={TOY}", f"--out_dir={out}", "--noprogress",
          fault=(f"{out}/*", err), fault_dir=fault_dir, timeout=120)
  line = one_error_line(p, str(out), words, "not writable")
  assert "sweep:" not in p.stdout  # never started
  assert sorted(os.listdir(out)) == []  # not even the manifest
  assert time.perf_counter() - t0 < 60, line


def _sample_text(tmp_path):
  """A short War and Peace opening as --text: these cases test the output folder, not the
  corpus (which the default test run never has)."""
  from limits.models.gpt2.testing import SAMPLE_TEXT

  path = tmp_path / "sample.txt"
  path.write_text(SAMPLE_TEXT * 3, encoding="utf-8")
  return path


def test_vanishing_on_a_full_disk_fails_before_the_check(tmp_path, fault_dir):
  # Before: the OSError traceback came from the results writer after the whole computation.
  out = tmp_path / "v"
  text = _sample_text(tmp_path)  # a corpus is there: the disk is the only fault
  p = cli("vanishing", "--lengths=8", f"--out_dir={out}", f"--text={text}", "--noplot",
          fault=(f"{out}/*", "ENOSPC"), fault_dir=fault_dir, timeout=120)
  one_error_line(p, str(out), "disk full")  # one line: no progress bar was ever drawn
  assert os.listdir(out) == []


def test_full_disk_mid_sweep_keeps_records_and_resume_is_identical(tmp_path, fault_dir):
  # The store's appends fail (ENOSPC) after the probe passed: one line, no results.json, and
  # the same command afterwards gives exactly the records of an uninterrupted run.
  full, clean = tmp_path / "full", tmp_path / "clean"
  args = ["--experiment=toy", f"--grid={TOY}", "--batch_size=2", "--seed=5", "--noprogress",
          "--devices=1"]
  p = cli("sweep", *args, f"--out_dir={full}", fault=(f"{full}/records.0.jsonl", "ENOSPC"),
          fault_dir=fault_dir)
  one_error_line(p, "records.0.jsonl", "disk full", "run the same command again")
  assert not (full / "results.json").exists()
  assert cli("sweep", *args, f"--out_dir={full}").returncode == 0
  # The uninterrupted reference, in this process with the same settings (as test_sweep_cli).
  sweep.run_sweep("toy", sweep.parse_grid(TOY), clean, seed=5, batch_size=2, devices=1,
                  progress=False, log=None)
  assert sweep.collect(full, complete=True) == sweep.collect(clean, complete=True)


def test_writer_failure_is_one_line_and_leaves_old_file(tmp_path, monkeypatch):
  target = tmp_path / "results.json"
  results.write_json(target, {"old": 1})

  def enospc(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(os, "fsync", enospc)
  with pytest.raises(LimitsError) as e:
    results.write_json(target, {"new": 2})
  msg = str(e.value)
  assert "\n" not in msg and str(target) in msg and "disk full" in msg
  assert json.loads(target.read_text()) == {"old": 1}  # untouched, not half-written
  assert sorted(os.listdir(tmp_path)) == ["results.json"]  # the temp file is gone


def test_result_files_are_0644_like_csv_and_png(tmp_path):
  # Before: mkstemp's 0600 leaked into results.json while CSV/PNG were 0644.
  old = os.umask(0o022)
  try:
    paths = [results.write_json(tmp_path / "r.json", {}),
             results.write_csv(tmp_path / "r.csv", [{"a": 1}]),
             results.atomic_write_text(tmp_path / "report.md", "x")]
    with open(tmp_path / "plain.png", "wb"):  # what an ordinary open() gives (matplotlib)
      pass
  finally:
    os.umask(old)
  assert {oct(p.stat().st_mode & 0o777) for p in paths} == {
      oct((tmp_path / "plain.png").stat().st_mode & 0o777)} == {"0o644"}


def test_train_tiny_bad_output_dirs_fail_before_training(tmp_path, fault_dir):
  text = tmp_path / "t.txt"
  text.write_text("A short text. " * 400)
  small = ["--steps=2", "--seq_len=16", "--short_len=0", "--n_layer=1", "--n_head=1",
           "--n_embd=8", "--n_positions=16", "--vocab_size=260", f"--text={text}"]
  # --ckpt_dir names an existing file (before: FileExistsError from tokenizer.save).
  a_file = tmp_path / "file"
  a_file.write_text("x")
  p = cli("train_tiny", *small, f"--out_dir={tmp_path / 'm'}", f"--ckpt_dir={a_file}")
  one_error_line(p, "--ckpt_dir", str(a_file), "not a folder")
  assert "step" not in p.stdout
  # An unwritable --out_dir (before: it trained, evaluated, then crashed at export).
  out = tmp_path / "ro"
  p = cli("train_tiny", *small, f"--out_dir={out}", f"--ckpt_dir={tmp_path / 'c'}",
          fault=(f"{out}/*", "EROFS"), fault_dir=fault_dir)
  one_error_line(p, "--out_dir", str(out), "read-only")
  assert "step" not in p.stdout and not (tmp_path / "c" / "ckpt.msgpack").exists()
  # A corrupt checkpoint metadata file (before: JSONDecodeError traceback).
  ck = tmp_path / "ck"
  ck.mkdir()
  (ck / "ckpt.json").write_text("{truncated")
  p = cli("train_tiny", *small, f"--out_dir={tmp_path / 'm2'}", f"--ckpt_dir={ck}")
  one_error_line(p, str(ck / "ckpt.json"), "unreadable")


# ---------------------------------------------------------------------------------------------
# Another run's folder. Before: single-experiment CLIs overwrote an out_dir silently, mixing
# two runs' files.

def test_out_dir_identity_rules(tmp_path):
  d = tmp_path / "run"
  a, b = {"lengths": "8,16", "seed": 0}, {"lengths": "8", "seed": 0}
  results.prepare_out_dir(d, "vanishing", identity=a, overwrite=False)
  results.release_dir(d)
  (d / "summary.csv").write_text("L\n8\n")
  results.write_json(d / "results.json", {"experiment": "vanishing"})
  # The same run again: fine (continues or redoes it in place).
  results.prepare_out_dir(d, "vanishing", identity=a, overwrite=False)
  results.release_dir(d)
  # A different run: one line naming the flag, its old and its new value.
  with pytest.raises(LimitsError) as e:
    results.prepare_out_dir(d, "vanishing", identity=b, overwrite=False)
  results.release_dir(d)
  msg = str(e.value)
  assert "\n" not in msg and "lengths: '8,16' before, '8' now" in msg and "--overwrite" in msg
  assert (d / "results.json").exists()  # nothing removed when refused
  # Another experiment is a different run too.
  with pytest.raises(LimitsError, match="experiment: 'vanishing' before, 'distance' now"):
    results.prepare_out_dir(d, "distance", identity=a, overwrite=False)
  results.release_dir(d)
  # --overwrite: the old results.json goes first (a failing new run never shows it).
  results.prepare_out_dir(d, "vanishing", identity=b, overwrite=True)
  results.release_dir(d)
  assert not (d / "results.json").exists()
  marker = json.loads((d / results.RUN_MARKER).read_text())
  assert marker == {"experiment": "vanishing", **b}


def test_folder_of_a_failed_run_is_reused_and_foreign_results_refused(tmp_path):
  d = tmp_path / "run"
  results.prepare_out_dir(d, "gradient", identity={"seed": 1}, overwrite=False)
  results.release_dir(d)
  (d / "log.txt").write_text("error: bad model\n")  # a failed run left no results
  results.prepare_out_dir(d, "gradient", identity={"seed": 2}, overwrite=False)
  results.release_dir(d)
  # results.json with no marker (an older version or another tool wrote it): refused.
  e = tmp_path / "legacy"
  e.mkdir()
  (e / "results.json").write_text("{}")
  with pytest.raises(LimitsError, match="holds results.json from another run"):
    results.prepare_out_dir(e, "gradient", identity={"seed": 2}, overwrite=False)


def test_cli_refuses_a_different_run_in_its_out_dir(tmp_path):
  out = tmp_path / "v"
  out.mkdir()
  text = _sample_text(tmp_path)
  # The marker a run with --lengths=8,16 (and defaults otherwise) leaves behind.
  (out / results.RUN_MARKER).write_text(json.dumps(
      {"experiment": "vanishing", "model": "tiny", "text": str(text), "data_dir": None,
       "windows": 1, "lengths": "8,16", "seed": 0, "x64": True, "lemma1_a": 4.0}))
  (out / "results.json").write_text('{"experiment": "vanishing"}')
  p = cli("vanishing", "--lengths=8", f"--out_dir={out}", f"--text={text}", "--noplot",
          timeout=120)
  one_error_line(p, str(out), "lengths: '8,16' before, '8' now", "--overwrite")
  assert (out / "results.json").read_text() == '{"experiment": "vanishing"}'


# ---------------------------------------------------------------------------------------------
# Two writers on one folder, and Ctrl-C.

def _wait_for_records(path: Path, n: int, proc, timeout=120.0):
  t0 = time.time()
  while time.time() - t0 < timeout:
    if path.exists() and path.read_bytes().count(b"\n") >= n:
      return
    if proc.poll() is not None:
      raise AssertionError(f"sweep ended early: {proc.communicate()}")
    time.sleep(0.05)
  raise AssertionError("no records appeared")


def test_second_sweep_on_a_busy_folder_refuses_then_interrupt_and_resume(tmp_path):
  # Before: two sweeps on one out_dir both computed every cell (no lock).
  run, clean = tmp_path / "run", tmp_path / "clean"
  args = ["--experiment=toy", f"--grid={TOY}", "--batch_size=1", "--seed=9", "--noprogress",
          "--devices=1"]
  with interruptible():
    first = subprocess.Popen([sys.executable, "-m", "experiments.sweep", *args,
                              f"--out_dir={run}"], cwd=REPO,
                             env=_env(LIMITS_SWEEP_TOY_DELAY="0.6"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  try:
    _wait_for_records(run / "records.0.jsonl", 2, first)
    second = cli("sweep", *args, f"--out_dir={run}", timeout=120)
    one_error_line(second, str(run), "in use by another run", f"pid {first.pid}")
    # Ctrl-C (SIGINT) mid-run (20 steps of 0.6 s): exit 130 and one line besides the sweep's
    # own notice; the batch in flight is finished and recorded first.
    assert first.poll() is None, "the first sweep finished before it could be interrupted"
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=60)
  finally:
    if first.poll() is None:
      first.kill()
  assert first.returncode == 130, err[-2000:]
  assert [ln for ln in err.strip().splitlines() if not ln.startswith("sweep:")] == [
      interrupts.NOTICE, "interrupted: results written so far are kept in the run directory"], err
  assert not (run / "results.json").exists()
  kept = sweep.collect(run)
  assert 2 <= len(kept) < 20
  # The same command resumes (the lock died with the process) and equals a clean run.
  again = cli("sweep", *args, f"--out_dir={run}")
  assert again.returncode == 0, again.stderr[-2000:]
  assert f"{len(kept)} already done" in again.stdout
  # The uninterrupted reference, in this process with the same settings (as test_sweep_cli).
  sweep.run_sweep("toy", sweep.parse_grid(TOY), clean, seed=9, batch_size=1, devices=1,
                  progress=False, log=None)
  assert sweep.collect(run, complete=True) == sweep.collect(clean, complete=True)


def test_lock_names_the_holder_and_dies_with_it(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time; from limits.runs import results; "
       f"results.lock_dir({str(tmp_path)!r}); print('locked', flush=True); time.sleep(60)"],
      cwd=REPO, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(LimitsError, match=f"in use by another run .pid {holder.pid}."):
      results.lock_dir(tmp_path)
  finally:
    holder.kill()
    holder.wait()
  results.lock_dir(tmp_path)  # a killed holder leaves no stale lock
  results.release_dir(tmp_path)


# ---------------------------------------------------------------------------------------------
# Corrupt files and the sweep manifest.

def test_corrupt_sweep_manifest_is_one_line(tmp_path):
  out = tmp_path / "run"
  out.mkdir()
  (out / "sweep.json").write_text('{"format": "limits-sweep/1", "gri')
  p = cli("sweep", "--experiment=toy", "--grid=x=1", f"--out_dir={out}", "--noprogress")
  one_error_line(p, str(out / "sweep.json"))


def _failing_inputs_experiment():
  """A toy experiment whose shared inputs fail for model='bad' (like a bad checkpoint, found
  only after sweep.json was written)."""
  def inputs(static):
    if static["model"] == "bad":
      raise LimitsError("model 'bad' not found")
    return {"one": 1.0}

  def fn(static, params, keys, run_key, data):
    return {"y": params["x"] * 2 + data["one"]}

  return sweep.Experiment(name="robust_inputs", fn=fn, inputs=inputs,
                          defaults={"x": 0.5, "model": "good"},
                          default_grid={"x": [0.0, 1.0]})


def test_failed_sweep_does_not_block_the_corrected_command(tmp_path):
  # Before: the corrected grid was refused with "holds a different sweep: grid (1 cells, now
  # 1)", which did not say what differed.
  exp = _failing_inputs_experiment()
  kw = dict(devices=1, progress=False)
  with pytest.raises(LimitsError, match="model 'bad' not found"):
    sweep.run_sweep(exp, {"x": [1.0], "model": ["bad"]}, tmp_path, log=None, **kw)
  assert (tmp_path / "sweep.json").exists() and not sweep.shard_paths(tmp_path)
  said = []
  s = sweep.run_sweep(exp, {"x": [1.0], "model": ["good"]}, tmp_path, log=said.append, **kw)
  assert s.computed == 1
  assert len(said) == 1 and "recorded no cell" in said[0]
  assert "grid axis 'model': ['bad'] before, ['good'] now" in said[0]
  assert [r["result"]["y"] for r in sweep.collect(tmp_path, complete=True)] == [3.0]
  # Once a cell is recorded, a different grid is refused, naming the axis and both values.
  with pytest.raises(LimitsError) as e:
    sweep.run_sweep(exp, {"x": [1.0, 2.0], "model": ["good"]}, tmp_path, log=None, **kw)
  assert "grid axis 'x': [1.0] before, [1.0, 2.0] now" in str(e.value)
  assert "\n" not in str(e.value)


def test_large_grid_is_announced_with_its_size(tmp_path):
  # Before: a million-cell grid started without a word. --devices=4096 then stops it.
  p = cli("sweep", "--experiment=toy", "--grid=x=linspace:0:1:100001",
          f"--out_dir={tmp_path / 'big'}", "--devices=4096", timeout=180)
  lines = p.stderr.strip().splitlines()
  assert p.returncode == 2 and len(lines) == 2, p.stderr[-2000:]
  assert "100,001 cells" in lines[0] and lines[1].startswith("error: --devices=4096")
