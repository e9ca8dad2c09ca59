"""limits.models.gpt2 forward semantics without a reference library (HF parity: test_gpt2_hf.py).

Each test compares against an independent computation: a NumPy re-implementation of one block
from the checkpoint tensors, the full forward vs the streamed paths, or exact identities
(masked weights are 0, softmax rows sum to 1).
"""

import gc
import math
import weakref

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import models
from limits.models import gpt2
from limits.errors import LimitsError
from limits.models.gpt2 import model as model_lib
from limits.models import engine
from tests.live_arrays import frozen_heap

CONFIG = gpt2.Config(n_layer=3, n_head=2, n_embd=16, n_positions=24, vocab_size=40)
L = 12


@pytest.fixture(scope="module")
def params():
  p = gpt2.init_params(jax.random.key(0), CONFIG)
  # Perturb every tensor (biases and LN gains included) so nothing is trivially 0 or 1, and
  # scale up so attention is not near-uniform.
  leaves, tree = jax.tree_util.tree_flatten(p)
  rng = np.random.default_rng(1)
  leaves = [a + 0.3 * rng.standard_normal(a.shape).astype(np.float32) for a in leaves]
  return jax.tree_util.tree_unflatten(tree, leaves)


@pytest.fixture(scope="module")
def tokens():
  return np.random.default_rng(2).integers(0, CONFIG.vocab_size, (2, L)).astype(np.int32)


@pytest.fixture(scope="module")
def full(params, tokens):
  return models.forward(params, tokens, CONFIG)


def _np_gelu_new(x):
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _np_ln(x, w, b, eps):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * w + b


