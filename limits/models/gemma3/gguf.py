"""Gemma 3 GGUF files (llama.cpp ``general.architecture`` gemma3): config and weights.

The header gives the shapes, ``rope.freq_base`` (the global layers' θ) and
``attention.sliding_window``; the local θ (10⁴) and the layer pattern (every 6th layer global)
are not stored, and llama.cpp and HF both use Gemma 3's fixed values, as here. llama.cpp's
converter adds Gemma's +1 to every RMSNorm weight (``convert_hf_to_gguf.py``, Gemma3Model) and
does not permute Q/K rows; so the stored gains are loaded minus 1 (HF's convention, ``(1 + w)``
at run time, as transformers' own GGUF loader does) and Q/K are used as stored.
"""

from __future__ import annotations

import numpy as np

from limits.errors import LimitsError
from limits.models import gguf_file

ARCHITECTURE = "gemma3"
LOCAL_ROPE_THETA = 10_000.0

_LAYER_NAMES = {  # Gemma 3's sandwich norms on top of the shared block
    **gguf_file.SHARED_LAYER_NAMES,
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_GLOBAL_NAMES = {"token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight",
                 "output.weight": "lm_head.weight"}


def config(reader, path):
  """The Gemma 3 ``Config`` of a GGUF header (``gemma3.*`` keys)."""
  from limits.models.gemma3.config import Config, default_layer_types

  get = lambda k, d=None: gguf_file.field(reader, f"{ARCHITECTURE}.{k}", d)
  need = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
          "context_length")
  missing = [k for k in need if get(k) is None]
  if missing:
    raise LimitsError(f"{path}: GGUF header lacks {ARCHITECTURE}.{missing[0]}")
  for key in ("attn_logit_softcapping", "final_logit_softcapping"):
    if get(key) is not None:
      raise LimitsError(f"{path}: GGUF {ARCHITECTURE}.{key}={get(key)} is not supported "
                        "(no soft-capping)")
  scaling = get("rope.scaling.type")
  if scaling not in (None, "none"):
    raise LimitsError(f"{path}: RoPE scaling {scaling!r} is not supported (plain RoPE only)")
  n_layer, n_head = int(get("block_count")), int(get("attention.head_count"))
  d = int(get("embedding_length"))
  head_dim = int(get("attention.key_length", d // n_head))
  if int(get("attention.value_length", head_dim)) != head_dim:
    raise LimitsError(f"{path}: value length {get('attention.value_length')} != key length "
                      f"{head_dim} is not supported")
  tokens = gguf_file.field(reader, "tokenizer.ggml.tokens")
  vocab = get("vocab_size") or (len(tokens) if tokens is not None else None)
  if vocab is None:
    raise LimitsError(f"{path}: GGUF header gives no vocabulary size")
  names = {t.name for t in reader.tensors}
  return Config(n_layer=n_layer, n_head=n_head,
                n_kv_head=int(get("attention.head_count_kv", n_head)), n_embd=d,
                head_dim=head_dim, d_mlp=int(get("feed_forward_length")),
                n_positions=int(get("context_length")), vocab_size=int(vocab),
                rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
                rope_theta=float(get("rope.freq_base", 1_000_000.0)),
                rope_local_theta=LOCAL_ROPE_THETA,
                sliding_window=int(get("attention.sliding_window", 4096)),
                layer_types=default_layer_types(n_layer),
                query_pre_attn_scalar=float(head_dim),
                tie_word_embeddings="output.weight" not in names)


def read_tensors(reader, path) -> dict[str, np.ndarray]:
  """``{HF Gemma 3 name without prefix: float32 array (out, in)}``, norm weights minus 1."""
  flat = {}
  for tensor in reader.tensors:
    name = tensor.name
    if name in _GLOBAL_NAMES:
      hf = _GLOBAL_NAMES[name]
    elif name.startswith("blk.") and name.split(".", 2)[-1] in _LAYER_NAMES:
      _, index, rest = name.split(".", 2)
      hf = f"layers.{index}.{_LAYER_NAMES[rest]}"
    else:
      raise LimitsError(f"{path}: unexpected tensor {name} for a Gemma 3 model")
    w = gguf_file.dequantize(tensor, path)
    flat[hf] = w - np.float32(1) if hf.endswith("norm.weight") else w
  return flat


def load(path, reader, *, dtype="float32"):
  """``(config, flat tensors)`` of a Gemma 3 GGUF (shapes and values checked)."""
  from limits.models import files
  from limits.models.gemma3 import model

  cfg = config(reader, path)
  flat = read_tensors(reader, path)
  files.check_tensors(flat, model.checkpoint_shapes(cfg), path, "Gemma 3")
  return cfg, files.cast(flat, dtype)
