"""The cache key of one window's records: everything that decides their bits.

A key is a JSON-able dict; its SHA-256 names the entry's folder and the whole dict is stored in
the entry's manifest, which must equal the key exactly for the entry to be used (a hash
collision, a renamed folder or another model's entry is never read). It covers:

- the model: the resolved path of its weights and, for every regular file there (the file
  itself, or every file of the directory), its name, size and mtime in nanoseconds, plus the
  config's repr (so a changed file, a replaced checkpoint or another model never matches);
- the window: L and the SHA-256 of its int32 token ids;
- the code: a SHA-256 over the sources that compute records (``limits/models``, ``limits/gpt2``,
  ``limits/records``), JAX's version, the backend, ``jax_enable_x64`` and ``XLA_FLAGS`` (the
  float32 forward's last bits depend on them);
- :data:`FORMAT`, bumped when the on-disk layout changes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
_ROOT = Path(__file__).resolve().parent.parent  # limits/
_CODE_DIRS = ("models", "gpt2", "records")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
  """SHA-256 (hex, 16) of the sources that compute records, in a fixed order."""
  h = hashlib.sha256()
  for sub in _CODE_DIRS:
    for path in sorted((_ROOT / sub).rglob("*.py")):
      h.update(str(path.relative_to(_ROOT)).encode())
      h.update(path.read_bytes())
  return h.hexdigest()[:16]


def file_identity(path) -> dict[str, Any]:
  """The weights' resolved path and (name, size, mtime_ns) of each regular file there."""
  path = Path(path).resolve()
  files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
  out = []
  for p in files:
    st = p.stat()
    out.append([p.name, st.st_size, st.st_mtime_ns])
  return {"path": str(path), "files": out}


def window_key(model, tokens) -> dict[str, Any]:
  """The key of one window ``tokens`` ((1, L) or (L,) integer ids) of ``model``
  (a :class:`limits.records.sources.Model`)."""
  import jax

  tok = np.ascontiguousarray(np.asarray(tokens, dtype=np.int32).reshape(-1))
  return {"format": FORMAT,
          "model": file_identity(model.path),
          "config": repr(model.config),
          "L": int(tok.size),
          "tokens_sha256": hashlib.sha256(tok.tobytes()).hexdigest(),
          "code": code_version(),
          "jax": jax.__version__,
          "backend": jax.default_backend(),
          "x64": bool(jax.config.jax_enable_x64),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


def digest(key: dict[str, Any]) -> str:
  """The folder name of a key: SHA-256 (hex, 32) of its canonical JSON."""
  return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
