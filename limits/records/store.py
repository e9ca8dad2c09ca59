"""On-disk entries of per-layer records: one folder per window key, float32 files memory-mapped.

Layout of an entry ``ROOT/<digest>/``: ``manifest.json`` (the full key, the number of layers,
and per layer and field its shape, dtype and checksum) and one raw little-endian file
``<layer>.<field>.bin`` per layer and field. An entry is written in a private temporary folder
and renamed into place only when every layer is written (a crash or an interrupted step
leaves no entry, only a ``*.tmp-*`` folder that later writers ignore), so a reader sees a
complete entry or none. Reading checks that the manifest's key equals the asked key
(never a foreign or stale entry), every file's size (a truncated file), and the checksum of each
field it returns (a corrupt file): any mismatch raises :class:`Corrupt`, never a wrong number.

The checksum is XXH3-64 (``xxhash``; 13 GB/s on one core here, against 4.9 GB/s for zlib's
CRC-32, which was most of a records read) when the package is installed, else CRC-32; the
manifest names the one used per field (``"xxh3_64"`` or ``"crc32"``). CRC-32 detects every
burst of up to 32 bits; XXH3-64 is a 64-bit hash with no such guarantee, which lets a given
corruption through with probability about 2^-64 (against 2^-32 for a CRC-32 beyond its bursts). An entry written with XXH3 and read where ``xxhash`` is missing cannot be
verified: :class:`Corrupt` (recomputed), never read unchecked.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from limits.records.key import digest

FIELDS = ("q", "k", "v", "scores", "weights", "x")  # limits.models.AttnRecord's fields
MANIFEST = "manifest.json"


class Corrupt(Exception):
  """An entry that exists but cannot be trusted (truncated, corrupt or foreign)."""


try:
  import xxhash

  def _XXH3(buf) -> int:  # the hasher object releases the GIL while it hashes (one-shot does not)
    return xxhash.xxh3_64(buf).intdigest()
except ImportError:  # pragma: no cover - exercised by monkeypatching _XXH3 to None
  _XXH3 = None


def _crc(a: np.ndarray) -> int:
  return zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"))


def checksum(a: np.ndarray) -> dict[str, int]:
  """``{"xxh3_64": h}`` of the array's raw bytes (C order), ``{"crc32": c}`` without xxhash."""
  if _XXH3 is None:
    return {"crc32": _crc(a)}
  return {"xxh3_64": _XXH3(memoryview(np.ascontiguousarray(a)).cast("B"))}


def _verify(a: np.ndarray, meta: Mapping[str, Any], path: Path) -> None:
  """Corrupt unless ``a``'s checksum equals the manifest's (either kind)."""
  if "xxh3_64" in meta:
    if _XXH3 is None:
      raise Corrupt(f"{path}: written with an XXH3 checksum and the xxhash package is not "
                    "installed (cannot verify)")
    ok = _XXH3(memoryview(np.ascontiguousarray(a)).cast("B")) == int(meta["xxh3_64"])
  elif "crc32" in meta:
    ok = _crc(a) == int(meta["crc32"])
  else:
    raise Corrupt(f"{path}: the manifest gives no checksum")
  if not ok:
    raise Corrupt(f"{path}: checksum mismatch (corrupt file)")


def _file(folder: Path, layer: int, field: str) -> Path:
  return folder / f"{layer:03d}.{field}.bin"


class Entry:
  """A complete entry on disk, its manifest checked against ``key``."""

  def __init__(self, folder: Path, key: Mapping[str, Any]):
    self.folder = folder
    try:
      man = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
      raise Corrupt(f"{folder / MANIFEST}: unreadable ({e})") from None
    if not isinstance(man, dict) or man.get("key") != dict(key):
      raise Corrupt(f"{folder}: its key is not this window's (stale or foreign entry)")
    self.n_layer = int(man["n_layer"])
    self.layers: dict[str, dict] = man["layers"]
    for layer, meta in self.layers.items():  # a truncated or extended file: size mismatch
      for field, m in meta.items():
        want = int(np.prod(m["shape"])) * np.dtype(m["dtype"]).itemsize
        path = _file(folder, int(layer), field)
        try:
          size = path.stat().st_size
        except OSError:
          raise Corrupt(f"{path}: missing") from None
        if size != want:
          raise Corrupt(f"{path}: {size} bytes, the manifest says {want} (truncated?)")

  def read(self, layer: int, fields: Sequence[str]) -> dict[str, np.ndarray]:
    """``{field: read-only memory-mapped array}`` for one layer, each checksum-checked."""
    out = {}
    for field in fields:
      m = self.layers[str(layer)][field]
      path = _file(self.folder, layer, field)
      try:
        a = np.asarray(np.memmap(path, dtype=np.dtype(m["dtype"]), mode="r",
                                 shape=tuple(m["shape"])))
      except (OSError, ValueError) as e:
        raise Corrupt(f"{path}: cannot be mapped ({e})") from None
      _verify(a, m, path)
      out[field] = a
    return out


