"""Llama-family forward pass in pure JAX (the family half of ``limits.models.engine``).

Pre-norm blocks as HF ``modeling_llama.py`` (eager attention):

    x = rms(h);  q, k, v = x Wqᵀ, x Wkᵀ, x Wvᵀ;  q, k = rope(q), rope(k)      (rotate-half)
    h += attn(q, k, v) Woᵀ;   h += down(silu(gate(rms(h))) * up(rms(h)));   logits = rms(h) Eᵀ

Switches for the other HF model types (``limits.models.llama.config.ADAPTERS``): biases on the
q/k/v (and o) projections (Qwen2; ``attention_bias``), QK-norm ``q, k = rms_q(q), rms_k(k)`` over
d_head before RoPE (Qwen3), a sliding window per layer (Mistral, Qwen: the engine's layer kind;
records then carry ``window``, W or 0), and scaled RoPE frequencies (``limits.models.rope``).

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
from limits.models import rope
from limits.models.llama.config import Config

LAYERS_KEY = "layers"
Params = dict

def base_layer_shapes(config) -> dict[str, tuple[int, ...]]:
  """Shapes of a plain Llama block's tensors (HF layout, linear weights (out, in)); Gemma 3
  builds on these."""
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


def layer_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """One block's tensors for this config's switches: the plain ones, plus q/k/v biases, the o
  bias and the QK-norm gains (d_head) where set."""
  shapes = base_layer_shapes(config)
  dh = config.d_head
  if config.qkv_bias:
    shapes.update({"self_attn.q_proj.bias": (config.n_head * dh,),
                   "self_attn.k_proj.bias": (config.n_kv_head * dh,),
                   "self_attn.v_proj.bias": (config.n_kv_head * dh,)})
  if config.o_bias:
    shapes["self_attn.o_proj.bias"] = (config.n_embd,)
  if config.qk_norm:
    shapes.update({"self_attn.q_norm.weight": (dh,), "self_attn.k_norm.weight": (dh,)})
  return shapes


def checkpoint_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Every tensor name (HF, no ``model.`` prefix) and its shape."""
  return flat_shapes(config, layer_shapes(config))


def params_from_flat(flat: dict[str, Any], config: Config) -> Params:
  """The stacked params pytree from ``{HF name without prefix: array}`` (names checked)."""
  return stack_params(flat, config, ("embed_tokens.weight", "norm.weight"), LAYERS_KEY,
                      tuple(layer_shapes(config)))


def init_params(key: jax.Array, config: Config, dtype=jnp.float32) -> Params:
  """Random weights and biases N(0, 0.02²) (HF ``initializer_range``), RMSNorm gains 1; for
  tests and benchmarks. NumPy PCG64 seeded by the key's data (no per-shape compile)."""
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


def rope_tables(length: int, d_head: int, theta: float, dtype,
                scaling: Optional[rope.Scaling] = None):
  """cos, sin (L, d_head) of HF's rotate-half RoPE at positions 0..L-1.

  inv_freq_j = θ^(−2j/d_head) for j < d_head/2 (rewritten by ``scaling``: linear, dynamic,
  llama3, see ``limits.models.rope.inv_freq``), angles = position · inv_freq, duplicated as
  [angles, angles]; computed in ``dtype`` (float32 as HF, float64 under x64).
  """
  inv_freq = rope.inv_freq(d_head, theta, dtype, scaling)  # (dh/2,)
  angles = jnp.arange(length, dtype=dtype)[:, None] * inv_freq[None, :]  # (L, dh/2)
  emb = jnp.concatenate([angles, angles], axis=-1)  # (L, dh)
  return jnp.cos(emb), jnp.sin(emb)


def _rotate_half(x):
  half = x.shape[-1] // 2
  return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, cos, sin):
  """x (B, H, L, dh) rotated by position: x·cos + rotate_half(x)·sin (HF convention)."""
  return x * cos + _rotate_half(x) * sin


def layer_kinds(config: Config) -> tuple:
  """Per-layer static kind for the engine: the sliding window W or 0 (global) when some layer is
  local (Mistral, Qwen with windows); all None otherwise (records keep ``window`` None)."""
  if not config.has_windows:
    return (None,) * config.n_layer
  return tuple(config.window(i) for i in range(config.n_layer))


