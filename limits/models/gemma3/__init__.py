"""The Gemma 3 family (text decoder; Gemma 3 270M and up): config, pure-JAX blocks with local
(sliding-window) and global layers, GGUF and HF checkpoint loading."""

from limits.models.gemma3.config import Config
from limits.models.gemma3.model import (block, check_params, checkpoint_shapes, embed, head,
                                        init_params, layer_kinds, params_from_flat)

__all__ = ["Config", "block", "check_params", "checkpoint_shapes", "embed", "head",
           "init_params", "layer_kinds", "params_from_flat"]
