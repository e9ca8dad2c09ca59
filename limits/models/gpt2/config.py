"""GPT-2 hyper-parameters, read from and written to a Hugging Face ``config.json``.

Only what the forward pass needs is kept; HF fields that change the computation in a way this
implementation does not support (``scale_attn_weights=False``,
``scale_attn_by_inverse_layer_idx=True``) are refused with a LimitsError rather than ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from limits.errors import LimitsError
from limits.models.checks import check_fields, check_types, is_positive_int, is_positive_number

# HF activation_function names this implementation computes (see model._activation).
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "relu", "silu", "swish")

# HF GPT2Config defaults, used when a config.json omits a field (as HF itself does).
_HF_DEFAULTS = dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257,
                    layer_norm_epsilon=1e-5, activation_function="gelu_new",
                    tie_word_embeddings=True)
_INTEGERS = ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "n_inner")


@dataclasses.dataclass(frozen=True)
class Config:
  """GPT-2 architecture. Frozen (hashable) so it can be a static argument of ``jax.jit``."""

  family: ClassVar[str] = "gpt2"
  n_layer: int = 12
  n_head: int = 12
  n_embd: int = 768
  n_positions: int = 1024
  vocab_size: int = 50257
  layer_norm_epsilon: float = 1e-5
  activation: str = "gelu_new"
  tie_word_embeddings: bool = True
  n_inner: int | None = None  # MLP width; None means 4 * n_embd (every released GPT-2)

  def __post_init__(self):
    check_fields(self, ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"),
                 is_positive_int, "GPT-2 config", "be a positive integer")
    if self.n_embd % self.n_head:
      raise LimitsError(f"GPT-2 config n_embd={self.n_embd} is not divisible by "
                        f"n_head={self.n_head}")
    check_fields(self, ("layer_norm_epsilon",), is_positive_number, "GPT-2 config",
                 "be a positive number")
    check_fields(self, ("n_inner",), lambda v: v is None or is_positive_int(v), "GPT-2 config",
                 "be a positive integer or null")
    if self.activation not in ACTIVATIONS:
      raise LimitsError(f"GPT-2 config activation={self.activation!r} is not supported; "
                        f"allowed: {', '.join(ACTIVATIONS)}")

  @property
  def d_head(self) -> int:
    """Per-head width n_embd / n_head (64 for every released GPT-2)."""
    return self.n_embd // self.n_head

  @property
  def n_kv_head(self) -> int:
    """Key/value heads: GPT-2 has one per query head."""
    return self.n_head

  @property
  def d_mlp(self) -> int:
    """MLP hidden width (n_inner, default 4 * n_embd)."""
    return self.n_inner if self.n_inner is not None else 4 * self.n_embd

  @classmethod
  def from_hf(cls, hf: Mapping[str, Any], *, source: str = "config") -> "Config":
    """Builds a Config from a HF GPT-2 ``config.json`` dict (missing fields take HF defaults).

    Raises LimitsError (naming ``source``) for a non-GPT-2 architecture or unsupported options.
    """
    if not isinstance(hf, Mapping):
      raise LimitsError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    check_types(hf, source, integers=_INTEGERS, numbers=("layer_norm_epsilon",),
                booleans=("tie_word_embeddings", "scale_attn_weights",
                          "scale_attn_by_inverse_layer_idx"))
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type is None:
      if not any(str(a).startswith("GPT2") for a in archs):
        raise LimitsError(f"{source}: no model_type and no GPT2* architecture; only GPT-2 "
                          "checkpoints (model_type 'gpt2') are supported")
    elif model_type != "gpt2":
      raise LimitsError(f"{source}: unknown architecture model_type={model_type!r}; only "
                        "'gpt2' is supported")
    if hf.get("scale_attn_weights", True) is not True:
      raise LimitsError(f"{source}: scale_attn_weights=false is not supported")
    if hf.get("scale_attn_by_inverse_layer_idx", False):
      raise LimitsError(f"{source}: scale_attn_by_inverse_layer_idx=true is not supported")
    get = lambda k: hf.get(k, _HF_DEFAULTS[k]) if hf.get(k) is not None else _HF_DEFAULTS[k]
    return cls(n_layer=get("n_layer"), n_head=get("n_head"), n_embd=get("n_embd"),
               n_positions=get("n_positions"), vocab_size=get("vocab_size"),
               layer_norm_epsilon=float(get("layer_norm_epsilon")),
               activation=get("activation_function"),
               tie_word_embeddings=bool(get("tie_word_embeddings")),
               n_inner=hf.get("n_inner"))

  def to_hf(self) -> dict:
    """Returns a HF ``config.json`` dict loadable by ``GPT2LMHeadModel.from_pretrained``."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_layer": self.n_layer,
        "n_head": self.n_head,
        "n_embd": self.n_embd,
        "n_positions": self.n_positions,
        "n_ctx": self.n_positions,
        "vocab_size": self.vocab_size,
        "layer_norm_epsilon": self.layer_norm_epsilon,
        "activation_function": self.activation,
        "tie_word_embeddings": self.tie_word_embeddings,
        "n_inner": self.n_inner,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "attn_pdrop": 0.1,
        "initializer_range": 0.02,
        "bos_token_id": min(50256, self.vocab_size - 1),
        "eos_token_id": min(50256, self.vocab_size - 1),
    }
