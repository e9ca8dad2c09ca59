r"""One command that re-checks every quantitative claim of the paper and writes ``report.md``.

Runs Algorithms 1–5 and Lemma 1 with the paper's settings on ``--model`` (default the embedded
model), each as its own experiment in ``OUT/<step>/``, then judges every claim of the registry
(``limits.claims``; docs/claims.md) from the steps' own files: the paper's claims with a tally,
the suite's own findings in a separate table, and for each claim whether it holds or fails under
every reading of the ambiguities it depends on.

    python -m experiments.reproduce --quick          # about a minute on 2 CPU cores
    python -m experiments.reproduce --model=gpt2     # paper settings on real GPT-2 124M

Before the first step it checks the model, the corpus (``--data_dir``,
``--text`` or ``$LIMITS_DATA_DIR`` override it) and that the output folder can be written, and
stops with one line if one is wrong. Steps run as subprocesses (``python -m experiments.X``),
each exactly the command a user would type. A finished step leaves ``OUT/<step>/DONE`` holding
its command; a rerun skips it only if its results.json still loads, so an interrupted
reproduction resumes and loses at most the step in flight. Killing this process (Ctrl-C,
SIGTERM, SIGHUP, even SIGKILL) ends the running step too, so a rerun never shares a step folder
with a leftover process. A step that fails marks its claims "not run (step X failed)"; the
reasons are printed once at the end with each step's log, and the exit code is 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from absl import app, flags

from limits import cli
from limits import data as data_lib
from limits import reproduction as rp
from limits import results as res
from limits.errors import LimitsError

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "tiny", "'tiny' (embedded), 'smollm2', a model name, a directory "
                    "or a weight file.")
flags.DEFINE_bool("quick", False, "Small grids that finish in about a minute on 2 CPU cores.")
flags.DEFINE_string("data_dir", None, data_lib.DATA_DIR_HELP)
flags.DEFINE_string("text", None, "A text file to use instead of the corpus.")
flags.DEFINE_integer("windows", None, "Corpus windows per length (default 1 quick, 4 full).")
flags.DEFINE_string("only", "", "Comma-separated step names to run (default all).")
flags.DEFINE_integer("seed", 0, "Seed passed to every step.")
flags.DEFINE_string("out_dir", None, "Run directory (default results/reproduce/<time>).")
flags.DEFINE_bool("resume", True, "Skip steps whose DONE marker matches the same command and "
                  "whose results.json loads.")

flags.register_validator("windows", cli.positive, message="--windows must be a positive integer")

EXPERIMENT = "reproduce"
EXIT_STEP_FAILED = 1

# Runs in the child before it becomes the step: ask the kernel to SIGTERM it when this parent
# dies (even by SIGKILL), and give up if the parent is already gone; then exec the step.
_LAUNCHER = r"""
import ctypes, os, signal, sys
try:
  ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except Exception:
  pass
if os.getppid() != int(sys.argv[1]):
  sys.exit(143)
os.execv(sys.executable, [sys.executable, "-m"] + sys.argv[2:])
"""


def _terminate(proc: subprocess.Popen, grace: float = 10.0) -> None:
  """Ends the step's whole process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
  for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
    try:
      os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
      return
    try:
      proc.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue


def _raise_interrupt(signum, frame):
  del frame
  raise KeyboardInterrupt(f"signal {signum}")


def _last_error(log: Path) -> str:
  """The step's own one-line error (the last 'error:' line), else its last line."""
  try:
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
  except OSError:
    return ""
  return next((l for l in reversed(lines) if l.startswith("error:")), lines[-1] if lines else "")


def run_step(step: rp.Step, out: Path, settings: rp.Settings,
             ctx: Optional[int]) -> dict[str, Any]:
  """Runs one step as a subprocess in its own process group (or skips it when its DONE marker
  matches and its results.json loads); returns its status record."""
  step_dir = out / step.name
  args = rp.step_args(step, settings, ctx)
  shown = "python -m " + " ".join([step.module, *args])
  log = step_dir / "log.txt"
  base = {"command": shown, "log": str(log)}
  if FLAGS.resume:
    ok, why = rp.done_marker_valid(step_dir, shown)
    if ok:
      print(f"[{step.name}] done earlier, skipped: {shown}", flush=True)
      return {**base, "status": "ok", "skipped": True, "seconds": None}
    if (step_dir / "DONE").exists():
      print(f"[{step.name}] {why}: running it again", flush=True)
  step_dir.mkdir(parents=True, exist_ok=True)
  (step_dir / "DONE").unlink(missing_ok=True)
  print(f"[{step.name}] {shown}", flush=True)
  cmd = [sys.executable, "-c", _LAUNCHER, str(os.getpid()), step.module, *args,
         f"--out_dir={step_dir}"]
  t0 = time.perf_counter()
  with open(log, "w", encoding="utf-8") as f:
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
      code = proc.wait()
    except BaseException:
      _terminate(proc)
      raise
  seconds = time.perf_counter() - t0
  if code == 0:
    try:
      rp.load_results(step_dir)
    except rp.Unreadable as e:
      code, error = -1, f"exited 0 but {e}"
    else:
      res.atomic_write_text(step_dir / "DONE", shown + "\n")
      print(f"[{step.name}] ok in {seconds:.1f}s", flush=True)
      return {**base, "status": "ok", "seconds": seconds}
  else:
    error = f"exit {code}: {_last_error(log)}"
  print(f"[{step.name}] FAILED in {seconds:.1f}s (reason at the end)", flush=True)
  return {**base, "status": "failed", "exit": code, "error": error, "seconds": seconds}


