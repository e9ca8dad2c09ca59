"""One forward per (model, window, L), shared by every step and every reading (AMBIG-7).

:func:`iter_layers` is ``limits.models.iter_layers`` for a :class:`limits.records.sources.Model` and
one corpus window, with a disk cache in between: the first call for a window runs the forward
once for every layer and writes each layer's record (``q, k, v, scores, weights, x``, the
model's dtype: float32) to a :class:`~limits.records.store.RecordStore`; every later call, in
this process or another step's, reads them memory-mapped (one layer's arrays at a time, so
peak memory stays one layer whatever L and the number of windows). The records are
bit-identical to the forward's: they are its own output, stored raw.

The store is the folder in ``$LIMITS_RECORDS_DIR`` (the reproduction runner sets it to
``OUT/records`` for its steps and removes it when every step succeeded); unset, or ``off``,
the forward runs as before (:func:`store_from_env` is None). Size on disk: per window and L,
n_layer·(2·H·L² + 3·H·L·d_head + L·D)·4 bytes; SmolLM2-135M at paper settings (4 windows,
L = 32 … 1,024) about 14 GB, the embedded model's ``--quick`` run about 55 MB.
:func:`session_store` gives a temporary store for one call when none is set (Algorithm 3's
search re-reads the same records every round; the gradient step's rows when they pass
``limits.gradient.blocks.MEMORY_BYTES``: 9.5 GB under ``$TMPDIR`` at SmolLM2 paper settings).
The key (:mod:`limits.records.key`) covers the model files, the tokens, L and the code; a
stale, foreign, truncated or corrupt entry is never read: it is discarded and the forward
recomputed (one warning line on stderr).

Besides the record fields an entry holds :data:`DERIVED` columns, cut from a field when the
entry is written: ``weights_key0`` = ``weights[..., 0]`` (B, H, L), every query's weight on
token 0 (attention sinks), so a reader of that column checks and reads L values per head, not
the L × L weights. :func:`iter_arrays` gives them (the same float32 numbers as the field's).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator, Sequence

import numpy as np

from limits.records.key import window_key
from limits.records.store import FIELDS, Corrupt, RecordStore

ENV_DIR = "LIMITS_RECORDS_DIR"
OFF = ("", "0", "off", "none", "false")

# Columns cut from a record field when an entry is written: name -> (field, function).
DERIVED = {"weights_key0": ("weights", lambda w: w[..., 0])}  # (B, H, L) weight on token 0

__all__ = ["DERIVED", "ENV_DIR", "FIELDS", "Corrupt", "RecordStore", "iter_arrays",
           "iter_layers", "session_store", "store_from_env", "window_key"]


def store_from_env() -> RecordStore | None:
  """The store named by ``$LIMITS_RECORDS_DIR``, None when unset or off."""
  root = os.environ.get(ENV_DIR, "")
  return None if root.strip().lower() in OFF else RecordStore(root)


@contextlib.contextmanager
def session_store():
  """The environment's store, else a temporary one removed on exit."""
  store = store_from_env()
  if store is not None:
    yield store
    return
  with tempfile.TemporaryDirectory(prefix="limits_records_") as tmp:
    yield RecordStore(tmp)


def _warn(msg: str) -> None:
  print(f"warning: records cache: {msg}; recomputing the forward", file=sys.stderr, flush=True)


def _record(arrays, window=None):
  """An AttnRecord of the stored fields; ``window``: the layer's sliding window (W, 0 for a
  global layer, None in families without windows), from the config, not from the store."""
  from limits.models import AttnRecord

  return AttnRecord(**{f: arrays.get(f) for f in FIELDS}, window=_window(window))


_DEFAULT = object()


def iter_layers(model, tokens, *, layers=None, fields: Sequence[str] = FIELDS,
                store=_DEFAULT) -> Iterator[tuple[int, object]]:
  """Yields ``(layer, AttnRecord)`` for one window ``tokens (1, L)`` of ``model``.

  Same records as ``limits.models.iter_layers(model.params, tokens, model.config)`` (the
  model's own softmax and temperature) for the kept ``layers`` (None = all), as NumPy arrays
  with the batch axis of 1. ``fields``: the record fields the caller reads (the others may be
  None when they come from the store). ``store``: a :class:`RecordStore`, None for no cache,
  default :func:`store_from_env`.
  """
  from limits import models

  if store is _DEFAULT:
    store = store_from_env()
  if store is None:
    yield from models.iter_layers(model.params, tokens, model.config, layers=layers)
    return
  bad = [f for f in fields if f not in FIELDS]
  if bad:
    raise ValueError(f"unknown record fields {bad}; allowed: {FIELDS}")
  for i, arrays, window in iter_arrays(model, tokens, fields, layers=layers, store=store):
    yield i, _record(arrays, window)


