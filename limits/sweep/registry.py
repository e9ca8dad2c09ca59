"""Experiment kinds and their registry: name -> :class:`Experiment` (defaults, cell function).

Each kind lives in its own module under :mod:`limits.sweep.kinds` and calls :func:`register`
when imported; the engine (:mod:`limits.sweep.engine`) only ever sees an :class:`Experiment`.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable, Mapping, Sequence

from limits.errors import check
from limits.runs import options
from limits.sweep.grid import Cell, Grid, cell_id

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
      the parameter's type. A grid may only name these parameters. The real kinds' are
      :class:`ConfigParameters` (fields of the experiment's config dataclass).
    static: integer parameters that determine shapes (strings and booleans are always static).
    default_grid: axes used when the user gives no grid.
    validate: ``validate(cell)`` raises LimitsError for a bad value (one line).
    description: one line for ``--help``.
    inputs: optional ``inputs(static) -> pytree`` of host arrays (model weights, token windows)
      that every cell with those static values shares; it is placed replicated on the mesh once
      per static group and passed to ``fn`` as ``data=`` (an argument of the jitted step, never
      a baked-in constant).
    host: False (default): ``fn`` is traced, jitted and run under ``jax.shard_map`` on the mesh.
      True: ``fn`` is host code (NumPy, host sorting, its own jits; not traceable) that the
      engine calls once per batch with NumPy ``params`` holding only the batch's cells this
      process owns (no padding), the per-cell keys, the run key and ``data=inputs(static)`` as
      host arrays; it returns a dict of per-cell NumPy or JAX arrays ``(b, ...)``. Its JAX work
      runs on the process's default device; batches are still cut and split between processes
      as for a traced kind (the same owners), and the store, resume and record format are the
      same. Used by kinds that call a library implementation written for the host (e.g.
      ``distance_model`` -> ``limits.distance.model.ModelEvaluator``).
  """

  name: str
  fn: CellFn
  defaults: Mapping[str, Any]
  default_grid: Mapping[str, Sequence[Any]]
  static: tuple[str, ...] = ()
  validate: Callable[[Mapping[str, Any]], None] | None = None
  description: str = ""
  inputs: Callable[[Mapping[str, Any]], Any] | None = None
  host: bool = False

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


class ConfigParameters(Mapping[str, Any]):
  """The parameters of a kind that are fields of its experiment's config dataclass (issue 26:
  a sweep kind and a reproduction step are the same experiment), as the kind's ``defaults``
  (a read-only mapping ``name -> default``) with :meth:`check` for its ``validate``.

  ``config``: the config class as ``"module:Class"``, imported on first use (the theorem
  packages import JAX; importing :mod:`limits.sweep` does not). ``fields``: config fields that
  are parameters as they are: same name, the field's default, its ``choices`` and ``check``
  (:func:`limits.runs.options.violation`, one line per bad value). ``elements``: ``{parameter:
  (list field, default)}``, a parameter that is one value of a comma-separated list field
  (``temperature`` of ``temperatures``; the kind checks it). ``own``: ``{parameter: default}``
  of the kind's own parameters (no config field)."""

  def __init__(self, config: str, fields: Sequence[str],
               elements: Mapping[str, tuple[str, Any]] | None = None,
               own: Mapping[str, Any] | None = None):
    self.config_path, self.fields = config, tuple(fields)
    self.elements, self.own = dict(elements or {}), dict(own or {})
    self._defaults: dict[str, Any] | None = None

  @property
  def config(self) -> type:
    module, _, name = self.config_path.partition(":")
    return getattr(importlib.import_module(module), name)

  def _fields(self) -> dict[str, dataclasses.Field]:
    by_name = {f.name: f for f in dataclasses.fields(self.config)}
    missing = [n for n in [*self.fields, *(f for f, _ in self.elements.values())]
               if n not in by_name]
    if missing:
      raise ValueError(f"{self.config_path} has no field(s) {missing}")
    return by_name

  def _load(self) -> dict[str, Any]:
    if self._defaults is None:
      by_name = self._fields()
      defaults = {n: by_name[n].default for n in self.fields}
      defaults.update({p: d for p, (_, d) in self.elements.items()})
      defaults.update(self.own)
      self._defaults = defaults
    return self._defaults

  def __getitem__(self, name: str) -> Any:
    return self._load()[name]

  def __iter__(self):
    return iter(self._load())

  def __len__(self) -> int:
    return len(self._load())

  def check(self, cell: Mapping[str, Any]) -> None:
    """One LimitsError line for a value its config field refuses."""
    by_name = self._fields()
    for n in self.fields:
      why = options.violation(by_name[n], cell[n])
      check(why is None, why or "")


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


def describe() -> str:
  """Every registered kind: its description, parameters with defaults, and default grid."""
  lines = []
  for name in sorted(EXPERIMENTS):
    exp = EXPERIMENTS[name]
    lines.append(f"{name}: {exp.description}" + (
        " [host kind: one call per batch on each process's default device]" if exp.host else ""))
    static = set(exp.static_names())
    if isinstance(exp.defaults, ConfigParameters):
      lines.append(f"  parameters of {exp.defaults.config_path}" + "".join(
          f"; {p}: one value of {f}" for p, (f, _) in exp.defaults.elements.items()) + (
          f"; the kind's own: {', '.join(exp.defaults.own)}" if exp.defaults.own else ""))
    for p, v in exp.defaults.items():
      lines.append(f"  {p} = {v!r}" + ("  (static: one compile per value)" if p in static else ""))
    grid = ";".join(f"{k}={','.join(f'{x:g}' if isinstance(x, float) else str(x) for x in vs)}"
                    for k, vs in exp.default_grid.items())
    lines.append(f"  default grid: {grid}")
  return "\n".join(lines)
