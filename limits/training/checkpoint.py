"""Checkpoints of the embedded model's training (``limits.training``): params, optimiser state,
step and stream position as msgpack (flax serialization, no pickle) beside a JSON meta file,
written atomically; unreadable files are one-line errors naming the folder to delete."""

from __future__ import annotations

import json
from pathlib import Path

from limits.errors import LimitsError

CKPT_FILE = "ckpt.msgpack"
CKPT_META = "ckpt.json"


def save_checkpoint(ckpt_dir: Path, state: dict, meta: dict) -> None:
  """Writes params + optimiser state + step + position (msgpack) and meta (JSON) atomically."""
  from flax import serialization

  from limits.runs.results import atomic_write_bytes, write_json

  ckpt_dir = Path(ckpt_dir)
  atomic_write_bytes(ckpt_dir / CKPT_FILE, serialization.to_bytes(state))
  write_json(ckpt_dir / CKPT_META, meta)


def read_meta(ckpt_dir: Path) -> dict:
  """The checkpoint's ckpt.json; a one-line LimitsError when it is unreadable or not JSON."""

  path = ckpt_dir / CKPT_META
  try:
    meta = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise LimitsError(f"checkpoint metadata {str(path)!r} is unreadable ({type(e).__name__}); "
                      f"delete {str(ckpt_dir)!r} to start over") from None
  if not isinstance(meta, dict):
    raise LimitsError(f"checkpoint metadata {str(path)!r} is not a JSON object; delete "
                      f"{str(ckpt_dir)!r} to start over")
  return meta


def check_output_dirs(out_dir: Path, ckpt_dir: Path) -> None:
  """Both folders can be created and written, before any training (one-line LimitsError)."""
  from limits.runs.results import make_out_dir

  make_out_dir(out_dir, "--out_dir")
  make_out_dir(ckpt_dir, "--ckpt_dir")


def load_checkpoint(ckpt_dir: Path, template: dict):
  """(state, meta) or (None, None) when there is no checkpoint."""
  from flax import serialization

  if not (ckpt_dir / CKPT_FILE).is_file() or not (ckpt_dir / CKPT_META).is_file():
    return None, None
  meta = read_meta(ckpt_dir)
  try:
    state = serialization.from_bytes(template, (ckpt_dir / CKPT_FILE).read_bytes())
  except Exception as e:  # noqa: BLE001 - msgpack/flax raise several types.
    raise LimitsError(f"checkpoint {ckpt_dir / CKPT_FILE} is unreadable ({e}); delete "
                      f"{ckpt_dir} to start over") from None
  return state, meta
