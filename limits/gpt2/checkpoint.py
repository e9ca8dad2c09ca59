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

from limits.errors import LimitsError
from limits.gpt2 import model as model_lib
from limits.gpt2.config import Config

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".npy.pkl")
KNOWN_NAMES = {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
    "distilgpt2": "distilbert/distilgpt2",
}
_SKIPPED_BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
_SAFETENSORS_ALTERNATIVE = (
    "convert it once in a trusted environment to safetensors (e.g. "
    "GPT2LMHeadModel.from_pretrained(dir).save_pretrained(out, safe_serialization=True)) "
    "or download model.safetensors instead")


# ----------------------------------------------------------------------------------------------
# Name resolution (local Hugging Face cache only).

def hf_cache_dirs() -> list[pathlib.Path]:
  """The HF hub cache directories consulted, in order (HF_HUB_CACHE, HF_HOME/hub, default)."""
  dirs = []
  if os.environ.get("HF_HUB_CACHE"):
    dirs.append(pathlib.Path(os.environ["HF_HUB_CACHE"]))
  if os.environ.get("HUGGINGFACE_HUB_CACHE"):
    dirs.append(pathlib.Path(os.environ["HUGGINGFACE_HUB_CACHE"]))
  if os.environ.get("HF_HOME"):
    dirs.append(pathlib.Path(os.environ["HF_HOME"]) / "hub")
  xdg = os.environ.get("XDG_CACHE_HOME")
  base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
  dirs.append(base / "huggingface" / "hub")
  seen, out = set(), []
  for d in dirs:
    if str(d) not in seen:
      seen.add(str(d))
      out.append(d)
  return out


def _snapshot(repo_dir: pathlib.Path) -> Optional[pathlib.Path]:
  snaps = repo_dir / "snapshots"
  if not snaps.is_dir():
    return None
  ref = repo_dir / "refs" / "main"
  if ref.is_file():
    rev = ref.read_text().strip()
    if (snaps / rev / "config.json").exists():
      return snaps / rev
  candidates = [p for p in snaps.iterdir() if (p / "config.json").exists()]
  if not candidates:
    return None
  return max(candidates, key=lambda p: p.stat().st_mtime)


def resolve(path_or_name) -> pathlib.Path:
  """Returns the directory or file a ``load`` argument refers to (no network)."""
  path = pathlib.Path(os.path.expanduser(str(path_or_name)))
  if path.exists():
    return path
  name = str(path_or_name)
  if not re.fullmatch(r"[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?", name):
    raise LimitsError(f"checkpoint {name!r} not found: no such file or directory")
  repo_ids = [name]
  if name in KNOWN_NAMES:
    repo_ids.append(KNOWN_NAMES[name])
  elif name.startswith("openai-community/") or name.startswith("distilbert/"):
    repo_ids.append(name.split("/", 1)[1])
  looked = []
  for cache in hf_cache_dirs():
    for repo_id in repo_ids:
      repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
      looked.append(str(repo_dir))
      snap = _snapshot(repo_dir)
      if snap is not None:
        return snap
  want = KNOWN_NAMES.get(name, name)
  raise LimitsError(
      f"model {name!r} is neither a path nor in the local Hugging Face cache (looked in "
      f"{', '.join(looked)}); on a machine with network run `huggingface-cli download {want} "
      f"config.json model.safetensors tokenizer.json` and copy the cache or set HF_HUB_CACHE")


# ----------------------------------------------------------------------------------------------
# Reading weight files.

def _refuse_pickle(path: pathlib.Path):
  raise LimitsError(f"refusing pickle checkpoint {path}: unpickling can run arbitrary code; "
                    + _SAFETENSORS_ALTERNATIVE)


def _is_pickle(path: pathlib.Path) -> bool:
  return path.name.lower().endswith(PICKLE_SUFFIXES)


def _read_safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
  from safetensors import safe_open

  if not path.is_file():
    raise LimitsError(f"{path}: weight file is missing")
  try:
    with safe_open(str(path), framework="numpy") as f:  # bfloat16 arrives via ml_dtypes
      return {name: f.get_tensor(name) for name in f.keys()}
  except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file.
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise LimitsError(f"{path}: corrupt or truncated safetensors file ({msg})") from None


