"""Random-weight GPT-2 model directories for tests (no network, no torch).

``make_random_model_dir`` writes ``config.json`` + ``model.safetensors`` (HF GPT-2 layout, GPT-2
initialisation) + ``tokenizer.json`` (byte-level BPE trained on ``text`` or a built-in
paragraph), so ``limits.models.gpt2.load`` / ``load_tokenizer`` and HF can read it.
"""

from __future__ import annotations

import pathlib

import jax

from limits.models.gpt2 import checkpoint
from limits.models.gpt2.config import Config
from limits.models.gpt2.model import init_params
from limits.models.gpt2.tokenizer import train_bpe

SAMPLE_TEXT = (
    "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. "
    "But I warn you, if you don't tell me that this means war, if you still try to defend the "
    "infamies and horrors perpetrated by that Antichrist, I will have nothing more to do with "
    "you and you are no longer my friend. It was in July, 1805, and the speaker was the "
    "well-known Anna Pavlovna Scherer, maid of honor and favorite of the Empress Marya "
    "Fedorovna. With these words she greeted Prince Vasili Kuragin, a man of high rank and "
    "importance, who was the first to arrive at her reception. Anna Pavlovna had had a cough "
    "for some days. She was, as she said, suffering from la grippe. "
) * 4


def make_random_model_dir(path, *, n_layer: int = 2, n_head: int = 2, n_embd: int = 32,
                          n_positions: int = 128, vocab_size: int = 300, text=None,
                          seed: int = 0) -> pathlib.Path:
  """Writes a random-weight GPT-2 with a trained tokenizer into ``path``; returns ``path``.

  The tokenizer's vocabulary never exceeds ``vocab_size`` (the model's), so every encoded id is
  valid. ``text`` is a string or an iterable of strings to train the BPE on.
  """
  path = pathlib.Path(path)
  config = Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=n_positions,
                  vocab_size=vocab_size)
  params = init_params(jax.random.key(seed), config)
  checkpoint.save(path, config, params)
  tok = train_bpe(SAMPLE_TEXT if text is None else text, vocab_size)
  tok.save(path)
  return path
