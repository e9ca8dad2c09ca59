"""Pure-JAX GPT-2 with per-layer, per-head attention records and a swappable normalizer.

- ``Config`` (``from_hf`` / ``to_hf``), ``init_params`` (the forward is the one engine's,
  :func:`limits.models.forward`);
- ``load(path_or_name)`` / ``save(directory, config, params)`` (safetensors, HF layout);
- ``tokenizer``: ``Tokenizer``, ``load_tokenizer``, ``train_bpe``;
- ``testing.make_random_model_dir`` for tests.
"""

from limits.models.gpt2.checkpoint import load, save
from limits.models.gpt2.config import Config
from limits.models.gpt2.model import check_params, checkpoint_shapes, init_params
from limits.models.gpt2.tokenizer import Tokenizer, load_tokenizer, train_bpe

__all__ = [
    "Config", "Tokenizer", "check_params", "checkpoint_shapes", "init_params", "load",
    "load_tokenizer", "save", "train_bpe",
]
