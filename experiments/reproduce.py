r"""One command that re-checks every quantitative claim of the paper and writes ``report.md``.

Runs Algorithms 1–5 and Lemma 1 with the paper's settings on ``--model`` (default the embedded
model), each as its own experiment in ``OUT/<step>/``, then judges every claim of the registry
(``limits.claims``; docs/claims.md) from the steps' own files: the paper's claims with a tally,
the suite's own findings in a separate table, and for each claim whether it holds or fails under
every reading of the ambiguities it depends on.

    python -m experiments.reproduce --quick          # about 13 min on 2 idle CPU cores (16 steps)
    python -m experiments.reproduce --model=gpt2     # paper settings on real GPT-2 124M

Before the first step it checks the model, the corpus (``--data_dir``,
``--text`` or ``$LIMITS_DATA_DIR`` override it) and that the output folder can be written, and
stops with one line if one is wrong. Steps run as subprocesses (``python -m experiments.X``),
each exactly the command a user would type. A rerun skips a step whose ``OUT/<step>/results.json``
is a finished run recording the same settings, so an interrupted reproduction resumes and loses
at most the step in flight. Killing this process (Ctrl-C,
SIGTERM, SIGHUP, even SIGKILL) ends the running step too, so a rerun never shares a step folder
with a leftover process. A step that fails marks its claims "not run (step X failed)"; the
reasons are printed once at the end with each step's log, and the exit code is 1.
"""

from __future__ import annotations

import sys

from absl import app, flags

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits import reproduction as rp
from limits.reproduction import runner
from limits.errors import LimitsError
from limits.runs import results

FLAGS = flags.FLAGS
EXPERIMENT = runner.EXPERIMENT
DEFAULTS = {"model": "tiny", "data_dir": None, "text": None, "windows": None, "seed": 0,
            "out_dir": None}
def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_corpus_flags(
      DEFAULTS, model=cli_flags.MODEL_HELP,
      windows="Corpus windows per length (default 1 quick, 4 full).")
  cli_flags.define_run_flags(DEFAULTS, EXPERIMENT, seed="Seed passed to every step.")
  flags.DEFINE_bool("quick", False, "Small grids (about 13 min for the embedded model's 16 "
                    "steps on 2 idle CPU cores).")
  flags.DEFINE_string("only", "", "Comma-separated step names to run (default all).")
  flags.DEFINE_bool("resume", True, "Skip steps whose results.json is a finished run with the "
                    "same settings.")

EXIT_STEP_FAILED = 1


def main(argv):
  del argv
  only = [s for s in (x.strip() for x in FLAGS.only.split(",")) if s]
  unknown = [s for s in only if s not in rp.STEP_NAMES]
  if unknown:
    raise LimitsError(f"--only has unknown step(s) {unknown}; allowed: "
                      f"{', '.join(rp.STEP_NAMES)}")
  settings = rp.Settings(model=FLAGS.model, quick=FLAGS.quick, seed=FLAGS.seed,
                         windows=FLAGS.windows, data_dir=FLAGS.data_dir, text=FLAGS.text)
  run_config = results.run_identity()  # the command's settings, less the execution-only flags
  steps = [s for s in rp.STEPS if not only or s.name in only]
  out, status = runner.reproduce(steps, settings, FLAGS.out_dir, run_config, resume=FLAGS.resume)
  print(f"report: {out / 'report.md'}")
  failed = {n: st for n, st in status.items() if st["status"] != "ok"}
  if failed:
    print(f"error: {len(failed)} of {len(status)} steps failed; their claims are marked "
          "'not run'", file=sys.stderr)
    for name, st in failed.items():
      print(f"  {name}: {st['error']} (log: {st['log']})", file=sys.stderr)
    sys.exit(EXIT_STEP_FAILED)


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
