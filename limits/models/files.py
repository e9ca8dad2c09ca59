"""Reading weight files that cannot run code: safetensors (single or sharded) and checks.

Pickle formats (``pytorch_model.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.pkl``) are refused:
unpickling can run arbitrary code. Weights come only from inside the model folder: a file
found in it (config.json, weights) or named by it (an index's shards, GGUF splits) is resolved
and refused if it leaves the folder, through ``..``, an absolute path or a symlink pointing
out (:func:`inside`). Every problem is one LimitsError naming the file.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from limits.errors import LimitsError, first_line
from limits.runs.results import read_json_object

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".npy.pkl")
SAFETENSORS_ALTERNATIVE = (
    "convert it once in a trusted environment to safetensors (e.g. "
    "AutoModelForCausalLM.from_pretrained(dir).save_pretrained(out, safe_serialization=True)) "
    "or download model.safetensors instead")


def is_pickle(path: pathlib.Path) -> bool:
  """True for a file name in a pickle-based format."""
  return pathlib.Path(path).name.lower().endswith(PICKLE_SUFFIXES)


def refuse_pickle(path: pathlib.Path):
  """Raises the LimitsError that refuses a pickle checkpoint, naming it and the alternative."""
  raise LimitsError(f"refusing pickle checkpoint {path}: unpickling can run arbitrary code; "
                    + SAFETENSORS_ALTERNATIVE)


def model_root(directory: pathlib.Path) -> pathlib.Path:
  """The resolved folder a model's files must stay in: ``directory`` itself, or for a Hugging
  Face cache snapshot (``models--org--name/snapshots/<revision>``, whose files are symlinks into
  ``../../blobs``) the cached repo folder ``models--org--name``."""
  root = pathlib.Path(directory).resolve()
  if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
    return root.parent.parent
  return root


def inside(path: pathlib.Path, directory: pathlib.Path, what: str = "weight file") -> pathlib.Path:
  """``path`` (found in or named by the model in ``directory``) if it resolves inside
  ``model_root(directory)``; else one LimitsError naming it, where it leads and the folder."""
  root = model_root(directory)
  resolved = pathlib.Path(path).resolve()
  if not resolved.is_relative_to(root):
    raise LimitsError(f"{path}: {what} resolves to {resolved}, outside the model folder {root}; "
                      "model files are read only from inside --model")
  return path


def read_safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
  """All tensors of one safetensors file as numpy arrays (bfloat16 via ml_dtypes)."""
  from safetensors import safe_open

  if not path.is_file():
    raise LimitsError(f"{path}: weight file is missing")
  try:
    with safe_open(str(path), framework="numpy") as f:
      return {name: f.get_tensor(name) for name in f.keys()}
  except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file.
    raise LimitsError(f"{path}: corrupt or truncated safetensors file ({first_line(e)})") from None


def read_sharded(index_path: pathlib.Path) -> dict[str, np.ndarray]:
  """All tensors of a ``model.safetensors.index.json`` and its shards."""
  try:
    index = json.loads(index_path.read_text())
    weight_map = index["weight_map"]
    if not isinstance(weight_map, dict):
      raise TypeError("weight_map is not an object")
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise LimitsError(f"{index_path}: not a valid safetensors index ({e})") from None
  if not all(isinstance(shard, str) and shard for shard in weight_map.values()):
    raise LimitsError(f"{index_path}: not a valid safetensors index (a weight_map value is not "
                      "a file name)")
  out = {}
  for shard in sorted(set(weight_map.values())):
    shard_path = inside(index_path.parent / shard, index_path.parent, "shard named by the index")
    if is_pickle(shard_path):
      refuse_pickle(shard_path)
    tensors = read_safetensors(shard_path)
    for key, file in weight_map.items():
      if file == shard and key not in tensors:
        raise LimitsError(f"{shard_path}: index lists tensor {key} but the shard lacks it")
    out.update(tensors)
  return out


def read_json(path: pathlib.Path, what: str = "config.json",
              needed_by: str = "a checkpoint directory") -> dict:
  """A JSON object from ``path``; one line if missing (naming ``needed_by``) or invalid."""
  if not path.is_file():
    raise LimitsError(f"{path}: {what} is missing; {needed_by} needs it next to the weights")
  return read_json_object(inside(path, path.parent, what))


def find_weight_file(directory: pathlib.Path, names: tuple[str, ...]) -> pathlib.Path:
  """The first of ``names`` present in ``directory``, else its only ``*.safetensors``; a pickle
  found instead is refused; nothing found is one line listing ``names``."""
  for name in names:
    if (directory / name).is_file():
      return inside(directory / name, directory)
  singles = sorted(directory.glob("*.safetensors"))
  if len(singles) == 1:
    return inside(singles[0], directory)
  pickles = sorted(p for p in directory.iterdir() if is_pickle(p))
  if pickles:
    refuse_pickle(pickles[0])
  listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
  raise LimitsError(f"{directory}: no {listed} found")


def check_values(flat: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]],
                 source) -> None:
  """Shape, float dtype and finiteness of every expected tensor present in ``flat``."""
  import jax.numpy as jnp

  for name, shape in expected.items():
    value = flat[name]
    if tuple(value.shape) != shape:
      raise LimitsError(f"{source}: {name} has shape {tuple(value.shape)}, config expects "
                        f"{shape}")
    if not jnp.issubdtype(value.dtype, jnp.floating):  # ml_dtypes-aware (bfloat16)
      raise LimitsError(f"{source}: {name} has non-float dtype {value.dtype}")
    if not np.all(np.isfinite(value.astype(np.float32) if value.dtype.itemsize < 4 else value)):
      raise LimitsError(f"{source}: {name} contains non-finite values (NaN or inf)")


def check_tensors(flat: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]],
                  source, family: str) -> None:
  """Presence, shape, float dtype and finiteness of every expected tensor (LimitsError)."""
  missing = [n for n in expected if n not in flat]
  if missing:
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    raise LimitsError(f"{source}: missing tensors {', '.join(missing[:3])}{more} for this "
                      f"{family} config (config does not match the weights)")
  unexpected = [n for n in flat if n not in expected]
  if unexpected:
    more = f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else ""
    raise LimitsError(f"{source}: unexpected tensors {', '.join(unexpected[:3])}{more} "
                      f"(config does not match the weights, or not a {family} checkpoint)")
  check_values(flat, expected, source)


def cast(flat: dict[str, np.ndarray], dtype) -> dict[str, np.ndarray]:
  """Every tensor cast to a floating ``dtype`` (None keeps the stored dtypes)."""
  import jax.numpy as jnp

  if dtype is None:
    return flat
  try:
    target = jnp.dtype(dtype)
  except TypeError:
    raise LimitsError(f"dtype={dtype!r} is not a floating dtype") from None
  if not jnp.issubdtype(target, jnp.floating):
    raise LimitsError(f"dtype={dtype!r} is not a floating dtype")
  return {k: v.astype(target) for k, v in flat.items()}
