"""Sweep engine: grids of cells sharded over every device, with a resumable result store.

A *grid* is an ordered list of *cells*; a cell is a flat dict of scalar parameters (numbers,
strings, booleans). A grid is either the cartesian product of named axes or an explicit list.
Every cell is completed with its experiment's defaults and coerced to the defaults' types, so
``epsilon=10`` and ``epsilon=10.0`` are the same cell, and has a stable id: the first 16 hex
digits of sha256 of its canonical JSON (sorted keys, no spaces).

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
- Randomness: ``run_key = jax.random.key(seed)``; the key of a cell is
  ``fold_in(fold_in(run_key, hi), lo)`` where ``hi, lo`` are the two 32-bit halves of the cell
  id. It depends only on the seed and the cell's parameters, never on its position, the batch,
  the device count or on resuming. Batches are cut from the full grid at fixed places (a resumed
  run recomputes a partly finished batch whole and appends only the missing cells), so an
  interrupted-and-resumed run is bitwise identical to an uninterrupted one with the same
  settings. Runs on any k >= 2 devices with the same ``batch_size`` compile the same per-device
  program and agree bitwise; a 1-device program is compiled without partitioning, which XLA may
  fuse differently, so float results can differ from multi-device ones in the last bits (the
  tests measure both).

Store (one run directory):

- ``sweep.json``: manifest with the experiment, the config that determines the numbers (seed,
  x64, extra) and the full grid. Re-running in the same directory with a different experiment,
  grid or config is a :class:`~limits.errors.LimitsError` naming every difference (key, old and
  new value), never silent mixing, once a cell is recorded; a sweep that recorded no cell (it
  failed on a bad model, say) is replaced by the corrected command. Execution
  settings (``batch_size``, devices) are not part of it: a run may resume with fewer devices
  or a smaller batch (after running out of memory, say); cells computed before and after may
  then differ in the last bits, as explained above.
- ``.lock.<process_index>``: while a process runs a sweep it holds an exclusive ``flock`` on
  it, so a second sweep started on the same folder stops with one line instead of computing
  every cell again (the lock dies with its process; nothing stale is left).
- ``records.<process_index>.jsonl``: append-only, one JSON record per finished cell per line,
  ``{"cell", "id", "index", "result", "sha256"}``; ``sha256`` is over the exact bytes of the
  record before the ``sha256`` field. Each batch's lines are appended with one write, then
  flushed and fsynced, so a killed run loses at most the batch in flight.
- On load, a line that is not valid JSON, has no newline (a crash mid-write) or fails its
  checksum is reported and removed from the process's own shard (a trailing one by truncation;
  one in the middle by an atomic rewrite that keeps the bad bytes in ``<shard>.corrupt``), and
  its cell is recomputed. Re-running the same command skips finished cells.

Multi-host (GPU clusters, TPU pods): :func:`maybe_initialize_distributed` calls
``jax.distributed.initialize()`` when ``LIMITS_DISTRIBUTED=1`` or ``JAX_COORDINATOR_ADDRESS`` is
set (optionally with ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``; on Cloud TPU, Slurm and Open
MPI ``LIMITS_DISTRIBUTED=1`` alone auto-detects them). Every process runs the same program over
the global mesh; each writes only the records of cells computed on its own devices to
``records.<process_index>.jsonl``. Finished-cell sets are merged across processes with
``process_allgather``, so the run directory may be shared (NFS, GCS FUSE) or per host (copy the
shard files together before :func:`collect`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from limits.errors import LimitsError, check

MANIFEST = "sweep.json"
FORMAT = "limits-sweep/1"
MESH_AXIS = "cells"
_SHA_SUFFIX_LEN = len(',"sha256":"') + 64 + len('"}')

Cell = dict[str, Any]


# ----------------------------------------------------------------------------------------------
# Cells and grids
# ----------------------------------------------------------------------------------------------

def canonical_json(obj: Any) -> str:
  """Sorted keys, no spaces, strict JSON: the byte form that ids and checksums are taken over."""
  return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def cell_id(cell: Mapping[str, Any]) -> str:
  """The stable id of a cell: 16 hex digits of sha256 of its canonical JSON."""
  return hashlib.sha256(canonical_json(dict(cell)).encode()).hexdigest()[:16]


def id_halves(cid: str) -> tuple[int, int]:
  """The two uint32 halves of a cell id, folded into the run key to give the cell's key."""
  return int(cid[:8], 16), int(cid[8:16], 16)


def _scalar(value: Any, where: str) -> Any:
  if isinstance(value, (bool, int, str)) or value is None:
    return value
  if isinstance(value, float):
    check(math.isfinite(value), f"{where}={value!r} is not finite; grid values must be finite")
    return value
  if isinstance(value, np.generic):
    return _scalar(value.item(), where)
  raise LimitsError(f"{where}={value!r} is not a scalar (number, string or boolean)")


def _parse_value(text: str) -> Any:
  t = text.strip()
  low = t.lower()
  if low in ("true", "false"):
    return low == "true"
  try:
    return int(t)
  except ValueError:
    pass
  try:
    v = float(t)
  except ValueError:
    return t
  return v


def _parse_axis_values(name: str, text: str) -> list[Any]:
  text = text.strip()
  for kind in ("logspace", "linspace"):
    if text.startswith(kind + ":"):
      parts = text.split(":")[1:]
      try:
        check(len(parts) == 3, "")
        a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
        check(n >= 1, "")
      except (ValueError, LimitsError):
        raise LimitsError(f"axis {name!r}: {text!r} is not {kind}:START:STOP:COUNT "
                          "(COUNT a positive integer)") from None
      vals = np.logspace(a, b, n) if kind == "logspace" else np.linspace(a, b, n)
      return [float(v) for v in vals]
  values = [p for p in text.split(",")]
  check(all(v.strip() for v in values),
        f"axis {name!r} has an empty value in {text!r}; give NAME=v1,v2,...")
  return [_parse_value(v) for v in values]


