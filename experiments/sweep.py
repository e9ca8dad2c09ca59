"""Runs a registered experiment's cell function over a grid, sharded over devices, resumable.

Examples:

  python -m experiments.sweep --experiment=gradient --x64 --out_dir=results/grad
      --grid="temperature=logspace:-3:2:26;epsilon=1e-3,0.1,10"
  python -m experiments.sweep --experiment=separability_sphere --config=grid.json --devices=4
  python -m experiments.sweep --experiment=distance_model
      --grid="model=tiny,/path/to/gpt2;length=128,256,512,1024;n=1,5,10,20,100;windows=4"
  python -m experiments.sweep --describe     # experiments, their parameters and defaults

``--grid`` is ``NAME=v1,v2;NAME2=...`` (cartesian product; ``logspace:A:B:K`` and
``linspace:A:B:K`` are accepted for a value list); ``--config`` is a JSON file holding
``{"axes": {...}}``, ``{"cells": [...]}``, a plain ``{name: [values]}`` or a list of cells.
Parameters not named take the experiment's defaults. Re-running the same command continues an
interrupted run in the same ``--out_dir`` (``--noresume`` refuses a non-empty one); a different
grid or config there is refused with every difference named, unless the earlier sweep recorded
no cell (then the corrected command replaces it). A second sweep started on a folder in use
stops with one line. A grid above 100,000 cells is announced on stderr. On several
hosts, set ``LIMITS_DISTRIBUTED=1`` (Cloud TPU, Slurm, Open MPI) or ``JAX_COORDINATOR_ADDRESS``,
``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` and start the same command on every host.

Writes to ``--out_dir``: ``sweep.json`` (manifest), ``records.<process>.jsonl`` (the store),
and at the end ``results.json`` and ``records.csv`` with every record in grid order.
"""

from __future__ import annotations

import sys
from pathlib import Path

from absl import app, flags

from limits import cli, sweep
from limits.runs import results

FLAGS = flags.FLAGS

def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  flags.DEFINE_string("experiment", "gradient",
                      f"registered experiment: {', '.join(sorted(sweep.EXPERIMENTS))}")
  flags.DEFINE_string("grid", None, "grid axes 'NAME=v1,v2;NAME2=...' (default: the experiment's)")
  flags.DEFINE_string("config", None, "grid JSON file (instead of --grid)")
  flags.DEFINE_integer("devices", 0, "number of devices to use (the first k); 0 = all")
  flags.DEFINE_boolean("resume", True, "continue a matching run in --out_dir; --noresume refuses "
                       "a non-empty --out_dir")
  flags.DEFINE_integer("batch_size", 8, "cells per device per step")
  flags.DEFINE_integer("seed", 0, "run seed; cell keys are fold_in(key(seed), cell id)")
  flags.DEFINE_boolean("x64", False, "compute in float64")
  flags.DEFINE_string("out_dir", None, "run directory (default results/sweep_<experiment>/<time>)")
  flags.DEFINE_boolean("progress", True, "show a progress bar with rate and ETA")
  flags.DEFINE_boolean("describe", False, "print the experiments, their parameters and default "
                       "grids, then exit")

  flags.register_validator(
      "experiment", lambda v: v in sweep.EXPERIMENTS,
      message=f"unknown experiment; choose from {', '.join(sorted(sweep.EXPERIMENTS))}")
  flags.register_validator("batch_size", lambda v: v is not None and v >= 1,
                           message="--batch_size must be a positive integer")
  flags.register_validator("devices", lambda v: v is not None and v >= 0,
                           message="--devices must be >= 0 (0 = all devices)")
  flags.register_multi_flags_validator(
      ["grid", "config"], lambda d: not (d["grid"] and d["config"]),
      message="give either --grid or --config, not both")


LARGE_GRID = 100_000


def warn_large_grid(n_cells: int | None) -> None:
  """One line on stderr for a grid above :data:`LARGE_GRID` cells (it still runs)."""
  if n_cells is not None and n_cells > LARGE_GRID:
    print(f"sweep: warning: the grid has {n_cells:,} cells (more than {LARGE_GRID:,}); sweep.json "
          f"lists every cell and each finished cell is one record line", file=sys.stderr,
          flush=True)


def main(argv):
  del argv
  if FLAGS.describe:
    print(sweep.describe())
    return 0
  sweep.maybe_initialize_distributed()
  cli.setup_precision(FLAGS.x64)
  import jax

  exp = sweep.get_experiment(FLAGS.experiment)
  if FLAGS.grid:
    grid = sweep.parse_grid(FLAGS.grid)
  elif FLAGS.config:
    grid = sweep.load_grid_file(FLAGS.config)
  else:
    grid = None
  warn_large_grid(len(grid) if grid is not None else None)
  grid = exp.make_grid(grid)
  sweep.select_devices(FLAGS.devices or None)  # one-line error before anything is written
  # Writable and locked (one sweep per folder and process index) before any cell is computed;
  # whether the folder holds another sweep is the manifest's check (sweep.json).
  out = results.prepare_out_dir(FLAGS.out_dir, f"sweep_{exp.name}", check_identity=False,
                                lock_tag=str(jax.process_index()))
  lead = jax.process_index() == 0
  if lead:
    print(f"sweep: {exp.name}, {len(grid)} cells; run directory {out}", flush=True)
  summary = sweep.run_sweep(exp, grid, out, seed=FLAGS.seed, batch_size=FLAGS.batch_size,
                            devices=FLAGS.devices or None, resume=FLAGS.resume,
                            progress=FLAGS.progress)
  if not lead:
    return 0
  records = sweep.collect(out)
  csv_path = results.write_csv(Path(out) / "records.csv", sweep.flat_rows(records))
  results.write_results(out, "sweep", results.run_identity(),
                        sweep.results_block(exp, summary, records, csv_path.name), seed=FLAGS.seed)
  print(f"sweep: {summary.computed} cells computed, {summary.done_before} already done, "
        f"{len(records)}/{summary.n_cells} recorded, {summary.seconds:.1f} s on "
        f"{summary.devices} device(s)", flush=True)
  print(f"sweep: results in {out} (results.json, records.csv, records.*.jsonl)", flush=True)
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
