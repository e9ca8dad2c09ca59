"""Run directories, environment metadata and atomic JSON/CSV writers.

Every experiment writes ``DIR/results.json`` with the schema
``{"experiment", "config", "env", "results"}`` (DESIGN.md), plus CSV and PNG files. All writes
go to a temporary file in the same directory and are moved into place with ``os.replace``, so
an interrupted run never leaves a half-written file behind.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from limits.errors import LimitsError

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_out_dir(experiment: str) -> Path:
  """results/<experiment>/<UTC timestamp> under the current directory."""
  stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
  return Path("results") / experiment / stamp


def prepare_out_dir(out_dir: str | os.PathLike | None, experiment: str) -> Path:
  """Creates (if needed) and returns the run directory; a one-line error if it cannot."""
  path = Path(out_dir) if out_dir else default_out_dir(experiment)
  if path.exists() and not path.is_dir():
    raise LimitsError(f"--out_dir={str(path)!r} exists and is not a directory")
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise LimitsError(f"cannot create --out_dir={str(path)!r}: {e.strerror}") from None
  return path


def git_commit() -> str | None:
  """The commit of the checkout limits/ lives in, or None outside a git checkout."""
  try:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=5)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip() or None if out.returncode == 0 else None


def env_info(seed: int | None = None) -> dict[str, Any]:
  """Versions, devices, precision, git commit and seed: the ``env`` block of results.json."""
  import jax
  import numpy as np

  info: dict[str, Any] = {
      "python": sys.version.split()[0],
      "platform": platform.platform(),
      "jax": jax.__version__,
      "numpy": np.__version__,
      "backend": jax.default_backend(),
      "devices": [str(d) for d in jax.devices()],
      "device_count": jax.device_count(),
      "process_count": jax.process_count(),
      "x64": bool(jax.config.read("jax_enable_x64")),
      "git_commit": git_commit(),
      "seed": seed,
      "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
  }
  try:
    import jaxlib

    info["jaxlib"] = jaxlib.__version__
  except Exception:  # pragma: no cover - jaxlib always ships with jax
    pass
  return info


def to_jsonable(obj: Any) -> Any:
  """Converts numpy/jax scalars and arrays, paths and tuples; non-finite floats become strings
  ("nan", "inf", "-inf") so the file stays strict JSON."""
  import numpy as np

  if isinstance(obj, Mapping):
    return {str(k): to_jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [to_jsonable(v) for v in obj]
  if isinstance(obj, Path):
    return str(obj)
  if hasattr(obj, "__array__") and not isinstance(obj, (str, bytes)):
    arr = np.asarray(obj)
    return to_jsonable(arr.item() if arr.ndim == 0 else arr.tolist())
  if isinstance(obj, (np.generic,)):
    return to_jsonable(obj.item())
  if isinstance(obj, float):
    if math.isnan(obj):
      return "nan"
    if math.isinf(obj):
      return "inf" if obj > 0 else "-inf"
    return obj
  return obj


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
  """Writes text to path via a temp file + fsync + os.replace (never half-written)."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    try:
      os.unlink(tmp)
    except OSError:
      pass
    raise
  return path


def write_json(path: str | os.PathLike, obj: Any) -> Path:
  return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def write_csv(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> Path:
  """Writes a list of dicts as CSV; columns are the union of keys in first-seen order."""
  rows = [to_jsonable(r) for r in rows]
  columns: list[str] = []
  for r in rows:
    for k in r:
      if k not in columns:
        columns.append(k)
  buf = io.StringIO()
  w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
  w.writeheader()
  for r in rows:
    w.writerow(r)
  return atomic_write_text(path, buf.getvalue())


def write_results(out_dir: str | os.PathLike, experiment: str, config: Mapping[str, Any],
                  results: Mapping[str, Any], seed: int | None = None) -> Path:
  """Writes DIR/results.json = {"experiment", "config", "env", "results"}."""
  return write_json(Path(out_dir) / "results.json", {
      "experiment": experiment,
      "config": dict(config),
      "env": env_info(seed),
      "results": results,
  })


def flags_config(flag_values, names: Iterable[str]) -> dict[str, Any]:
  """The values of the named absl flags, for the ``config`` block."""
  return {n: flag_values[n].value for n in names}


def verdict(claim: str, holds: bool | None, measured: Any, *, detail: str = "",
            reason: str = "") -> dict[str, Any]:
  """One per-claim verdict record: holds (True/False) or None = not testable here (reason)."""
  status = "not testable" if holds is None else ("holds" if holds else "fails")
  out = {"claim": claim, "verdict": status, "measured": measured}
  if detail:
    out["detail"] = detail
  if reason:
    out["reason"] = reason
  return out
