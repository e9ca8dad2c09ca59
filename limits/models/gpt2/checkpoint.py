"""Loading and saving GPT-2 checkpoints: safetensors (single or sharded) and Flax msgpack only.

``load(path_or_name)`` accepts
- a directory with ``config.json`` and ``model.safetensors`` (keys with or without the
  ``transformer.`` prefix; ``lm_head.weight`` tied to ``wte`` or stored; the ``attn.bias`` /
  ``attn.masked_bias`` buffers skipped), ``model.safetensors.index.json`` + shards (gpt2-xl), or
  ``flax_model.msgpack`` (flax serialization, data only);
- a path to one of those weight files (``config.json`` is read from the same directory);
- a GPT-2 name (``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``, ``distilgpt2`` or an
  ``org/name`` repo id) resolved from the local Hugging Face cache. Never the network.

Pickle formats (``pytorch_model.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.pkl``) are refused:
unpickling can run arbitrary code. Every tensor's presence, shape and finiteness is checked
against the config; each problem is one LimitsError naming the file.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any, Optional

import numpy as np

from limits.errors import LimitsError, first_line
from limits.models.gpt2 import model as model_lib
from limits.models.gpt2.config import Config
from limits.models import files
from limits.models import hub
from limits.models.checks import check_layer_count
from limits.models.files import PICKLE_SUFFIXES  # noqa: F401 (re-exported)

KNOWN_NAMES = hub.KNOWN_NAMES  # GPT-2 short names -> hub repo ids (one table, in hub)
_SKIPPED_BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


# ----------------------------------------------------------------------------------------------
# Name resolution (local Hugging Face cache only).

def hf_cache_dirs() -> list[pathlib.Path]:
  """The HF hub cache directories consulted, in order (see ``limits.models.hub.cache_dirs``)."""
  return hub.cache_dirs()


def _snapshot(repo_dir: pathlib.Path) -> Optional[pathlib.Path]:
  return hub.snapshot(repo_dir)


def resolve(path_or_name) -> pathlib.Path:
  """The directory or file a ``load`` argument refers to: an existing path, else a hub name
  (the local HF cache first, then a download: ``limits.models.hub.resolve_name``)."""
  path = pathlib.Path(os.path.expanduser(str(path_or_name)))
  if path.exists():
    return path
  return hub.resolve_name(str(path_or_name))


# ----------------------------------------------------------------------------------------------
# Reading weight files.

def _read_msgpack(path: pathlib.Path) -> dict[str, np.ndarray]:
  """Flax msgpack (data only) in the HF Flax GPT-2 layout -> checkpoint-named numpy arrays."""
  from flax import serialization

  try:
    state = serialization.msgpack_restore(path.read_bytes())
  except Exception as e:  # noqa: BLE001 - msgpack raises several types for a bad file.
    raise LimitsError(f"{path}: corrupt or truncated flax msgpack file "
                      f"({first_line(e)})") from None
  if not isinstance(state, dict):
    raise LimitsError(f"{path}: flax msgpack does not hold a parameter dict")
  if "params" in state and isinstance(state["params"], dict):
    state = state["params"]
  out = {}

  def walk(tree, prefix):
    for key, value in tree.items():
      name = f"{prefix}.{key}" if prefix else str(key)
      if isinstance(value, dict):
        walk(value, name)
      else:
        out[name] = np.asarray(value)

  walk(state, "")
  flat = {}
  for name, value in out.items():
    parts = name.split(".")
    leaf = parts[-1]
    if leaf == "embedding":
      parts[-1] = "weight"
    elif leaf == "scale":
      parts[-1] = "weight"
    elif leaf == "kernel":
      parts[-1] = "weight"
      # FlaxConv1D stores (out, in) and lm_head (nn.Dense) stores (in, out); both are the
      # transpose of the PyTorch checkpoint layout.
      value = value.T
    flat[".".join(parts)] = value
  return flat


def _read_config(directory: pathlib.Path) -> Config:
  path = directory / "config.json"
  return Config.from_hf(files.read_json(path, needed_by="a GPT-2 checkpoint"), source=str(path))


def load_config(path_or_name) -> Config:
  """The ``Config`` of a checkpoint (directory, file in it, or cached name) without its weights."""
  p = resolve(path_or_name)
  return _read_config(p if p.is_dir() else p.parent)


def _weight_file(directory: pathlib.Path) -> pathlib.Path:
  return files.find_weight_file(directory, ("model.safetensors", "model.safetensors.index.json",
                                            "flax_model.msgpack"))


def _normalise_names(raw: dict[str, np.ndarray], config: Config,
                     source: pathlib.Path) -> dict[str, np.ndarray]:
  """Strips the ``transformer.`` prefix, drops buffers, checks presence/shape/finiteness."""

  check_layer_count(config.n_layer, len(raw), source)
  expected = model_lib.checkpoint_shapes(config)
  flat, unexpected = {}, []
  for key, value in raw.items():
    name = key[len("transformer."):] if key.startswith("transformer.") else key
    if _SKIPPED_BUFFERS.match(name):
      continue
    if name == "lm_head.weight" and config.tie_word_embeddings:
      # Tied: HF ignores the stored copy too; still check its shape.
      if tuple(value.shape) != (config.vocab_size, config.n_embd):
        raise LimitsError(f"{source}: lm_head.weight has shape {tuple(value.shape)}, config "
                          f"expects {(config.vocab_size, config.n_embd)}")
      continue
    if name not in expected:
      unexpected.append(key)
      continue
    if name in flat:
      raise LimitsError(f"{source}: tensor {name} appears twice (with and without prefix)")
    flat[name] = value
  missing = [n for n in expected if n not in flat]
  if missing:
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    raise LimitsError(f"{source}: missing tensors {', '.join(missing[:3])}{more} for a GPT-2 "
                      f"with n_layer={config.n_layer} (not a GPT-2 checkpoint, or config.json "
                      "does not match it)")
  if unexpected:
    more = f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else ""
    raise LimitsError(f"{source}: unexpected tensors {', '.join(unexpected[:3])}{more} "
                      "(config.json does not match the weights, or not a GPT-2 checkpoint)")
  files.check_values(flat, expected, source)
  return flat


def load(path_or_name, *, dtype: Any = "float32") -> tuple[Config, dict]:
  """Loads a GPT-2 checkpoint; returns ``(config, params)`` with float32 params by default.

  See the module docstring for accepted inputs. ``dtype=None`` keeps the stored dtype.
  """
  path = resolve(path_or_name)
  if path.is_file():
    if files.is_pickle(path):
      files.refuse_pickle(path)
    directory, weights = path.parent, path
    if not (path.name.endswith(".safetensors") or path.name.endswith(".msgpack")
            or path.name.endswith(".index.json")):
      raise LimitsError(f"{path}: not a GPT-2 weight file; give a directory or a .safetensors, "
                        ".safetensors.index.json or .msgpack file")
  elif not path.is_dir():  # a device (/dev/null), a FIFO, a socket
    raise LimitsError(f"{path}: not a checkpoint directory or a weight file; give a directory "
                      "with config.json and model.safetensors, or a .safetensors, "
                      ".safetensors.index.json or .msgpack file")
  else:
    directory = path
    if not any(directory.iterdir()):
      raise LimitsError(f"{directory}: directory is empty; expected config.json and "
                        "model.safetensors")
    weights = None
  config = _read_config(directory)
  if weights is None:
    weights = _weight_file(directory)
  if weights.name.endswith(".index.json"):
    raw = files.read_sharded(weights)
  elif weights.name.endswith(".msgpack"):
    raw = _read_msgpack(weights)
  else:
    raw = files.read_safetensors(weights)
  flat = files.cast(_normalise_names(raw, config, weights), dtype)
  return config, model_lib.params_from_flat(flat, config)


def save(directory, config: Config, params: dict) -> pathlib.Path:
  """Writes ``config.json`` + ``model.safetensors`` (HF GPT-2 names with the ``transformer.``
  prefix, tied LM head omitted, metadata format=pt) loadable by HF and by ``load``."""
  from safetensors.numpy import save_file

  model_lib.check_params(params, config)
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  flat = model_lib.params_to_flat(params, config)
  tensors = {}
  for name, value in flat.items():
    key = name if name.startswith("lm_head") else "transformer." + name
    tensors[key] = np.ascontiguousarray(value)
  tmp = directory / "model.safetensors.tmp"
  save_file(tensors, str(tmp), metadata={"format": "pt"})
  os.replace(tmp, directory / "model.safetensors")
  cfg_tmp = directory / "config.json.tmp"
  cfg_tmp.write_text(json.dumps(config.to_hf(), indent=2) + "\n")
  os.replace(cfg_tmp, directory / "config.json")
  return directory