def iter_arrays(model, tokens, fields: Sequence[str], *, layers=None,
                store=_DEFAULT) -> Iterator[tuple[int, dict, object]]:
  """Yields ``(layer, {name: array}, window)`` for one window ``tokens (1, L)``: the asked
  record ``fields`` and :data:`DERIVED` columns of the kept ``layers`` (same numbers as
  :func:`iter_layers`' records, NumPy arrays with the batch axis of 1; ``window``: the
  layer's sliding window, from the config). Without a store the forward runs and the columns
  are cut from its record."""
  from limits import models
  from limits.models import engine

  if store is _DEFAULT:
    store = store_from_env()
  bad = [f for f in fields if f not in FIELDS and f not in DERIVED]
  if bad:
    raise ValueError(f"unknown record fields {bad}; allowed: {FIELDS + tuple(DERIVED)}")
  if store is None:
    for i, rec in models.iter_layers(model.params, tokens, model.config, layers=layers):
      arrays = _with_derived({f: np.asarray(getattr(rec, f)) for f in FIELDS})
      yield i, {f: arrays[f] for f in fields}, rec.window
    return
  tokens = engine.check_tokens(tokens, model.config)
  if tokens.shape[0] != 1:
    raise ValueError(f"one window at a time: tokens must be (1, L), got {tuple(tokens.shape)}")
  kept = engine.check_layers(layers, model.config)
  key = window_key(model, tokens)
  kinds = engine.layer_kinds(model.config)  # per-layer sliding window (Gemma 3), else None
  done: set[int] = set()
  try:
    entry = store.open(key)
    if entry is not None:
      for i, arrays in _read_ahead(entry, kept, fields):
        yield i, arrays, _window(kinds[i])
        done.add(i)
      return
  except (Corrupt, KeyError, ValueError) as e:
    _warn(str(e) if isinstance(e, Corrupt) else f"malformed manifest ({e!r})")
    store.remove(key)
  for i, arrays, window in _compute(model, tokens, kept, done, store, key):
    yield i, {f: arrays[f] for f in fields}, window


# A layer's fields are read ahead (mapped and checked while the caller uses the previous
# layer) up to this many bytes: its pages then count in the process's resident memory beside
# the previous layer's. A larger layer (SmolLM2's weights alone are 604 MB at L = 4,096) is
# read when it is reached, so peak memory stays one layer's records there.
READ_AHEAD_BYTES = 1 << 28


def _read_ahead(entry, kept: Sequence[int], fields: Sequence[str]):
  """Yields ``(layer, entry.read(layer, fields))`` for the ``kept`` layers in order, the next
  layer mapped and checksum-checked by one background thread while the caller uses this one
  (the check pages the file in from disk and hashes it with the GIL released: 22 ms per
  SmolLM2 weights file at L = 1,024 when it is not in the page cache), for layers of at most
  :data:`READ_AHEAD_BYTES`. A failed read (Corrupt) is raised when its layer is reached, as a
  read in the caller's thread would be; a caller that stops early waits for at most the one
  read in flight."""
  from concurrent.futures import ThreadPoolExecutor

  if len(kept) < 2 or max(entry.nbytes(i, fields) for i in kept) > READ_AHEAD_BYTES:
    for i in kept:
      yield i, entry.read(i, fields)
    return
  with ThreadPoolExecutor(1, thread_name_prefix="records-read") as pool:
    nxt = pool.submit(entry.read, kept[0], fields)
    for j, i in enumerate(kept):
      arrays = nxt.result()
      nxt = pool.submit(entry.read, kept[j + 1], fields) if j + 1 < len(kept) else None
      yield i, arrays


def _window(window):
  return None if window is None else np.int32(window)


def _with_derived(arrays: dict) -> dict:
  """``arrays`` plus every :data:`DERIVED` column (C-contiguous copies: L values per head)."""
  out = dict(arrays)
  for name, (field, cut) in DERIVED.items():
    out[name] = np.ascontiguousarray(cut(arrays[field]))
  return out


def _written(writer, write):
  """Runs ``write()`` (the writer's ``add`` or ``flush``); on a failed write (OSError) warns
  once, aborts the entry and returns None, else returns the writer."""
  try:
    write()
    return writer
  except OSError as e:
    print(f"warning: records cache: write failed ({e}); not cached", file=sys.stderr,
          flush=True)
    writer.abort()
    return None


def _compute(model, tokens, kept, done, store, key):
  """Runs the forward over every layer, writes the entry, yields the kept layers not done."""
  from limits import models

  try:
    writer = store.writer(key)
  except OSError as e:
    print(f"warning: records cache: cannot write under {store.root} ({e}); not cached",
          file=sys.stderr, flush=True)
    writer = None
  committed = False
  try:
    for i, rec in models.iter_layers(model.params, tokens, model.config):
      arrays = _with_derived({f: np.asarray(getattr(rec, f)) for f in FIELDS})
      rec_window = rec.window
      del rec
      if writer is not None:
        writer = _written(writer, lambda: writer.add(i, arrays))
      if i in kept and i not in done:
        yield i, arrays, rec_window
    if writer is not None:  # the layers still in the writer's background thread
      writer = _written(writer, writer.flush)
    if writer is not None:
      try:
        writer.commit(model.config.n_layer)
        committed = True
      except OSError as e:
        print(f"warning: records cache: commit failed ({e}); not cached", file=sys.stderr,
              flush=True)
  finally:
    if writer is not None and not committed:
      writer.abort()
