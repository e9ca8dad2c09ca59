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

  def nbytes(self, layer: int, fields: Sequence[str]) -> int:
    """Bytes of one layer's ``fields`` on disk (from the manifest)."""
    meta = self.layers[str(layer)]
    return sum(int(np.prod(meta[f]["shape"])) * np.dtype(meta[f]["dtype"]).itemsize
               for f in fields)

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


# A layer's files are written by a background thread while the caller goes on (the forward of
# the next layer, the step's own kernels): the writes wait on the disk (dirty-page
# throttling), not on the CPU, so they overlap. Layers up to this many bytes in flight; a larger
# layer is written before add returns (at L = 4,096 a SmolLM2 layer is 1.2 GB: no second copy).
WRITE_AHEAD_BYTES = 1 << 28


def _write_layer(folder: Path, layer: int, arrays: Mapping[str, np.ndarray]) -> dict:
  """Writes one layer's files; returns their manifest entries (shape, dtype, checksum)."""
  meta = {}
  for field, a in arrays.items():
    with open(_file(folder, layer, field), "wb") as f:
      f.write(memoryview(a).cast("B"))
    meta[field] = {"shape": list(a.shape), "dtype": a.dtype.str, **checksum(a)}
  return meta


class Writer:
  """Writes one entry into a private temporary folder; :meth:`commit` renames it into place.

  :meth:`add` hands a layer to a background thread (:data:`WRITE_AHEAD_BYTES` in flight at
  most) and marks its arrays read-only: the caller keeps using them, never changes them (the
  file and its checksum are those of the forward's arrays). A write's ``OSError`` is raised by
  a later :meth:`add` or by :meth:`flush`; :meth:`commit` flushes first; :meth:`abort` waits
  for the thread and removes the folder.
  """

  def __init__(self, root: Path, key: Mapping[str, Any]):
    self.key = dict(key)
    self.final = root / digest(self.key)
    self.tmp = root / f"{self.final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    self.tmp.mkdir(parents=True)
    self.layers: dict[str, Any] = {}  # str(layer) -> manifest entry, or its pending Future
    self._pending: list = []  # [(Future, bytes)] in submission order
    self._pool = None

  def add(self, layer: int, arrays: Mapping[str, np.ndarray]) -> None:
    arrays = {f: np.ascontiguousarray(a) for f, a in arrays.items()}
    nbytes = sum(a.nbytes for a in arrays.values())
    if nbytes > WRITE_AHEAD_BYTES:
      self.flush()
      self.layers[str(layer)] = _write_layer(self.tmp, layer, arrays)
      return
    self._wait(WRITE_AHEAD_BYTES - nbytes)
    for a in arrays.values():
      a.flags.writeable = False  # written as it is now (the caller's arrays, not copies)
    if self._pool is None:
      from concurrent.futures import ThreadPoolExecutor

      self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="records-writer")
    fut = self._pool.submit(_write_layer, self.tmp, layer, arrays)
    self.layers[str(layer)] = fut
    self._pending.append((fut, nbytes))

  def _wait(self, budget: int) -> None:
    """Waits for the oldest writes until at most ``budget`` bytes are in flight; raises the
    first failed write's exception."""
    while self._pending and (sum(b for _, b in self._pending) > budget
                             or self._pending[0][0].done()):
      fut, _ = self._pending.pop(0)
      fut.result()

  def flush(self) -> None:
    """Waits for every write in flight (raises the first failure)."""
    self._wait(-1)
    for k, v in self.layers.items():
      if not isinstance(v, dict):
        self.layers[k] = v.result()

  def _stop(self) -> None:
    if self._pool is not None:
      self._pool.shutdown(wait=True, cancel_futures=True)
      self._pool = None
    self._pending = []

  def commit(self, n_layer: int) -> None:
    try:
      self.flush()
    finally:
      self._stop()
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
    self._stop()
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