def check_prerequisites(steps) -> tuple[Optional[Any], str]:
  """The model's config and a one-line description of model and corpus; a LimitsError (one
  line) if the model or the corpus cannot be used. Writes nothing."""
  if not any(s.uses_model for s in steps):
    return None, "no model step"
  from limits import data, sources

  config = sources.model_config(FLAGS.model)
  corpus = data.resolve_corpus(text=FLAGS.text, data_dir=FLAGS.data_dir)
  kb = len(corpus.text.encode("utf-8")) / 1e6
  return config, (f"model {FLAGS.model} ({config.n_layer} layers × {config.n_head} heads, "
                  f"context {config.n_positions}), corpus {corpus.path.name} ({corpus.source}, "
                  f"{kb:.2f} MB)")


def write_report(out: Path, status, settings: rp.Settings, seconds: float, config) -> str:
  """Judges every claim from the step files and writes report.md and results.json."""
  ctx = config.n_positions if config is not None else None
  context = {"d_head": getattr(config, "d_head", None),
             "windows": settings.windows or (1 if settings.quick else 4)}
  assessments = rp.assess_all(out, status, context)
  tally = rp.claims.tally(assessments)
  rows = [rp.row(a, out) for a in assessments]
  report = rp.render_report(rows, status, settings, seconds, ctx, tally)
  res.atomic_write_text(out / "report.md", report)
  print(next(line for line in report.splitlines() if line.startswith("Paper's claims:")),
        flush=True)
  res.write_results(out, EXPERIMENT, res.flags_config(FLAGS, (
      "model", "quick", "data_dir", "text", "windows", "only", "seed", "resume")),
      {"claims": rows, "tally": tally, "steps": status, "seconds": seconds}, seed=FLAGS.seed)
  return report


def main(argv):
  del argv
  only = [s for s in (x.strip() for x in FLAGS.only.split(",")) if s]
  unknown = [s for s in only if s not in rp.STEP_NAMES]
  if unknown:
    raise LimitsError(f"--only has unknown step(s) {unknown}; allowed: "
                      f"{', '.join(rp.STEP_NAMES)}")
  settings = rp.Settings(model=FLAGS.model, quick=FLAGS.quick, seed=FLAGS.seed,
                         windows=FLAGS.windows, data_dir=FLAGS.data_dir, text=FLAGS.text)
  steps = [s for s in rp.STEPS if not only or s.name in only]
  config, what = check_prerequisites(steps)          # one line and exit 2 if unusable
  out = res.prepare_out_dir(FLAGS.out_dir, EXPERIMENT)  # writable and locked, or one line
  print(f"reproduce: {what}; writing to {out}", flush=True)
  ctx = config.n_positions if config is not None else None
  for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, _raise_interrupt)
  t0 = time.perf_counter()
  status: dict[str, dict[str, Any]] = {}
  try:
    for step in steps:
      status[step.name] = run_step(step, out, settings, ctx)
  except KeyboardInterrupt:
    running = next((s for s in steps if s.name not in status), None)
    if running is not None:
      shown = "python -m " + " ".join([running.module, *rp.step_args(running, settings, ctx)])
      status[running.name] = {"status": "interrupted", "command": shown,
                              "error": "interrupted", "log": str(out / running.name / "log.txt"),
                              "seconds": None}
    write_report(out, status, settings, time.perf_counter() - t0, config)
    raise
  write_report(out, status, settings, time.perf_counter() - t0, config)
  print(f"report: {out / 'report.md'}")
  failed = {n: st for n, st in status.items() if st["status"] != "ok"}
  if failed:
    print(f"error: {len(failed)} of {len(status)} steps failed; their claims are marked "
          "'not run'", file=sys.stderr)
    for name, st in failed.items():
      print(f"  {name}: {st['error']} (log: {st['log']})", file=sys.stderr)
    sys.exit(EXIT_STEP_FAILED)


if __name__ == "__main__":
  app.run(cli.guard(main))