def parse_grid(text: str) -> "Grid":
  """Parses ``"temperature=1e-3,1e-2;epsilon=1e-3,0.1,10;normalizer=softmax"`` into a product
  grid. A value list may also be ``logspace:START:STOP:COUNT`` (10**START..10**STOP) or
  ``linspace:START:STOP:COUNT``. Values parse as int, float, true/false, else string."""
  axes: dict[str, list[Any]] = {}
  parts = [p for p in str(text).split(";") if p.strip()]
  check(bool(parts), f"--grid={text!r} is empty; give NAME=v1,v2;NAME2=...")
  for part in parts:
    name, sep, values = part.partition("=")
    name = name.strip()
    check(bool(sep) and bool(name) and name.isidentifier(),
          f"--grid part {part.strip()!r} is not NAME=v1,v2,... (NAME a Python identifier)")
    check(name not in axes, f"--grid names axis {name!r} twice")
    axes[name] = _parse_axis_values(name, values)
  return Grid.product(axes)


@dataclasses.dataclass(frozen=True)
class Grid:
  """An ordered list of cells; ``axes`` is kept when the grid is a product (for the manifest)."""

  cells: tuple[Cell, ...]
  axes: Mapping[str, tuple[Any, ...]] | None = None

  @classmethod
  def product(cls, axes: Mapping[str, Iterable[Any]]) -> "Grid":
    """The cartesian product of named axes; the last axis varies fastest."""
    check(isinstance(axes, Mapping) and len(axes) > 0, "a product grid needs at least one axis")
    clean: dict[str, tuple[Any, ...]] = {}
    for name, values in axes.items():
      check(isinstance(name, str) and name.isidentifier(),
            f"axis name {name!r} is not a Python identifier")
      if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        values = [values]
      values = tuple(_scalar(v, f"{name}") for v in values)
      check(len(values) > 0, f"axis {name!r} has no values")
      check(len(set(map(canonical_json, values))) == len(values),
            f"axis {name!r} repeats a value: {list(values)}")
      clean[name] = values
    names = list(clean)
    cells = tuple(dict(zip(names, combo)) for combo in itertools.product(*clean.values()))
    return cls(cells=cells, axes=clean)

  @classmethod
  def explicit(cls, cells: Iterable[Mapping[str, Any]]) -> "Grid":
    """A grid from an explicit list of cells (dicts of scalars), in the given order."""
    out = []
    for i, c in enumerate(cells):
      check(isinstance(c, Mapping), f"cell {i} is {c!r}, not an object of NAME: value")
      out.append({str(k): _scalar(v, f"cell {i} {k}") for k, v in c.items()})
    check(len(out) > 0, "the grid has no cells")
    return cls(cells=tuple(out), axes=None)

  @classmethod
  def from_json(cls, obj: Any) -> "Grid":
    """``{"axes": {...}}``, ``{"cells": [...]}``, a plain ``{name: [values]}`` or a list."""
    if isinstance(obj, list):
      return cls.explicit(obj)
    check(isinstance(obj, Mapping), "a grid must be a JSON object or a list of cells")
    if "cells" in obj:
      return cls.explicit(obj["cells"])
    if "axes" in obj:
      return cls.product(obj["axes"])
    return cls.product(obj)

  def to_json(self) -> dict[str, Any]:
    out: dict[str, Any] = {"cells": [dict(c) for c in self.cells]}
    if self.axes is not None:
      out["axes"] = {k: list(v) for k, v in self.axes.items()}
    return out

  def __len__(self) -> int:
    return len(self.cells)

  @property
  def ids(self) -> list[str]:
    return [cell_id(c) for c in self.cells]


def load_grid_file(path: str | os.PathLike) -> Grid:
  """Reads a grid JSON file (see :meth:`Grid.from_json`); one-line errors."""
  p = Path(path)
  try:
    text = p.read_text(encoding="utf-8")
  except OSError as e:
    raise LimitsError(f"cannot read grid file {str(p)!r}: {e.strerror}") from None
  try:
    obj = json.loads(text)
  except json.JSONDecodeError as e:
    raise LimitsError(f"grid file {str(p)!r} is not valid JSON: {e.msg} at line {e.lineno}") \
        from None
  return Grid.from_json(obj)


# ----------------------------------------------------------------------------------------------
# Experiments
# ----------------------------------------------------------------------------------------------