def test_first_layer_and_logits_match_numpy_reimplementation(params, tokens, full):
  """A float64 NumPy GPT-2 written from the checkpoint tensors (picoGPT style).

  Tolerance 1e-4: float32 forward vs float64 reference, outputs O(1)-O(10).
  """
  flat = {k: np.asarray(v, np.float64) for k, v in model_lib.params_to_flat(params,
                                                                         CONFIG).items()}
  eps, nh, dh = CONFIG.layer_norm_epsilon, CONFIG.n_head, CONFIG.d_head
  h = flat["wte.weight"][tokens] + flat["wpe.weight"][:L]
  causal = np.tril(np.ones((L, L), bool))
  for i in range(CONFIG.n_layer):
    g = lambda n: flat[f"h.{i}.{n}"]
    x = _np_ln(h, g("ln_1.weight"), g("ln_1.bias"), eps)
    qkv = x @ g("attn.c_attn.weight") + g("attn.c_attn.bias")
    q, k, v = [t.reshape(2, L, nh, dh).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, -1)]
    s = q @ k.transpose(0, 1, 3, 2)
    z = np.where(causal, s / math.sqrt(dh), -np.inf)
    w = np.exp(z - z.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(full.attn.scores[i], s, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(full.attn.weights[i], w, atol=1e-5)
    np.testing.assert_allclose(full.attn.v[i], v, atol=1e-4, rtol=1e-4)
    a = (w @ v).transpose(0, 2, 1, 3).reshape(2, L, -1)
    h = h + a @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
    m = _np_ln(h, g("ln_2.weight"), g("ln_2.bias"), eps)
    m = _np_gelu_new(m @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"))
    h = h + m @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
  logits = _np_ln(h, flat["ln_f.weight"], flat["ln_f.bias"], eps) @ flat["wte.weight"].T
  np.testing.assert_allclose(full.logits, logits, atol=1e-4, rtol=1e-4)


def test_masked_weights_exactly_zero_and_rows_sum_to_one(full):
  w = np.asarray(full.attn.weights)  # (n_layer, B, H, L, L)
  upper = ~np.tril(np.ones((L, L), bool))
  assert np.all(w[..., upper] == 0.0)
  np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)  # float32 sum of ≤ 12 terms


def test_temperature_sqrt_dhead_equals_default(params, tokens, full):
  out = models.forward(params, tokens, CONFIG, temperature=math.sqrt(CONFIG.d_head))
  chex.assert_trees_all_equal(out.logits, full.logits)
  chex.assert_trees_all_equal(out.attn.weights, full.attn.weights)


def test_temperature_rescales_first_layer_logits(params, tokens, full):
  """Layer 0 sees the same input at any T, so its weights are softmax(scores / T)."""
  t = 0.37
  out = models.forward(params, tokens, CONFIG, temperature=t, layers=[0], lm_head=False)
  s = np.asarray(full.attn.scores[0], np.float64)
  z = np.where(np.tril(np.ones((L, L), bool)), s / t, -np.inf)
  w = np.exp(z - z.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  np.testing.assert_allclose(out.attn.weights[0], w, atol=1e-5)  # float32 vs float64 softmax
  assert not np.allclose(out.attn.weights[0], full.attn.weights[0], atol=1e-3)


def test_normalizer_receives_causal_mask_and_masked_output_is_zeroed(params, tokens):
  seen = {}

  def uniform_everywhere(logits, mask):
    seen["mask"], seen["shape"] = mask, logits.shape
    return jnp.full(logits.shape, 1.0 / logits.shape[-1], logits.dtype)  # ignores the mask

  out = models.forward(params, tokens, CONFIG, normalizer=uniform_everywhere, layers=[1],
                     lm_head=False)
  assert seen["shape"] == (2, CONFIG.n_head, L, L)
  w = np.asarray(out.attn.weights[0])
  assert np.all(w[..., ~np.tril(np.ones((L, L), bool))] == 0)
  np.testing.assert_allclose(w[..., np.tril(np.ones((L, L), bool))], 1.0 / L)


def test_layers_option_selects_records_and_stops_early(params, tokens, full):
  out = models.forward(params, tokens, CONFIG, layers=[2, 0], lm_head=False)
  assert out.logits is None
  for j, i in enumerate([0, 2]):  # increasing layer order
    np.testing.assert_allclose(out.attn.weights[j], full.attn.weights[i], atol=1e-6)
    np.testing.assert_allclose(out.attn.q[j], full.attn.q[i], atol=1e-6)
  last = models.forward(params, tokens, CONFIG, layers=-1)
  np.testing.assert_allclose(last.attn.scores[0], full.attn.scores[-1], atol=1e-5)
  np.testing.assert_allclose(last.logits, full.logits, atol=1e-5)
  none = models.forward(params, tokens, CONFIG, layers=())
  assert none.attn is None
  np.testing.assert_allclose(none.logits, full.logits, atol=1e-5)


def _column_mass(rec):
  return {"mass": rec.weights.sum(axis=-2), "qnorm": jnp.linalg.norm(rec.q, axis=-1)}


def test_record_fn_streams_reduction_equal_to_full_records(params, tokens, full):
  # Tolerance 1e-5: same float32 ops compiled in a different program (fusion may reorder).
  out = models.forward(params, tokens, CONFIG, record_fn=_column_mass)
  assert out.attn["mass"].shape == (CONFIG.n_layer, 2, CONFIG.n_head, L)
  np.testing.assert_allclose(out.attn["mass"], np.asarray(full.attn.weights).sum(-2), atol=1e-5)
  np.testing.assert_allclose(out.attn["qnorm"], np.linalg.norm(full.attn.q, axis=-1),
                             atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(out.logits, full.logits, atol=1e-5)


def _lxl_arrays():
  gc.collect()
  return {id(a): a for a in jax.live_arrays() if a.shape == (2, CONFIG.n_head, L, L)}


@pytest.mark.parametrize("ahead", [False, True])
def test_iter_layers_matches_forward_and_holds_one_layer(params, tokens, full, ahead):
  # The gc.collect() before each count scans only what this test creates (frozen_heap: in a
  # pytest worker that ran many tests first, each full collection took ~1 s: 7.6 and 7.1 s
  # for the two cases in the default suite against 0.7 and 0.4 s alone, 2026-12-07).
  with frozen_heap():
    before = _lxl_arrays()
    seen, prev = [], None
    for i, rec in models.iter_layers(params, tokens, CONFIG, ahead=ahead):
      seen.append(i)
      # While the caller holds this record, the only new (B, H, L, L) arrays alive are its own
      # scores and weights, and with ``ahead`` the next layer's (dispatched, not yet yielded):
      # no other layer's L×L arrays are kept by the generator.
      new = set(_lxl_arrays()) - set(before) - {id(rec.scores), id(rec.weights)}
      assert len(new) == (2 if ahead and i < CONFIG.n_layer - 1 else 0), (i, len(new))
      assert rec.window is None and full.attn.window is None  # GPT-2 has no sliding windows
      for name in (f for f in rec._fields if f != "window"):
        # Same float32 ops, compiled as one step instead of inside a scan: 1e-5.
        np.testing.assert_allclose(getattr(rec, name), getattr(full.attn, name)[i], atol=1e-5,
                                   rtol=1e-5, err_msg=f"layer {i} {name}")
      if prev is not None:  # the previous layer's records were released by the generator (a
        gc.collect()  # weak reference: an id could be reused by a new array at the same address)
        assert prev() is None, i
      prev = weakref.ref(rec.weights)
      del rec
    assert seen == [0, 1, 2]
    sub = [i for i, _ in models.iter_layers(params, tokens, CONFIG, layers=[1], ahead=ahead)]
    assert sub == [1]


def test_iter_layers_ahead_same_records_and_default_by_size(params, tokens, monkeypatch):
  """``ahead`` changes when layer i+1 is dispatched, not what it computes: bit-identical
  records; by default it is on exactly when one layer's (H, L, L) weights and scores fit
  ``AHEAD_BYTES`` (both sides of the boundary), seen from the order of dispatches and
  yields."""
  plain = [(i, {f: np.asarray(getattr(r, f)) for f in r._fields if f != "window"})
           for i, r in models.iter_layers(params, tokens, CONFIG, ahead=False)]
  early = [(i, {f: np.asarray(getattr(r, f)) for f in r._fields if f != "window"})
           for i, r in models.iter_layers(params, tokens, CONFIG, ahead=True)]
  assert [i for i, _ in plain] == [i for i, _ in early]
  for (i, a), (_, b) in zip(plain, early):
    for f in a:
      np.testing.assert_array_equal(a[f], b[f], err_msg=f"layer {i} {f}")

  log = []
  step = engine._layer_step

  def logged(*args, **kwargs):
    log.append(("step", int(args[1])))
    return step(*args, **kwargs)

  monkeypatch.setattr(engine, "_layer_step", logged)
  need = engine.record_bytes(CONFIG, L) * tokens.shape[0]
  for limit, ahead in ((need, True), (need - 1, False)):
    monkeypatch.setattr(engine, "AHEAD_BYTES", limit)
    log.clear()
    for i, _ in models.iter_layers(params, tokens, CONFIG):
      log.append(("yield", i))
    if ahead:  # layer i+1 dispatched before layer i is yielded
      want = [("step", 0), ("step", 1), ("yield", 0), ("step", 2), ("yield", 1), ("yield", 2)]
    else:
      want = [("step", 0), ("yield", 0), ("step", 1), ("yield", 1), ("step", 2), ("yield", 2)]
    assert log == want, (limit, log)


@pytest.mark.parametrize("name", ["softmax", "sparsemax", "entmax"])
def test_extreme_temperature_and_large_weights_stay_finite(name):
  """T = 1e-4 and logits of order ±1e4 or more: forward and gradients finite, masked weights 0."""
  from limits import normalizers

  cfg = gpt2.Config(n_layer=1, n_head=2, n_embd=8, n_positions=8, vocab_size=11)
  p = gpt2.init_params(jax.random.key(0), cfg)
  p["h"]["attn"]["c_attn"]["weight"] = p["h"]["attn"]["c_attn"]["weight"] * 50.0
  toks = np.array([[1, 5, 5, 2, 9, 0]], np.int32)
  norm = None if name == "softmax" else normalizers.get(name)

  @jax.jit
  def run(p):
    def loss(p):
      out = models.forward(p, toks, cfg, normalizer=norm, temperature=1e-4)
      return jnp.mean(out.logits) + jnp.mean(out.attn.weights ** 2), out
    return jax.value_and_grad(loss, has_aux=True)(p)

  (value, out), grads = run(p)
  assert float(jnp.max(jnp.abs(out.attn.scores))) > 1.0  # so |scores / 1e-4| > 1e4
  assert np.isfinite(float(value))
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))
  w = np.asarray(out.attn.weights)
  assert np.all(w[..., ~np.tril(np.ones((6, 6), bool))] == 0)
  # Rows sum to 1 up to float32 resolution: softmax sums ≤ 6 terms in [0, 1] (1e-5); the
  # sparse maps compute z_i − τ at |z| = max|logits|, whose float32 spacing times L bounds the
  # error (about 1e-2 at |z| ~ 1e5; inherent to float32, not a bug).
  zmax = float(jnp.max(jnp.abs(out.attn.scores))) / 1e-4
  tol = 1e-5 if name == "softmax" else max(1e-5, 6 * 4 * float(np.spacing(np.float32(zmax))))
  np.testing.assert_allclose(w.sum(-1), 1.0, atol=tol)


def test_jit_takes_params_as_arguments_no_recompile(params, tokens):
  models.forward(params, tokens, CONFIG)
  before = engine._forward._cache_size()
  other = gpt2.init_params(jax.random.key(9), CONFIG)
  a = models.forward(other, tokens, CONFIG).logits
  b = models.forward(params, tokens, CONFIG).logits
  assert engine._forward._cache_size() == before
  assert not np.allclose(a, b)


def test_init_params_shapes_and_statistics():
  cfg = gpt2.Config(n_layer=4, n_head=2, n_embd=64, n_positions=16, vocab_size=300)
  p = gpt2.init_params(jax.random.key(0), cfg)
  gpt2.check_params(p, cfg)
  # Standard deviations of ≥ 16k samples: relative standard error < 1%, so 5% is ~5 sigma.
  np.testing.assert_allclose(np.std(p["h"]["attn"]["c_attn"]["weight"]), 0.02, rtol=0.05)
  np.testing.assert_allclose(np.std(p["h"]["mlp"]["c_proj"]["weight"]),
                             0.02 / math.sqrt(2 * 4), rtol=0.05)
  assert np.all(np.asarray(p["h"]["ln_1"]["weight"]) == 1)
  assert np.all(np.asarray(p["h"]["attn"]["c_attn"]["bias"]) == 0)
  q = gpt2.init_params(jax.random.key(0), cfg)
  r = gpt2.init_params(jax.random.key(1), cfg)
  np.testing.assert_array_equal(p["wte"]["weight"], q["wte"]["weight"])  # deterministic
  assert not np.allclose(p["wte"]["weight"], r["wte"]["weight"])


@pytest.mark.parametrize("kwargs,match", [
    (dict(tokens=np.zeros((3,), np.int32)), "shape"),
    (dict(tokens=np.zeros((1, 25), np.int32)), "n_positions"),
    (dict(tokens=np.full((1, 4), 40, np.int32)), "vocab_size"),
    (dict(tokens=np.zeros((1, 4), np.float32)), "integers"),
    (dict(temperature=0.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(layers=[3]), "out of range"),
    (dict(layers=["a"]), "integers"),
])
def test_bad_arguments_raise_limits_error(params, kwargs, match):
  args = dict(tokens=np.zeros((1, 4), np.int32))
  args.update(kwargs)
  tokens = args.pop("tokens")
  with pytest.raises(LimitsError, match=match):
    models.forward(params, tokens, CONFIG, **args)
  with pytest.raises(LimitsError, match=match):
    list(models.iter_layers(params, tokens, CONFIG, **args))


@pytest.mark.parametrize("hf,match", [
    ({"model_type": "llama"}, "unknown architecture"),
    ({"architectures": ["BertModel"]}, "GPT2"),
    ({"model_type": "gpt2", "n_embd": 10, "n_head": 3}, "divisible"),
    ({"model_type": "gpt2", "activation_function": "tanh"}, "activation"),
    ({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": True}, "inverse_layer_idx"),
    ({"model_type": "gpt2", "n_layer": 0}, "n_layer"),
])
def test_config_from_hf_rejects(hf, match):
  with pytest.raises(LimitsError, match=match):
    gpt2.Config.from_hf(hf)


def test_config_round_trip_and_defaults():
  cfg = gpt2.Config(n_layer=2, n_head=3, n_embd=48, n_positions=64, vocab_size=99,
                    layer_norm_epsilon=1e-6, activation="gelu", n_inner=100)
  assert gpt2.Config.from_hf(cfg.to_hf()) == cfg
  small = gpt2.Config.from_hf({"model_type": "gpt2"})  # HF GPT2Config defaults: GPT-2 124M
  assert (small.n_layer, small.n_head, small.n_embd, small.d_head) == (12, 12, 768, 64)
