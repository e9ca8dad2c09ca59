"""Llama-family hyper-parameters, read from a HF ``config.json`` or a GGUF header.

One Config and one block serve every decoder whose maths is Llama's up to switches; each HF
``model_type`` is a small adapter (:data:`ADAPTERS`: its defaults and which switches it sets):

- ``llama``: Llama 1-3.x, SmolLM2; ``attention_bias`` (biases on q, k, v and o);
- ``mistral``: every layer a sliding window of ``sliding_window`` keys (null = global);
- ``qwen2``: biases on q, k, v (not o); sliding windows only with ``use_sliding_window``, on
  layers ≥ ``max_window_layers`` (or as ``layer_types`` says), as HF;
- ``qwen3``: QK-norm (RMSNorm over head_dim on q and k, before RoPE), ``attention_bias`` on q,
  k, v and o, windows as Qwen2.

RoPE θ is read as transformers 5 writes it (``rope_parameters``) and as 4.x wrote it
(``rope_theta``, ``rope_scaling``), with the scalings "linear", "dynamic" and "llama3" (see
``limits.models.rope``). Options that change the computation in a way this implementation does
not support (another ``rope_type``, partial rotary dimensions, MLP biases, an activation other
than SiLU, a sliding layer without a window) are refused with a LimitsError rather than ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from limits.errors import LimitsError
from limits.models import rope
from limits.models.checks import (check_fields, check_types, is_positive_int,
                                  is_positive_number, show)

SLIDING, FULL = "sliding_attention", "full_attention"
# HF LlamaConfig defaults, used when a config.json omits a field (as HF itself does).
_HF_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                    head_dim=None, max_position_embeddings=2048, rms_norm_eps=1e-6,
                    rope_theta=10000.0, tie_word_embeddings=False)
_QWEN_DEFAULTS = dict(_HF_DEFAULTS, vocab_size=151936, intermediate_size=22016,
                      num_key_value_heads=32, max_position_embeddings=32768,
                      sliding_window=4096, max_window_layers=28)


@dataclasses.dataclass(frozen=True)
class Adapter:
  """What one HF model_type changes in the Llama block: HF's config defaults, biases on q/k/v
  (``qkv_bias``: always; else ``attention_bias`` sets q/k/v/o), QK-norm, and where its sliding
  windows come from ("mistral": every layer; "qwen": use_sliding_window/max_window_layers or
  layer_types; None: none)."""

  defaults: dict
  qkv_bias: bool = False
  attention_bias: bool = True  # whether HF reads the attention_bias key for this type
  qk_norm: bool = False
  windows: str | None = None


ADAPTERS = {
    "llama": Adapter(_HF_DEFAULTS),
    "mistral": Adapter(dict(_HF_DEFAULTS, intermediate_size=14336, num_key_value_heads=8,
                            max_position_embeddings=4096 * 32, sliding_window=4096),
                       attention_bias=False, windows="mistral"),
    "qwen2": Adapter(_QWEN_DEFAULTS, qkv_bias=True, attention_bias=False, windows="qwen"),
    "qwen3": Adapter(dict(_QWEN_DEFAULTS, head_dim=128), qk_norm=True, windows="qwen"),
}
MODEL_TYPES = tuple(ADAPTERS)
_INTEGERS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
             "head_dim", "intermediate_size", "max_position_embeddings", "vocab_size",
             "sliding_window", "max_window_layers")
_NUMBERS = ("rms_norm_eps", "rope_theta", "partial_rotary_factor")
_BOOLEANS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window")


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
  model_type: str = "llama"  # the HF adapter it came from (names it in describe / to_hf)
  qkv_bias: bool = False  # biases on q, k, v projections
  o_bias: bool = False  # bias on the output projection
  qk_norm: bool = False  # RMSNorm over head_dim on q and k before RoPE (Qwen3)
  rope_scaling: rope.Scaling | None = None  # None = plain RoPE
  sliding_window: int | None = None  # W of the sliding layers
  layer_types: tuple[str, ...] | None = None  # per layer SLIDING or FULL; None = all FULL

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
    check_fields(self, ("sliding_window",), lambda v: v is None or is_positive_int(v),
                 "Llama config", "be a positive integer or None")
    if self.layer_types is not None:
      types = tuple(self.layer_types)
      if len(types) != self.n_layer or any(t not in (SLIDING, FULL) for t in types):
        raise LimitsError(f"Llama config layer_types={show(list(types))} must list "
                          f"{self.n_layer} entries, each {SLIDING!r} or {FULL!r}")
      if SLIDING in types and self.sliding_window is None:
        raise LimitsError(f"Llama config layer_types has {SLIDING!r} layers but "
                          "sliding_window is None; give the window")
      object.__setattr__(self, "layer_types", types)
    if (self.rope_scaling is not None and self.rope_scaling.rope_type == "dynamic"
        and self.d_head == 2):
      raise LimitsError("Llama config: dynamic RoPE scaling needs head_dim > 2")

  def window(self, layer: int) -> int:
    """The sliding window of a local layer, 0 for a global one."""
    if self.layer_types is None or self.layer_types[layer] != SLIDING:
      return 0
    return self.sliding_window

  @property
  def has_windows(self) -> bool:
    """True when some layer is local (its records then carry ``window``)."""
    return self.layer_types is not None and SLIDING in self.layer_types

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
    """Builds a Config from a HF ``config.json`` dict of any :data:`MODEL_TYPES` (missing
    fields take that model type's HF defaults)."""
    if not isinstance(hf, Mapping):
      raise LimitsError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    check_types(hf, source, integers=_INTEGERS, numbers=_NUMBERS, booleans=_BOOLEANS)
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in ADAPTERS:
      raise LimitsError(f"{source}: model_type={model_type!r} is not a Llama-family model "
                        f"({', '.join(MODEL_TYPES)})")
    adapter = ADAPTERS[model_type]
    if hf.get("mlp_bias"):
      raise LimitsError(f"{source}: mlp_bias=true is not supported")
    act = hf.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
      raise LimitsError(f"{source}: hidden_act={act!r} is not supported; allowed: silu")
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
      raise LimitsError(f"{source}: partial_rotary_factor={hf['partial_rotary_factor']!r} is "
                        "not supported (full rotary only)")
    defaults = adapter.defaults
    get = lambda k: hf[k] if hf.get(k) is not None else defaults[k]
    n_layer, n_head = get("num_hidden_layers"), get("num_attention_heads")
    n_kv = get("num_key_value_heads")
    n_kv = n_head if n_kv is None else n_kv  # LlamaConfig: None = multi-head
    n_positions = get("max_position_embeddings")
    theta, scaling = rope.rope_settings(hf, source, default=defaults["rope_theta"],
                                        n_positions=n_positions)
    window, types = _windows(hf, adapter, model_type, n_layer, source)
    bias = adapter.attention_bias and bool(hf.get("attention_bias"))  # Mistral, Qwen2: no key
    return cls(n_layer=n_layer, n_head=n_head, n_kv_head=n_kv,
               n_embd=get("hidden_size"), head_dim=get("head_dim"),
               d_mlp=get("intermediate_size"), n_positions=n_positions,
               vocab_size=get("vocab_size"), rms_norm_eps=float(get("rms_norm_eps")),
               rope_theta=theta, tie_word_embeddings=bool(get("tie_word_embeddings")),
               model_type=model_type, qkv_bias=adapter.qkv_bias or bias, o_bias=bias,
               qk_norm=adapter.qk_norm, rope_scaling=scaling, sliding_window=window,
               layer_types=types)

  def to_hf(self) -> dict:
    """A HF ``config.json`` dict of this config's model_type (``LlamaForCausalLM``, ...)."""
    adapter = ADAPTERS[self.model_type]
    if (self.qkv_bias, self.o_bias) not in ((adapter.qkv_bias, False),
                                            (True, True) if adapter.attention_bias else ()):
      raise LimitsError(f"{self.model_type} cannot express qkv_bias={self.qkv_bias}, "
                        f"o_bias={self.o_bias} in a config.json")
    if self.qk_norm != adapter.qk_norm:
      raise LimitsError(f"{self.model_type} cannot express qk_norm={self.qk_norm}")
    params = {"rope_type": "default", "rope_theta": self.rope_theta}
    if self.rope_scaling is not None:
      params = dict(dataclasses.asdict(self.rope_scaling), rope_theta=self.rope_theta)
      keep = ("rope_type", "rope_theta") + rope.scaling_keys(params["rope_type"])
      params = {k: v for k, v in params.items() if k in keep}
    hf = {"model_type": self.model_type,
          "architectures": [_ARCHITECTURES[self.model_type]],
          "num_hidden_layers": self.n_layer, "num_attention_heads": self.n_head,
          "num_key_value_heads": self.n_kv_head, "hidden_size": self.n_embd,
          "intermediate_size": self.d_mlp,
          "max_position_embeddings": self.n_positions, "vocab_size": self.vocab_size,
          "rms_norm_eps": self.rms_norm_eps, "rope_parameters": params,  # 5.x
          "tie_word_embeddings": self.tie_word_embeddings, "hidden_act": "silu"}
    if self.head_dim is not None or self.model_type != "qwen2":  # Qwen2Config has no head_dim
      hf["head_dim"] = self.d_head
    if self.rope_scaling is None:
      hf["rope_theta"] = self.rope_theta  # 4.x readers
    if adapter.attention_bias:
      hf.update(attention_bias=self.o_bias, mlp_bias=False)
    if adapter.windows == "mistral":
      if self.has_windows and set(self.layer_types) != {SLIDING}:
        raise LimitsError("mistral cannot express a mix of sliding and global layers")
      hf["sliding_window"] = self.sliding_window if self.has_windows else None
    elif adapter.windows == "qwen":
      hf.update(use_sliding_window=self.has_windows,
                sliding_window=self.sliding_window if self.has_windows else None,
                layer_types=list(self.layer_types or (FULL,) * self.n_layer))
    elif self.has_windows:
      raise LimitsError(f"{self.model_type} cannot express sliding windows")
    return hf


_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                  "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def _windows(hf: Mapping[str, Any], adapter: Adapter, model_type: str, n_layer: int,
             source: str) -> tuple[int | None, tuple[str, ...] | None]:
  """(sliding_window, layer_types) as HF builds them for this model type (None, None: every
  layer global)."""
  if adapter.windows is None:
    types = hf.get("layer_types")
    if hf.get("sliding_window") is not None or (
        types is not None and (not isinstance(types, list) or any(t != FULL for t in types))):
      raise LimitsError(f"{source}: sliding windows (sliding_window, layer_types) are not "
                        f"supported for model_type {model_type!r}; use mistral, qwen2 or qwen3")
    return None, None
  window = hf["sliding_window"] if "sliding_window" in hf else adapter.defaults["sliding_window"]
  if adapter.windows == "mistral":
    if hf.get("layer_types") is not None:  # transformers' AutoConfig reads it as "ministral"
      raise LimitsError(f"{source}: layer_types in a mistral config (transformers loads it as "
                        "ministral, alternating windows) is not supported; drop it or use qwen2")
    # MistralModel: one sliding-window mask for every layer, or none.
    return (None, None) if window is None else (window, (SLIDING,) * n_layer)
  if not hf.get("use_sliding_window", False):
    window = None  # Qwen2Config.__post_init__: no window unless use_sliding_window
  types = hf.get("layer_types")
  if types is None:
    start = hf.get("max_window_layers", adapter.defaults["max_window_layers"])
    types = [SLIDING if window is not None and i >= start else FULL for i in range(n_layer)]
  if not isinstance(types, (list, tuple)) or any(t not in (SLIDING, FULL) for t in types):
    raise LimitsError(f"{source}: layer_types={show(types)} must list {SLIDING!r} or "
                      f"{FULL!r} per layer")
  if SLIDING in types and window is None:
    raise LimitsError(f"{source}: layer_types has {SLIDING!r} layers but no sliding window "
                      "(use_sliding_window is false or sliding_window is null)")
  if SLIDING not in types:
    return None, None
  return window, tuple(types)