def _read_sharded(index_path: pathlib.Path) -> dict[str, np.ndarray]:
  try:
    index = json.loads(index_path.read_text())
    weight_map = index["weight_map"]
    if not isinstance(weight_map, dict):
      raise TypeError("weight_map is not an object")
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise LimitsError(f"{index_path}: not a valid safetensors index ({e})") from None
  out = {}
  for shard in sorted(set(weight_map.values())):
    shard_path = index_path.parent / shard
    if _is_pickle(shard_path):
      _refuse_pickle(shard_path)
    tensors = _read_safetensors(shard_path)
    for key, file in weight_map.items():
      if file == shard and key not in tensors:
        raise LimitsError(f"{shard_path}: index lists tensor {key} but the shard lacks it")
    out.update(tensors)
  return out


def _read_msgpack(path: pathlib.Path) -> dict[str, np.ndarray]:
  """Flax msgpack (data only) in the HF Flax GPT-2 layout -> checkpoint-named numpy arrays."""
  from flax import serialization

  try:
    state = serialization.msgpack_restore(path.read_bytes())
  except Exception as e:  # noqa: BLE001 - msgpack raises several types for a bad file.
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise LimitsError(f"{path}: corrupt or truncated flax msgpack file ({msg})") from None
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
  if not path.is_file():
    raise LimitsError(f"{path}: config.json is missing; a GPT-2 checkpoint needs it next to the "
                      "weights")
  try:
    hf = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, ValueError) as e:
    raise LimitsError(f"{path}: not valid JSON ({str(e).splitlines()[0]})") from None
  return Config.from_hf(hf, source=str(path))


def load_config(path_or_name) -> Config:
  """The ``Config`` of a checkpoint (directory, file in it, or cached name) without its weights."""
  p = resolve(path_or_name)
  return _read_config(p if p.is_dir() else p.parent)


def _weight_file(directory: pathlib.Path) -> pathlib.Path:
  for name in ("model.safetensors", "model.safetensors.index.json", "flax_model.msgpack"):
    if (directory / name).is_file():
      return directory / name
  singles = sorted(directory.glob("*.safetensors"))
  if len(singles) == 1:
    return singles[0]
  pickles = sorted(p for p in directory.iterdir() if _is_pickle(p))
  if pickles:
    _refuse_pickle(pickles[0])
  raise LimitsError(f"{directory}: no model.safetensors, model.safetensors.index.json or "
                    "flax_model.msgpack found")


def _normalise_names(raw: dict[str, np.ndarray], config: Config,
                     source: pathlib.Path) -> dict[str, np.ndarray]:
  """Strips the ``transformer.`` prefix, drops buffers, checks presence/shape/finiteness."""
  import jax.numpy as jnp

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
  for name, shape in expected.items():
    value = flat[name]
    if tuple(value.shape) != shape:
      raise LimitsError(f"{source}: {name} has shape {tuple(value.shape)}, config expects "
                        f"{shape}")
    if not jnp.issubdtype(value.dtype, jnp.floating):  # ml_dtypes-aware (bfloat16)
      raise LimitsError(f"{source}: {name} has non-float dtype {value.dtype}")
    if not np.all(np.isfinite(value.astype(np.float32) if value.dtype.itemsize < 4 else value)):
      raise LimitsError(f"{source}: {name} contains non-finite values (NaN or inf)")
  return flat


def load(path_or_name, *, dtype: Any = "float32") -> tuple[Config, dict]:
  """Loads a GPT-2 checkpoint; returns ``(config, params)`` with float32 params by default.

  See the module docstring for accepted inputs. ``dtype=None`` keeps the stored dtype.
  """
  import jax.numpy as jnp

  path = resolve(path_or_name)
  if path.is_file():
    if _is_pickle(path):
      _refuse_pickle(path)
    directory, weights = path.parent, path
    if not (path.name.endswith(".safetensors") or path.name.endswith(".msgpack")
            or path.name.endswith(".index.json")):
      raise LimitsError(f"{path}: not a GPT-2 weight file; give a directory or a .safetensors, "
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
    raw = _read_sharded(weights)
  elif weights.name.endswith(".msgpack"):
    raw = _read_msgpack(weights)
  else:
    raw = _read_safetensors(weights)
  flat = _normalise_names(raw, config, weights)
  if dtype is not None:
    try:
      target = jnp.dtype(dtype)
    except TypeError:
      raise LimitsError(f"dtype={dtype!r} is not a floating dtype") from None
    if not jnp.issubdtype(target, jnp.floating):
      raise LimitsError(f"dtype={dtype!r} is not a floating dtype")
    flat = {k: v.astype(target) for k, v in flat.items()}
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
