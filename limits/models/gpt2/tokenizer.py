"""GPT-2 byte-level BPE through the ``tokenizers`` library.

``load_tokenizer(directory)`` reads ``tokenizer.json`` or, failing that, GPT-2's original
``vocab.json`` + ``merges.txt``; ``train_bpe`` trains a small byte-level BPE (for tests and for
the embedded model). Byte-level BPE maps every string to tokens and back losslessly.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Iterable, Sequence

from limits.errors import LimitsError

END_OF_TEXT = "<|endoftext|>"


class Tokenizer:
  """A thin wrapper over ``tokenizers.Tokenizer`` with the project's interface."""

  def __init__(self, backend):
    self._tok = backend

  @property
  def backend(self):
    """The underlying ``tokenizers.Tokenizer``."""
    return self._tok

  @property
  def vocab_size(self) -> int:
    """Number of token ids (including special tokens)."""
    return self._tok.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str) -> list[int]:
    if not isinstance(text, str):
      raise LimitsError(f"encode expects a str, got {type(text).__name__}")
    return list(self._tok.encode(text, add_special_tokens=False).ids)

  def decode(self, ids: Sequence[int]) -> str:
    ids = [int(i) for i in ids]
    n = self.vocab_size
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
      raise LimitsError(f"token id {bad[0]} out of range [0, {n})")
    return self._tok.decode(ids, skip_special_tokens=False)

  def token_to_id(self, token: str):
    return self._tok.token_to_id(token)

  def save(self, directory) -> pathlib.Path:
    """Writes ``directory/tokenizer.json``; returns its path."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tmp = directory / "tokenizer.json.tmp"
    self._tok.save(str(tmp))
    os.replace(tmp, path)
    return path


def _byte_level(tok):
  from tokenizers import decoders, pre_tokenizers, processors

  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  return tok


def load_tokenizer(directory) -> Tokenizer:
  """Loads ``tokenizer.json`` (or ``vocab.json`` + ``merges.txt``) from ``directory``.

  ``directory`` may also be the path of a ``tokenizer.json`` file.
  """
  from tokenizers import Tokenizer as HFTokenizer
  from tokenizers.models import BPE

  path = pathlib.Path(directory)
  if path.is_file():
    path, directory = path, path.parent
  else:
    directory = path
    path = directory / "tokenizer.json"
  if path.is_file():
    try:
      return Tokenizer(HFTokenizer.from_file(str(path)))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a generic Exception.
      msg = str(e).splitlines()[0] if str(e) else type(e).__name__
      raise LimitsError(f"{path}: not a valid tokenizer.json ({msg})") from None
  vocab, merges = directory / "vocab.json", directory / "merges.txt"
  if vocab.is_file() and merges.is_file():
    try:
      json.loads(vocab.read_text(encoding="utf-8"))
      tok = HFTokenizer(BPE.from_file(str(vocab), str(merges)))
    except Exception as e:  # noqa: BLE001
      msg = str(e).splitlines()[0] if str(e) else type(e).__name__
      raise LimitsError(f"{directory}: invalid vocab.json/merges.txt ({msg})") from None
    if tok.token_to_id(END_OF_TEXT) is not None:
      tok.add_special_tokens([END_OF_TEXT])
    return Tokenizer(_byte_level(tok))
  raise LimitsError(f"{directory}: no tokenizer.json, and no vocab.json + merges.txt pair")


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
  """Trains a GPT-2-style byte-level BPE with ``<|endoftext|>`` (id 0) on ``texts``.

  The vocabulary has at most ``vocab_size`` ids: the special token, the 256 byte symbols and
  the merges learnt (fewer when the text runs out of pairs).
  """
  from tokenizers import Tokenizer as HFTokenizer
  from tokenizers import pre_tokenizers, trainers
  from tokenizers.models import BPE

  if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 257:
    raise LimitsError(f"vocab_size={vocab_size!r} must be an integer >= 257 (256 bytes + "
                      f"{END_OF_TEXT})")
  if isinstance(texts, str):
    texts = [texts]
  tok = _byte_level(HFTokenizer(BPE()))
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(texts, trainer=trainer)
  return Tokenizer(tok)
