"""Tests for limits.records.sources and the shipped model in limits/assets/tiny.

Random-weight models come from ``limits.models.gpt2.testing.make_random_model_dir``; the corpus is a
small text file written by the test, except in the ``corpus`` test (out of the default run, about
a minute: `python -m pytest -m corpus` runs it on the embedded corpus), which re-checks the model
card's held-out loss with Hugging Face transformers (an independent GPT-2 implementation) on the
shipped weights.
"""

import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import data
from limits import models
from limits.models import gpt2
from limits.records import sources
from limits.errors import LimitsError
from limits.models.gpt2.testing import make_random_model_dir

TEXT = "".join(
    f"Chapter {i}. Prince Andrew rode out at dawn; the regiment followed him along the road "
    f"to the village of {name}, where the French had camped the night before.\n\n"
    for i, name in enumerate(["Schön Grabern", "Austerlitz", "Borodinó", "Krasnoe"] * 12))

# Fixed, hand-written prose (not from the corpus) for the attention check of the shipped model.
SENTENCES = (
    "The old prince rose early, as was his habit, and walked through the cold rooms of the "
    "house before anyone else was awake. His daughter heard his steps and knew from their "
    "sound what kind of day it would be. In the study the clock struck seven, and the "
    "architect came in with his plans. Outside, the snow lay deep on the avenue, and the "
    "peasants were clearing it with shovels while the steward shouted at them. Princess Mary "
    "took her book and went down to the drawing room, where the little princess was already "
    "sitting by the fire with her work. They spoke of the war, of the letters from the army, "
    "and of Prince Andrew, who had written that the regiment would soon march. Nobody knew "
    "where the French would stop, and in Moscow people said that Napoleon himself would come. "
    "The count laughed at these rumours at dinner, but the countess did not laugh, and after "
    "dinner she sat alone for a long time in her room, thinking of her sons.")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("model")
  return make_random_model_dir(d, n_layer=2, n_head=2, n_embd=32, n_positions=64,
                               vocab_size=300, text=TEXT, seed=1)


@pytest.fixture(scope="module")
def model(model_dir):
  return sources.load_model(str(model_dir))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
  p = tmp_path_factory.mktemp("corpus") / "text.txt"
  p.write_text(TEXT, encoding="utf-8")
  return p


@pytest.fixture
def no_corpus(tmp_path, monkeypatch):
  """No data dir, no cache, no download (the embedded copy is the only corpus left)."""
  monkeypatch.delenv(data.ENV_DATA_DIR, raising=False)
  monkeypatch.setenv(data.ENV_ALLOW_DOWNLOAD, "0")
  monkeypatch.setenv(data.ENV_CACHE_DIR, str(tmp_path / "empty_cache"))


def _one_line(err) -> str:
  msg = str(err.value)
  assert "\n" not in msg and msg, msg
  return msg


# ---------------------------------------------------------------------------------------------
# load_model

def test_load_model_directory(model, model_dir):
  assert model.path == Path(model_dir) and model.name == str(model_dir)
  assert (model.config.n_layer, model.config.n_head, model.config.n_embd) == (2, 2, 32)
  assert model.native_temperature == pytest.approx(math.sqrt(16))
  assert model.tokenizer.decode(model.tokenizer.encode(TEXT[:200])) == TEXT[:200]
  info = model.info()
  json.dumps(info)  # JSON-able
  assert info["d_head"] == 16


@pytest.mark.parametrize("spec", ["no-such-model-xyz", "/definitely/not/a/dir", "",
                                  "gpt2-imaginary"])
def test_load_model_unknown_is_one_line(spec, monkeypatch, tmp_path):
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty HF cache
  with pytest.raises(LimitsError) as e:
    sources.load_model(spec)
  _one_line(e)


def test_load_model_without_tokenizer(tmp_path):
  d = make_random_model_dir(tmp_path / "m", n_positions=16)
  (d / "tokenizer.json").unlink()
  with pytest.raises(LimitsError, match="no tokenizer") as e:
    sources.load_model(str(d))
  _one_line(e)


# ---------------------------------------------------------------------------------------------
# corpus_windows

def test_corpus_windows_are_consecutive_token_slices(model, text_file):
  out = sources.corpus_windows(model, 16, 3, text=text_file)
  tokens = model.tokenizer.encode(TEXT)  # direct encoding of the whole text
  assert out.shape == (3, 16) and out.dtype == np.int32
  for w in range(3):
    assert out[w].tolist() == tokens[16 * w:16 * (w + 1)]


