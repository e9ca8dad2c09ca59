"""Parity of the Llama-family adapters (Mistral, Qwen2, Qwen3, Llama with attention biases and
RoPE scaling "linear" / "dynamic" / "llama3") with HF transformers, and their refusals.

Reference: ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``,
``LlamaForCausalLM`` (eager attention; transformers pinned in requirements-dev.txt) built from
random tiny configs offline, every RMSNorm gain (QK-norm included) and every bias perturbed (HF
initialises biases to 0 and gains to 1), q/k projections scaled so attention is peaked and
position-sensitive, saved with ``save_pretrained`` (safetensors, transformers-5 config.json) and
read by ``limits.models.load``. Sequences are longer than every sliding window (so the window
binds) and than the llama3 rewrite's original context L₀ (so low, medium and high frequencies
all occur at positions that matter).

Tolerance: 1e-4 (relative to max |logit| for logits, absolute for attention weights in [0, 1])
in float32; summation-order noise is ~1e-6. The boundary tests use the same weights with one
plausible bug (window off by one, no window, biases dropped, no QK-norm, plain or linear RoPE in
place of llama3) and require the logits to move by more than 10 × the tolerance.
"""

import dataclasses
import json

import numpy as np
import pytest
import torch  # requirements-dev.txt: the reference, imported plainly so it can never skip
import transformers

from limits import models
from limits.errors import LimitsError
from limits.models.llama.config import Config
from tests.hf_reference import assert_logits_and_weights_match
from tests.hf_reference import hf_forward as _hf
from tests.hf_reference import max_diff as _max_diff
from tests.hf_reference import random_tokens as _tokens

TOL = 1e-4
L = 40  # > every window below and > the llama3 L₀ = 32
BASE = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-5, tie_word_embeddings=False)
CLASSES = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
           "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)}
LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


def _hf_model(tmp_path, model_type, seed=0, qk_scale=6.0, **kw):
  """A random HF model of ``model_type`` (gains and biases perturbed, q/k × qk_scale) saved to
  tmp_path; returns (model, dir)."""
  torch.manual_seed(seed)
  cfg_cls, model_cls = CLASSES[model_type]
  cfg = cfg_cls(attn_implementation="eager", **dict(BASE, **kw))
  model = model_cls(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.add_(0.2 * torch.randn_like(p))
      if name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
      if "q_proj" in name or "k_proj" in name:
        p.mul_(qk_scale)
  path = tmp_path / f"{model_type}_{seed}"
  model.save_pretrained(path, safe_serialization=True)
  return model, path


CASES = {
    "mistral_window5": ("mistral", dict(sliding_window=5)),
    "mistral_no_window_mqa": ("mistral", dict(sliding_window=None, num_key_value_heads=1)),
    "qwen2_biases": ("qwen2", dict(tie_word_embeddings=True)),
    "qwen2_window6_from_layer1": ("qwen2", dict(use_sliding_window=True, sliding_window=6,
                                                max_window_layers=1, num_hidden_layers=3)),
    "qwen3_qk_norm": ("qwen3", dict(head_dim=16)),
    "qwen3_bias_layer_types": ("qwen3", dict(head_dim=8, attention_bias=True,
                                             use_sliding_window=True, sliding_window=7,
                                             layer_types=["sliding_attention",
                                                          "full_attention"])),
    "llama_attention_bias": ("llama", dict(attention_bias=True)),
    "llama3_rope": ("llama", dict(head_dim=16, rope_parameters=LLAMA3)),
    "linear_rope": ("llama", dict(rope_parameters={"rope_type": "linear", "factor": 4.0,
                                                   "rope_theta": 10000.0})),
    "dynamic_rope": ("llama", dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                    "rope_theta": 10000.0})),
}


