"""Pure-JAX GPT-2 with per-layer, per-head attention records and a swappable normalizer.

- ``Config`` (``from_hf`` / ``to_hf``), ``init_params``, ``forward``, ``iter_layers``;
- ``load(path_or_name)`` / ``save(directory, config, params)`` (safetensors, HF layout);
- ``tokenizer``: ``Tokenizer``, ``load_tokenizer``, ``train_bpe``;
- ``testing.make_random_model_dir`` for tests.
"""

from limits.gpt2.checkpoint import load, save
from limits.gpt2.config import Config
from limits.gpt2.model import (AttnRecord, Output, check_params, checkpoint_shapes, forward,
                               init_params, iter_layers, softmax_normalizer)
from limits.gpt2.tokenizer import Tokenizer, load_tokenizer, train_bpe

__all__ = [
    "AttnRecord", "Config", "Output", "Tokenizer", "check_params", "checkpoint_shapes",
    "forward", "init_params", "iter_layers", "load", "load_tokenizer", "save",
    "softmax_normalizer", "train_bpe",
]
