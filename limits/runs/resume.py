"""Continuing an interrupted run from its last finished unit (issue 30, item 1).

The experiments whose loops write results as they go (distance per L, and per L of the
critical-N search and scan; separability per block of Monte Carlo samples (sphere) or per
window (model); gradient per temperature batch; vanishing per L) keep, while a run is
unfinished, every finished unit's *payload* (what the unit contributes to the tables and to results.json) in a ``resume`` block
of results.json, written atomically with the results themselves. A rerun of the same command in
the same folder (same run identity: :func:`limits.runs.results.prepare_out_dir` refuses any
other) reads them back with :meth:`Units.open`, takes each finished unit from there instead of
computing it, computes the rest, and writes outputs identical to an uninterrupted run's:

- payloads are stored losslessly (:func:`encode`/:func:`decode`: numpy and JAX arrays keep
  their dtype and shape, numpy scalars their type, floats their exact value, NaN and ±inf
  included), so a restored unit is bit for bit the unit that was computed, and everything
  derived from it afterwards (tables, summaries, fits, figures) is computed from the same bits;
- a unit is stored only once complete, in loop order, so the tables are rebuilt in the same
  order; timing fields of restored units are the ones measured when they ran.

The finished run keeps only the counts ``{"unit", "units", "resumed", "computed"}`` (results.json
stays as small as before); its payloads are dropped, so rerunning a *complete* run recomputes it.
The other resumable runs use their own natural records: the sweep skips the cells recorded in
its cell store (``records.*.jsonl``), reproduce skips steps whose ``results.json`` is complete
(and a step that was cut short resumes inside its experiment through this module), training
restarts from its checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Mapping

import numpy as np

BLOCK = "resume"  # the key of the block in results.json "results"

_ARRAY, _SCALAR, _FLOAT, _ITEMS = "__ndarray__", "__npscalar__", "__float__", "__items__"


def _float_out(x: float):
  return x if math.isfinite(x) else {_FLOAT: repr(x)}


def encode(obj: Any) -> Any:
  """A JSON-ready form of ``obj`` that :func:`decode` turns back into equal bits: dicts (order
  kept; keys strings, or numbers kept as such), lists and tuples (as lists),
  None, bools, ints, floats (non-finite ones tagged), strings, numpy scalars and numpy/JAX
  arrays (tagged with dtype and shape)."""
  if isinstance(obj, Mapping):
    if all(isinstance(k, str) for k in obj):
      return {k: encode(v) for k, v in obj.items()}
    for k in obj:
      if not isinstance(k, (str, int, float, np.number)):
        raise TypeError(f"resume payload keys must be strings or numbers, got {k!r}")
    return {_ITEMS: [[encode(k), encode(v)] for k, v in obj.items()]}
  if isinstance(obj, (list, tuple)):
    return [encode(v) for v in obj]
  if isinstance(obj, np.generic):
    return {_SCALAR: [obj.dtype.str, encode(obj.item())]}
  if obj is None or isinstance(obj, (bool, int, str)):
    return obj
  if isinstance(obj, float):
    return _float_out(obj)
  if hasattr(obj, "__array__"):
    arr = np.asarray(obj)
    if arr.dtype.kind not in "biuf":
      raise TypeError(f"resume payload arrays must be numeric, got dtype {arr.dtype}")
    data = [_float_out(float(x)) if arr.dtype.kind == "f" else x.item()
            for x in arr.reshape(-1)]
    return {_ARRAY: [arr.dtype.str, list(arr.shape), data]}
  raise TypeError(f"resume payload cannot hold {type(obj).__name__}")


def _float_in(x):
  return float(x[_FLOAT]) if isinstance(x, dict) else x


def decode(obj: Any) -> Any:
  """The inverse of :func:`encode` (arrays come back as numpy arrays)."""
  if isinstance(obj, list):
    return [decode(v) for v in obj]
  if not isinstance(obj, dict):
    return obj
  if _ITEMS in obj and len(obj) == 1:
    return {decode(k): decode(v) for k, v in obj[_ITEMS]}
  if _FLOAT in obj and len(obj) == 1:
    return float(obj[_FLOAT])
  if _SCALAR in obj and len(obj) == 1:
    dtype, value = obj[_SCALAR]
    return np.dtype(dtype).type(_float_in(value))
  if _ARRAY in obj and len(obj) == 1:
    dtype, shape, data = obj[_ARRAY]
    return np.asarray([_float_in(x) for x in data], dtype=np.dtype(dtype)).reshape(shape)
  return {k: decode(v) for k, v in obj.items()}


def _normal(obj: Any) -> Any:
  """``obj`` as it reads back from results.json (for comparing configs)."""
  from limits.runs import results as res

  return json.loads(json.dumps(res.to_jsonable(obj)))


class Units:
  """The finished units of one run: restored from a previous attempt, or computed now.

  Usage in a task's loop (``key`` a string naming the unit, e.g. ``"L=64"``)::

    units = Units.open(out_dir, EXPERIMENT, record, unit="L")
    for L in lengths:
      payload = units.get(key)          # a finished unit of the interrupted run, or None
      if payload is None:
        payload = compute(L)
        units.add(key, payload)
      use(payload); write_results(..., {..., resume.BLOCK: units.block(final)})
  """

  def __init__(self, unit: str, restored: Mapping[str, Any] | None = None):
    self.unit = unit
    self._restored = dict(restored or {})
    self._done: dict[str, Any] = {}  # key -> encoded payload, in loop order
    self.resumed = 0
    self.computed = 0

  @classmethod
  def open(cls, out_dir: str | os.PathLike, experiment: str, config: Mapping[str, Any],
           unit: str, *, announce: bool = True) -> "Units":
    """The units kept in ``out_dir/results.json`` by an unfinished run of the same experiment
    with the same ``config`` block (anything else, or no such file: none)."""
    path = Path(out_dir) / "results.json"
    restored = {}
    try:
      old = json.loads(path.read_text(encoding="utf-8"))
      block = old["results"][BLOCK]
      if (old.get("experiment") == experiment and old.get("config") == _normal(config)
          and block.get("unit") == unit and isinstance(block.get("partial"), dict)):
        restored = block["partial"]
        for payload in restored.values():  # every payload must decode (a hand-edited file)
          decode(payload)
    except Exception:  # no file, another run, an unreadable or hand-edited block: compute all
      restored = {}
    units = cls(unit, restored)
    if restored and announce:
      print(f"resume: {len(restored)} finished {unit} unit(s) of the interrupted run in "
            f"{path} are reused, the rest is computed", file=sys.stderr, flush=True)
    return units

  def get(self, key: str) -> Any | None:
    """The restored payload of ``key`` (counted as resumed and kept), or None to compute it."""
    if key not in self._restored:
      return None
    stored = self._restored.pop(key)
    self._done[key] = stored
    self.resumed += 1
    return decode(stored)

  def restored(self, key: str) -> bool:
    """Whether ``key`` was finished by the interrupted run (:meth:`get` will return it)."""
    return key in self._restored

  def add(self, key: str, payload: Any) -> Any:
    """Records the payload of a unit just computed (counted as computed); returns it."""
    self._done[key] = encode(payload)
    self.computed += 1
    return payload

  def block(self, final: bool = False) -> dict:
    """results.json's ``resume`` block: the counts, plus (unfinished run) the payloads."""
    out = {"unit": self.unit, "units": len(self._done), "resumed": self.resumed,
           "computed": self.computed}
    if not final:
      out["partial"] = dict(self._done)
    return out
