"""The Llama family (SmolLM2, Llama 2/3.x) and its adapters (Mistral, Qwen2, Qwen3): config,
pure-JAX blocks, checkpoint loading."""

from limits.models.llama.config import Config
from limits.models.llama.model import (block, check_params, checkpoint_shapes, embed, head,
                                       init_params, layer_kinds, params_from_flat)

__all__ = ["Config", "block", "check_params", "checkpoint_shapes", "embed", "head",
           "init_params", "layer_kinds", "params_from_flat"]
