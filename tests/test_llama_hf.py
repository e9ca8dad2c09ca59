"""Parity of the Llama family (limits.models.llama) with HF ``transformers.LlamaForCausalLM``.

Reference: ``LlamaForCausalLM`` (eager attention; version pinned in requirements-dev.txt) built
from random ``LlamaConfig``s offline — grouped-query, multi-head and multi-query attention, tied
and untied heads, a ``head_dim`` different from hidden/heads, several RoPE θ — every RMSNorm
gain perturbed, saved with ``save_pretrained`` (safetensors) and read by ``limits.models.load``.
q and k after RoPE, v and the raw scores are captured inside HF's own attention function.

Tolerance: 1e-4 (relative for logits, absolute for attention weights in [0, 1]) in float32, as
the issue fixes. Both sides run float32 in different summation orders (a few ulps times
√(reduction length), ~1e-6 here); a real bug (wrong RoPE convention, kv head mapped to the
wrong query group, missing RMSNorm gain, causal off-by-one) changes outputs by ≥ 1e-2.
"""

import dataclasses

import numpy as np
import pytest
import torch  # requirements-dev.txt: the reference, imported plainly so it can never skip
import transformers
from transformers.models.llama import modeling_llama

from limits import models
from limits.errors import LimitsError

TOL = 1e-4  # float32 summation-order noise is ~1e-6; see the module docstring


