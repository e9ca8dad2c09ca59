"""Run directories, environment metadata and atomic JSON/CSV writers.

Every experiment writes ``DIR/results.json`` with the schema
``{"experiment", "config", "env", "results"}``, plus CSV and PNG files. All writes
go to a temporary file in the same directory and are moved into place with ``os.replace``
(:func:`atomic_write_bytes`), so
an interrupted run never leaves a half-written file behind; files are created with mode
0644 (less the umask), like the CSV and PNG files. A failed write (disk full, read-only
mount, permission) is a one-line :class:`~limits.errors.LimitsError` naming the file.

Run directories (:func:`prepare_out_dir`), for every CLI:

- the folder is created and a probe file is written and removed, so a read-only or full disk
  fails with one line *before* any computation;
- a lock (``DIR/.lock``, ``fcntl.flock``, held until the process exits) refuses a second run on
  the same folder while the first is running;
- ``DIR/.limits-run.json`` records the experiment and its *identity* (the command's flags,
  less those that only change how it runs: ``out_dir``, ``overwrite``, ``progress``, ``plot``,
  ``resume``, ``only``, ``devices``, ``verbosity``). Re-running the same command in the same
  folder continues or redoes that run in place. A different command is refused with one line
  naming the first differing flag (old and new value) when the folder already holds results
  (any file other than the marker, the lock and ``log.txt``), unless ``--overwrite`` is given:
  then the old ``results.json`` is removed first, so a new run that fails never presents the
  old results as its own (other files of the old run are replaced as the new run writes them).
  A folder without results (e.g. left by a run that failed on its inputs) is simply reused.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import errno
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

from absl import flags

from limits.errors import LimitsError, first_line

REPO_ROOT = Path(__file__).resolve().parent.parent
# Settings that change how a run executes, not what it computes: not part of a run's identity
# (the run marker) nor of the ``config`` block of results.json.
EXECUTION_FIELDS = frozenset({"out_dir", "overwrite", "progress", "plot", "resume", "only",
                              "devices", "verbosity"})


def default_out_dir(experiment: str) -> Path:
  """results/<experiment>/<UTC timestamp> under the current directory."""
  stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
  return Path("results") / experiment / stamp


RUN_MARKER = ".limits-run.json"
LOCK_FILE = ".lock"
# Files that are not results of a run: the marker, locks, the probe and reproduce's step log.
_NOT_RESULTS = ("log.txt",)
_HELD_LOCKS: dict[str, int] = {}  # resolved lock path -> open fd (kept until exit)


def oserror_line(e: OSError, action: str = "write", path=None) -> str:
  """One line for an OSError: what failed, on which file, and why."""
  name = path if path is not None else (e.filename or "?")
  why = e.strerror or str(e) or type(e).__name__
  hint = {errno.ENOSPC: " (disk full)", errno.EROFS: " (read-only file system)",
          errno.EACCES: " (permission denied)", errno.EDQUOT: " (disk quota exceeded)"
          }.get(e.errno, "")
  return f"cannot {action} {str(name)!r}: {why}{hint if why.lower() not in hint else ''}"


def check_writable(path: str | os.PathLike, what: str = "--out_dir") -> Path:
  """Writes and removes a probe file in the folder path; a one-line LimitsError if it cannot."""
  path = Path(path)
  probe = path / f".limits-write-probe-{os.getpid()}"
  try:
    with open(probe, "wb") as f:
      f.write(b"probe\n")
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    raise LimitsError(f"{what}={str(path)!r} is not writable: "
                      f"{oserror_line(e, 'write', probe)}") from None
  finally:
    try:
      os.unlink(probe)
    except OSError:
      pass
  return path


def make_out_dir(path: str | os.PathLike, what: str = "--out_dir") -> Path:
  """Creates the folder ``path`` (with its parents) and checks that it is writable, before any
  computation: a path that is not a folder, or one that cannot be created or written, is a
  one-line LimitsError naming ``what``."""
  path = Path(path)
  if path.exists() and not path.is_dir():
    raise LimitsError(f"{what}={str(path)!r} exists and is not a folder")
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise LimitsError(f"cannot create {what}={str(path)!r}: {e.strerror}") from None
  return check_writable(path, what)


def lock_dir(path: str | os.PathLike, tag: str = "", what: str = "--out_dir") -> Path:
  """Takes an exclusive lock on ``path/.lock[.tag]`` for the rest of this process.

  Idempotent within a process. Another process holding it gives a one-line LimitsError that
  names its pid. The lock is advisory (``fcntl.flock``) and released when the process exits,
  also when it is killed, so no stale lock is ever left behind.
  """
  import fcntl

  lock = Path(path) / (LOCK_FILE + (f".{tag}" if tag else ""))
  key = str(lock.resolve())
  if key in _HELD_LOCKS:
    return lock
  try:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise LimitsError(f"{what}={str(path)!r}: {oserror_line(e, 'create', lock)}") from None
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    try:
      other = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
    except OSError:
      other = "?"
    os.close(fd)
    raise LimitsError(f"{what}={str(path)!r} is in use by another run (pid {other}); wait for "
                      "it to finish or use another folder") from None
  os.ftruncate(fd, 0)
  os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
  _HELD_LOCKS[key] = fd
  return lock


def is_locked(path: str | os.PathLike, tag: str = "") -> bool:
  """Whether this process holds the lock of :func:`lock_dir` on path (and tag)."""
  lock = Path(path) / (LOCK_FILE + (f".{tag}" if tag else ""))
  return str(lock.resolve()) in _HELD_LOCKS


def release_dir(path: str | os.PathLike, tag: str = "") -> None:
  """Releases a lock taken by :func:`lock_dir` in this process (no-op if not held)."""
  lock = Path(path) / (LOCK_FILE + (f".{tag}" if tag else ""))
  fd = _HELD_LOCKS.pop(str(lock.resolve()), None)
  if fd is not None:
    os.close(fd)


def _holds_results(path: Path) -> list[str]:
  """Names of the entries of path that are results of some run (sorted)."""
  return sorted(p.name for p in path.iterdir()
                if not p.name.startswith(".") and p.name not in _NOT_RESULTS)


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 3) -> str:
  """'key: old before, new now' for the first ``limit`` differing keys (experiment first)."""
  keys = sorted(set(old) | set(new), key=lambda k: (k != "experiment", k))
  diffs = [f"{k}: {old.get(k, '<unset>')!r} before, {new.get(k, '<unset>')!r} now"
           for k in keys if old.get(k, "<unset>") != new.get(k, "<unset>")]
  more = f"; and {len(diffs) - limit} more" if len(diffs) > limit else ""
  return "; ".join(diffs[:limit]) + more


def check_run_identity(path: Path, experiment: str, identity: Mapping[str, Any],
                       overwrite: bool) -> None:
  """Refuses (one line) to mix a different run into a folder holding results; records ours."""
  new = {"experiment": experiment, **to_jsonable(dict(identity))}
  marker = path / RUN_MARKER
  old = None
  if marker.exists():
    try:
      old = json.loads(marker.read_text(encoding="utf-8"))
      assert isinstance(old, dict)
    except (OSError, ValueError, AssertionError):
      old = {"experiment": "<unreadable run marker>"}
  found = _holds_results(path)
  if old != new and found and not overwrite:
    if old is None:
      why = (f"it holds {', '.join(found[:3])}{' ...' if len(found) > 3 else ''} from another "
             "run")
    else:
      why = f"it holds a different run ({_differences(old, new)})"
    raise LimitsError(f"--out_dir={str(path)!r} not used: {why}; use a new --out_dir, the "
                      "same command to continue that run, or --overwrite to replace it")
  if old != new and overwrite and (path / "results.json").exists():
    try:
      os.unlink(path / "results.json")
    except OSError as e:
      raise LimitsError(oserror_line(e, "remove", path / "results.json")) from None
  if old != new:
    write_json(marker, new)


def prepare_out_dir(out_dir: str | os.PathLike | None, experiment: str, *,
                    identity: Mapping[str, Any] | None = None, overwrite: bool | None = None,
                    lock_tag: str = "", check_identity: bool = True) -> Path:
  """Creates (if needed), probes, locks and returns the run directory (see the module doc).

  Args:
    out_dir: the folder (None: results/<experiment>/<UTC time>).
    experiment: the experiment's name.
    identity: what makes two runs the same run (default: the flags of the running CLI, less
      the execution-only ones, from :func:`run_identity`).
    overwrite: replace a different run's results (default: the ``--overwrite`` flag).
    lock_tag: lock file suffix (a multi-host sweep locks per process index).
    check_identity: False when the caller checks identity itself (the sweep's manifest).
  """
  path = make_out_dir(Path(out_dir) if out_dir else default_out_dir(experiment))
  lock_dir(path, lock_tag)
  if check_identity:
    if identity is None:
      identity = run_identity()
    if overwrite is None:
      overwrite = overwrite_requested()
    check_run_identity(path, experiment, identity, bool(overwrite))
  return path


def git_commit() -> str | None:
  """The commit of the checkout limits/ lives in, or None outside a git checkout; asked of git
  once per process (a run writes results.json up to dozens of times, each a ``git`` process
  before), so every write of a run records the commit its code was started from."""
  if "commit" not in _GIT_COMMIT:
    _GIT_COMMIT["commit"] = _ask_git_commit()
  return _GIT_COMMIT["commit"]


_GIT_COMMIT: dict[str, str | None] = {}


def _ask_git_commit() -> str | None:
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


def read_json_object(path: str | os.PathLike) -> dict:
  """A JSON object from ``path``; one LimitsError line if unreadable, not JSON (a truncated
  write) or not an object."""
  try:
    value = json.loads(Path(path).read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError, ValueError) as e:
    raise LimitsError(f"{path}: not valid JSON ({first_line(e)})") from None
  if not isinstance(value, dict):
    raise LimitsError(f"{path}: expected a JSON object, got {type(value).__name__}")
  return value


def to_jsonable(obj: Any) -> Any:
  """Converts numpy/jax scalars and arrays, paths and tuples; non-finite floats become strings
  ("nan", "inf", "-inf") so the file stays strict JSON.

  The exact types a run's tables are made of (dict, list, tuple, str, int, bool, None, float,
  numpy scalars and arrays) take a direct path (a numeric array of finite values is one
  ``tolist``); anything else goes through :func:`_to_jsonable_general`, whose order of checks
  decides every case. Both give the same value for every input (tests/test_results_fast.py
  compares them): per_head.csv's 2,160 rows of numpy scalars cost 0.4 CPU s through the
  general path alone (``isinstance(obj, Mapping)`` is an ABC check per value)."""
  t = type(obj)
  if t is float:
    return obj if obj - obj == 0.0 else _nonfinite(obj)
  if t is str or t is int or t is bool or obj is None:
    return obj
  if t is dict:
    return {k if type(k) is str else str(k): to_jsonable(v) for k, v in obj.items()}
  if t is list or t is tuple:
    return [to_jsonable(v) for v in obj]
  np = sys.modules.get("numpy")
  if np is not None:
    if isinstance(obj, np.generic):
      return to_jsonable(obj.item())
    if t is np.ndarray and obj.ndim and obj.dtype.char in _PLAIN_ARRAY_CHARS:
      if obj.dtype.kind == "f" and not np.isfinite(obj).all():
        return to_jsonable(obj.tolist())
      return obj.tolist()  # Python bools, ints and finite floats: already JSON values
  return _to_jsonable_general(obj)


# numpy dtypes (by ``dtype.char``) whose ``tolist`` gives Python bools, ints or floats: bool,
# the signed and unsigned integers, float16, float32 and float64.
_PLAIN_ARRAY_CHARS = frozenset("?bBhHiIlLqQefd")


def _nonfinite(x: float) -> str:
  """"nan", "inf" or "-inf" for a non-finite float."""
  return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _to_jsonable_general(obj: Any) -> Any:
  """:func:`to_jsonable` for any input, by the rules in this order: mappings, lists and tuples
  (subclasses too), paths, anything with ``__array__`` (but strings), numpy scalars, floats."""
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
    return obj if math.isfinite(obj) else _nonfinite(obj)
  return obj


def _file_mode() -> int:
  """0644 less the process umask (mkstemp's own 0600 would hide results from other users)."""
  mask = os.umask(0)
  os.umask(mask)
  return 0o644 & ~mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
  """Writes bytes to path via a temp file + fsync + os.replace (never half-written).

  The one atomic writer of the project: every result, manifest, store repair and checkpoint
  goes through it. The file gets mode 0644 (less the umask). Any OSError (disk full,
  read-only, permission) is a one-line LimitsError naming the file; the temp file is removed
  and an existing file at path is left untouched.
  """
  path = Path(path)
  tmp = None
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
      os.fchmod(f.fileno(), _file_mode())
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    if tmp is not None:
      try:
        os.unlink(tmp)
      except OSError:
        pass
    if isinstance(e, OSError):
      raise LimitsError(oserror_line(e, "write", path)) from None
    raise
  return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
  """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8 (newlines written as given)."""
  return atomic_write_bytes(path, text.encode("utf-8"))


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
  w = csv.writer(buf, lineterminator="\n")  # csv.DictWriter's output, without its per-row checks
  w.writerow(columns)
  w.writerows([r.get(k, "") for k in columns] for r in rows)
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


def config_record(config: Any) -> dict[str, Any]:
  """results.json ``config``: every field of a config dataclass, in declaration order, less
  :data:`EXECUTION_FIELDS` (they change how a run executes, not what it computes)."""
  return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
          if f.name not in EXECUTION_FIELDS}


def run_identity() -> dict[str, Any]:
  """The flags of the running CLI (its main module) that determine its results: every flag
  it defines less :data:`EXECUTION_FIELDS`. Empty when flags are not parsed
  (library use)."""
  fv = flags.FLAGS
  if not fv.is_parsed() or not sys.argv:
    return {}
  own = fv.flags_by_module_dict().get(sys.argv[0], [])
  return {f.name: f.value for f in own if f.name not in EXECUTION_FIELDS}


def overwrite_requested() -> bool:
  """The value of ``--overwrite`` (False when flags are not parsed)."""
  fv = flags.FLAGS
  return bool(fv.is_parsed() and "overwrite" in fv and fv["overwrite"].value)
