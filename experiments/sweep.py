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

from absl import app

from limits import cli, sweep
from limits.cli import shared_flags as cli_flags
from limits.runs import results


def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(sweep.SweepConfig)


LARGE_GRID = 100_000


def warn_large_grid(n_cells: int | None) -> None:
  """One line on stderr for a grid above :data:`LARGE_GRID` cells (it still runs)."""
  if n_cells is not None and n_cells > LARGE_GRID:
    print(f"sweep: warning: the grid has {n_cells:,} cells (more than {LARGE_GRID:,}); sweep.json "
          f"lists every cell and each finished cell is one record line", file=sys.stderr,
          flush=True)


def main(argv):
  del argv
  c = cli_flags.config_from_flags(sweep.SweepConfig)
  if c.describe:
    print(sweep.describe())
    return 0
  sweep.maybe_initialize_distributed()
  cli.setup_precision(c.x64)
  import jax

  exp = sweep.get_experiment(c.experiment)
  if c.grid:
    grid = sweep.parse_grid(c.grid)
  elif c.config:
    grid = sweep.load_grid_file(c.config)
  else:
    grid = None
  warn_large_grid(len(grid) if grid is not None else None)
  grid = exp.make_grid(grid)
  sweep.select_devices(c.devices or None)  # one-line error before anything is written
  # Writable and locked (one sweep per folder and process index) before any cell is computed;
  # whether the folder holds another sweep is the manifest's check (sweep.json).
  out = results.prepare_out_dir(c.out_dir, f"sweep_{exp.name}", check_identity=False,
                                lock_tag=str(jax.process_index()))
  lead = jax.process_index() == 0
  if lead:
    print(f"sweep: {exp.name}, {len(grid)} cells; run directory {out}", flush=True)
  summary = sweep.run_sweep(exp, grid, out, seed=c.seed, batch_size=c.batch_size,
                            devices=c.devices or None, resume=c.resume,
                            progress=c.progress)
  if not lead:
    return 0
  records = sweep.collect(out)
  csv_path = results.write_csv(Path(out) / "records.csv", sweep.flat_rows(records))
  results.write_results(out, "sweep", results.run_identity(),
                        sweep.results_block(exp, summary, records, csv_path.name), seed=c.seed)
  print(f"sweep: {summary.computed} cells computed, {summary.done_before} already done, "
        f"{len(records)}/{summary.n_cells} recorded, {summary.seconds:.1f} s on "
        f"{summary.devices} device(s)", flush=True)
  print(f"sweep: results in {out} (results.json, records.csv, records.*.jsonl)", flush=True)
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