def _linear(x, p):
  """x Wᵀ (+ b where the checkpoint has a bias)."""
  y = x @ p["weight"].T
  return y + p["bias"] if "bias" in p else y


def block(p, h, temperature, *, config: Config, normalizer: Optional[Normalizer],
          kind: Optional[int] = None):
  """One Llama-family block; ``kind`` = sliding window W (local), 0 (global) or None (no layer
  of the model is local). h (B, L, D) -> (h (B, L, D), AttnRecord)."""
  b, l, _ = h.shape
  nh, nkv, dh, eps = config.n_head, config.n_kv_head, config.d_head, config.rms_norm_eps
  att = p["self_attn"]
  x = _rms_norm(h, p["input_layernorm"]["weight"], eps)  # (B, L, D)
  heads = lambda name, n: _linear(x, att[name]).reshape(b, l, n, dh)  # (B, L, n, dh)
  q, k, v = heads("q_proj", nh), heads("k_proj", nkv), heads("v_proj", nkv)
  if config.qk_norm:  # Qwen3: RMSNorm over d_head before RoPE
    q = _rms_norm(q, att["q_norm"]["weight"], eps)
    k = _rms_norm(k, att["k_norm"]["weight"], eps)
  q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # (B, n, L, dh)
  cos, sin = rope_tables(l, dh, config.rope_theta, h.dtype, config.rope_scaling)
  q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
  # attend reads k, v per kv head; the record holds them per query head (i uses i // group).
  per_head = lambda t: jnp.repeat(t, config.group, axis=1)  # (B, n_kv, L, dh) -> (B, H, L, dh)
  a, scores, weights = attend(q, k, v, temperature, normalizer, window=kind or 0)
  a = a.transpose(0, 2, 1, 3).reshape(b, l, nh * dh)
  h = h + _linear(a, att["o_proj"])
  m = _rms_norm(h, p["post_attention_layernorm"]["weight"], eps)
  mlp = p["mlp"]
  m = (jax.nn.silu(m @ mlp["gate_proj"]["weight"].T) * (m @ mlp["up_proj"]["weight"].T))
  h = h + m @ mlp["down_proj"]["weight"].T
  return h, AttnRecord(q=q, k=per_head(k), v=per_head(v), scores=scores, weights=weights, x=x,
                       window=None if kind is None else jnp.int32(kind))


def embed(params, tokens, config: Config = None):
  return params["embed_tokens"]["weight"][tokens]  # (B, L, D)


def head(params, h, config: Config):
  h = _rms_norm(h, params["norm"]["weight"], config.rms_norm_eps)
  w = params["embed_tokens"]["weight"] if config.tie_word_embeddings else params["lm_head"]["weight"]
  return h @ w.T  # (B, L, V)


def describe(config: Config) -> str:
  """One line: model type, layers × heads (kv heads), widths, switches, RoPE θ, context."""
  extras = [name for name, on in (("q/k/v biases", config.qkv_bias), ("o bias", config.o_bias),
                                  ("QK-norm", config.qk_norm)) if on]
  if config.has_windows:
    n_local = sum(1 for i in range(config.n_layer) if config.window(i))
    extras.append(f"{n_local} local layers with window {config.sliding_window}")
  if config.rope_scaling is not None:
    extras.append(f"RoPE scaling {config.rope_scaling.rope_type} ×{config.rope_scaling.factor:g}")
  return (f"{config.model_type} {config.n_layer} layers × {config.n_head} heads "
          f"({config.n_kv_head} kv), d_head {config.d_head}, d_model {config.n_embd}, "
          + "".join(e + ", " for e in extras)
          + f"RoPE θ {config.rope_theta:g}, context {config.n_positions}")


__all__ = ["LAYERS_KEY", "block", "checkpoint_shapes", "embed", "head",
           "init_params", "params_from_flat", "check_params", "rope_tables", "apply_rope",
           "describe", "layer_kinds", "layer_shapes", "base_layer_shapes"]
