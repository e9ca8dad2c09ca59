"""GPT-2 forward pass in pure JAX that exposes every layer's attention (q, k, v, scores, weights).

Pre-LN transformer blocks (Radford et al. 2019; HF ``modeling_gpt2.py``, nanoGPT ``model.py``):

    a = ln_1(h);  h += c_proj(attn(a));  h += mlp(ln_2(h));   logits = ln_f(h) @ wte.T

Parameters are a nested dict whose paths are the checkpoint names (``h.3.attn.c_attn.weight`` is
``params["h"]["attn"]["c_attn"]["weight"][3]``): the ``h`` subtree is stacked over layers and
run with ``lax.scan``. Conv1D weights are stored as in the checkpoint, ``(in, out)``, so a linear
layer is ``x @ W + b``.

The family supplies ``embed`` / ``block`` / ``head``; ``limits.models.engine`` runs them
(``forward``, ``iter_layers``) and defines the record contract (raw q·k scores, logits =
scores / T with T = √d_head by default, a swappable normalizer, exact zeros where masked).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from limits.errors import LimitsError
from limits.models.gpt2.config import Config
from limits.models.engine import (AttnRecord, Normalizer, Output, attend, forward,  # noqa: F401
                                  iter_layers, set_path, softmax_normalizer, stack_params)

LAYERS_KEY = "h"  # the stacked-layer subtree run by the engine's lax.scan

Params = dict


# ----------------------------------------------------------------------------------------------
# Checkpoint tensors: the explicit list, with shapes (HF names, no "transformer." prefix).

LAYER_TENSORS = (
    "ln_1.weight", "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias",
)


def layer_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Shapes of one block's tensors, keyed by the name after ``h.<i>.``."""
  d, m = config.n_embd, config.d_mlp
  return {
      "ln_1.weight": (d,), "ln_1.bias": (d,),
      "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
      "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
      "ln_2.weight": (d,), "ln_2.bias": (d,),
      "mlp.c_fc.weight": (d, m), "mlp.c_fc.bias": (m,),
      "mlp.c_proj.weight": (m, d), "mlp.c_proj.bias": (d,),
  }


