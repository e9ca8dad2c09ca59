"""The ``sweep`` command's settings (:class:`SweepConfig`): which registered kind runs over which
grid, on how many devices, into which folder. Each field declares its CLI flag
(:mod:`limits.runs.options`); ``experiments/sweep.py`` generates its flags from them."""

from __future__ import annotations

import dataclasses

from limits.runs import options
from limits.sweep.registry import EXPERIMENTS

_KINDS = ", ".join(sorted(EXPERIMENTS))  # every kind registered when this module is imported


@dataclasses.dataclass(frozen=True)
class SweepConfig:
  """One sweep command: the kind, the grid (``grid`` or a ``config`` file, not both) and how it
  runs (devices, batch, resume, seed, precision, folder, progress bar)."""

  CROSS_CHECKS = ((("grid", "config"), lambda d: not (d["grid"] and d["config"]),
                   "give either --grid or --config, not both"),)

  experiment: str = options.option(
      "gradient", f"registered experiment: {_KINDS}",
      check=(lambda v: v in EXPERIMENTS, "be a registered experiment"),
      message=f"unknown experiment; choose from {_KINDS}")
  grid: str | None = options.option(
      None, "grid axes 'NAME=v1,v2;NAME2=...' (default: the experiment's)")
  config: str | None = options.option(None, "grid JSON file (instead of --grid)")
  devices: int = options.option(
      0, "number of devices to use (the first k); 0 = all",
      check=(lambda v: v is not None and v >= 0, "be >= 0 (0 = all devices)"))
  resume: bool = options.option(True, "continue a matching run in --out_dir; --noresume "
                                "refuses a non-empty --out_dir")
  batch_size: int = options.option(8, "cells per device per step",
                                   check=(lambda v: v is not None and v >= 1,
                                          "be a positive integer"))
  seed: int = options.option(0, "run seed; cell keys are fold_in(key(seed), cell id)")
  x64: bool = options.option(False, "compute in float64")
  out_dir: str | None = options.option(
      None, "run directory (default results/sweep_<experiment>/<time>)")
  progress: bool = options.option(True, "show a progress bar with rate and ETA")
  describe: bool = options.option(False, "print the experiments, their parameters and default "
                                  "grids, then exit")