def _hf_model(tmp_path, seed=0, qk_scale=1.0, **kw):
  """A random HF Llama (norm gains perturbed; q/k projections × ``qk_scale``, for peaked,
  position-sensitive attention) saved to tmp_path; returns (model, dir)."""
  torch.manual_seed(seed)
  base = dict(vocab_size=101, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
              rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)
  base.update(kw)
  cfg = transformers.LlamaConfig(attn_implementation="eager", **base)
  model = transformers.LlamaForCausalLM(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.add_(0.2 * torch.randn_like(p))  # gains around 1
      if "q_proj" in name or "k_proj" in name:
        p.mul_(qk_scale)
  path = tmp_path / f"llama_{seed}"
  model.save_pretrained(path, safe_serialization=True)
  return model, path


def _hf_run(model, tokens, *, normalizer=None, temperature=None):
  """Runs HF capturing q, k (after RoPE, per kv head), v and raw scores per layer.

  With ``normalizer`` (a torch function of (logits, mask)) the attention weights are replaced,
  logits = q·kᵀ / temperature: a torch reference for the normalizer swap.
  """
  captured = []
  original = modeling_llama.eager_attention_forward

  def patched(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    k = modeling_llama.repeat_kv(key, module.num_key_value_groups)
    scores = torch.matmul(query, k.transpose(2, 3))  # (B, H, L, L) raw q·k
    captured.append(dict(q=query, k=key, v=value, scores=scores))
    if normalizer is None:
      return original(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    l = query.shape[-2]
    mask = torch.tril(torch.ones(l, l, dtype=torch.bool))
    weights = normalizer(scores / temperature, mask)
    v = modeling_llama.repeat_kv(value, module.num_key_value_groups)
    return torch.matmul(weights, v).transpose(1, 2).contiguous(), weights

  modeling_llama.eager_attention_forward = patched
  try:
    with torch.no_grad():
      out = model(torch.tensor(np.asarray(tokens), dtype=torch.long), output_attentions=True)
  finally:
    modeling_llama.eager_attention_forward = original
  assert len(captured) == model.config.num_hidden_layers  # the patched attention really ran
  return out, captured


def _tokens(vocab, shape, seed=0):
  return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


def _repeat(x, group):
  """HF's per-kv-head tensor (B, n_kv, L, d) repeated to per query head (B, H, L, d)."""
  return np.repeat(np.asarray(x), group, axis=1)


CONFIGS = {
    "gqa_tied_theta1e4": dict(),
    "mha_untied_theta1e5": dict(num_key_value_heads=6, tie_word_embeddings=False,
                                rope_theta=100000.0),
    "mqa_theta5e5": dict(num_key_value_heads=1, rope_theta=500000.0, num_hidden_layers=3),
    "head_dim_16_gqa_untied": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   tie_word_embeddings=False),
}


@pytest.mark.parametrize("kw", list(CONFIGS.values()), ids=list(CONFIGS))
def test_logits_and_every_record_match_hf(tmp_path, kw):
  hf, path = _hf_model(tmp_path, **kw)
  config, params = models.load(path)
  assert config.family == "llama"
  assert config.n_kv_head == hf.config.num_key_value_heads
  tokens = _tokens(config.vocab_size, (2, 37))
  ref, cap = _hf_run(hf, tokens)
  out = models.forward(params, tokens, config)
  logits, ref_logits = np.asarray(out.logits), ref.logits.numpy()
  np.testing.assert_allclose(logits, ref_logits, rtol=0,
                             atol=TOL * float(np.abs(ref_logits).max()), err_msg="logits")
  group = config.n_head // config.n_kv_head
  for i, c in enumerate(cap):
    rec = {f: np.asarray(getattr(out.attn, f)[i]) for f in ("q", "k", "v", "scores", "weights")}
    np.testing.assert_allclose(rec["weights"], ref.attentions[i].numpy(), atol=TOL,
                               err_msg=f"layer {i} weights")
    np.testing.assert_allclose(rec["q"], c["q"].numpy(), atol=TOL, err_msg=f"layer {i} q")
    np.testing.assert_allclose(rec["k"], _repeat(c["k"], group), atol=TOL,
                               err_msg=f"layer {i} k per query head")
    np.testing.assert_allclose(rec["v"], _repeat(c["v"], group), atol=TOL,
                               err_msg=f"layer {i} v per query head")
    scale = float(np.abs(c["scores"].numpy()).max())
    np.testing.assert_allclose(rec["scores"], c["scores"].numpy(), atol=TOL * scale,
                               err_msg=f"layer {i} raw scores")


def test_temperature_and_normalizer_swap_match_patched_hf(tmp_path):
  from limits import normalizers

  hf, path = _hf_model(tmp_path, seed=3)
  config, params = models.load(path)
  tokens = _tokens(config.vocab_size, (1, 20), seed=1)

  def torch_softmax(logits, mask):
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)

  t = 2.5
  ref, _ = _hf_run(hf, tokens, normalizer=torch_softmax, temperature=t)
  out = models.forward(params, tokens, config, temperature=t,
                       normalizer=normalizers.get("softmax"))
  np.testing.assert_allclose(np.asarray(out.logits), ref.logits.numpy(),
                             atol=TOL * float(np.abs(ref.logits.numpy()).max()))
  for i in range(config.n_layer):
    np.testing.assert_allclose(np.asarray(out.attn.weights[i]), ref.attentions[i].numpy(),
                               atol=TOL)


def test_iter_layers_equals_forward(tmp_path):
  _, path = _hf_model(tmp_path, seed=5, num_hidden_layers=3)
  config, params = models.load(path)
  tokens = _tokens(config.vocab_size, (1, 16))
  out = models.forward(params, tokens, config)
  seen = []
  for i, rec in models.iter_layers(params, tokens, config, layers=[0, 2]):
    seen.append(i)
    np.testing.assert_allclose(np.asarray(rec.weights), np.asarray(out.attn.weights[i]),
                               atol=1e-6)
  assert seen == [0, 2]


def test_sharded_checkpoint_loads_equal(tmp_path):
  hf, path = _hf_model(tmp_path, seed=7)
  sharded = tmp_path / "sharded"
  hf.save_pretrained(sharded, safe_serialization=True, max_shard_size="20KB")
  assert (sharded / "model.safetensors.index.json").is_file()
  c1, p1 = models.load(path)
  c2, p2 = models.load(sharded)
  assert c1 == c2
  tokens = _tokens(c1.vocab_size, (1, 8))
  np.testing.assert_array_equal(np.asarray(models.forward(p1, tokens, c1).logits),
                                np.asarray(models.forward(p2, tokens, c2).logits))


def test_pickle_only_llama_dir_refused(tmp_path):
  hf, _ = _hf_model(tmp_path, seed=1)
  pickled = tmp_path / "pickled"
  # transformers 5 always saves safetensors: write the pickle checkpoint as older versions did.
  pickled.mkdir()
  hf.config.to_json_file(str(pickled / "config.json"))
  torch.save(hf.state_dict(), pickled / "pytorch_model.bin")
  with pytest.raises(LimitsError, match="refusing pickle checkpoint .*pytorch_model.bin") as e:
    models.load(pickled)
  assert "\n" not in str(e.value)


def test_unsupported_rope_scaling_and_mlp_bias_refused(tmp_path):
  import json

  _, path = _hf_model(tmp_path, seed=2)
  cfg = json.loads((path / "config.json").read_text())
  for key, value, match in (("rope_scaling", {"rope_type": "yarn", "factor": 2.0},
                             "rope_scaling"), ("mlp_bias", True, "mlp_bias")):
    bad = dict(cfg, **{key: value})
    (path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(LimitsError, match=match):
      models.load(path)
    with pytest.raises(LimitsError, match=match):
      models.load_config(path)


def test_transformers5_rope_parameters_theta_is_read(tmp_path):
  """transformers 5 writes θ only inside ``rope_parameters``; it must not fall back to 10⁴.

  q/k projections × 30 make attention peaked, so RoPE's θ matters (at the 0.02 init attention
  is near uniform and θ = 10⁴ moves logits by only ~2e-3); reading the default θ turns this
  red (the issue measured 0.11-0.35 on trained-scale weights)."""
  import json

  hf, path = _hf_model(tmp_path, seed=11, qk_scale=30.0, rope_theta=500000.0,
                       num_hidden_layers=3)
  saved = json.loads((path / "config.json").read_text())
  assert "rope_theta" not in saved and saved["rope_parameters"] == {
      "rope_theta": 500000.0, "rope_type": "default"}  # the transformers-5 layout
  config, params = models.load(path)
  assert config.rope_theta == 500000.0
  tokens = _tokens(config.vocab_size, (1, 40))
  ref, _ = _hf_run(hf, tokens)
  logits, ref_logits = np.asarray(models.forward(params, tokens, config).logits), ref.logits.numpy()
  np.testing.assert_allclose(logits, ref_logits, rtol=0,
                             atol=TOL * float(np.abs(ref_logits).max()))
  # The other side of the boundary: the same weights at θ = 10⁴ are far from HF.
  wrong = models.forward(params, tokens, dataclasses.replace(config, rope_theta=10000.0)).logits
  assert float(np.abs(np.asarray(wrong) - ref_logits).max()) > 30 * TOL * float(
      np.abs(ref_logits).max())


def test_transformers4_style_config_loads_with_its_theta(tmp_path):
  """A config.json as transformers 4.x wrote it (top-level rope_theta, rope_scaling null, no
  rope_parameters) gives the same model as the transformers-5 file."""
  import json

  hf, path = _hf_model(tmp_path, seed=12, rope_theta=100000.0)
  saved = json.loads((path / "config.json").read_text())
  old = {k: v for k, v in saved.items() if k != "rope_parameters"}
  old.update(rope_theta=100000.0, rope_scaling=None, transformers_version="4.57.3")
  (path / "config.json").write_text(json.dumps(old))
  config, params = models.load(path)
  assert config.rope_theta == 100000.0
  tokens = _tokens(config.vocab_size, (1, 24))
  ref, _ = _hf_run(hf, tokens)
  np.testing.assert_allclose(np.asarray(models.forward(params, tokens, config).logits),
                             ref.logits.numpy(), rtol=0,
                             atol=TOL * float(np.abs(ref.logits.numpy()).max()))


@pytest.mark.parametrize("style", ["v5", "v4"])
@pytest.mark.parametrize("rope_type", ["yarn", "longrope"])
def test_rope_types_that_change_attention_are_refused(tmp_path, style, rope_type):
  """Types other than default, linear, dynamic and llama3 (those: tests/test_llama_families_hf.py)
  are refused in both config formats."""
  import json

  from limits.models.llama.config import Config

  base = {"model_type": "llama", "hidden_size": 48, "num_attention_heads": 6,
          "num_hidden_layers": 2, "intermediate_size": 80, "vocab_size": 101}
  ok = dict(base, rope_parameters={"rope_type": "default", "rope_theta": 2e5})
  assert Config.from_hf(ok).rope_theta == 2e5  # "default" is accepted
  extra = {"rope_type": rope_type, "factor": 8.0}
  bad = (dict(base, rope_parameters=dict(extra, rope_theta=5e5)) if style == "v5"
         else dict(base, rope_theta=5e5, rope_scaling=extra))
  with pytest.raises(LimitsError, match=f"rope_type='{rope_type}' is not supported") as e:
    Config.from_hf(bad, source="config.json")
  assert "\n" not in str(e.value)
  # A factor alone (no rope_type) changes attention too and is refused, naming the key.
  with pytest.raises(LimitsError, match="factor=8.0"):
    Config.from_hf(dict(base, rope_parameters={"rope_theta": 5e5, "factor": 8.0}))
  path = tmp_path / "cfg"
  path.mkdir()
  (path / "config.json").write_text(json.dumps(bad))
  with pytest.raises(LimitsError, match=rope_type):
    models.load_config(path)


def test_attend_grouped_query_matches_repeated_heads():
  """engine.attend with H_kv = 2 key/value heads for H = 6 query heads equals the same call with
  k, v repeated per query head (head i reads kv head i // 3), and differs from the other
  plausible grouping (i % 2); a head count that is not a multiple is refused."""
  import jax.numpy as jnp
  from limits.models.engine import attend

  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.standard_normal((1, 6, 7, 4)), jnp.float32)
  k, v = (jnp.asarray(rng.standard_normal((1, 2, 7, 4)), jnp.float32) for _ in range(2))
  t = jnp.asarray(2.0)
  got = attend(q, k, v, t, None)
  ref = attend(q, jnp.repeat(k, 3, axis=1), jnp.repeat(v, 3, axis=1), t, None)
  wrong = attend(q, jnp.tile(k, (1, 3, 1, 1)), jnp.tile(v, (1, 3, 1, 1)), t, None)
  for g, r, w in zip(got, ref, wrong):
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=1e-6)  # float32 GEMM order
    assert not np.allclose(np.asarray(g), np.asarray(w), atol=1e-3)
  with pytest.raises(LimitsError, match="not a multiple"):
    attend(q, k[:, :1].repeat(4, axis=1), v[:, :1].repeat(4, axis=1), t, None)
