"""Gemma 3 forward pass in pure JAX (the family half of ``limits.models.engine``).

As HF ``modeling_gemma3.py`` (eager attention), transformers 5:

    h = E[tokens] · √d_model
    x = rms(h);  q, k, v = x Wqᵀ, x Wkᵀ, x Wvᵀ;  q, k = rms_q(q), rms_k(k)   (QK-norm over d_head)
    q, k = rope_θ(q), rope_θ(k)     θ = rope_local_theta in local layers, rope_theta in global
    h += rms(attn(q, k, v) Woᵀ)                                              (sandwich norms)
    h += rms(down(gelu_tanh(gate(rms(h))) * up(rms(h))));   logits = rms(h) Eᵀ (tied head)

Every RMSNorm is ``x · rsqrt(mean(x²) + eps) · (1 + w)`` computed in float32 (HF's Gemma3RMSNorm;
the params keep HF's ``w``, so a GGUF's stored gains, which include the +1, are loaded minus
1). Attention logits are ``scores / T`` with the model's T = √query_pre_attn_scalar. Local
layers attend to the last ``sliding_window`` keys only (``limits.numerics.attention_mask``);
their records carry ``window`` = W, global layers 0. QK-norm bounds every logit: |q·k| ≤
‖q‖‖k‖ ≤ d_head·max|1+w_q|·max|1+w_k| (Lemma 1's premise of bounded logits holds by construction).
Params are HF names without ``model.``; the ``layers`` subtree is stacked and scanned.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from limits.models.engine import (AttnRecord, Normalizer, attend, check_stacked_params,
                                  flat_shapes, stack_params)
from limits.models.gemma3.config import Config
from limits.models.llama.model import apply_rope, rope_tables
from limits.models.llama.model import base_layer_shapes as llama_layer_shapes

LAYERS_KEY = "layers"
Params = dict

LAYER_TENSORS = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
    "post_feedforward_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)


def layer_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Shapes of one block's tensors (HF layout, linear weights (out, in)): Llama's, plus the
  QK-norm gains (d_head) and the two extra sandwich norms (d_model)."""
  d, dh = config.n_embd, config.d_head
  return dict(llama_layer_shapes(config), **{
      "self_attn.q_norm.weight": (dh,), "self_attn.k_norm.weight": (dh,),
      "pre_feedforward_layernorm.weight": (d,), "post_feedforward_layernorm.weight": (d,)})


def checkpoint_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Every tensor name (HF, no ``model.`` prefix) and its shape."""
  return flat_shapes(config, layer_shapes(config))


def params_from_flat(flat: dict[str, Any], config: Config) -> Params:
  """The stacked params pytree from ``{HF name without prefix: array}`` (names checked)."""
  return stack_params(flat, config, ("embed_tokens.weight", "norm.weight"), LAYERS_KEY,
                      LAYER_TENSORS)


def init_params(key: jax.Array, config: Config, dtype=jnp.float32) -> Params:
  """Random weights N(0, 0.02²), norm weights N(0, 0.2²) (gains 1 + w around 1); for tests
  and benchmarks. NumPy PCG64 seeded by the key's data."""
  rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
  flat = {}
  for name, shape in checkpoint_shapes(config).items():
    scale = 0.2 if "norm" in name else 0.02
    flat[name] = scale * rng.standard_normal(shape, dtype=np.float32)
  params = params_from_flat(flat, config)
  return jax.tree_util.tree_map(lambda a: a.astype(dtype), params)


def check_params(params: Params, config: Config) -> None:
  """LimitsError unless every tensor is present with the shape the config implies."""
  check_stacked_params(params, config, layer_shapes(config), "Gemma 3")


def layer_kinds(config: Config) -> tuple[int, ...]:
  """Per-layer static kind for the engine: the sliding window W, or 0 for a global layer."""
  return tuple(config.window(i) for i in range(config.n_layer))


