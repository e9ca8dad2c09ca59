"""Cells and grids of the sweep.

A *grid* is an ordered list of *cells*; a cell is a flat dict of scalar parameters (numbers,
strings, booleans). A grid is either the cartesian product of named axes or an explicit list.
Every cell is completed with its experiment's defaults and coerced to the defaults' types
(:meth:`limits.sweep.registry.Experiment.make_grid`), so ``epsilon=10`` and ``epsilon=10.0``
are the same cell, and has a stable id: the first 16 hex digits of sha256 of its canonical JSON
(sorted keys, no spaces).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from limits.errors import LimitsError, check

Cell = dict[str, Any]


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
