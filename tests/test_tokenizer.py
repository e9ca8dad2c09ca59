"""limits.models.gpt2.tokenizer: byte-level BPE, round trips, file formats, and HF parity.

The reference is HF ``transformers.GPT2TokenizerFast`` (and ``GPT2Tokenizer``, the slow pure-
Python BPE) built from the same vocab.json + merges.txt: an independent implementation of GPT-2's
byte-level BPE. Tokenizers are trained in the test with ``tokenizers`` on a small text.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limits.errors import LimitsError
from limits.models.gpt2 import testing
from limits.models.gpt2.tokenizer import END_OF_TEXT, Tokenizer, load_tokenizer, train_bpe

SAMPLES = ["Hello, Prince Vasili!", "  two  spaces\tand a tab\n", "Ünïcödé — ß, 東京, 🙂",
           "", "<|endoftext|> literal", "numbers 1805 and 12,345.67"]


@pytest.fixture(scope="module")
def tok():
  return train_bpe([testing.SAMPLE_TEXT], 400)


def _vocab_merges(tok, directory):
  """Writes GPT-2's original vocab.json + merges.txt from a trained tokenizer."""
  data = json.loads(tok.backend.to_str())
  vocab = data["model"]["vocab"]
  merges = data["model"]["merges"]
  (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
  lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
  (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(lines) + "\n",
                                        encoding="utf-8")


def test_trained_vocab_is_byte_level_with_merges(tok):
  assert 257 < tok.vocab_size <= 400
  assert tok.token_to_id(END_OF_TEXT) == 0
  ids = tok.encode(" Prince Vasili")  # frequent in the training text: merged
  assert len(ids) < len(" Prince Vasili".encode())


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip(tok, text):
  assert tok.decode(tok.encode(text)) == text


@settings(max_examples=15, deadline=None)
@given(st.text(max_size=40))
def test_round_trip_any_unicode(tok, text):
  # Byte-level BPE is lossless on every str (unpaired surrogates cannot be UTF-8 encoded).
  if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
    return
  assert tok.decode(tok.encode(text)) == text


def test_save_and_load_tokenizer_json(tmp_path, tok):
  path = tok.save(tmp_path)
  assert path.name == "tokenizer.json"
  again = load_tokenizer(tmp_path)
  for text in SAMPLES:
    assert again.encode(text) == tok.encode(text)
  assert load_tokenizer(path).vocab_size == tok.vocab_size


def test_vocab_merges_matches_hf_gpt2_tokenizers(tmp_path, tok):
  import transformers  # requirements-dev.txt
  _vocab_merges(tok, tmp_path)
  ours = load_tokenizer(tmp_path)  # no tokenizer.json: the vocab.json + merges.txt path
  # transformers 5 has one GPT-2 tokenizer class (tokenizers backend; the slow Python BPE is
  # gone): it takes the vocabulary and merges themselves, read here from the two files.
  import json

  vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
  lines = (tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines()
  merges = [tuple(m.split(" ")) for m in lines if m and not m.startswith("#version")]
  ref = transformers.GPT2Tokenizer(vocab=vocab, merges=merges)
  assert len(ref) == ours.vocab_size
  for text in SAMPLES[:4] + [testing.SAMPLE_TEXT[:300]]:
    ids = ours.encode(text)
    assert ids == ref.encode(text), text
    assert ids == tok.encode(text)  # same model as the tokenizer.json it came from
    assert ours.decode(ids) == ref.decode(ids) == text


def test_make_random_model_dir_tokenizer_fits_model(tmp_path):
  from limits.models import gpt2

  d = testing.make_random_model_dir(tmp_path / "m", vocab_size=300, text="abc abd " * 50)
  config, _ = gpt2.load(d)
  t = load_tokenizer(d)
  assert t.vocab_size <= config.vocab_size
  assert max(t.encode(testing.SAMPLE_TEXT)) < config.vocab_size


def test_errors(tmp_path, tok):
  with pytest.raises(LimitsError, match="vocab_size"):
    train_bpe(["abc"], 256)
  with pytest.raises(LimitsError, match="no tokenizer.json"):
    load_tokenizer(tmp_path)
  (tmp_path / "tokenizer.json").write_text("{broken")
  with pytest.raises(LimitsError, match="not a valid tokenizer.json"):
    load_tokenizer(tmp_path)
  with pytest.raises(LimitsError, match="out of range"):
    tok.decode([tok.vocab_size])
  with pytest.raises(LimitsError, match="str"):
    tok.encode(b"bytes")
  assert isinstance(tok, Tokenizer)