def _rms_norm(x, weight, eps):
  # HF Gemma3RMSNorm: float32 x · rsqrt(mean(x²) + eps) · (1 + w), cast back to x's dtype.
  xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  var = jnp.mean(jnp.square(xf), axis=-1, keepdims=True)
  out = xf * jax.lax.rsqrt(var + eps) * (1.0 + weight.astype(xf.dtype))
  return out.astype(x.dtype)


def block(p, h, temperature, *, config: Config, normalizer: Optional[Normalizer], kind: int):
  """One Gemma 3 block; ``kind`` = sliding window W (local) or 0 (global).
  h (B, L, D) -> (h (B, L, D), AttnRecord)."""
  b, l, _ = h.shape
  nh, nkv, dh, eps = config.n_head, config.n_kv_head, config.d_head, config.rms_norm_eps
  att = p["self_attn"]
  x = _rms_norm(h, p["input_layernorm"]["weight"], eps)  # (B, L, D)
  heads = lambda w, n: (x @ w.T).reshape(b, l, n, dh).transpose(0, 2, 1, 3)  # (B, n, L, dh)
  q = _rms_norm(heads(att["q_proj"]["weight"], nh), att["q_norm"]["weight"], eps)
  k = _rms_norm(heads(att["k_proj"]["weight"], nkv), att["k_norm"]["weight"], eps)
  v = heads(att["v_proj"]["weight"], nkv)
  theta = config.rope_local_theta if kind else config.rope_theta
  cos, sin = rope_tables(l, dh, theta, h.dtype)
  q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
  # attend reads k, v per kv head; the record holds them per query head (i uses i // group).
  per_head = lambda t: jnp.repeat(t, config.group, axis=1)  # (B, n_kv, L, dh) -> (B, H, L, dh)
  a, scores, weights = attend(q, k, v, temperature, normalizer, window=kind)
  a = a.transpose(0, 2, 1, 3).reshape(b, l, nh * dh)
  h = h + _rms_norm(a @ att["o_proj"]["weight"].T, p["post_attention_layernorm"]["weight"], eps)
  m = _rms_norm(h, p["pre_feedforward_layernorm"]["weight"], eps)
  mlp = p["mlp"]
  m = (jax.nn.gelu(m @ mlp["gate_proj"]["weight"].T, approximate=True)
       * (m @ mlp["up_proj"]["weight"].T))
  h = h + _rms_norm(m @ mlp["down_proj"]["weight"].T, p["post_feedforward_layernorm"]["weight"],
                    eps)
  return h, AttnRecord(q=q, k=per_head(k), v=per_head(v), scores=scores, weights=weights, x=x,
                       window=jnp.int32(kind))


def embed(params, tokens, config: Config):
  w = params["embed_tokens"]["weight"]
  # HF: embeddings · √hidden_size, the scale rounded to the weights' dtype.
  return w[tokens] * jnp.asarray(config.n_embd ** 0.5, dtype=w.dtype)  # (B, L, D)


def head(params, h, config: Config):
  h = _rms_norm(h, params["norm"]["weight"], config.rms_norm_eps)
  w = params["embed_tokens"]["weight"] if config.tie_word_embeddings else params["lm_head"]["weight"]
  return h @ w.T  # (B, L, V)


def describe(config: Config) -> str:
  """One line: layers (local/global), heads, widths, window, RoPE θ, context."""
  n_local = sum(1 for t in config.layer_types if t == "sliding_attention")
  return (f"gemma3 {config.n_layer} layers ({n_local} local with window "
          f"{config.sliding_window}, {config.n_layer - n_local} global) × {config.n_head} heads "
          f"({config.n_kv_head} kv), d_head {config.d_head}, d_model {config.n_embd}, RoPE θ "
          f"{config.rope_local_theta:g} local / {config.rope_theta:g} global, context "
          f"{config.n_positions}")


__all__ = ["LAYERS_KEY", "block", "check_params", "checkpoint_shapes", "describe",
           "embed", "head", "init_params", "layer_kinds", "params_from_flat"]
