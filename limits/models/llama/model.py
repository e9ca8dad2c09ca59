"""Llama-family forward pass in pure JAX (the family half of ``limits.models.engine``).

Pre-norm blocks as HF ``modeling_llama.py`` (eager attention):

    x = rms(h);  q, k, v = x Wqᵀ, x Wkᵀ, x Wvᵀ;  q, k = rope(q), rope(k)      (rotate-half)
    h += attn(q, k, v) Woᵀ;   h += down(silu(gate(rms(h))) * up(rms(h)));   logits = rms(h) Eᵀ

Grouped-query attention: ``n_kv_head`` key/value heads, each repeated over its ``group`` of
query heads, so the record's k and v are per query head like GPT-2's. Parameters are a nested
dict whose paths are the HF names without the ``model.`` prefix (``layers.3.self_attn.q_proj.
weight`` is ``params["layers"]["self_attn"]["q_proj"]["weight"][3]``), linear weights stored as
in HF, ``(out, in)``; the ``layers`` subtree is stacked over layers and run with ``lax.scan``.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from limits.models.engine import (AttnRecord, Normalizer, attend, check_stacked_params,
                                  flat_shapes, stack_params)
from limits.models.llama.config import Config

LAYERS_KEY = "layers"
Params = dict

# HF names after ``layers.<i>.``.
LAYER_TENSORS = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)


def layer_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Shapes of one block's tensors (HF layout, linear weights (out, in))."""
  d, dh, m = config.n_embd, config.d_head, config.d_mlp
  return {
      "input_layernorm.weight": (d,),
      "self_attn.q_proj.weight": (config.n_head * dh, d),
      "self_attn.k_proj.weight": (config.n_kv_head * dh, d),
      "self_attn.v_proj.weight": (config.n_kv_head * dh, d),
      "self_attn.o_proj.weight": (d, config.n_head * dh),
      "post_attention_layernorm.weight": (d,),
      "mlp.gate_proj.weight": (m, d), "mlp.up_proj.weight": (m, d),
      "mlp.down_proj.weight": (d, m),
  }


def checkpoint_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Every tensor name (HF, no ``model.`` prefix) and its shape."""
  return flat_shapes(config, layer_shapes(config))


def params_from_flat(flat: dict[str, Any], config: Config) -> Params:
  """The stacked params pytree from ``{HF name without prefix: array}`` (names checked)."""
  return stack_params(flat, config, ("embed_tokens.weight", "norm.weight"), "layers",
                      LAYER_TENSORS)


def init_params(key: jax.Array, config: Config, dtype=jnp.float32) -> Params:
  """Random weights N(0, 0.02²) (HF ``initializer_range``), RMSNorm gains 1; for tests and
  benchmarks. NumPy PCG64 seeded by the key's data (no per-shape compile)."""
  rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
  flat = {}
  for name, shape in checkpoint_shapes(config).items():
    if "norm" in name:
      flat[name] = np.ones(shape, np.float32)
    else:
      flat[name] = 0.02 * rng.standard_normal(shape, dtype=np.float32)
  params = params_from_flat(flat, config)
  return jax.tree_util.tree_map(lambda a: a.astype(dtype), params)


def check_params(params: Params, config: Config) -> None:
  """LimitsError unless every tensor is present with the shape the config implies."""
  check_stacked_params(params, config, layer_shapes(config), "Llama")


# ----------------------------------------------------------------------------------------------
# Building blocks.

def _rms_norm(x, weight, eps):
  # (..., D); HF LlamaRMSNorm: x · rsqrt(mean(x²) + eps) · weight.
  var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
  return x * jax.lax.rsqrt(var + eps) * weight


def rope_tables(length: int, d_head: int, theta: float, dtype):
  """cos, sin (L, d_head) of HF's rotate-half RoPE at positions 0..L-1.

  inv_freq_j = θ^(−2j/d_head) for j < d_head/2, angles = position · inv_freq, duplicated as
  [angles, angles]; computed in ``dtype`` (float32 as HF, float64 under x64).
  """
  inv_freq = 1.0 / (theta ** (jnp.arange(0, d_head, 2, dtype=dtype) / d_head))  # (dh/2,)
  angles = jnp.arange(length, dtype=dtype)[:, None] * inv_freq[None, :]  # (L, dh/2)
  emb = jnp.concatenate([angles, angles], axis=-1)  # (L, dh)
  return jnp.cos(emb), jnp.sin(emb)


def _rotate_half(x):
  half = x.shape[-1] // 2
  return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, cos, sin):
  """x (B, H, L, dh) rotated by position: x·cos + rotate_half(x)·sin (HF convention)."""
  return x * cos + _rotate_half(x) * sin


def block(p, h, temperature, *, config: Config, normalizer: Optional[Normalizer]):
  """One Llama block. h (B, L, D) -> (h (B, L, D), AttnRecord)."""
  b, l, _ = h.shape
  nh, nkv, dh = config.n_head, config.n_kv_head, config.d_head
  att = p["self_attn"]
  x = _rms_norm(h, p["input_layernorm"]["weight"], config.rms_norm_eps)  # (B, L, D)
  heads = lambda w, n: (x @ w.T).reshape(b, l, n, dh).transpose(0, 2, 1, 3)  # (B, n, L, dh)
  q = heads(att["q_proj"]["weight"], nh)
  k = heads(att["k_proj"]["weight"], nkv)
  v = heads(att["v_proj"]["weight"], nkv)
  cos, sin = rope_tables(l, dh, config.rope_theta, h.dtype)
  q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
  k = jnp.repeat(k, config.group, axis=1)  # (B, H, L, dh): head i uses kv head i // group
  v = jnp.repeat(v, config.group, axis=1)
  a, scores, weights = attend(q, k, v, temperature, normalizer)  # a (B, H, L, dh)
  a = a.transpose(0, 2, 1, 3).reshape(b, l, nh * dh)
  h = h + a @ att["o_proj"]["weight"].T
  m = _rms_norm(h, p["post_attention_layernorm"]["weight"], config.rms_norm_eps)
  mlp = p["mlp"]
  m = (jax.nn.silu(m @ mlp["gate_proj"]["weight"].T) * (m @ mlp["up_proj"]["weight"].T))
  h = h + m @ mlp["down_proj"]["weight"].T
  return h, AttnRecord(q=q, k=k, v=v, scores=scores, weights=weights, x=x)


def embed(params, tokens, config: Config = None):
  return params["embed_tokens"]["weight"][tokens]  # (B, L, D)


def head(params, h, config: Config):
  h = _rms_norm(h, params["norm"]["weight"], config.rms_norm_eps)
  w = params["embed_tokens"]["weight"] if config.tie_word_embeddings else params["lm_head"]["weight"]
  return h @ w.T  # (B, L, V)


def describe(config: Config) -> str:
  """One line: layers × heads (kv heads), widths, RoPE θ, context."""
  return (f"llama {config.n_layer} layers × {config.n_head} heads ({config.n_kv_head} kv), "
          f"d_head {config.d_head}, d_model {config.n_embd}, RoPE θ {config.rope_theta:g}, "
          f"context {config.n_positions}")


__all__ = ["LAYERS_KEY", "block", "checkpoint_shapes", "embed", "head",
           "init_params", "params_from_flat", "check_params", "rope_tables", "apply_rope",
           "describe"]
