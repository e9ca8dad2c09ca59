"""Llama-family hyper-parameters, read from a HF ``config.json`` or a GGUF header.

Only what the forward pass needs is kept. RoPE θ is read as transformers 5 writes it
(``rope_parameters``) and as 4.x wrote it (``rope_theta``), see ``limits.models.rope``. Options
that change the computation in a way this implementation does not support (a ``rope_type``
other than "default", RoPE scaling, partial rotary dimensions, attention or MLP
biases, an activation other than SiLU) are refused with a LimitsError rather than ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from limits.errors import LimitsError
from limits.models import rope
from limits.models.checks import (check_fields, check_types, is_positive_int,
                                  is_positive_number)

# HF LlamaConfig defaults, used when a config.json omits a field (as HF itself does).
_HF_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                    num_hidden_layers=32, num_attention_heads=32, max_position_embeddings=2048,
                    rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
MODEL_TYPES = ("llama",)
_INTEGERS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
             "head_dim", "intermediate_size", "max_position_embeddings", "vocab_size")
_NUMBERS = ("rms_norm_eps", "rope_theta", "partial_rotary_factor")
_BOOLEANS = ("tie_word_embeddings", "attention_bias", "mlp_bias")


@dataclasses.dataclass(frozen=True)
class Config:
  """Llama architecture (RMSNorm, RoPE, grouped-query attention, SwiGLU). Frozen: a static jit
  argument. Attribute names shared with ``limits.models.gpt2.Config``: n_layer, n_head, n_kv_head,
  n_embd, d_head, n_positions, vocab_size."""

  family: ClassVar[str] = "llama"
  n_layer: int = 30
  n_head: int = 9
  n_kv_head: int = 3
  n_embd: int = 576
  head_dim: int | None = None  # None = n_embd // n_head
  d_mlp: int = 1536
  n_positions: int = 8192
  vocab_size: int = 49152
  rms_norm_eps: float = 1e-5
  rope_theta: float = 100000.0
  tie_word_embeddings: bool = True

  def __post_init__(self):
    check_fields(self, ("n_layer", "n_head", "n_kv_head", "n_embd", "d_mlp", "n_positions",
                        "vocab_size"), is_positive_int, "Llama config", "be a positive integer")
    if self.n_head % self.n_kv_head:
      raise LimitsError(f"Llama config n_head={self.n_head} is not a multiple of "
                        f"n_kv_head={self.n_kv_head}")
    if self.head_dim is None and self.n_embd % self.n_head:
      raise LimitsError(f"Llama config n_embd={self.n_embd} is not divisible by "
                        f"n_head={self.n_head} and no head_dim is given")
    check_fields(self, ("head_dim",), lambda v: v is None or (is_positive_int(v) and v % 2 == 0),
                 "Llama config", "be an even integer >= 2")
    check_fields(self, ("rms_norm_eps", "rope_theta"), is_positive_number, "Llama config",
                 "be a positive number")

  @property
  def d_head(self) -> int:
    """Per-head width (head_dim, or n_embd / n_head)."""
    return self.head_dim if self.head_dim is not None else self.n_embd // self.n_head

  @property
  def group(self) -> int:
    """Query heads per key/value head (1 = multi-head, n_head = multi-query)."""
    return self.n_head // self.n_kv_head

  @classmethod
  def from_hf(cls, hf: Mapping[str, Any], *, source: str = "config") -> "Config":
    """Builds a Config from a HF Llama ``config.json`` dict (missing fields take HF defaults)."""
    if not isinstance(hf, Mapping):
      raise LimitsError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    check_types(hf, source, integers=_INTEGERS, numbers=_NUMBERS, booleans=_BOOLEANS)
    if hf.get("model_type") not in MODEL_TYPES:
      raise LimitsError(f"{source}: model_type={hf.get('model_type')!r} is not a Llama model")
    for flag in ("attention_bias", "mlp_bias"):
      if hf.get(flag):
        raise LimitsError(f"{source}: {flag}=true is not supported")
    act = hf.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
      raise LimitsError(f"{source}: hidden_act={act!r} is not supported; allowed: silu")
    theta = rope.rope_theta(hf, source, default=_HF_DEFAULTS["rope_theta"])
    if hf.get("layer_types") is not None and set(hf["layer_types"]) != {"full_attention"}:
      raise LimitsError(f"{source}: layer_types={hf['layer_types']!r} is not supported for "
                        "Llama (full_attention only)")
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
      raise LimitsError(f"{source}: partial_rotary_factor={hf['partial_rotary_factor']!r} is "
                        "not supported (full rotary only)")
    get = lambda k: hf[k] if hf.get(k) is not None else _HF_DEFAULTS[k]
    n_head = get("num_attention_heads")
    n_kv = n_head if hf.get("num_key_value_heads") is None else hf["num_key_value_heads"]
    return cls(n_layer=get("num_hidden_layers"), n_head=n_head, n_kv_head=n_kv,
               n_embd=get("hidden_size"), head_dim=hf.get("head_dim"),
               d_mlp=get("intermediate_size"), n_positions=get("max_position_embeddings"),
               vocab_size=get("vocab_size"), rms_norm_eps=float(get("rms_norm_eps")),
               rope_theta=theta,
               tie_word_embeddings=bool(get("tie_word_embeddings")))

  def to_hf(self) -> dict:
    """A HF ``config.json`` dict loadable by ``LlamaForCausalLM``."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": self.n_layer, "num_attention_heads": self.n_head,
            "num_key_value_heads": self.n_kv_head, "hidden_size": self.n_embd,
            "head_dim": self.d_head, "intermediate_size": self.d_mlp,
            "max_position_embeddings": self.n_positions, "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,  # 4.x
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},  # 5.x
            "tie_word_embeddings": self.tie_word_embeddings, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False}
