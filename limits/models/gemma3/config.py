"""Gemma 3 (text) hyper-parameters, read from a HF ``config.json`` (transformers 5 or 4.x) or a
GGUF header.

Gemma 3 interleaves local layers (sliding window of ``sliding_window`` keys, RoPE base
``rope_local_theta``) with global ones (full causal attention, RoPE base ``rope_theta``):
``layer_types`` as transformers 5 writes it, else the 4.x ``sliding_window_pattern`` (default 6:
layers 5, 11, 17, ... global). Options that change attention in a way not implemented here (logit
soft-capping, bidirectional attention, attention biases, a rope_type other than "default", an
activation other than GELU-tanh) are refused with one line naming them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

from limits.errors import LimitsError
from limits.models import rope
from limits.models.checks import check_fields, is_positive_int, is_positive_number

MODEL_TYPES = ("gemma3", "gemma3_text")
SLIDING, FULL = "sliding_attention", "full_attention"
DEFAULT_PATTERN = 6  # HF Gemma3TextConfig and llama.cpp: every 6th layer is global
# HF Gemma3TextConfig defaults for fields a config.json may omit.
_HF_DEFAULTS = dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216,
                    num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                    head_dim=256, max_position_embeddings=131_072, rms_norm_eps=1e-6,
                    query_pre_attn_scalar=256, sliding_window=4096, tie_word_embeddings=True)
_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh")


def default_layer_types(n_layer: int, pattern: int = DEFAULT_PATTERN) -> tuple[str, ...]:
  """HF's rule: layer i is global iff (i + 1) % pattern == 0."""
  return tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n_layer))


@dataclasses.dataclass(frozen=True)
class Config:
  """Gemma 3 text architecture (the 270M model's values by default). Frozen: a static jit
  argument. Shared attribute names: n_layer, n_head, n_kv_head, n_embd, d_head, n_positions,
  vocab_size."""

  family: ClassVar[str] = "gemma3"
  n_layer: int = 18
  n_head: int = 4
  n_kv_head: int = 1
  n_embd: int = 640
  head_dim: int = 256
  d_mlp: int = 2048
  n_positions: int = 32768
  vocab_size: int = 262144
  rms_norm_eps: float = 1e-6
  rope_theta: float = 1_000_000.0  # global layers
  rope_local_theta: float = 10_000.0  # sliding-window layers
  sliding_window: int = 512
  layer_types: tuple[str, ...] = default_layer_types(18)
  query_pre_attn_scalar: float = 256.0
  tie_word_embeddings: bool = True

  def __post_init__(self):
    check_fields(self, ("n_layer", "n_head", "n_kv_head", "n_embd", "d_mlp", "n_positions",
                        "vocab_size", "sliding_window"), is_positive_int, "Gemma 3 config",
                 "be a positive integer")
    check_fields(self, ("head_dim",), lambda v: is_positive_int(v) and v % 2 == 0,
                 "Gemma 3 config", "be an even integer >= 2")
    check_fields(self, ("rms_norm_eps", "rope_theta", "rope_local_theta",
                        "query_pre_attn_scalar"), is_positive_number, "Gemma 3 config",
                 "be a positive number")
    if self.n_head % self.n_kv_head:
      raise LimitsError(f"Gemma 3 config n_head={self.n_head} is not a multiple of "
                        f"n_kv_head={self.n_kv_head}")
    types = tuple(self.layer_types)
    if len(types) != self.n_layer or any(t not in (SLIDING, FULL) for t in types):
      raise LimitsError(f"Gemma 3 config layer_types={list(types)!r} must list {self.n_layer} "
                        f"entries, each {SLIDING!r} or {FULL!r}")
    object.__setattr__(self, "layer_types", types)

  @property
  def d_head(self) -> int:
    return self.head_dim

  @property
  def group(self) -> int:
    """Query heads per key/value head."""
    return self.n_head // self.n_kv_head

  @property
  def attn_temperature(self) -> float:
    """The model's own T on the raw q·k scale: √query_pre_attn_scalar (16 for 270M, = √d_head
    there; larger Gemma 3 models may differ from √d_head)."""
    return math.sqrt(self.query_pre_attn_scalar)

  def window(self, layer: int) -> int:
    """The sliding window of a local layer, 0 for a global one."""
    return self.sliding_window if self.layer_types[layer] == SLIDING else 0

  @classmethod
  def from_hf(cls, hf: Mapping[str, Any], *, source: str = "config") -> "Config":
    """From a HF ``config.json`` dict (``gemma3_text``, or ``gemma3`` with a ``text_config``)."""
    if not isinstance(hf, Mapping):
      raise LimitsError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    if hf.get("model_type") not in MODEL_TYPES:
      raise LimitsError(f"{source}: model_type={hf.get('model_type')!r} is not Gemma 3")
    if hf.get("model_type") == "gemma3" and isinstance(hf.get("text_config"), Mapping):
      hf = dict(hf["text_config"], model_type="gemma3_text")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
      if hf.get(key) is not None:
        raise LimitsError(f"{source}: {key}={hf[key]!r} is not supported (no soft-capping)")
    for key in ("attention_bias", "use_bidirectional_attention"):
      if hf.get(key):
        raise LimitsError(f"{source}: {key}=true is not supported")
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in _ACTIVATIONS:
      raise LimitsError(f"{source}: hidden_activation={act!r} is not supported; allowed: "
                        f"{', '.join(_ACTIVATIONS)}")
    get = lambda k: hf[k] if hf.get(k) is not None else _HF_DEFAULTS[k]
    n_layer = get("num_hidden_layers")
    types = hf.get("layer_types")
    if types is None:
      pattern = hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern",
                                                       DEFAULT_PATTERN))
      if not is_positive_int(pattern):
        raise LimitsError(f"{source}: sliding_window_pattern={pattern!r} must be a positive "
                          "integer")
      types = default_layer_types(n_layer, pattern)
    return cls(n_layer=n_layer, n_head=get("num_attention_heads"),
               n_kv_head=get("num_key_value_heads"), n_embd=get("hidden_size"),
               head_dim=get("head_dim"), d_mlp=get("intermediate_size"),
               n_positions=get("max_position_embeddings"), vocab_size=get("vocab_size"),
               rms_norm_eps=float(get("rms_norm_eps")),
               rope_theta=rope.rope_theta(hf, source, default=1_000_000.0,
                                          layer_type=FULL),
               rope_local_theta=rope.rope_theta(hf, source, default=10_000.0,
                                                layer_type=SLIDING,
                                                legacy_key="rope_local_base_freq"),
               sliding_window=get("sliding_window"), layer_types=tuple(types),
               query_pre_attn_scalar=float(get("query_pre_attn_scalar")),
               tie_word_embeddings=bool(get("tie_word_embeddings")))

  def to_hf(self) -> dict:
    """A transformers-5 ``config.json`` dict loadable by ``Gemma3ForCausalLM``."""
    return {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
            "num_hidden_layers": self.n_layer, "num_attention_heads": self.n_head,
            "num_key_value_heads": self.n_kv_head, "hidden_size": self.n_embd,
            "head_dim": self.head_dim, "intermediate_size": self.d_mlp,
            "max_position_embeddings": self.n_positions, "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps, "sliding_window": self.sliding_window,
            "layer_types": list(self.layer_types),
            "rope_parameters": {FULL: {"rope_type": "default", "rope_theta": self.rope_theta},
                                SLIDING: {"rope_type": "default",
                                          "rope_theta": self.rope_local_theta}},
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
            "attn_logit_softcapping": None, "final_logit_softcapping": None}
