"""The sweep engine: runs a registered experiment's cells over every device, resumably.

It knows no theorem: experiments (:mod:`limits.sweep.kinds`) register a batched cell function
with their parameters (:mod:`limits.sweep.registry`); grids are :mod:`limits.sweep.grid`, the
run directory :mod:`limits.sweep.store`, devices :mod:`limits.sweep.devices`.

Execution (JAX's own sharding, no home-made scheduler):

- A 1-D mesh ``jax.make_mesh((k,), ("cells",))`` over the first ``k`` devices (all by default).
- Cells are grouped by their *static* parameters (strings, booleans and the experiment's
  shape-determining integers such as ``length``); each group is cut, in grid order, into global
  batches of ``batch_size * k`` cells (``batch_size`` cells per device). The last batch is padded
  to that size by repeating its last cell; padded results are dropped. Every step therefore has
  the same shape: one compile per static group, and each device always runs the same
  ``(batch_size,)``-shaped program.
- The experiment's batched cell function ``fn(static, params, keys, run_key)`` gets a dict of
  numeric parameter arrays with a leading cell axis ``(b,)``, the per-cell PRNG keys ``(b,)`` and
  the run key (and, for experiments with ``inputs`` such as ``distance_model``, the group's
  shared host arrays, model weights and corpus windows, replicated on the mesh as ``data=``),
  and returns a dict of per-cell arrays ``(b, ...)``. It runs under
  ``jax.shard_map`` with the cell axis sharded over ``"cells"`` (no communication between cells).
- Randomness (the rule of :mod:`limits.runs.seeding`, the tasks' too): ``run_key =
  jax.random.key(seed)``; the key of a cell is ``fold_in(fold_in(run_key, hi), lo)`` where ``hi, lo`` are the two 32-bit halves of the cell
  id. It depends only on the seed and the cell's parameters, never on its position, the batch,
  the device count or on resuming. Batches are cut from the full grid at fixed places (a resumed
  run recomputes a partly finished batch whole and appends only the missing cells), so an
  interrupted-and-resumed run is bitwise identical to an uninterrupted one with the same
  settings. Runs on any k >= 2 devices with the same ``batch_size`` compile the same per-device
  program and agree bitwise; a 1-device program is compiled without partitioning, which XLA may
  fuse differently, so float results can differ from multi-device ones in the last bits (the
  tests measure both).
- Host kinds (``Experiment.host``, e.g. ``distance_model``, which calls the host-side
  ``ModelEvaluator``): batches are cut and owned exactly as above, but each process calls
  ``fn`` once per batch on the host, with NumPy parameters of the slots it owns (no padding,
  no jit, no shard_map; the same cell keys); ``fn``'s own JAX work runs on the process's
  default device, so extra local devices do not speed it up. Store, resume and records are the
  same as for traced kinds.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from limits.runs import interrupts, seeding
from limits.errors import check
from limits.sweep.devices import MESH_AXIS, make_mesh, select_devices
from limits.sweep.grid import Grid, canonical_json, id_halves
from limits.sweep.registry import Experiment, get_experiment
from limits.sweep.store import (append_lines, load_done, make_manifest, open_run, record_line,
                                shard_path)


@dataclasses.dataclass
class Summary:
  """What :func:`run_sweep` did."""

  run_dir: Path
  experiment: str
  n_cells: int
  done_before: int
  computed: int  # cells this process wrote
  batches: int  # global batches run
  devices: int
  batch_size: int
  problems: list[str]
  seconds: float
  shard: Path


def _batches(grid: Grid, static_names: Sequence[str], global_batch: int) -> list[list[int]]:
  """Grid indices grouped by static values (groups in order of first appearance), each group
  cut in grid order into chunks of ``global_batch``. Deterministic in (grid, global_batch)."""
  groups: dict[tuple, list[int]] = {}
  for i, c in enumerate(grid.cells):
    groups.setdefault(tuple(canonical_json(c[n]) for n in static_names), []).append(i)
  out = []
  for idx in groups.values():
    out.extend(idx[s:s + global_batch] for s in range(0, len(idx), global_batch))
  return out


def float_dtype():
  """float64 when ``jax_enable_x64`` is on, else float32: the dtype of float parameters."""
  import jax

  return np.float64 if jax.config.read("jax_enable_x64") else np.float32


def _step_fn(exp: Experiment, static: Mapping[str, Any], mesh):
  import jax
  from jax.sharding import PartitionSpec as P

  spec = P(MESH_AXIS)

  def local(params, hi, lo, seed, data):
    run_key = seeding.root(seed)
    keys = jax.vmap(lambda h, l: seeding.cell_key(run_key, h, l))(hi, lo)
    extra = {} if exp.inputs is None else {"data": data}
    out = exp.fn(static, params, keys, run_key, **extra)
    check(isinstance(out, Mapping), f"experiment {exp.name!r} must return a dict of arrays")
    return dict(out)

  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec, P(), P()),
                               out_specs=spec, check_vma=False))


def _global(mesh, arr: np.ndarray, replicated: bool = False):
  import jax
  from jax.sharding import NamedSharding, PartitionSpec as P

  sharding = NamedSharding(mesh, P() if replicated else P(MESH_AXIS))
  return jax.make_array_from_callback(arr.shape, sharding, lambda idx: arr[idx])


def _host_rows(tree: Mapping[str, Any]) -> dict[int, dict[str, np.ndarray]]:
  """Slot -> {name: value} for the rows of a sharded output held by this process's devices."""
  rows: dict[int, dict[str, np.ndarray]] = {}
  for name, arr in tree.items():
    n = arr.shape[0]
    for shard in arr.addressable_shards:
      sl = shard.index[0] if shard.index else slice(None)
      start, stop, _ = sl.indices(n)
      data = np.asarray(shard.data)
      for j, slot in enumerate(range(start, stop)):
        rows.setdefault(slot, {})[name] = data[j]
  return rows


