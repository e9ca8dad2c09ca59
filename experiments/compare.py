r"""Reproduction runs side by side: the README's claim tables from two or more run directories.

  python -m experiments.compare --run="SmolLM2-135M=runs/smollm2" --run="embedded=runs/tiny"

Each ``--run`` is ``LABEL=DIR`` where DIR is the ``--out_dir`` of ``python -m
experiments.reproduce``. Prints (or writes to ``--out``) the tally of the paper's claims per
run, the paper's claims and the suite's findings with one column of measured values and
verdicts per run, and one line per claim that fails or depends on a reading. The verdicts are
the runs' own (``limits.claims.compare``); nothing is recomputed.

With ``--figures=OUTDIR`` it also draws the paper's figures (2a, 2b, 2c, 3, 4) with every run's
curves, the attention-sink shares by layer (``sinks.png``, the suite's finding) and the verdict
map (claims × runs, coloured by primary verdict, hatched where not robust), from the runs' step
results.json files (``limits.claims.figures``; nothing recomputed), into OUTDIR.

  python -m experiments.compare --run=SmolLM2=runs/smollm2 --run=embedded=runs/tiny --figures=figs

With ``--values`` and exactly two runs (of ``reproduce`` or of any one experiment), prints
instead every results.json's recorded values compared, file by file: how many numbers differ and
the largest relative difference, with timings, the env block and model paths left out
(``limits.claims.value_diff``); for checking a refactor, a commit or a machine against another.

  python -m experiments.compare --run=before=runs/a --run=after=runs/b --values
"""

from __future__ import annotations

import sys

from absl import app

from limits import cli
from limits.claims import compare, value_diff
from limits.cli import shared_flags as cli_flags
from limits.errors import LimitsError
from limits.runs.results import atomic_write_text


def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(compare.CompareConfig)


def main(argv):
  del argv
  c = cli_flags.config_from_flags(compare.CompareConfig)
  if not c.run:
    raise LimitsError("give at least one --run=LABEL=DIR (a reproduce --out_dir)")
  specs = []
  for spec in c.run:
    label, sep, path = spec.partition("=")
    if not sep or not label or not path:
      raise LimitsError(f"--run={spec!r} must be LABEL=DIR, e.g. --run=SmolLM2=runs/smollm2")
    specs.append((label, path))
  if c.values and c.figures:
    raise LimitsError("--figures draws reproduction runs' claims and curves; it cannot be "
                      "combined with --values")
  if c.values:
    if len(specs) != 2:
      raise LimitsError(f"--values compares exactly two runs; got {len(specs)} --run")
    text = value_diff.render(value_diff.diff_runs(*specs), (specs[0][0], specs[1][0]))
  else:
    text = compare.side_by_side([compare.load_run(*s) for s in specs], width=c.width)
  if c.out:
    atomic_write_text(c.out, text)
  else:
    print(text, end="")
  if c.figures:
    from limits.claims import figures as plot_compare

    try:
      paths = plot_compare.draw(specs, c.figures)
    except OSError as e:
      raise LimitsError(f"--figures={c.figures!r}: cannot write there ({e.strerror or e})")
    print("figures: " + ", ".join(str(p) for p in paths), file=sys.stderr)


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