@pytest.mark.parametrize("case", list(CASES))
def test_logits_and_every_layer_attention_match_hf(tmp_path, case):
  model_type, kw = CASES[case]
  hf, path = _hf_model(tmp_path, model_type, **kw)
  config, params = models.load(path)
  assert (config.family, config.model_type) == ("llama", model_type)
  tokens = _tokens(config.vocab_size, (2, L))
  ref = _hf(hf, tokens)
  out = models.forward(params, tokens, config)
  assert_logits_and_weights_match(out, ref, config.n_layer, TOL)
  i, j = np.arange(L)[:, None], np.arange(L)[None, :]
  for n in range(config.n_layer):
    w = np.asarray(out.attn.weights[n])
    # The window HF applies to this layer (None = global), from HF's own config.
    types = getattr(hf.config, "layer_types", None)
    hf_window = hf.config.sliding_window if (
        model_type == "mistral" or (types and types[n] == "sliding_attention")) else None
    if out.attn.window is None:
      assert hf_window is None
      continue
    assert int(out.attn.window[n]) == (hf_window or 0)
    if hf_window:
      outside = j <= i - hf_window  # causal keys beyond the window
      assert outside.any()  # L > W: the window binds
      assert np.all(w[..., outside] == 0.0), f"layer {n}: weight outside the window"
      np.testing.assert_array_equal((w[0, 0] > 0).sum(-1), models.visible_keys(L, hf_window))


def test_windows_in_records_and_iter_layers(tmp_path):
  _, path = _hf_model(tmp_path, "qwen2", seed=3, use_sliding_window=True, sliding_window=6,
                      max_window_layers=1, num_hidden_layers=3)
  config, params = models.load(path)
  assert config.layer_types == ("full_attention", "sliding_attention", "sliding_attention")
  out = models.forward(params, _tokens(config.vocab_size, (1, L)), config)
  assert [int(w) for w in out.attn.window] == [0, 6, 6]
  for n, rec in models.iter_layers(params, _tokens(config.vocab_size, (1, L)), config):
    assert int(rec.window) == config.window(n)
    np.testing.assert_allclose(np.asarray(rec.weights), np.asarray(out.attn.weights[n]),
                               atol=1e-6)
  # A plain Llama keeps window None (no layer is local), as before the adapters.
  _, plain = _hf_model(tmp_path, "llama", seed=3)
  c, p = models.load(plain)
  assert models.forward(p, _tokens(c.vocab_size, (1, 8)), c).attn.window is None


def _bug_distance(params, tokens, config, ref_logits, bad_config=None, bad_params=None):
  out = models.forward(params if bad_params is None else bad_params, tokens,
                       config if bad_config is None else bad_config)
  return _max_diff(out.logits, ref_logits)


def test_each_switch_is_needed(tmp_path):
  """The other side of the boundary: dropping or changing each adapter's switch on the same
  weights moves the logits by more than 10 × TOL (so the parity above is not vacuous)."""
  checks = []
  hf, path = _hf_model(tmp_path, "mistral", seed=4, sliding_window=5)
  config, params = models.load(path)
  checks.append(("mistral", hf, config, params, {
      "no window": dataclasses.replace(config, sliding_window=None, layer_types=None),
      "window off by one": dataclasses.replace(config, sliding_window=6)}))
  hf, path = _hf_model(tmp_path, "qwen3", seed=5, head_dim=16)
  config, params = models.load(path)
  checks.append(("qwen3", hf, config, params, {
      "no QK-norm": dataclasses.replace(config, qk_norm=False)}))
  hf, path = _hf_model(tmp_path, "llama", seed=6, head_dim=16, rope_parameters=LLAMA3)
  config, params = models.load(path)
  lin = dataclasses.replace(config.rope_scaling, rope_type="linear")
  checks.append(("llama3", hf, config, params, {
      "plain RoPE": dataclasses.replace(config, rope_scaling=None),
      "linear ×8 instead of llama3": dataclasses.replace(config, rope_scaling=lin)}))
  for family, hf, config, params, bugs in checks:
    tokens = _tokens(config.vocab_size, (1, L), seed=2)
    ref = _hf(hf, tokens).logits.numpy()
    scale = TOL * float(np.abs(ref).max())
    assert _bug_distance(params, tokens, config, ref) <= scale, family
    for what, bad in bugs.items():
      assert _bug_distance(params, tokens, config, ref, bad_config=bad) > 10 * scale, what
  # Qwen2 without its q/k/v biases.
  hf, path = _hf_model(tmp_path, "qwen2", seed=7)
  config, params = models.load(path)
  tokens = _tokens(config.vocab_size, (1, L), seed=2)
  ref = _hf(hf, tokens).logits.numpy()
  att = {k: {"weight": v["weight"]} for k, v in params["layers"]["self_attn"].items()}
  no_bias = dict(params, layers=dict(params["layers"], self_attn=att))
  assert _bug_distance(params, tokens, config, ref, bad_params=no_bias) > 10 * TOL * float(
      np.abs(ref).max())


