r"""One command that re-checks every quantitative claim of the paper and writes ``report.md``.

Runs Algorithms 1–5 and Lemma 1 with the paper's settings on ``--model`` (default the embedded
model), each as its own experiment in ``OUT/<step>/``, then judges every claim of the registry
(``limits.claims``; docs/claims.md) from the steps' own files: the paper's claims with a tally,
the suite's own findings in a separate table, and for each claim whether it holds or fails under
every reading of the ambiguities it depends on.

    python -m experiments.reproduce --quick          # about 2-3 min on 2 idle CPU cores (16 steps)
    python -m experiments.reproduce --model=gpt2     # paper settings on real GPT-2 124M

Before the first step it checks the model, the corpus (``--data_dir``,
``--text`` or ``$LIMITS_DATA_DIR`` override it) and that the output folder can be written, and
stops with one line if one is wrong. Steps run as subprocesses (``python -m experiments.X``),
each exactly the command a user would type (on Linux forked from one process that imported
JAX, SciPy and matplotlib once, ``limits.reproduction.stepserver``; ``LIMITS_STEP_SERVER=off``
starts a fresh interpreter per step). A rerun skips a step whose ``OUT/<step>/results.json``
is a finished run recording the same settings, so an interrupted reproduction resumes and loses
at most the step in flight. Killing this process (Ctrl-C,
SIGTERM, SIGHUP, even SIGKILL) ends the running step too, so a rerun never shares a step folder
with a leftover process. A step that fails marks its claims "not run (step X failed)"; the
reasons are printed once at the end with each step's log, and the exit code is 1.
"""

from __future__ import annotations

import sys

from absl import app

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits import reproduction as rp
from limits.reproduction import runner
from limits.runs import results

EXPERIMENT = runner.EXPERIMENT


def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(rp.Settings)


EXIT_STEP_FAILED = 1


def main(argv):
  del argv
  settings = cli_flags.config_from_flags(rp.Settings)  # an unknown --only step: one line
  run_config = results.run_identity()  # the command's settings, less the execution-only flags
  steps = [s for s in rp.STEPS if not settings.only or s.name in settings.only]
  out, status = runner.reproduce(steps, settings, settings.out_dir, run_config,
                                 resume=settings.resume)
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
