"""The sweep's result store: one run directory, its manifest, locks, record shards and resume.

- ``sweep.json``: manifest with the experiment, the config that determines the numbers (seed,
  x64, extra) and the full grid. Re-running in the same directory with a different experiment,
  grid or config is a :class:`~limits.errors.LimitsError` naming every difference (key, old and
  new value), never silent mixing, once a cell is recorded; a sweep that recorded no cell (it
  failed on a bad model, say) is replaced by the corrected command. Execution
  settings (``batch_size``, devices) are not part of it: a run may resume with fewer devices
  or a smaller batch (after running out of memory, say); cells computed before and after may
  then differ in the last bits (see :mod:`limits.sweep.engine`).
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

On several hosts each process writes only its own shard; the run directory may be shared (NFS,
GCS FUSE) or per host (copy the shard files together before :func:`collect`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from limits.errors import LimitsError, check
from limits.sweep.grid import Grid, canonical_json

MANIFEST = "sweep.json"
FORMAT = "limits-sweep/1"
_SHA_SUFFIX_LEN = len(',"sha256":"') + 64 + len('"}')


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
  from limits.runs.results import to_jsonable

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
      from limits.runs.results import atomic_write_text

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
    from limits.runs.results import oserror_line

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


def make_manifest(exp_name: str, grid: Grid, config: Mapping[str, Any]) -> dict:
  """The ``sweep.json`` of a run: format, experiment, config, the grid and its sha256."""
  from limits.runs.results import to_jsonable

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


def has_records(run_dir: Path) -> bool:
  return any(p.stat().st_size > 0 for p in shard_paths(run_dir))


def check_manifest(old: Mapping[str, Any], new: Mapping[str, Any], run_dir: Path,
                    log: Callable[[str], None] | None = None) -> bool:
  """Whether the manifest must be (re)written. A different sweep with recorded cells is a
  LimitsError naming every difference; one that recorded nothing (it failed before its first
  cell, say on a bad model) is replaced, with one line saying what changed."""
  diffs = manifest_differences(old, new)
  if not diffs:
    return False
  if not has_records(run_dir):
    if log is not None:
      log(f"{str(run_dir)!r} held a sweep that recorded no cell; replacing it "
          f"({'; '.join(diffs)})")
    return True
  raise LimitsError(f"--out_dir={str(run_dir)!r} holds a different sweep with recorded cells: "
                    f"{'; '.join(diffs)}; use a new --out_dir or the original settings")


@contextlib.contextmanager
def open_run(run_dir: str | os.PathLike, manifest: Mapping[str, Any], *, process_index: int,
             resume: bool = True, log: Callable[[str], None] | None = None) -> Iterator[Path]:
  """Opens a run directory for this process: created, locked, manifest checked or written.

  A path that is not a folder, or a non-empty folder with ``resume=False``, is a one-line
  LimitsError. The lock ``.lock.<process_index>`` is held for the ``with`` block (released
  after it unless this process already held it). A different sweep with recorded cells is
  refused by :func:`check_manifest`; records without a manifest are refused too.
  """
  from limits.runs import results

  run_dir = Path(run_dir)
  if run_dir.exists() and not run_dir.is_dir():
    raise LimitsError(f"--out_dir={str(run_dir)!r} exists and is not a directory")
  if not resume and run_dir.exists() and any(not p.name.startswith(".")
                                              for p in run_dir.iterdir()):
    raise LimitsError(f"--out_dir={str(run_dir)!r} is not empty and resuming is off; "
                      "use a new directory or --resume")
  run_dir.mkdir(parents=True, exist_ok=True)
  man_path = run_dir / MANIFEST
  tag = str(process_index)
  took_lock = not results.is_locked(run_dir, tag)
  results.lock_dir(run_dir, tag)  # a second sweep on this folder: one line, not a rerun
  try:
    if man_path.exists():
      write = check_manifest(read_manifest(run_dir), manifest, run_dir, log)
    else:
      check(not has_records(run_dir),
            f"--out_dir={str(run_dir)!r} has records but no {MANIFEST}; use a new directory")
      write = True
    if write:
      results.write_json(man_path, manifest)
    yield run_dir
  finally:
    if took_lock:
      results.release_dir(run_dir, tag)


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