# Layers whose files a Writer may still be writing while the forward and the step go on (each
# holds its arrays: ~83 MB per SmolLM2 layer at L = 1,024, 2.5 GB per window in all).
WRITES_IN_FLIGHT = 2


def _write_file(path: Path, a: np.ndarray) -> None:
  with open(path, "wb") as f:
    f.write(memoryview(a).cast("B"))


class Writer:
  """Writes one entry into a private temporary folder; :meth:`commit` renames it into place.

  The files of a layer are written and checksummed on one background thread (the write
  syscall and the XXH3 hasher release the GIL), so the kernel's copy into the page cache
  overlaps the next layer's forward and the step's own work instead of following them: a
  SmolLM2 window at L = 1,024 is 2.5 GB, 5-9 s of writes on this machine (nineteenth
  session). At most :data:`WRITES_IN_FLIGHT` layers are pending; :meth:`add` waits for the
  oldest beyond that. A write that failed raises its ``OSError`` from a later :meth:`add`,
  from :meth:`wait` or from :meth:`commit` (never silently: no manifest is written until every
  file is); :meth:`abort` cancels what has not started, waits for the rest, and removes the
  folder. The arrays handed to :meth:`add` must not change until then (the forward's are
  read-only; a writable one is copied)."""

  def __init__(self, root: Path, key: Mapping[str, Any]):
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    self.key = dict(key)
    self.final = root / digest(self.key)
    self.tmp = root / f"{self.final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    self.tmp.mkdir(parents=True)
    self.layers: dict[str, dict] = {}
    self._pool = ThreadPoolExecutor(max_workers=1)
    self._pending: deque = deque()

  def _write_layer(self, layer: int, arrays: Mapping[str, np.ndarray]) -> None:
    meta = {}
    for field, a in arrays.items():
      _write_file(_file(self.tmp, layer, field), a)
      meta[field] = {"shape": list(a.shape), "dtype": a.dtype.str, **checksum(a)}
    self.layers[str(layer)] = meta

  def add(self, layer: int, arrays: Mapping[str, np.ndarray]) -> None:
    """Queues the layer's files (C-contiguous copies only where needed)."""
    held = {}
    for field, a in arrays.items():
      c = np.ascontiguousarray(a)
      held[field] = c.copy() if c.flags.writeable else c
    self._pending.append(self._pool.submit(self._write_layer, layer, held))
    while len(self._pending) > WRITES_IN_FLIGHT or (self._pending and self._pending[0].done()):
      self._pending.popleft().result()          # an earlier layer's OSError surfaces here

  def wait(self) -> None:
    """Returns when every queued file is written; raises the first write's ``OSError``."""
    while self._pending:
      self._pending.popleft().result()

  def commit(self, n_layer: int) -> None:
    self.wait()
    self._pool.shutdown(wait=True)
    man = {"key": self.key, "n_layer": int(n_layer), "layers": self.layers}
    (self.tmp / MANIFEST).write_text(json.dumps(man), encoding="utf-8")
    try:
      os.rename(self.tmp, self.final)
    except OSError:  # another process committed the same entry first (or a broken one is there)
      if self.final.exists():
        try:
          Entry(self.final, self.key)
        except Corrupt:
          shutil.rmtree(self.final, ignore_errors=True)
          os.rename(self.tmp, self.final)
          return
      self.abort()

  def abort(self) -> None:
    self._pool.shutdown(wait=True, cancel_futures=True)
    self._pending.clear()
    shutil.rmtree(self.tmp, ignore_errors=True)


class RecordStore:
  """Entries under ``root`` (created on first write)."""

  def __init__(self, root):
    self.root = Path(root)

  def __repr__(self) -> str:
    return f"RecordStore({str(self.root)!r})"

  def open(self, key: Mapping[str, Any]) -> Entry | None:
    """The checked entry of ``key``, None if there is none; :class:`Corrupt` if it is bad."""
    folder = self.root / digest(dict(key))
    if not folder.is_dir():
      return None
    return Entry(folder, key)

  def remove(self, key: Mapping[str, Any]) -> None:
    shutil.rmtree(self.root / digest(dict(key)), ignore_errors=True)

  def writer(self, key: Mapping[str, Any]) -> Writer:
    return Writer(self.root, key)
