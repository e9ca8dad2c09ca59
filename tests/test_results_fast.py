"""limits.runs.results: the direct paths of to_jsonable and write_csv give exactly what the
general rules (the previous implementation, copied here as the reference) and csv.DictWriter
give, for every kind of value a run writes."""

import csv
import io
import math
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from limits.runs import results as res


def _reference(obj):
  """to_jsonable as it was before the direct paths (the rules, in order)."""
  if isinstance(obj, Mapping):
    return {str(k): _reference(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_reference(v) for v in obj]
  if isinstance(obj, Path):
    return str(obj)
  if hasattr(obj, "__array__") and not isinstance(obj, (str, bytes)):
    arr = np.asarray(obj)
    return _reference(arr.item() if arr.ndim == 0 else arr.tolist())
  if isinstance(obj, (np.generic,)):
    return _reference(obj.item())
  if isinstance(obj, float):
    if math.isnan(obj):
      return "nan"
    if math.isinf(obj):
      return "inf" if obj > 0 else "-inf"
    return obj
  return obj


class _Str(str):
  pass


VALUES = [
    1.5, -0.0, float("nan"), float("inf"), -float("inf"), 3, True, None, "x", _Str("s"),
    np.float64(0.1), np.float32(0.1), np.float16(2.5), np.int64(-4), np.uint8(7), np.bool_(True),
    np.float64("nan"), np.float32("-inf"), np.str_("n"),
    np.array([1.0, np.nan, np.inf, -np.inf], np.float64), np.array([[0.1, 0.2]], np.float32),
    np.array([1, 2], np.int32), np.array([True, False]), np.array(3.0), np.array([], np.float64),
    np.arange(6, dtype=np.float16).reshape(2, 3), np.array(["a", "b"]),
    (1, (2.0, np.float64("inf"))), [Path("/a/b"), {"k": np.int8(1)}],
    {1: 2.0, np.int64(3): np.float64(4.0), "n": [np.nan]}, OrderedDict(a=np.float32(1e-8)),
    {"rows": [{"n": np.int64(5), "frac": np.float64(0.25)}]},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_to_jsonable_equals_the_general_rules(value):
  got, want = res.to_jsonable(value), _reference(value)
  assert repr(got) == repr(want)  # equal and of the same types ("nan" strings, floats, ints)
  assert [type(x) for x in _leaves(got)] == [type(x) for x in _leaves(want)]


def test_to_jsonable_of_a_jax_array_equals_the_general_rules():
  jnp = pytest.importorskip("jax.numpy")
  value = {"a": jnp.asarray([1.0, 2.5]), "b": jnp.asarray(3)}
  assert repr(res.to_jsonable(value)) == repr(_reference(value))


def _leaves(obj):
  if isinstance(obj, dict):
    return [x for v in obj.values() for x in _leaves(v)]
  if isinstance(obj, list):
    return [x for v in obj for x in _leaves(v)]
  return [obj]


def test_write_csv_equals_dictwriter(tmp_path):
  rows = [{"n": np.int64(1), "frac": np.float64(0.1), "lower": np.float32(0.2)},
          {"n": 2, "upper": float("nan"), "note": "a,b \"q\""},
          {"frac": np.float64(1e-300), "n": np.int64(3)}]
  res.write_csv(tmp_path / "r.csv", rows)
  jsonable = [_reference(r) for r in rows]
  columns = []
  for r in jsonable:
    columns += [k for k in r if k not in columns]
  buf = io.StringIO()
  w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
  w.writeheader()
  for r in jsonable:
    w.writerow(r)
  assert (tmp_path / "r.csv").read_text() == buf.getvalue()
  assert buf.getvalue().splitlines()[0] == "n,frac,lower,upper,note"


def test_git_commit_asks_git_once_per_process(monkeypatch):
  calls = []
  real = res.subprocess.run

  def counted(*args, **kwargs):
    calls.append(args)
    return real(*args, **kwargs)

  monkeypatch.setattr(res.subprocess, "run", counted)
  monkeypatch.setattr(res, "_GIT_COMMIT", {})
  first = res.git_commit()
  assert res.git_commit() == first and res.env_info()["git_commit"] == first
  assert len(calls) == 1
  assert first == res._ask_git_commit()