def test_corpus_tokens_come_from_the_disk_cache_of_exactly_this_tokenizer_and_corpus(
    model, model_dir, tmp_path, monkeypatch):
  """The on-disk token cache (every reproduction step is a process of its own): a second
  process's encode is a read of the same int32 tokens; another corpus, or a changed tokenizer
  file, is another entry; a corrupt entry is recomputed; ``off`` writes nothing."""
  cache = tmp_path / "tokens"
  monkeypatch.setenv(sources.TOKEN_CACHE_ENV, str(cache))
  calls = []
  real = model.tokenizer.encode
  monkeypatch.setattr(model.tokenizer, "encode", lambda t: calls.append(len(t)) or real(t))
  corpus = lambda text: data.Corpus(text=text, path=tmp_path / "c.txt", source="text",
                                    sha256=data.sha256_bytes(text.encode("utf-8")))
  fresh = lambda c: (sources._TOKEN_CACHE.clear(), sources.encode_corpus(model, c))[1]
  first = fresh(corpus(TEXT))
  assert calls == [len(TEXT)] and len(list(cache.glob("*.npy"))) == 1
  again = fresh(corpus(TEXT))                      # a new process: read from disk
  assert calls == [len(TEXT)] and again.dtype == np.int32
  np.testing.assert_array_equal(again, real(TEXT))
  np.testing.assert_array_equal(first, again)
  other = fresh(corpus(TEXT[:500]))                # another corpus: its own entry
  assert len(calls) == 2 and other.tolist() == real(TEXT[:500])
  assert len(list(cache.glob("*.npy"))) == 2
  (entry,) = [p for p in cache.glob("*.npy") if np.load(p).size == len(first)]
  entry.write_bytes(b"not an npy file")            # corrupt: recomputed and rewritten
  np.testing.assert_array_equal(fresh(corpus(TEXT)), first)
  assert len(calls) == 3 and np.load(entry).tolist() == first.tolist()
  entry.write_bytes(b"")                           # empty (a write cut short): recomputed
  np.testing.assert_array_equal(fresh(corpus(TEXT)), first)
  assert len(calls) == 4 and not list(cache.glob(".*.tmp"))
  tok = Path(model_dir) / "tokenizer.json"          # the tokenizer file changes: new entry
  import os
  st = tok.stat()
  os.utime(tok, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
  try:
    fresh(corpus(TEXT))
  finally:
    os.utime(tok, ns=(st.st_atime_ns, st.st_mtime_ns))
  assert len(calls) == 5 and len(list(cache.glob("*.npy"))) == 3
  monkeypatch.setenv(sources.TOKEN_CACHE_ENV, "off")
  assert sources.token_cache_dir() is None
  fresh(corpus(TEXT))
  assert len(calls) == 6 and len(list(cache.glob("*.npy"))) == 3


def test_corpus_windows_from_data_dir_and_env(model, tmp_path, monkeypatch, no_corpus):
  (tmp_path / data.FILENAME).write_text(TEXT, encoding="utf-8")
  expected = np.asarray(model.tokenizer.encode(TEXT)[:20]).reshape(2, 10)
  np.testing.assert_array_equal(sources.corpus_windows(model, 10, 2, data_dir=tmp_path),
                                expected)
  monkeypatch.setenv(data.ENV_DATA_DIR, str(tmp_path))
  np.testing.assert_array_equal(sources.corpus_windows(model, 10, 2), expected)


def test_corpus_windows_errors(model, text_file, no_corpus):
  n_tokens = len(model.tokenizer.encode(TEXT))
  with pytest.raises(LimitsError, match="exceeds the context") as e:
    sources.corpus_windows(model, 65, 1, text=text_file)  # n_positions = 64
  _one_line(e)
  with pytest.raises(LimitsError, match=f"has {n_tokens} tokens") as e:
    sources.corpus_windows(model, 64, n_tokens // 64 + 1, text=text_file)
  _one_line(e)
  with pytest.raises(LimitsError, match="LIMITS_DATA_DIR") as e:
    sources.corpus_windows(model, 16, 1, data_dir="gutenberg")  # no cache, downloads off
  _one_line(e)
  for bad in (0, -1, 2.0, True):
    with pytest.raises(LimitsError):
      sources.corpus_windows(model, bad, 1, text=text_file)
    with pytest.raises(LimitsError):
      sources.corpus_windows(model, 8, bad, text=text_file)


# ---------------------------------------------------------------------------------------------
# model_logit_rows

def test_model_logit_rows_equal_qk_from_forward_records(model, text_file):
  L, W = 12, 2
  rows, mask, meta = sources.model_logit_rows(model, L, W, text=text_file)
  c = model.config
  assert rows.shape == (W * c.n_layer * c.n_head * L, L) and mask.shape == rows.shape
  tokens = sources.corpus_windows(model, L, W, text=text_file)
  np.testing.assert_array_equal(meta["tokens"], tokens)
  tril = np.tril(np.ones((L, L), bool))
  for w in range(W):
    rec = models.forward(model.params, tokens[w:w + 1], c).attn  # full records, all layers
    q, k = np.asarray(rec.q, np.float64), np.asarray(rec.k, np.float64)
    for layer in range(c.n_layer):
      for head in range(c.n_head):
        qk = q[layer, 0, head] @ k[layer, 0, head].T  # (L, L) raw q·k, computed here
        sel = (meta["window"] == w) & (meta["layer"] == layer) & (meta["head"] == head)
        got = rows[sel]
        np.testing.assert_array_equal(meta["query"][sel], np.arange(L))
        np.testing.assert_array_equal(mask[sel], tril)  # causal: query t sees t+1 keys
        # float32 einsum in the model vs float64 product of the same float32 q, k: 1e-5
        # relative + 1e-6 absolute covers summation-order rounding over d_head = 16.
        np.testing.assert_allclose(got[tril], qk[tril], rtol=1e-5, atol=1e-6)
        assert np.all(got[~tril] == 0)
        # Softmax of the rows at the model's own temperature reproduces its attention weights.
        z = np.where(tril, got / model.native_temperature, -np.inf)
        alpha = np.exp(z - z.max(-1, keepdims=True))
        alpha /= alpha.sum(-1, keepdims=True)
        np.testing.assert_allclose(alpha, np.asarray(rec.weights[layer, 0, head]), atol=1e-6)
  np.testing.assert_array_equal(meta["n_visible"], meta["query"] + 1)
  assert mask.sum(-1).tolist() == (meta["query"] + 1).tolist()
  assert meta["native_temperature"] == pytest.approx(4.0)


def test_model_logit_rows_layer_subset(model, text_file):
  rows, mask, meta = sources.model_logit_rows(model, 8, 1, text=text_file)
  sub, sub_mask, sub_meta = sources.model_logit_rows(model, 8, 1, layers=[-1], text=text_file)
  assert sub_meta["layers"] == (1,)
  sel = meta["layer"] == 1
  np.testing.assert_allclose(sub, rows[sel], rtol=1e-6, atol=1e-6)  # same math, same rounding
  np.testing.assert_array_equal(sub_mask, mask[sel])
  with pytest.raises(LimitsError, match="out of range") as e:
    sources.model_logit_rows(model, 8, 1, layers=[5], text=text_file)
  _one_line(e)


# ---------------------------------------------------------------------------------------------
# The shipped model (limits/assets/tiny).

def test_tiny_loads_and_matches_its_card():
  tiny = sources.load_model("tiny")
  assert tiny.path == sources.TINY_DIR
  report = json.loads((sources.TINY_DIR / "training.json").read_text())
  for key in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"):
    assert getattr(tiny.config, key) == report["model"][key]
  assert tiny.tokenizer.vocab_size == tiny.config.vocab_size
  assert tiny.tokenizer.decode(tiny.tokenizer.encode(SENTENCES)) == SENTENCES
  card = (sources.TINY_DIR / "MODEL_CARD.md").read_text()
  assert "not GPT-2" in card
  assert f"{report['heldout']['nats_per_token']:.4f} nats/token" in card
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(tiny.params))
  assert n_params == report["model"]["n_params"]


def _max_weight(rec):
  return jnp.max(rec.weights, axis=-1)  # (B, H, L): each query's largest attention weight


def _mean_max_weight_ratio(params, config, tokens, first_query):
  """Per head: mean over queries t >= first_query of max_j alpha_tj, divided by the uniform
  value 1/(t+1) averaged the same way. ~1 for uniform attention."""
  rec = models.forward(params, tokens, config, lm_head=False,
                     record_fn=_max_weight).attn  # (n_layer, 1, H, L)
  mx = np.asarray(rec)[:, 0, :, first_query:]  # (n_layer, H, L - first_query)
  uniform = 1.0 / (np.arange(first_query, tokens.shape[1]) + 1)
  return mx.mean(-1) / uniform.mean()  # (n_layer, H)


def test_tiny_attention_is_far_from_uniform_unlike_random_init():
  tiny = sources.load_model("tiny")
  ids = tiny.tokenizer.encode(SENTENCES)
  L = 128
  assert len(ids) >= L
  tokens = jnp.asarray([ids[:L]], jnp.int32)
  trained = _mean_max_weight_ratio(tiny.params, tiny.config, tokens, 32)
  random = _mean_max_weight_ratio(gpt2.init_params(jax.random.key(0), tiny.config),
                                  tiny.config, tokens, 32)
  # Queries t >= 32 have uniform weight <= 1/33. At GPT-2 initialisation q·k ~ 0, so every
  # head's max weight stays within a factor 1.5 of uniform (measured <= 1.13). The trained
  # model's heads concentrate: measured mean 8.2x and median 7.5x uniform over its 16 heads
  # (layer 0 stays near 1.3-1.7x); the thresholds leave a factor ~2 of margin.
  assert np.all(random < 1.5), random
  assert trained.mean() > 4.0, trained
  assert np.median(trained) > 3.0, trained


@pytest.mark.corpus
def test_tiny_heldout_loss_matches_card_with_hf_transformers(reference_corpus):
  import torch
  import transformers

  from limits import training as tt

  report = json.loads((sources.TINY_DIR / "training.json").read_text())
  card = (sources.TINY_DIR / "MODEL_CARD.md").read_text()
  card_nats = float(re.search(r"Held-out loss: ([0-9.]+) nats/token", card).group(1))
  tiny = sources.load_model("tiny")
  corpus = data.resolve_corpus()
  assert corpus.sha256 == report["corpus"]["sha256"]
  _, heldout = data.split_heldout(corpus.text, report["settings"]["heldout_fraction"])
  windows = tt.eval_windows(tiny.tokenizer.encode(heldout), report["heldout"]["seq_len"])
  assert windows.shape[0] == report["heldout"]["windows"]

  # Independent implementation: Hugging Face GPT2LMHeadModel (torch) on the shipped files.
  hf = transformers.GPT2LMHeadModel.from_pretrained(str(sources.TINY_DIR)).eval()
  total = 0.0
  with torch.no_grad():
    for i in range(0, windows.shape[0], 8):
      w = torch.as_tensor(windows[i:i + 8], dtype=torch.long)
      logits = hf(w[:, :-1]).logits.double()
      total += float(torch.nn.functional.cross_entropy(
          logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum"))
  nats = total / (windows.shape[0] * (windows.shape[1] - 1))
  # Two float32 implementations over ~45k tokens: they agree to ~1e-5; the card rounds to
  # 4 decimals, so 1e-3 nats/token is a strict but safe tolerance.
  assert abs(nats - card_nats) < 1e-3, (nats, card_nats)
  assert abs(nats - report["heldout"]["nats_per_token"]) < 1e-3
  probe = report["probe"]
  ours = tt.heldout_loss(tiny.params, tiny.config, windows[:probe["windows"]], 2)
  assert abs(ours - probe["nats_per_token"]) < 1e-4


def test_iter_model_layers_matches_forward(model, text_file):
  tokens = sources.corpus_windows(model, 10, 2, text=text_file)
  seen = []
  for w, layer, rec in sources.iter_model_layers(model, 10, 2, layers=[0, 1], text=text_file):
    full = models.forward(model.params, tokens[w:w + 1], model.config).attn
    # Same math compiled differently (scan vs one layer per call): float32 rounding only.
    np.testing.assert_allclose(np.asarray(rec.weights), np.asarray(full.weights[layer]),
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(rec.v), np.asarray(full.v[layer]), atol=1e-5)
    seen.append((w, layer))
  assert seen == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_model_logit_rows_of_local_layers_see_min_t_w_keys(model, text_file):
  """A Gemma 3 model with sliding window W = 4 (layers 0, 2 local, 1 global) at L = 12: rows of a
  local layer have min(t, W) visible keys, exactly the keys its attention weights are non-zero
  on; a global layer's rows keep the causal prefix."""
  import dataclasses

  from limits import models
  from limits.models.gemma3 import Config

  L, Wn = 12, 4
  config = Config(n_layer=3, n_head=2, n_kv_head=1, n_embd=16, head_dim=8, d_mlp=24,
                  n_positions=64, vocab_size=model.config.vocab_size, sliding_window=Wn,
                  layer_types=("sliding_attention", "full_attention", "sliding_attention"),
                  query_pre_attn_scalar=8.0)
  params = models.init_params(jax.random.PRNGKey(0), config)
  gm = dataclasses.replace(model, config=config, params=params, name="gemma3-random")
  assert gm.info()["layer_windows"] == [Wn, 0, Wn]
  rows, mask, meta = sources.model_logit_rows(gm, L, 1, text=text_file)
  t = meta["query"] + 1
  local = meta["layer"] != 1
  np.testing.assert_array_equal(meta["attn_window"], np.where(local, Wn, 0))
  np.testing.assert_array_equal(meta["n_visible"], np.where(local, np.minimum(t, Wn), t))
  np.testing.assert_array_equal(mask.sum(-1), meta["n_visible"])
  weights = np.asarray(models.forward(params, meta["tokens"], config).attn.weights[:, 0])
  np.testing.assert_array_equal(mask.reshape(3, 2, L, L), weights > 0)
  assert np.all(rows[~mask] == 0)