def checkpoint_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Every checkpoint tensor name (no prefix) and its shape, in checkpoint order."""
  shapes = {"wte.weight": (config.vocab_size, config.n_embd),
            "wpe.weight": (config.n_positions, config.n_embd)}
  per_layer = layer_shapes(config)
  for i in range(config.n_layer):
    for name in LAYER_TENSORS:
      shapes[f"h.{i}.{name}"] = per_layer[name]
  shapes["ln_f.weight"] = (config.n_embd,)
  shapes["ln_f.bias"] = (config.n_embd,)
  if not config.tie_word_embeddings:
    shapes["lm_head.weight"] = (config.vocab_size, config.n_embd)
  return shapes


def _get(tree: dict, path: Sequence[str]):
  for key in path:
    tree = tree[key]
  return tree


def params_from_flat(flat: dict[str, Any], config: Config) -> Params:
  """Builds the stacked params pytree from ``{checkpoint name: array}`` (names already checked)."""
  return stack_params(flat, config, ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"), "h",
                      LAYER_TENSORS)


def params_to_flat(params: Params, config: Config) -> dict[str, np.ndarray]:
  """Inverse of ``params_from_flat``: ``{checkpoint name: numpy array}``."""
  flat = {}
  for name in checkpoint_shapes(config):
    parts = name.split(".")
    if parts[0] == "h":
      flat[name] = np.asarray(_get(params, ["h"] + parts[2:])[int(parts[1])])
    else:
      flat[name] = np.asarray(_get(params, parts))
  return flat


def check_params(params: Params, config: Config) -> None:
  """LimitsError unless every tensor is present with the shape the config implies."""
  per_layer = layer_shapes(config)
  expected = {"wte.weight": (config.vocab_size, config.n_embd),
              "wpe.weight": (config.n_positions, config.n_embd),
              "ln_f.weight": (config.n_embd,), "ln_f.bias": (config.n_embd,)}
  if not config.tie_word_embeddings:
    expected["lm_head.weight"] = (config.vocab_size, config.n_embd)
  for name, shape in per_layer.items():
    expected["h." + name] = (config.n_layer,) + shape
  for name, shape in expected.items():
    try:
      got = tuple(_get(params, name.split(".")).shape)
    except (KeyError, TypeError, AttributeError):
      raise LimitsError(f"GPT-2 params: missing tensor {name}") from None
    if got != shape:
      raise LimitsError(f"GPT-2 params: {name} has shape {got}, config expects {shape}")


# ----------------------------------------------------------------------------------------------
# Initialisation.

def init_params(key: jax.Array, config: Config, dtype=jnp.float32) -> Params:
  """GPT-2 initialisation (HF ``GPT2PreTrainedModel._init_weights``, nanoGPT).

  Weights N(0, 0.02²), residual projections (``attn.c_proj``, ``mlp.c_proj``) N(0, (0.02/√(2
  n_layer))²), biases 0, LayerNorm gains 1. Draws with NumPy's PCG64 seeded by the key's data
  (deterministic per key; avoids compiling one random op per tensor shape, seconds on a CPU).
  """
  seed = np.asarray(jax.random.key_data(key)).ravel().tolist()
  rng = np.random.default_rng(seed)
  dtype = jnp.dtype(dtype)
  std = 0.02
  proj_std = std / math.sqrt(2 * config.n_layer)
  shapes = {"wte.weight": (config.vocab_size, config.n_embd),
            "wpe.weight": (config.n_positions, config.n_embd),
            "ln_f.weight": (config.n_embd,), "ln_f.bias": (config.n_embd,)}
  if not config.tie_word_embeddings:
    shapes["lm_head.weight"] = (config.vocab_size, config.n_embd)
  for name, shape in layer_shapes(config).items():
    shapes["h." + name] = (config.n_layer,) + shape
  params: Params = {}
  for name, shape in shapes.items():
    leaf = name.split(".")[-2:]
    if leaf[0].startswith("ln_"):
      value = np.ones(shape) if leaf[1] == "weight" else np.zeros(shape)
    elif leaf[1] == "bias":
      value = np.zeros(shape)
    else:
      s = proj_std if leaf[0] == "c_proj" else std
      value = s * rng.standard_normal(shape, dtype=np.float32)
    set_path(params, name.split("."), jnp.asarray(value, dtype))
  return params


# ----------------------------------------------------------------------------------------------
# Building blocks.

def _layer_norm(x, p, eps):
  # (..., D); biased variance, as torch.nn.LayerNorm.
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + eps) * p["weight"] + p["bias"]


def _activation(name: str, x):
  if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
    return jax.nn.gelu(x, approximate=True)
  if name == "gelu":
    return jax.nn.gelu(x, approximate=False)
  if name == "relu":
    return jax.nn.relu(x)
  return jax.nn.silu(x)  # "silu" / "swish"


def _linear(x, p):
  return x @ p["weight"] + p["bias"]


def block(p, h, temperature, *, config: Config, normalizer: Optional[Normalizer]):
  """One pre-LN block. h (B, L, D) -> (h (B, L, D), AttnRecord)."""
  b, l, d = h.shape
  nh, dh = config.n_head, config.d_head
  x = _layer_norm(h, p["ln_1"], config.layer_norm_epsilon)  # (B, L, D)
  qkv = _linear(x, p["attn"]["c_attn"])  # (B, L, 3D)
  q, k, v = (t.reshape(b, l, nh, dh).transpose(0, 2, 1, 3)
             for t in jnp.split(qkv, 3, axis=-1))  # each (B, H, L, dh)
  a, scores, weights = attend(q, k, v, temperature, normalizer)  # a (B, H, L, dh)
  a = a.transpose(0, 2, 1, 3).reshape(b, l, d)  # (B, L, D)
  h = h + _linear(a, p["attn"]["c_proj"])
  m = _layer_norm(h, p["ln_2"], config.layer_norm_epsilon)
  m = _linear(_activation(config.activation, _linear(m, p["mlp"]["c_fc"])), p["mlp"]["c_proj"])
  return h + m, AttnRecord(q=q, k=k, v=v, scores=scores, weights=weights, x=x)


def embed(params, tokens, config: Config = None):
  l = tokens.shape[1]
  return params["wte"]["weight"][tokens] + params["wpe"]["weight"][:l]  # (B, L, D)


def head(params, h, config: Config):
  h = _layer_norm(h, params["ln_f"], config.layer_norm_epsilon)
  w = params["wte"]["weight"] if config.tie_word_embeddings else params["lm_head"]["weight"]
  return h @ w.T  # (B, L, V)