def _cell_keys(seed: int, halves: np.ndarray):
  """(run_key, per-cell keys (b,)) as in the jitted step: fold_in(fold_in(key(seed), hi), lo)."""
  import jax

  run_key = seeding.root(np.uint32(seed))
  keys = jax.vmap(lambda h, l: seeding.cell_key(run_key, h, l))(
      halves[:, 0], halves[:, 1])
  return run_key, keys


def _host_batch(exp: Experiment, grid: Grid, b: Sequence[int], static_names, numeric, fdt,
                seed: int, batch_size: int, pidx: int, owners: Sequence[int],
                done_mask: np.ndarray, host_data: dict) -> list[str]:
  """One batch of a host kind (``exp.host``): the record lines of this process's unfinished
  cells. The batch's slots are owned as in the sharded path (slot s by ``owners[s //
  batch_size]``); this process computes all of its slots (finished ones too, so a resumed run
  sees the same batches as an uninterrupted one), without padding, in one call of ``exp.fn``
  on the host (its JAX work on the default device)."""
  mine = [s for s in range(len(b)) if owners[s // batch_size] == pidx]
  if not mine or all(done_mask[b[s]] for s in mine):
    return []
  cells = [grid.cells[b[s]] for s in mine]
  static = {n: cells[0][n] for n in static_names}
  skey = tuple(canonical_json(static[n]) for n in static_names)
  if skey not in host_data:
    host_data.clear()  # batches come grouped by static values: free the previous group's data
    host_data[skey] = None if exp.inputs is None else exp.inputs(static)
  extra = {} if exp.inputs is None else {"data": host_data[skey]}
  params = {n: np.asarray([c[n] for c in cells],
                          dtype=fdt if isinstance(exp.defaults[n], float) else np.int32)
            for n in numeric}
  ids = grid.ids
  halves = np.asarray([id_halves(ids[b[s]]) for s in mine], dtype=np.uint32)
  run_key, keys = _cell_keys(seed, halves)
  out = exp.fn(static, params, keys, run_key, **extra)
  check(isinstance(out, Mapping), f"experiment {exp.name!r} must return a dict of arrays")
  out = {k: np.asarray(v) for k, v in out.items()}
  for k, v in out.items():
    check(v.ndim >= 1 and v.shape[0] == len(mine),
          f"experiment {exp.name!r}: output {k!r} has shape {v.shape}, "
          f"expected ({len(mine)}, ...)")
  lines = []
  for j, s in enumerate(mine):
    i = b[s]
    if not done_mask[i]:
      lines.append(record_line(ids[i], i, grid.cells[i], {k: v[j] for k, v in out.items()}))
  return lines


def _stderr(msg: str) -> None:
  print(f"sweep: {msg}", file=sys.stderr, flush=True)


def run_sweep(experiment: "str | Experiment", grid=None, run_dir: str | os.PathLike = ".", *,
              seed: int = 0, batch_size: int = 8, devices: "int | Sequence[Any] | None" = None,
              resume: bool = True, config: Mapping[str, Any] | None = None,
              process_index: int | None = None, device_processes: Sequence[int] | None = None,
              progress: bool = True, log: Callable[[str], None] | None = _stderr) -> Summary:
  """Runs every unfinished cell of ``grid`` and appends its record to this process's shard.

  Args:
    experiment: a registered name or an :class:`Experiment`.
    grid: a :class:`Grid`, axes dict, list of cells or None (the experiment's default grid).
    run_dir: the run directory (created); holds ``sweep.json`` and ``records.<p>.jsonl``.
    seed: run seed, 0 <= seed < 2**32; cell keys are ``fold_in``s of ``key(seed)``.
    batch_size: cells per device per step (a global step has ``batch_size * devices`` cells).
    devices: None = all, k = the first k, or a list of devices.
    resume: continue a matching run in ``run_dir``; False refuses a non-empty directory.
    config: extra settings that determine the numbers; stored and checked on resume.
    process_index: this process's index (default ``jax.process_index()``); with
      ``device_processes`` it simulates one host of a multi-host run (tests).
    device_processes: the owning process of each mesh device, in mesh order (default: real).
    progress: show a :class:`~limits.runs.progress.Progress` bar (process 0 only).
    log: where problems (repaired records) are reported; None to silence.

  Returns:
    A :class:`Summary`. Raises LimitsError for bad arguments or a mismatching run directory.
  """
  import jax

  t0 = time.perf_counter()
  exp = get_experiment(experiment)
  check(isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1,
        f"batch_size={batch_size!r} must be a positive integer")
  check(isinstance(seed, int) and 0 <= seed < 2**32, f"seed={seed!r} must be in [0, 2**32)")
  grid = exp.make_grid(grid)
  devs = select_devices(devices)
  mesh = make_mesh(devs)
  mesh_devs = list(mesh.devices.flat)
  k = len(mesh_devs)
  pidx = jax.process_index() if process_index is None else int(process_index)
  owners = (list(device_processes) if device_processes is not None
            else [d.process_index for d in mesh_devs])
  check(len(owners) == k, f"device_processes has {len(owners)} entries for {k} devices")

  full_config = {"seed": seed, "x64": bool(jax.config.read("jax_enable_x64")),
                 **dict(config or {})}
  man = make_manifest(exp.name, grid, full_config)
  with open_run(run_dir, man, process_index=pidx, resume=resume, log=log) as run_dir:
    return _run_batches(exp, grid, run_dir, seed, batch_size, mesh, pidx, owners, log,
                        progress, t0)


def _run_batches(exp: Experiment, grid: Grid, run_dir: Path, seed: int, batch_size: int, mesh,
                 pidx: int, owners: Sequence[int], log, progress: bool, t0: float) -> Summary:
  """The engine's loop: every unfinished batch, appended to this process's shard."""
  import jax

  from limits.runs.progress import Progress

  k = len(owners)

  own = shard_path(run_dir, pidx)
  done, problems = load_done(run_dir, grid, own_shard=own, log=log)
  ids = grid.ids
  done_mask = np.array([cid in done for cid in ids], dtype=bool)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils

    done_mask = np.asarray(multihost_utils.process_allgather(done_mask)).reshape(
        -1, len(ids)).any(axis=0)
  done_before = int(done_mask.sum())

  static_names = exp.static_names()
  numeric = [n for n in exp.defaults if n not in static_names]
  gb = batch_size * k
  batches = [b for b in _batches(grid, static_names, gb) if not done_mask[b].all()]
  pending = int(sum((~done_mask[b]).sum() for b in batches))
  fdt = float_dtype()
  steps: dict[tuple, Any] = {}
  host_data: dict[tuple, Any] = {}  # host kinds: the current static group's inputs
  computed = 0
  seed_arr = np.asarray(seed, dtype=np.uint32)
  show = progress and pidx == 0
  # Ctrl-C / SIGTERM wait for the batch in flight to be recorded (limits.runs.interrupts): inside
  # XLA a KeyboardInterrupt would lose the batch or crash the interpreter.
  with Progress(pending, f"sweep {exp.name}", unit="cells", enabled=show) as bar, \
      interrupts.deferred():
    for b in batches:
      interrupts.check()  # a safe point: the previous batch is recorded
      if exp.host:
        lines = _host_batch(exp, grid, b, static_names, numeric, fdt, seed, batch_size, pidx,
                            owners, done_mask, host_data)
        append_lines(own, lines)
        computed += len(lines)
        bar.update(int((~done_mask[b]).sum()))
        continue
      idx = b + [b[-1]] * (gb - len(b))  # pad by repeating the last cell
      cells = [grid.cells[i] for i in idx]
      static = {n: cells[0][n] for n in static_names}
      skey = tuple(canonical_json(static[n]) for n in static_names)
      if skey not in steps:
        steps.clear()  # batches come grouped by static values: free the previous group's data
        data = None
        if exp.inputs is not None:  # shared host arrays, replicated on the mesh once per group
          data = jax.tree.map(lambda a: _global(mesh, np.asarray(a), replicated=True),
                              exp.inputs(static))
        steps[skey] = (_step_fn(exp, static, mesh), data)
      step, data = steps[skey]
      params = {}
      for n in numeric:
        dt = fdt if isinstance(exp.defaults[n], float) else np.int32
        params[n] = _global(mesh, np.asarray([c[n] for c in cells], dtype=dt))
      halves = np.asarray([id_halves(ids[i]) for i in idx], dtype=np.uint32)
      out = step(params, _global(mesh, np.ascontiguousarray(halves[:, 0])),
                 _global(mesh, np.ascontiguousarray(halves[:, 1])),
                 _global(mesh, seed_arr, replicated=True), data)
      rows = _host_rows(out)
      lines = []
      for slot in range(len(b)):
        i = idx[slot]
        if done_mask[i] or owners[slot // batch_size] != pidx:
          continue
        check(slot in rows, f"internal: row {slot} is not on this process's devices")
        lines.append(record_line(ids[i], i, grid.cells[i], rows[slot]))
      append_lines(own, lines)
      computed += len(lines)
      bar.update(int((~done_mask[b]).sum()))
  return Summary(run_dir=run_dir, experiment=exp.name, n_cells=len(ids), done_before=done_before,
                 computed=computed, batches=len(batches), devices=k, batch_size=batch_size,
                 problems=problems, seconds=time.perf_counter() - t0, shard=own)


def results_block(exp, summary: Summary, records, records_csv: str) -> dict:
  """The ``results`` block of a sweep's results.json: the run's summary and every record."""
  return {
      "experiment": exp.name,
      "n_cells": summary.n_cells,
      "complete": len(records) == summary.n_cells,
      "done_before": summary.done_before,
      "computed": summary.computed,
      "devices": summary.devices,
      "batch_size": summary.batch_size,
      "seconds": round(summary.seconds, 3),
      "problems": summary.problems,
      "records_csv": records_csv,
      "records": [{"id": r["id"], "cell": r["cell"], "result": r["result"]} for r in records],
  }
