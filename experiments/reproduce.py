r"""One command that re-checks every quantitative claim of the paper and writes ``report.md``.

Runs Algorithms 1–5 and Lemma 1 with the paper's settings (PAPER.md §3) on ``--model`` (default
the embedded model; ``--model=gpt2`` or a directory for a real checkpoint), each as its own
experiment in ``OUT/<step>/``, then builds one table with a row per claim of PAPER.md §4 and the
Corollary 3 bound: the paper's statement, what we measured, the verdict (holds / fails / not
testable, with the reason) and the figure.

    python -m experiments.reproduce --quick          # a few minutes on 2 CPU cores
    python -m experiments.reproduce --model=gpt2     # paper settings on real GPT-2 124M

The plan (steps, claims, report) lives in ``limits.reproduction``; this file only runs it.
Steps run as subprocesses (``python -m experiments.X``) so each is exactly the command a user
would type; the report lists them. A finished step leaves ``OUT/<step>/DONE`` holding its
command, and re-running the same command skips it, so an interrupted reproduction resumes and
loses at most the step in flight. Needs the corpus (``LIMITS_DATA_DIR`` or ``--data_dir``) for
the model steps; without it those rows say "not testable" with the reason.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from absl import app, flags

from limits import cli
from limits import reproduction as rp
from limits import results as res
from limits.errors import LimitsError

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "tiny", "'tiny' (embedded), a GPT-2 name, or a model directory.")
flags.DEFINE_bool("quick", False, "Small grids that finish in a few minutes on 2 CPU cores.")
flags.DEFINE_string("data_dir", None, "Folder with war_and_peace.txt (else $LIMITS_DATA_DIR).")
flags.DEFINE_string("text", None, "A text file to use instead of the corpus.")
flags.DEFINE_integer("windows", None, "Corpus windows per length (default 1 quick, 4 full).")
flags.DEFINE_string("only", "", "Comma-separated step names to run (default all).")
flags.DEFINE_integer("seed", 0, "Seed passed to every step.")
flags.DEFINE_string("out_dir", None, "Run directory (default results/reproduce/<time>).")
flags.DEFINE_bool("resume", True, "Skip steps whose DONE marker matches the same command.")

flags.register_validator("windows", cli.positive, message="--windows must be a positive integer")

EXPERIMENT = "reproduce"


def run_step(step: rp.Step, out: Path, settings: rp.Settings,
             ctx: Optional[int]) -> dict[str, Any]:
  """Runs one step as a subprocess (or skips it when its DONE marker matches)."""
  step_dir = out / step.name
  args = rp.step_args(step, settings, ctx)
  cmd = [sys.executable, "-m", step.module, *args, f"--out_dir={step_dir}"]
  shown = "python -m " + " ".join([step.module, *args])
  done = step_dir / "DONE"
  if FLAGS.resume and done.exists() and done.read_text().strip() == shown:
    print(f"[{step.name}] done earlier, skipped: {shown}", flush=True)
    return {"status": "ok", "command": shown, "skipped": True, "seconds": None}
  print(f"[{step.name}] {shown}", flush=True)
  step_dir.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  with open(step_dir / "log.txt", "w") as log:
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
  seconds = time.perf_counter() - t0
  if proc.returncode != 0:
    lines = (step_dir / "log.txt").read_text().strip().splitlines()
    last = next((l for l in reversed(lines) if l.startswith("error:")), lines[-1] if lines else "")
    print(f"[{step.name}] FAILED (exit {proc.returncode}) in {seconds:.1f}s: {last}", flush=True)
    return {"status": "failed", "command": shown, "exit": proc.returncode, "error": last,
            "seconds": seconds}
  res.atomic_write_text(done, shown + "\n")
  print(f"[{step.name}] ok in {seconds:.1f}s", flush=True)
  return {"status": "ok", "command": shown, "seconds": seconds}


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
  ctx = None
  if any(s.uses_model for s in steps):
    from limits import sources

    ctx = sources.model_config(FLAGS.model).n_positions   # a bad --model fails here, once
  out = res.prepare_out_dir(FLAGS.out_dir, EXPERIMENT)
  print(f"reproduce: writing to {out}", flush=True)
  t0 = time.perf_counter()
  status: dict[str, dict[str, Any]] = {}
  for step in steps:
    status[step.name] = run_step(step, out, settings, ctx)
  seconds = time.perf_counter() - t0
  rows = rp.claim_rows(out, status)
  report = rp.render_report(rows, status, settings, seconds, ctx)
  res.atomic_write_text(out / "report.md", report)
  res.write_results(out, EXPERIMENT, res.flags_config(FLAGS, (
      "model", "quick", "data_dir", "text", "windows", "only", "seed", "resume")),
      {"claims": rows, "steps": status, "seconds": seconds}, seed=FLAGS.seed)
  print(report)
  print(f"report: {out / 'report.md'}")


if __name__ == "__main__":
  app.run(cli.guard(main))
