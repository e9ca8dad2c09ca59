"""One model API over families (GPT-2; Llama with its Mistral, Qwen2, Qwen3 adapters; Gemma 3):
load, forward with records, tokenizers.

- ``load(spec) -> (config, params)``; ``load_config(spec)``; ``load_tokenizer(spec)``;
  ``locate(spec)`` (see ``limits.models.loading`` for the accepted specs: ``tiny``,
  ``smollm2``, ``gemma3-270m``, a directory, a ``.gguf`` file, a hub name);
- ``forward(params, tokens, config, *, normalizer=None, temperature=None) -> Output`` and
  ``iter_layers`` (one layer's records at a time), for any family (``config.family``);
- the record contract ``AttnRecord`` / ``Output`` (``limits.models.engine``): q, k, v
  ``(n_layer, B, n_head, L, d_head)`` with k and v per query head, ``scores`` the raw q·kᵀ
  after RoPE (before scaling and masking), ``weights`` the masked normalizer of scores/√d_head,
  ``window`` the sliding window of a local layer (0 global; None where no layer is local).
"""

from limits.models.engine import (AttnRecord, Output, attend, family_module,
                                  forward, iter_layers, layer_kinds, softmax_normalizer,
                                  visible_keys)
from limits.models.loading import (FAMILIES, SPEC_HELP, Location, gemma3_270m_path, init_params,
                                   load, load_config, load_tokenizer, locate, smollm2_path)

__all__ = ["AttnRecord", "FAMILIES", "Location", "Output", "SPEC_HELP", "attend",
           "family_module", "forward", "gemma3_270m_path", "init_params",
           "iter_layers", "layer_kinds", "load", "load_config", "load_tokenizer", "locate",
           "smollm2_path", "softmax_normalizer", "visible_keys"]