CellFn = Callable[[Mapping[str, Any], Mapping[str, Any], Any, Any], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class Experiment:
  """A batched cell function with its parameters.

  Attributes:
    name: registry name.
    fn: ``fn(static, params, keys, run_key) -> {name: (b, ...) array}``; ``static`` holds the
      Python values of the static parameters, ``params`` the numeric ones as ``(b,)`` arrays,
      ``keys`` the per-cell PRNG keys ``(b,)``; it must treat cells independently.
    defaults: every parameter with its default; the default's type (float, int, str, bool) is
      the parameter's type. A grid may only name these parameters.
    static: integer parameters that determine shapes (strings and booleans are always static).
    default_grid: axes used when the user gives no grid.
    validate: ``validate(cell)`` raises LimitsError for a bad value (one line).
    description: one line for ``--help``.
    inputs: optional ``inputs(static) -> pytree`` of host arrays (model weights, token windows)
      that every cell with those static values shares; it is placed replicated on the mesh once
      per static group and passed to ``fn`` as ``data=`` (an argument of the jitted step, never
      a baked-in constant).
  """

  name: str
  fn: CellFn
  defaults: Mapping[str, Any]
  default_grid: Mapping[str, Sequence[Any]]
  static: tuple[str, ...] = ()
  validate: Callable[[Mapping[str, Any]], None] | None = None
  description: str = ""
  inputs: Callable[[Mapping[str, Any]], Any] | None = None

  def static_names(self) -> tuple[str, ...]:
    names = [n for n, v in self.defaults.items()
             if n in self.static or isinstance(v, (str, bool)) or v is None]
    return tuple(names)

  def coerce(self, cell: Mapping[str, Any], where: str = "cell") -> Cell:
    """Fills defaults, checks names and types, returns the canonical full cell."""
    unknown = sorted(set(cell) - set(self.defaults))
    check(not unknown, f"{where}: unknown parameter(s) {unknown} for experiment {self.name!r}; "
          f"allowed: {sorted(self.defaults)}")
    out: Cell = {}
    for name, default in self.defaults.items():
      v = cell.get(name, default)
      out[name] = _coerce(v, default, f"{where} {name}")
    if self.validate is not None:
      self.validate(out)
    return out

  def make_grid(self, grid: "Grid | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None"
                ) -> Grid:
    if grid is None:
      grid = Grid.product(self.default_grid)
    elif not isinstance(grid, Grid):
      grid = Grid.from_json(grid)
    cells = [self.coerce(c, f"cell {i}") for i, c in enumerate(grid.cells)]
    ids = [cell_id(c) for c in cells]
    seen: dict[str, int] = {}
    for i, cid in enumerate(ids):
      check(cid not in seen, f"cells {seen.get(cid)} and {i} are the same cell {cells[i]}")
      seen[cid] = i
    axes = None
    if grid.axes is not None:
      axes = {k: tuple(_coerce(v, self.defaults[k], k) for v in vals)
              for k, vals in grid.axes.items()}
    return Grid(cells=tuple(cells), axes=axes)


def _coerce(v: Any, default: Any, where: str) -> Any:
  if isinstance(default, bool):
    check(isinstance(v, bool), f"{where}={v!r} must be true or false")
    return v
  if isinstance(default, int):
    ok = (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and v.is_integer())
    check(ok, f"{where}={v!r} must be an integer")
    return int(v)
  if isinstance(default, float):
    check(isinstance(v, (int, float)) and not isinstance(v, bool),
          f"{where}={v!r} must be a number")
    v = float(v)
    check(math.isfinite(v), f"{where}={v!r} must be finite")
    return v
  if isinstance(default, str):
    check(isinstance(v, str), f"{where}={v!r} must be a string")
    return v
  return v


EXPERIMENTS: dict[str, Experiment] = {}


def register(exp: Experiment) -> Experiment:
  """Adds an experiment to :data:`EXPERIMENTS` (name -> Experiment)."""
  EXPERIMENTS[exp.name] = exp
  return exp


def get_experiment(name: "str | Experiment") -> Experiment:
  if isinstance(name, Experiment):
    return name
  check(name in EXPERIMENTS,
        f"unknown experiment {name!r}; choose from {', '.join(sorted(EXPERIMENTS))}")
  return EXPERIMENTS[name]


# ----------------------------------------------------------------------------------------------
# Record store
# ----------------------------------------------------------------------------------------------

def shard_path(run_dir: str | os.PathLike, process_index: int) -> Path:
  """``<run_dir>/records.<process_index>.jsonl``: the only file process ``process_index``
  appends to."""
  return Path(run_dir) / f"records.{int(process_index)}.jsonl"


def shard_paths(run_dir: str | os.PathLike) -> list[Path]:
  """All record shards in a run directory, ordered by process index."""
  out = []
  for p in Path(run_dir).glob("records.*.jsonl"):
    mid = p.name[len("records."):-len(".jsonl")]
    if mid.isdigit():
      out.append((int(mid), p))
  return [p for _, p in sorted(out)]


def record_line(cid: str, index: int, cell: Mapping[str, Any], result: Mapping[str, Any]) -> str:
  """One store line (no newline): canonical JSON of the record, then its sha256 field."""
  from limits.results import to_jsonable

  body = canonical_json({"id": cid, "index": int(index), "cell": dict(cell),
                         "result": to_jsonable(dict(result))})
  digest = hashlib.sha256(body.encode()).hexdigest()
  return body[:-1] + ',"sha256":"' + digest + '"}'


def parse_record_line(raw: bytes) -> tuple[dict | None, str]:
  """Returns (record, "") for a valid line, else (None, reason)."""
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError:
    return None, "not UTF-8"
  if len(text) <= _SHA_SUFFIX_LEN or not text.endswith('"}'):
    return None, "truncated or not a record"
  body = text[:-_SHA_SUFFIX_LEN] + "}"
  suffix = text[-_SHA_SUFFIX_LEN:]
  if not suffix.startswith(',"sha256":"'):
    return None, "no sha256 field at the end"
  digest = suffix[len(',"sha256":"'):-2]
  try:
    rec = json.loads(text)
  except json.JSONDecodeError as e:
    return None, f"bad JSON ({e.msg})"
  if hashlib.sha256(body.encode()).hexdigest() != digest:
    return None, "checksum mismatch"
  if not (isinstance(rec, dict) and {"id", "index", "cell", "result"} <= set(rec)):
    return None, "missing fields"
  return rec, ""


@dataclasses.dataclass
class ShardReport:
  path: Path
  records: list[dict]
  problems: list[str]  # one readable line each
  repaired: bool = False


def read_shard(path: str | os.PathLike, *, repair: bool = False) -> ShardReport:
  """Reads one shard; invalid lines are reported. With ``repair``, they are removed from the
  file: trailing ones by truncation, others by an atomic rewrite that appends the removed bytes
  to ``<path>.corrupt``. Only a process's own shard may be repaired (others may be in use)."""
  path = Path(path)
  data = path.read_bytes() if path.exists() else b""
  records: list[dict] = []
  problems: list[str] = []
  good_spans: list[tuple[int, int]] = []
  bad_spans: list[tuple[int, int]] = []
  pos = 0
  lineno = 0
  while pos < len(data):
    lineno += 1
    nl = data.find(b"\n", pos)
    end = len(data) if nl < 0 else nl + 1
    raw = data[pos:end]
    if nl < 0:
      rec, why = None, "partial record without newline (interrupted write)"
    else:
      rec, why = parse_record_line(raw[:-1])
    if rec is None:
      problems.append(f"{path.name} line {lineno}: {why}")
      bad_spans.append((pos, end))
    else:
      records.append(rec)
      good_spans.append((pos, end))
    pos = end
  repaired = False
  if repair and bad_spans:
    last_good_end = good_spans[-1][1] if good_spans else 0
    trailing_only = all(s >= last_good_end for s, _ in bad_spans)
    with open(path.with_name(path.name + ".corrupt"), "ab") as f:
      for s, e in bad_spans:
        f.write(data[s:e] if data[s:e].endswith(b"\n") else data[s:e] + b"\n")
      f.flush()
      os.fsync(f.fileno())
    if trailing_only:
      os.truncate(path, last_good_end)
    else:
      from limits.results import atomic_write_text

      atomic_write_text(path, b"".join(data[s:e] for s, e in good_spans).decode("utf-8"))
    repaired = True
  return ShardReport(path=path, records=records, problems=problems, repaired=repaired)


def append_lines(path: str | os.PathLike, lines: Sequence[str]) -> None:
  """Appends lines with one write, then flush + fsync (and fsyncs the directory on create)."""
  if not lines:
    return
  path = Path(path)
  created = not path.exists()
  data = "".join(line + "\n" for line in lines).encode("utf-8")
  try:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
      view = memoryview(data)
      while view:
        view = view[os.write(fd, view):]
      os.fsync(fd)
    finally:
      os.close(fd)
  except OSError as e:  # a torn last line is repaired on resume; say it in one line
    from limits.results import oserror_line

    raise LimitsError(oserror_line(e, "append to", path) + "; the cells recorded so far are "
                      "kept, run the same command again to continue") from None
  if created:
    _fsync_dir(path.parent)


def _fsync_dir(d: Path) -> None:
  try:
    fd = os.open(d, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def read_manifest(run_dir: str | os.PathLike) -> dict:
  p = Path(run_dir) / MANIFEST
  try:
    return json.loads(p.read_text(encoding="utf-8"))
  except FileNotFoundError:
    raise LimitsError(f"{str(run_dir)!r} is not a sweep run directory (no {MANIFEST})") from None
  except (OSError, json.JSONDecodeError) as e:
    raise LimitsError(f"cannot read {str(p)!r}: {e}") from None


def _manifest(exp_name: str, grid: Grid, config: Mapping[str, Any]) -> dict:
  from limits.results import to_jsonable

  ids = grid.ids
  return {
      "format": FORMAT,
      "experiment": exp_name,
      "config": to_jsonable(dict(config)),
      "grid_sha256": hashlib.sha256(canonical_json(ids).encode()).hexdigest(),
      "n_cells": len(ids),
      "grid": grid.to_json(),
  }


def _short(values: Sequence[Any], limit: int = 6) -> str:
  """A list for a one-line message, cut after ``limit`` values."""
  vals = list(values)
  if len(vals) <= limit:
    return repr(vals)
  return "[" + ", ".join(map(repr, vals[:limit])) + f", ... ({len(vals)} values)]"


def grid_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
  """What differs between two manifests' grids: per axis (product grids), else the cell count
  and the first differing cell. Each item says the old and the new value."""
  og, ng = old.get("grid") or {}, new.get("grid") or {}
  if isinstance(og.get("axes"), Mapping) and isinstance(ng.get("axes"), Mapping):
    oa, na = og["axes"], ng["axes"]
    out = []
    for k in list(oa) + [k for k in na if k not in oa]:
      if oa.get(k) != na.get(k):
        before = _short(oa[k]) if k in oa else "absent"
        now = _short(na[k]) if k in na else "absent"
        out.append(f"grid axis {k!r}: {before} before, {now} now")
    if out:
      return out
  oc, nc = list(og.get("cells") or []), list(ng.get("cells") or [])
  out = [] if len(oc) == len(nc) else [f"grid: {len(oc)} cells before, {len(nc)} now"]
  for i, (a, b) in enumerate(zip(oc, nc)):
    if a != b:
      diff = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
      out.append("first differing cell " + str(i) + ": " + ", ".join(
          f"{k}={a.get(k)!r} before, {b.get(k)!r} now" for k in sorted(diff)))
      break
  return out or ["grid: same cells in a different order"]


def manifest_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
  """Every difference between two manifests, each naming the key, its old and new value."""
  diffs = []
  if old.get("format") != new["format"]:
    diffs.append(f"format: {old.get('format')!r} before, {new['format']!r} now")
  if old.get("experiment") != new["experiment"]:
    diffs.append(f"experiment: {old.get('experiment')!r} before, {new['experiment']!r} now")
  elif old.get("grid_sha256") != new["grid_sha256"]:
    diffs.extend(grid_differences(old, new))
  oc, nc = old.get("config", {}), new["config"]
  for k in sorted(set(oc) | set(nc)):
    if oc.get(k) != nc.get(k):
      diffs.append(f"{k}: {oc.get(k)!r} before, {nc.get(k)!r} now")
  return diffs


def _has_records(run_dir: Path) -> bool:
  return any(p.stat().st_size > 0 for p in shard_paths(run_dir))


def _check_manifest(old: Mapping[str, Any], new: Mapping[str, Any], run_dir: Path,
                    log: Callable[[str], None] | None = None) -> bool:
  """Whether the manifest must be (re)written. A different sweep with recorded cells is a
  LimitsError naming every difference; one that recorded nothing (it failed before its first
  cell, say on a bad model) is replaced, with one line saying what changed."""
  diffs = manifest_differences(old, new)
  if not diffs:
    return False
  if not _has_records(run_dir):
    if log is not None:
      log(f"{str(run_dir)!r} held a sweep that recorded no cell; replacing it "
          f"({'; '.join(diffs)})")
    return True
  raise LimitsError(f"--out_dir={str(run_dir)!r} holds a different sweep with recorded cells: "
                    f"{'; '.join(diffs)}; use a new --out_dir or the original settings")


def load_done(run_dir: str | os.PathLike, grid: Grid, *, own_shard: Path | None = None,
              log: Callable[[str], None] | None = None) -> tuple[dict[str, dict], list[str]]:
  """Valid records of cells in ``grid`` from every shard (first one per id wins). Only
  ``own_shard`` is repaired. Returns (id -> record, problem lines)."""
  ids = set(grid.ids)
  done: dict[str, dict] = {}
  problems: list[str] = []
  for p in shard_paths(run_dir):
    rep = read_shard(p, repair=(own_shard is not None and p.resolve() == own_shard.resolve()))
    for pr in rep.problems:
      problems.append(pr + ("; removed, the cell will be recomputed" if rep.repaired
                            else "; ignored"))
    for rec in rep.records:
      if rec["id"] not in ids:
        problems.append(f"{p.name}: record {rec['id']} is not a cell of this grid; ignored")
      elif rec["id"] not in done:
        done[rec["id"]] = rec
  if log is not None:
    for pr in problems:
      log(pr)
  return done, problems


def collect(run_dir: str | os.PathLike, *, complete: bool = False) -> list[dict]:
  """All valid records of a run directory, merged over shard files, in grid order.

  Read-only (bad lines are skipped, not repaired). With ``complete=True`` a LimitsError says
  how many cells are missing. Each record: ``{"id", "index", "cell", "result", "sha256"}``.
  """
  man = read_manifest(run_dir)
  grid = Grid.from_json(man["grid"])
  order = {cid: i for i, cid in enumerate(grid.ids)}
  done, _ = load_done(run_dir, grid)
  if complete:
    missing = len(order) - len(done)
    check(missing == 0, f"{str(run_dir)!r}: {missing} of {len(order)} cells have no record yet; "
          "re-run the sweep to finish them")
  return sorted(done.values(), key=lambda r: order[r["id"]])


def flat_rows(records: Iterable[Mapping[str, Any]]) -> list[dict]:
  """Records as flat CSV rows: id, index, cell parameters, then results (arrays as JSON)."""
  rows = []
  for r in records:
    row: dict[str, Any] = {"id": r["id"], "index": r["index"]}
    row.update(r["cell"])
    for k, v in r["result"].items():
      row[k if k not in row else f"result_{k}"] = json.dumps(v) if isinstance(v, list) else v
    rows.append(row)
  return rows


# ----------------------------------------------------------------------------------------------
# Distributed set-up and devices
# ----------------------------------------------------------------------------------------------

_DISTRIBUTED_DONE = False


def maybe_initialize_distributed(environ: Mapping[str, str] | None = None) -> bool:
  """Calls ``jax.distributed.initialize()`` when the environment asks for it.

  Triggers: ``LIMITS_DISTRIBUTED=1`` (auto-detection on Cloud TPU, Slurm, Open MPI) or
  ``JAX_COORDINATOR_ADDRESS=host:port`` (then also ``JAX_NUM_PROCESSES`` and
  ``JAX_PROCESS_ID``). Must run before any JAX computation. Returns whether it initialized.
  """
  global _DISTRIBUTED_DONE
  env = os.environ if environ is None else environ
  flag = env.get("LIMITS_DISTRIBUTED", "").strip().lower()
  if _DISTRIBUTED_DONE or not (flag in ("1", "true", "yes") or env.get("JAX_COORDINATOR_ADDRESS")):
    return False
  import jax

  kwargs: dict[str, Any] = {}
  if env.get("JAX_COORDINATOR_ADDRESS"):
    kwargs["coordinator_address"] = env["JAX_COORDINATOR_ADDRESS"]
  for var, arg in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
    if env.get(var):
      try:
        kwargs[arg] = int(env[var])
      except ValueError:
        raise LimitsError(f"{var}={env[var]!r} is not an integer") from None
  try:
    jax.distributed.initialize(**kwargs)
  except (ValueError, RuntimeError) as e:
    raise LimitsError(f"jax.distributed.initialize failed: {str(e).splitlines()[0]}") from None
  _DISTRIBUTED_DONE = True
  return True


def select_devices(devices: "int | Sequence[Any] | None" = None) -> list:
  """All devices (None), the first k (int) or an explicit list; one-line errors."""
  import jax

  avail = jax.devices()
  if devices is None or (isinstance(devices, int) and devices == 0):
    return list(avail)
  if isinstance(devices, int):
    check(devices >= 1, f"--devices={devices} must be >= 1 (or 0 for all)")
    check(devices <= len(avail), f"--devices={devices} but only {len(avail)} "
          f"{jax.default_backend()} device(s) are available")
    check(jax.process_count() == 1 or devices == len(avail),
          f"--devices={devices}: a multi-host run must use all {len(avail)} devices")
    return list(avail[:devices])
  devs = list(devices)
  check(len(devs) >= 1, "no devices selected")
  return devs


def make_mesh(devices: Sequence[Any]):
  """A 1-D mesh with axis ``"cells"`` over the given devices."""
  import jax

  return jax.make_mesh((len(devices),), (MESH_AXIS,), devices=list(devices))


# ----------------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------------

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


def _float_dtype():
  import jax

  return np.float64 if jax.config.read("jax_enable_x64") else np.float32


def _step_fn(exp: Experiment, static: Mapping[str, Any], mesh):
  import jax
  from jax.sharding import PartitionSpec as P

  spec = P(MESH_AXIS)

  def local(params, hi, lo, seed, data):
    run_key = jax.random.key(seed)
    keys = jax.vmap(lambda h, l: jax.random.fold_in(jax.random.fold_in(run_key, h), l))(hi, lo)
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


class _StopRequest:
  requested = False


@contextlib.contextmanager
def _stop_between_batches(log: Callable[[str], None] | None):
  """Defers the first Ctrl-C (SIGINT) until the batch in flight is recorded, then raises
  KeyboardInterrupt; a second Ctrl-C stops at once. Inside XLA (a host callback, say) a
  KeyboardInterrupt would surface as an opaque runtime error and lose the batch. Only in the
  main thread (signal handlers cannot be set elsewhere)."""
  stop = _StopRequest()
  if threading.current_thread() is not threading.main_thread():
    yield stop
    return

  def handler(signum, frame):
    if stop.requested:
      raise KeyboardInterrupt
    stop.requested = True
    if log is not None:
      log("interrupt: stopping after the batch in flight is recorded (Ctrl-C again to stop now)")

  previous = signal.signal(signal.SIGINT, handler)
  try:
    yield stop
  finally:
    signal.signal(signal.SIGINT, previous)


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
    progress: show a :class:`~limits.progress.Progress` bar (process 0 only).
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

  run_dir = Path(run_dir)
  if run_dir.exists() and not run_dir.is_dir():
    raise LimitsError(f"--out_dir={str(run_dir)!r} exists and is not a directory")
  if not resume and run_dir.exists() and any(not p.name.startswith(".")
                                              for p in run_dir.iterdir()):
    raise LimitsError(f"--out_dir={str(run_dir)!r} is not empty and resuming is off; "
                      "use a new directory or --resume")
  run_dir.mkdir(parents=True, exist_ok=True)
  full_config = {"seed": seed, "x64": bool(jax.config.read("jax_enable_x64")),
                 **dict(config or {})}
  man = _manifest(exp.name, grid, full_config)
  man_path = run_dir / MANIFEST
  from limits import results

  took_lock = not results.is_locked(run_dir, str(pidx))
  results.lock_dir(run_dir, str(pidx))  # a second sweep on this folder: one line, not a rerun
  try:
    if man_path.exists():
      write = _check_manifest(read_manifest(run_dir), man, run_dir, log)
    else:
      check(not _has_records(run_dir),
            f"--out_dir={str(run_dir)!r} has records but no {MANIFEST}; use a new directory")
      write = True
    if write:
      results.write_json(man_path, man)
    return _run_batches(exp, grid, run_dir, seed, batch_size, mesh, pidx, owners, log,
                        progress, t0)
  finally:
    if took_lock:
      results.release_dir(run_dir, str(pidx))


def _run_batches(exp: Experiment, grid: Grid, run_dir: Path, seed: int, batch_size: int, mesh,
                 pidx: int, owners: Sequence[int], log, progress: bool, t0: float) -> Summary:
  """The engine's loop: every unfinished batch, appended to this process's shard."""
  import jax

  from limits.progress import Progress

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
  fdt = _float_dtype()
  steps: dict[tuple, Any] = {}
  computed = 0
  seed_arr = np.asarray(seed, dtype=np.uint32)
  show = progress and pidx == 0
  with Progress(pending, f"sweep {exp.name}", unit="cells", enabled=show) as bar, \
      _stop_between_batches(log) as stop:
    for b in batches:
      if stop.requested:  # Ctrl-C arrived during the previous batch, now recorded
        raise KeyboardInterrupt
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


# ----------------------------------------------------------------------------------------------
# Registered experiments
# ----------------------------------------------------------------------------------------------

def _toy_fn(static, params, keys, run_key):
  """Toy cell: deterministic closed forms plus one uniform draw per cell.

  ``square = x**2``, ``series = sum_{j<n} x**j`` (a length-n geometric sum), ``powers`` the
  ``(n,)`` vector ``x**j``, ``noise ~ U[0, 1)`` from the cell's key. ``LIMITS_SWEEP_TOY_DELAY``
  (seconds, read when compiling) makes each step sleep, for kill-and-resume tests.
  """
  import jax
  import jax.numpy as jnp

  x = params["x"]  # (b,)
  delay = float(os.environ.get("LIMITS_SWEEP_TOY_DELAY", "0") or 0)
  if delay > 0:
    def _sleep(a):
      time.sleep(delay)
      return np.asarray(a)

    x = jax.pure_callback(_sleep, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
  j = jnp.arange(static["n"], dtype=x.dtype)  # (n,)
  powers = x[:, None] ** j[None, :]  # (b, n)
  noise = jax.vmap(lambda k: jax.random.uniform(k, dtype=x.dtype))(keys)  # (b,)
  return {"square": x * x, "series": powers.sum(axis=1), "powers": powers, "noise": noise}


def _toy_validate(cell):
  check(1 <= cell["n"] <= 64, f"toy n={cell['n']} must be in [1, 64]")


register(Experiment(
    name="toy", fn=_toy_fn, defaults={"x": 0.5, "n": 3}, static=("n",),
    default_grid={"x": [0.0, 0.5, 1.0, 2.0], "n": [1, 3]}, validate=_toy_validate,
    description="cheap deterministic + random cell, for tests"))


# Tags folded into the run key for data shared by every cell of a run (common random numbers:
# cells that differ only in T, epsilon or n see the same logits / weights / points).
_LOGITS_TAG = 0x6C6F6769   # "logi"
_ALPHA_TAG = 0x616C7068    # "alph"
_POINTS_TAG = 0x706F696E   # "poin"


def gradient_logits(run_key, rows: int, length: int, dtype=None):
  """The synthetic logit rows of the ``gradient`` experiment: standard Gaussians (rows, length)
  from ``fold_in(run_key, _LOGITS_TAG)``, shared by every cell of a run; cells scale them by
  ``logit_scale``."""
  import jax
  import jax.numpy as jnp

  dtype = dtype or jnp.result_type(float)
  return jax.random.normal(jax.random.fold_in(run_key, _LOGITS_TAG), (rows, length), dtype)


def _gradient_fn(static, params, keys, run_key):
  """Gradient sensitivity (Corollary 3, Algorithm 5) on synthetic logit rows.

  Per cell: logits = logit_scale * Z with Z (rows, length) shared by the run; the normalizer is
  applied to logits / T (``normalizers.get(normalizer)``; for softmax this is Eq. 2). Results:
  ``g_mean``/``g_max`` over rows of g(T, eps) = ||fn(l + eps v) - fn(l)|| / eps
  (``jacobians.fd_sensitivity``, a fresh unit direction v per row from the cell's key), and
  ``jac_norm_mean``/``jac_norm_max`` of the exact Jacobian's spectral norm. ``jacobian``:
  "dense" (softmax: the closed form (diag a - a a^T)/T, ``jacobians.softmax_closed_form``, then
  ``spectral_norm``; others: ``jacobians.exact``; memory b x rows x L x L per device),
  "secular" (softmax only: ``jacobians.softmax_closed_form_norm``, O(L) per row, for long rows)
  or "none" (no Jacobian outputs).
  """
  import jax

  from limits import jacobians, normalizers

  norm = normalizers.get(static["normalizer"])
  T, eps, scale = params["temperature"], params["epsilon"], params["logit_scale"]  # (b,)
  Z = gradient_logits(run_key, static["rows"], static["length"], T.dtype)  # (R, L)

  def one(t, e, c, key):
    logits = c * Z  # (R, L)
    fn = lambda l: norm(l / t)
    g = jacobians.fd_sensitivity(fn, logits, e, key)  # (R,)
    out = {"g_mean": g.mean(), "g_max": g.max()}
    if static["jacobian"] == "none":
      return out
    if static["jacobian"] == "secular":
      jn = jacobians.softmax_closed_form_norm(logits, t)  # (R,), O(L) per row
    elif static["normalizer"] == "softmax":
      jn = jacobians.spectral_norm(jacobians.softmax_closed_form(logits, t))  # (R, L, L) -> (R,)
    else:
      jn = jacobians.spectral_norm(jacobians.exact(fn, logits))
    out.update(jac_norm_mean=jn.mean(), jac_norm_max=jn.max())
    return out

  return jax.vmap(one)(T, eps, scale, keys)


def _gradient_validate(cell):
  from limits import normalizers

  check(cell["normalizer"] in normalizers.NAMES,
        f"normalizer={cell['normalizer']!r}; choose one of {', '.join(normalizers.NAMES)}")
  check(cell["jacobian"] in ("dense", "secular", "none"),
        f"jacobian={cell['jacobian']!r}; choose dense, secular or none")
  check(cell["jacobian"] != "secular" or cell["normalizer"] == "softmax",
        f"jacobian=secular is for softmax only, not normalizer={cell['normalizer']!r}")
  check(cell["temperature"] > 0, f"temperature={cell['temperature']} must be > 0")
  check(cell["epsilon"] > 0, f"epsilon={cell['epsilon']} must be > 0")
  check(cell["logit_scale"] > 0, f"logit_scale={cell['logit_scale']} must be > 0")
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["rows"] <= 65536, f"rows={cell['rows']} must be in [1, 65536]")


register(Experiment(
    name="gradient", fn=_gradient_fn,
    defaults={"temperature": 1.0, "epsilon": 1e-3, "logit_scale": 1.0, "normalizer": "softmax",
              "length": 64, "rows": 128, "jacobian": "dense"},
    static=("length", "rows"),
    # AMBIG-11: log grid 1e-3..1e2, 5 points per decade; the paper's three epsilons.
    default_grid={"temperature": [float(t) for t in np.logspace(-3, 2, 26)],
                  "epsilon": [1e-3, 1e-1, 10.0]},
    validate=_gradient_validate,
    description="g(T, eps) by finite differences and the exact Jacobian norm on random logits"))


def separability_alpha(kind: str, run_key, length: int, temperature, zipf_s=1.0, dtype=None):
  """Weights (length,) of the ``separability_sphere`` experiment, from
  ``fold_in(run_key, _ALPHA_TAG)``: "softmax" = softmax(g / T) of standard Gaussian logits g
  (as ``separability.synthetic_alpha``, but T may be traced), "zipf" and "uniform" via
  ``separability.synthetic_alpha``."""
  import jax
  import jax.numpy as jnp

  from limits import separability

  dtype = dtype or jnp.result_type(float)
  key = jax.random.fold_in(run_key, _ALPHA_TAG)
  if kind == "softmax":
    g = jax.random.normal(key, (length,), dtype)
    return jax.nn.softmax(g / temperature)
  if kind == "zipf":
    a = jnp.arange(1, length + 1, dtype=dtype) ** (-jnp.asarray(zipf_s, dtype))
    a = jax.random.permutation(key, a)
    return a / jnp.sum(a)
  return separability.synthetic_alpha(kind, length, dtype=dtype)


def separability_points_key(run_key):
  """Key of the point sets: sample i uses ``fold_in(this, i)`` as ``separability.monte_carlo``
  does, so a cell's Monte Carlo equals ``monte_carlo(separability_points_key(key), ...)``."""
  import jax

  return jax.random.fold_in(run_key, _POINTS_TAG)


def _separability_fn(static, params, keys, run_key):
  """Theorem 2 on the sphere (Algorithm 4 with synthetic embeddings).

  Per cell: weights alpha (length,) of ``alpha_kind`` (temperature / zipf_s), ``samples`` point
  sets x (length, dim) uniform on S^{dim-1}(M) (``separability.sphere_points``), and for each:
  r, delta (``min_pairwise_distance``), N_s/N and both Theorem 2 bounds with that sample's r
  and delta (``separability.row_stats``, the same formulas as ``theorem2_bounds``). Results:
  ``frac_mean``, ``frac_stderr`` (of N_s/N over samples) and the sample means of r, delta and
  the bounds (``lower`` clipped at 0, ``lower_raw`` not). Alpha and points are shared by all
  cells of a run (common random numbers); the per-cell key is not used.
  """
  import jax
  import jax.numpy as jnp

  from limits import separability as sep

  L, dim, S = static["length"], static["dim"], static["samples"]
  T, M, zs, ns = params["temperature"], params["M"], params["zipf_s"], params["n"]  # (b,)
  b = T.shape[0]
  pkey = separability_points_key(run_key)
  itemsize = jnp.dtype(T.dtype).itemsize
  chunk = int(max(1, min(S, (128 * 2**20) // max(1, b * itemsize * (2 * L * L + 3 * L * dim)))))

  def one(t, m, z, n):
    alpha = separability_alpha(static["alpha_kind"], run_key, L, t, z, T.dtype)[None]  # (1, L)
    srt = sep.sort_desc(alpha)                     # (1, L) row_stats takes sorted weights
    visible = jnp.ones(alpha.shape, bool)

    def sample(i):
      x = sep.sphere_points(jax.random.fold_in(pkey, i), L, dim, m, alpha.dtype)  # (L, dim)
      delta = sep.min_pairwise_distance(x)
      dl = jnp.where(jnp.isfinite(delta), delta, 0)
      st = sep.row_stats(alpha, srt, visible, x, n, m, dl)
      return jnp.stack([st.frac[0], st.r[0], delta, st.lower[0], st.lower_raw[0], st.upper[0]])

    out = jax.lax.map(sample, jnp.arange(S, dtype=jnp.int32), batch_size=chunk)  # (S, 6)
    mean = out.mean(axis=0)
    f = out[:, 0]
    stderr = (jnp.sqrt(jnp.sum((f - mean[0]) ** 2) / (S - 1) / S) if S > 1
              else jnp.asarray(jnp.inf, f.dtype))
    return {"frac_mean": mean[0], "frac_stderr": stderr, "r_mean": mean[1],
            "delta_mean": mean[2], "lower_mean": mean[3], "lower_raw_mean": mean[4],
            "upper_mean": mean[5]}

  return jax.vmap(one)(T, M, zs, ns)


def _separability_validate(cell):
  kinds = ("softmax", "zipf", "uniform")
  check(cell["alpha_kind"] in kinds, f"alpha_kind={cell['alpha_kind']!r}; choose from {kinds}")
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["n"] <= cell["length"], f"n={cell['n']} must be in [1, length={cell['length']}]")
  check(1 <= cell["dim"] <= 4096, f"dim={cell['dim']} must be in [1, 4096]")
  check(1 <= cell["samples"] <= 10**7, f"samples={cell['samples']} must be in [1, 1e7]")
  check(cell["temperature"] > 0, f"temperature={cell['temperature']} must be > 0")
  check(cell["M"] > 0, f"M={cell['M']} must be > 0")
  check(cell["zipf_s"] >= 0, f"zipf_s={cell['zipf_s']} must be >= 0")


register(Experiment(
    name="separability_sphere", fn=_separability_fn,
    defaults={"n": 8, "length": 128, "dim": 64, "samples": 200, "alpha_kind": "softmax",
              "temperature": 1.0, "M": 1.0, "zipf_s": 1.0},
    static=("length", "dim", "samples"),
    # AMBIG-10: N in powers of two, M = 1.
    default_grid={"n": [1, 2, 4, 8, 16, 32, 64], "temperature": [0.1, 1.0]},
    validate=_separability_validate,
    description="Monte Carlo N_s/N on the sphere and the Theorem 2 bounds"))


@functools.lru_cache(maxsize=2)
def _model(spec: str):
  from limits import sources

  return sources.load_model(spec)


def _distance_model_inputs(static):
  """Model weights and the run's corpus windows (W, L) for one (model, length, windows) group."""
  from limits import sources

  model = _model(static["model"])
  tokens = sources.corpus_windows(model, static["length"], static["windows"],
                                  text=static["text"] or None)
  return {"params": model.params, "tokens": np.asarray(tokens, np.int32)}


def _distance_model_fn(static, params, keys, run_key, data):
  """Theorem 1 (Algorithms 1-2) on a model's own attention, one cell per (L, N).

  The corpus windows (W, L) of the group run through ``models.forward`` once per step; each
  layer's record is reduced inside the layer scan by ``distance.head_stats`` for every N of the
  step's cells (the N axis is the batch), with x = value vectors or hidden states (AMBIG-7),
  every query t > N with its causal prefix (AMBIG-8). Per cell, over the n_layer * n_head heads
  (token-averaged first, Algorithm 1): ``d_mean`` / ``expected_mean`` / ``dmax_mean`` (mean over
  heads of d̃ (sum form, AMBIG-1), its Jensen expectation (AMBIG-3/4) and the Eq. 9 bound),
  ``violations`` (rows with d̃ > d_max, Theorem 1 says 0), ``max_ratio`` (max d̃/d_max) and
  ``rows`` (query rows checked). The same numbers as ``experiments.distance`` at that L and N.
  """
  import jax.numpy as jnp

  from limits import distance, models

  model = _model(static["model"])
  L = static["length"]
  ns = params["n"]                                                    # (b,)
  dt = jnp.dtype(_float_dtype())

  def reduce(rec):
    x = distance.record_vectors(rec, static["vectors"]).astype(dt)
    return distance.head_stats(rec.weights.astype(dt), x, ns, n_cap=L - 1,
                               inclusion=static["inclusion"], bound=True)  # (W, H, b)

  st = models.forward(data["params"], data["tokens"], model.config, lm_head=False,
                    record_fn=reduce).attn                            # (n_layer, W, H, b)
  # Sum over windows (max for the ratios), then heads = layer x head, layer-major.
  heads = distance.HeadStats(*[
      (jnp.max(v, axis=1) if name.startswith("max_ratio") else jnp.sum(v, axis=1)).reshape(
          (-1, v.shape[-1]))
      for name, v in zip(distance.HeadStats._fields, st)])             # (n_layer*H, b)
  means = distance.token_means(heads)                                  # (n_layer*H, b)
  return {"d_mean": jnp.nanmean(means["d_sum"], axis=0),
          "expected_mean": jnp.nanmean(means["expected"], axis=0),
          "dmax_mean": jnp.nanmean(means["dmax_sum"], axis=0),
          "violations": jnp.sum(heads.viol_sum, axis=0),
          "max_ratio": jnp.max(heads.max_ratio_sum, axis=0),
          "rows": jnp.sum(heads.count, axis=0)}


def _distance_model_validate(cell):
  check(cell["vectors"] in ("value", "hidden"),
        f"vectors={cell['vectors']!r}; choose value or hidden")
  check(cell["inclusion"] in ("n_over_l_minus_1", "n_over_l"),
        f"inclusion={cell['inclusion']!r}; choose n_over_l_minus_1 or n_over_l")
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["n"] < cell["length"],
        f"n={cell['n']} must be in [1, length - 1 = {cell['length'] - 1}] (t <= N is skipped)")
  check(1 <= cell["windows"] <= 4096, f"windows={cell['windows']} must be in [1, 4096]")


register(Experiment(
    name="distance_model", fn=_distance_model_fn, inputs=_distance_model_inputs,
    defaults={"model": "tiny", "length": 256, "n": 5, "windows": 1, "vectors": "value",
              "inclusion": "n_over_l_minus_1", "text": ""},
    static=("length", "windows"),
    # Fig. 2a/2b grids (AMBIG-14), cut where N >= L.
    default_grid={"length": [128, 256, 512, 1024], "n": [1, 5, 10, 20, 100]},
    validate=_distance_model_validate,
    description="Theorem 1 distances on a model's attention over corpus windows, per (L, N)"))
