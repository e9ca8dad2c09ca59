"""Parity of limits.models.gpt2 with Hugging Face transformers GPT-2 (PyTorch, eager attention).

Reference: ``transformers.GPT2LMHeadModel`` (version pinned in requirements-dev.txt) built from a
random ``GPT2Config`` offline, every parameter perturbed so biases and LayerNorm affine terms are
non-trivial, saved with ``save_pretrained`` (safetensors) and loaded by ``limits.models.gpt2.load``.
q, k, v and the raw scores are captured inside HF's own attention function.

Tolerance: 1e-5 absolute on float32 outputs of magnitude O(1)-O(10). The two implementations
run the same float32 arithmetic in different summation orders (BLAS/Eigen blocking), which
gives differences of a few ulps times √(reduction length), ~1e-6 here; a real bug (wrong scale,
missing bias, causal off-by-one, transposed Conv1D) changes outputs by ≥ 1e-2.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch  # requirements-dev.txt: the reference, imported plainly so it can never skip
import transformers
from transformers.models.gpt2 import modeling_gpt2

from limits import models
from limits.models import gpt2

ATOL = 1e-5  # float32 summation-order noise, see module docstring
RTOL = 1e-5


def _hf_model(tmp_path, seed=0, **config_kwargs):
  """A random HF GPT-2 with all parameters perturbed, saved to tmp_path; returns (model, dir)."""
  torch.manual_seed(seed)
  cfg = transformers.GPT2Config(attn_implementation="eager", **config_kwargs)
  model = transformers.GPT2LMHeadModel(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "ln_" in name and name.endswith("weight"):
        p.add_(0.2 * torch.randn_like(p))  # gains around 1
      elif name.endswith("bias"):
        p.copy_(0.05 * torch.randn_like(p))
  path = tmp_path / f"hf_{seed}"
  model.save_pretrained(path, safe_serialization=True)
  return model, path


def _hf_run(model, tokens, *, normalizer=None, temperature=None):
  """Runs HF with its eager attention function wrapped to capture q, k, v and raw scores.

  With ``normalizer`` (a torch function of (logits, mask)) the attention weights are replaced,
  logits = q·kᵀ / temperature: a torch reference for our normalizer swap.
  """
  captured = []
  original = modeling_gpt2.eager_attention_forward

  def patched(module, query, key, value, attention_mask, head_mask=None, **kwargs):
    scores = torch.matmul(query, key.transpose(-1, -2))  # (B, H, L, L)
    captured.append(dict(q=query, k=key, v=value, scores=scores))
    if normalizer is None:
      return original(module, query, key, value, attention_mask, head_mask=head_mask, **kwargs)
    l = query.shape[-2]
    mask = torch.tril(torch.ones(l, l, dtype=torch.bool))
    weights = normalizer(scores / temperature, mask)
    out = torch.matmul(weights, value).transpose(1, 2)
    return out, weights

  assert model.config._attn_implementation == "eager"
  modeling_gpt2.eager_attention_forward = patched
  try:
    with torch.no_grad():
      out = model(torch.tensor(np.asarray(tokens), dtype=torch.long), output_attentions=True)
  finally:
    modeling_gpt2.eager_attention_forward = original
  assert len(captured) == model.config.n_layer  # the patched attention really ran
  return out, captured


def _tokens(vocab, shape, seed=0):
  return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


def _close(ours, ref, what, atol=ATOL, rtol=RTOL):
  np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=atol, rtol=rtol,
                             err_msg=what)


SMALL_CONFIGS = [
    dict(n_layer=1, n_head=3, n_embd=48, n_positions=40, vocab_size=97),
    dict(n_layer=5, n_head=3, n_embd=48, n_positions=40, vocab_size=97),
    dict(n_layer=2, n_head=4, n_embd=32, n_positions=24, vocab_size=61, n_inner=40,
         activation_function="gelu"),
]


@pytest.mark.parametrize("kwargs", SMALL_CONFIGS, ids=["1L3H48", "5L3H48", "2L4H32gelu"])
def test_logits_and_attention_match_hf(tmp_path, kwargs):
  model, path = _hf_model(tmp_path, **kwargs)
  config, params = gpt2.load(path)
  assert config.n_layer == kwargs["n_layer"] and config.n_head == kwargs["n_head"]
  tokens = _tokens(kwargs["vocab_size"], (2, 19))
  ref, cap = _hf_run(model, tokens)
  out = models.forward(params, tokens, config)
  _close(out.logits, ref.logits, "logits")
  assert out.attn.weights.shape == (config.n_layer, 2, config.n_head, 19, 19)
  for i in range(config.n_layer):
    _close(out.attn.weights[i], ref.attentions[i], f"layer {i} weights")
    for name in ("q", "k", "v", "scores"):
      _close(getattr(out.attn, name)[i], cap[i][name], f"layer {i} {name}")


def test_x_is_ln1_output_against_hf_hook(tmp_path):
  model, path = _hf_model(tmp_path, n_layer=2, n_head=2, n_embd=16, n_positions=16,
                          vocab_size=50)
  config, params = gpt2.load(path)
  tokens = _tokens(50, (1, 11))
  seen = []
  hooks = [blk.ln_1.register_forward_hook(lambda m, i, o: seen.append(o.detach()))
           for blk in model.transformer.h]
  try:
    _hf_run(model, tokens)
  finally:
    for h in hooks:
      h.remove()
  out = models.forward(params, tokens, config)
  for i in range(2):
    _close(out.attn.x[i], seen[i], f"layer {i} ln_1 output")


def test_untied_lm_head_matches_hf(tmp_path):
  model, path = _hf_model(tmp_path, n_layer=1, n_head=2, n_embd=16, n_positions=16,
                          vocab_size=50, tie_word_embeddings=False)
  assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
  config, params = gpt2.load(path)
  assert not config.tie_word_embeddings
  tokens = _tokens(50, (1, 9))
  ref, _ = _hf_run(model, tokens)
  _close(models.forward(params, tokens, config).logits, ref.logits, "untied logits")


def test_our_save_loads_in_hf(tmp_path):
  config = gpt2.Config(n_layer=2, n_head=3, n_embd=24, n_positions=32, vocab_size=70)
  params = gpt2.init_params(jax.random.key(3), config)
  # Non-trivial biases and gains so a dropped tensor would show.
  rng = np.random.default_rng(4)
  params = jax.tree_util.tree_map(
      lambda a: a + 0.05 * rng.standard_normal(a.shape).astype(np.float32), params)
  gpt2.save(tmp_path / "ours", config, params)
  model = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours",
                                                       attn_implementation="eager").eval()
  tokens = _tokens(70, (2, 13), seed=1)
  ref, _ = _hf_run(model, tokens)
  out = models.forward(params, tokens, config)
  _close(out.logits, ref.logits, "logits after save -> HF load")
  for i in range(2):
    _close(out.attn.weights[i], ref.attentions[i], f"layer {i} weights")


def _torch_softmax(logits, mask):
  return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)


def _torch_sparsemax(logits, mask):
  import entmax  # requirements-dev.txt
  return entmax.sparsemax(logits.masked_fill(~mask, -1e30), dim=-1)


@pytest.mark.parametrize("name,temperature", [("softmax", 0.7), ("softmax", 20.0),
                                              ("sparsemax", 2.0), ("sparsemax", None)])
def test_normalizer_swap_matches_patched_hf(tmp_path, name, temperature):
  """Every layer with the swapped normalizer, against HF whose attention uses the torch one."""
  from limits import normalizers

  model, path = _hf_model(tmp_path, n_layer=3, n_head=2, n_embd=32, n_positions=24,
                          vocab_size=50)
  config, params = gpt2.load(path)
  tokens = _tokens(50, (2, 17), seed=2)
  t_ref = math.sqrt(config.d_head) if temperature is None else temperature
  torch_norm = _torch_softmax if name == "softmax" else _torch_sparsemax
  ref, cap = _hf_run(model, tokens, normalizer=torch_norm, temperature=t_ref)
  norm = normalizers.get(name)
  out = models.forward(params, tokens, config, normalizer=norm, temperature=temperature)
  _close(out.logits, ref.logits, f"{name} T={temperature} logits")
  for i in range(config.n_layer):
    _close(out.attn.weights[i], ref.attentions[i], f"{name} layer {i} weights")
    _close(out.attn.scores[i], cap[i]["scores"], f"{name} layer {i} scores")


def test_float64_parity_is_much_tighter(tmp_path):
  """In float64 on both sides the gap shrinks to ~1e-13: the 1e-5 float32 tolerance above is
  rounding, not a modelling difference."""
  model, path = _hf_model(tmp_path, n_layer=2, n_head=3, n_embd=24, n_positions=16,
                          vocab_size=50)
  model = model.double()
  tokens = _tokens(50, (1, 10), seed=7)
  ref, _ = _hf_run(model, tokens)
  with jax.enable_x64(True):
    config, params = gpt2.load(path, dtype="float64")
    out = models.forward(params, tokens, config)
    assert out.logits.dtype == jnp.float64
    # 1e-10: float64 summation-order noise is ~1e-14 relative; any float32 step would give 1e-7.
    _close(out.logits, ref.logits, "float64 logits", atol=1e-10, rtol=1e-10)
    for i in range(2):
      _close(out.attn.weights[i], ref.attentions[i], f"float64 layer {i}", atol=1e-10, rtol=0)


def test_full_124m_config_matches_hf(tmp_path):
  """GPT-2 small (12 layers × 12 heads, 124M parameters, random weights) at L = 64 (~8 s)."""
  model, path = _hf_model(tmp_path)  # GPT2Config() defaults = the 124M model
  config, params = gpt2.load(path)
  assert (config.n_layer, config.n_head, config.n_embd, config.vocab_size) == (12, 12, 768,
                                                                               50257)
  tokens = _tokens(50257, (1, 64), seed=5)
  ref, cap = _hf_run(model, tokens)
  out = models.forward(params, tokens, config)
  _close(out.logits, ref.logits, "124M logits")  # |logits| < 3, observed gap ~3e-6
  for i in range(12):
    _close(out.attn.weights[i], ref.attentions[i], f"124M layer {i} weights")
    for name in ("q", "k", "v"):
      _close(getattr(out.attn, name)[i], cap[i][name], f"124M layer {i} {name}")
    # Raw scores are √d_head = 8 times the model's logits: the same 1e-5 on the logit scale.
    _close(out.attn.scores[i], cap[i]["scores"], f"124M layer {i} scores", atol=8 * ATOL)