def test_llama3_rewrite_matches_hf_frequencies():
  """inv_freq of every scaled type against HF's ROPE_INIT_FUNCTIONS (float32), with the three
  llama3 bands present: unchanged (λ < L₀/high), interpolated, divided (λ > L₀/low)."""
  import jax.numpy as jnp
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

  from limits.models import rope

  for params in (LLAMA3, {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0},
                 {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0}):
    hf_cfg = transformers.LlamaConfig(**dict(BASE, head_dim=16, rope_parameters=dict(params)))
    ref, _ = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf_cfg, "cpu")
    theta, scaling = rope.rope_settings(hf_cfg.to_dict(), "config", default=1e4,
                                        n_positions=BASE["max_position_embeddings"])
    got = np.asarray(rope.inv_freq(16, theta, jnp.float32, scaling))
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-6, err_msg=params["rope_type"])
  wavelen = 2 * np.pi / (1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16))
  old = LLAMA3["original_max_position_embeddings"]
  bands = np.digitize(wavelen, [old / LLAMA3["high_freq_factor"],
                                old / LLAMA3["low_freq_factor"]])
  assert set(bands) == {0, 1, 2}  # 2π < 8 < 2π·10^0.5 < 32 < 2π·10


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
def test_to_hf_round_trip(tmp_path, model_type):
  kw = {"mistral": dict(sliding_window=5), "qwen2": dict(use_sliding_window=True,
                                                         sliding_window=6, max_window_layers=1),
        "qwen3": dict(attention_bias=True),
        "llama": dict(rope_parameters=LLAMA3)}[model_type]
  cfg_cls, _ = CLASSES[model_type]
  hf = json.loads(cfg_cls(**dict(BASE, **kw)).to_json_string())
  config = Config.from_hf(hf)
  assert Config.from_hf(config.to_hf()) == config


@pytest.mark.parametrize("rope_type", ["yarn", "longrope", "su"])
@pytest.mark.parametrize("style", ["v5", "v4"])
def test_unsupported_rope_type_refused_in_one_line(rope_type, style):
  base = dict(BASE, model_type="llama")
  extra = {"rope_type": rope_type, "factor": 8.0}
  bad = (dict(base, rope_parameters=dict(extra, rope_theta=1e4)) if style == "v5"
         else dict(base, rope_theta=1e4, rope_scaling=extra))
  with pytest.raises(LimitsError, match=f"rope_type='{rope_type}' is not supported") as e:
    Config.from_hf(bad, source="config.json")
  assert "supported: default, linear, dynamic, llama3" in str(e.value)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("change,match", [
    (dict(model_type="mistral", layer_types=["full_attention", "sliding_attention"]),
     "layer_types in a mistral config"),
    (dict(model_type="qwen2", use_sliding_window=False,
          layer_types=["full_attention", "sliding_attention"]), "no sliding window"),
    (dict(model_type="llama", sliding_window=4), "sliding windows .* not supported"),
    (dict(model_type="llama", mlp_bias=True), "mlp_bias"),
    (dict(model_type="llama", rope_parameters={"rope_type": "llama3", "factor": 8.0,
                                               "rope_theta": 1e4}), "needs low_freq_factor"),
    (dict(model_type="llama", rope_parameters={"rope_type": "linear", "factor": 2.0,
                                               "rope_theta": 1e4, "beta_fast": 32}),
     "beta_fast=32"),
    (dict(model_type="qwen2", use_sliding_window="yes"), "use_sliding_window='yes'"),
])
def test_unsupported_adapter_fields_refused_in_one_line(change, match):
  ok = dict(BASE, model_type=change["model_type"])
  Config.from_hf(ok)  # the base dict is accepted
  with pytest.raises(LimitsError, match=match) as e:
    Config.from_hf(dict(ok, **change), source="config.json")
  assert "\n" not in str(e.value)


def test_unknown_model_type_names_it_and_the_supported_list(tmp_path):
  d = tmp_path / "m"
  d.mkdir()
  (d / "config.json").write_text(json.dumps(dict(BASE, model_type="phi3")))
  with pytest.raises(LimitsError) as e:
    models.load(d)
  msg = str(e.value)
  assert "model_type='phi3' is not supported" in msg and "\n" not in msg
  for name in ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma3", "gemma3_text"):
    assert name in msg
