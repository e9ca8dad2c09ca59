"""limits.models.gguf_cache: the on-disk GGUF header cache gives the parse's own config and
tokenizer, and is never trusted for another file state (size, modification time), a corrupt
entry (one warning line, then the parse) or an entry recording another identity."""

import dataclasses
import json
import os

import pytest

from limits import models
from limits.models import gguf_cache, gguf_file
from tests.test_models_loading import CONFIG, _flat, _write_llama_gguf


@pytest.fixture
def cache(tmp_path, monkeypatch):
  folder = tmp_path / "gguf-cache"
  monkeypatch.setenv(gguf_cache.CACHE_ENV, str(folder))
  return folder


@pytest.fixture
def parses(monkeypatch):
  """Counts the header parses of load_config (gguf_file.config) and load_tokenizer."""
  count = {"config": 0, "tokenizer": 0}
  config, tokenizer = gguf_file.config, gguf_file.tokenizer

  def counted_config(reader, path):
    count["config"] += 1
    return config(reader, path)

  def counted_tokenizer(path):
    count["tokenizer"] += 1
    return tokenizer(path)

  monkeypatch.setattr(gguf_file, "config", counted_config)
  monkeypatch.setattr(gguf_file, "tokenizer", counted_tokenizer)
  return count


def _entries(folder):
  return sorted(folder.glob("*.json"))


def test_config_hit_equals_parse_and_a_changed_file_is_parsed_again(tmp_path, cache, parses):
  _, flat = _flat(seed=0)
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat)
  first = models.load_config(path)
  assert parses["config"] == 1 and len(_entries(cache)) == 1
  again = models.load_config(path)
  assert parses["config"] == 1  # from the entry
  assert again == first and repr(again) == repr(first)  # records key on repr(config)
  # Same size, new modification time: the entry is not this file's state any more.
  st = path.stat()
  os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
  assert models.load_config(path) == first and parses["config"] == 2
  assert models.load_config(path) == first and parses["config"] == 2  # its own new entry
  # Replaced by a different model (another size): its own config, never the cached one.
  other = dataclasses.replace(CONFIG, n_positions=64)
  path.unlink()
  _write_llama_gguf(path, other, flat)
  got = models.load_config(path)
  assert got.n_positions == 64 and got != first and parses["config"] == 3


def test_corrupt_entry_is_parsed_again_with_one_warning(tmp_path, cache, parses, capsys):
  _, flat = _flat(seed=0)
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat)
  want = models.load_config(path)
  (entry,) = _entries(cache)
  entry.write_text(entry.read_text()[:40])  # a truncated write
  capsys.readouterr()
  assert models.load_config(path) == want and parses["config"] == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "ignoring the cached GGUF header" in err[0] and str(entry) in err[0]
  assert models.load_config(path) == want and parses["config"] == 2  # rewritten, quiet
  assert capsys.readouterr().err == ""


def test_entry_of_another_identity_is_not_trusted(tmp_path, cache, parses, capsys):
  _, flat = _flat(seed=0)
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat)
  models.load_config(path)
  (entry,) = _entries(cache)
  data = json.loads(entry.read_text())
  data["identity"]["size"] += 1  # e.g. another file whose key hashed to this name
  data["config"]["fields"]["n_layer"] = 7
  entry.write_text(json.dumps(data))
  got = models.load_config(path)
  assert got == CONFIG and parses["config"] == 2 and capsys.readouterr().err == ""


def test_cache_off_writes_nothing(tmp_path, monkeypatch, parses):
  monkeypatch.setenv(gguf_cache.CACHE_ENV, "off")
  _, flat = _flat(seed=0)
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat)
  assert models.load_config(path) == models.load_config(path) == CONFIG
  assert parses["config"] == 2 and gguf_cache.cache_dir() is None


def test_smollm2_tokenizer_and_config_from_the_cache_equal_the_parse(cache, parses):
  text = ("In 1805, Anna Pavlovna's 123 guests said: \u00abWell, Prince!\u00bb\n\t"
          "<|endoftext|> 2024 — caf\u00e9")
  tok = models.load_tokenizer("smollm2")
  config = models.load_config("smollm2")
  assert parses == {"config": 1, "tokenizer": 1}
  cached_tok = models.load_tokenizer("smollm2")
  cached_config = models.load_config("smollm2")
  assert parses == {"config": 1, "tokenizer": 1}  # both from the entry
  assert cached_config == config and repr(cached_config) == repr(config)
  assert cached_tok.vocab_size == tok.vocab_size == 49152
  assert cached_tok._backend is None  # the vocabulary size alone builds no backend
  assert cached_tok.backend.get_vocab_size(with_added_tokens=True) == 49152
  assert cached_tok.encode(text) == tok.encode(text)
  assert cached_tok.backend.to_str() == tok.backend.to_str()
  ids = tok.encode(text)
  assert cached_tok.decode(ids) == tok.decode(ids) == text
