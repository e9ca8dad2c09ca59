"""Checkpoint loading and saving: every accepted layout and every refused or broken file.

Accepted layouts are checked by round trip against the parameters that were written (exact
equality: loading is a copy, no arithmetic). Each bad case is written into a tmp directory and
must raise one LimitsError whose one-line message names the file and the problem.
"""

import json
import pathlib
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from limits.models import gpt2
from limits.errors import LimitsError
from limits.models.gpt2 import model as model_lib

CONFIG = gpt2.Config(n_layer=2, n_head=2, n_embd=8, n_positions=16, vocab_size=20)


@pytest.fixture(scope="module")
def params():
  leaves, tree = jax.tree_util.tree_flatten(gpt2.init_params(jax.random.key(0), CONFIG))
  rng = np.random.default_rng(0)  # non-trivial biases / gains so a mix-up would show
  return jax.tree_util.tree_unflatten(
      tree, [a + 0.1 * rng.standard_normal(a.shape).astype(np.float32) for a in leaves])


@pytest.fixture()
def saved(tmp_path, params):
  return gpt2.save(tmp_path / "model", CONFIG, params)


def _assert_same(a, b):
  fa, fb = model_lib.params_to_flat(a, CONFIG), model_lib.params_to_flat(b, CONFIG)
  assert fa.keys() == fb.keys()
  for k in fa:
    np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)


def _one_line(excinfo):
  msg = str(excinfo.value)
  assert "\n" not in msg and msg
  return msg


def _rewrite(path, fn):
  tensors = load_file(str(path / "model.safetensors"))
  save_file(fn(tensors), str(path / "model.safetensors"), metadata={"format": "pt"})


# ----------------------------------------------------------------------------------------------
# Accepted layouts.

def test_save_load_round_trip(saved, params):
  config, loaded = gpt2.load(saved)
  assert config == CONFIG
  _assert_same(loaded, params)
  names = set(load_file(str(saved / "model.safetensors")))
  assert names == {"transformer." + n for n in model_lib.checkpoint_shapes(CONFIG)}
  assert json.loads((saved / "config.json").read_text())["model_type"] == "gpt2"


def test_load_weight_file_path(saved, params):
  _, loaded = gpt2.load(saved / "model.safetensors")
  _assert_same(loaded, params)


def test_keys_without_prefix_with_buffers_and_stored_tied_head(saved, params):
  def strip(t):
    out = {k[len("transformer."):]: v for k, v in t.items()}
    out["lm_head.weight"] = out["wte.weight"].copy()
    for i in range(CONFIG.n_layer):
      out[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
      out[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    return out
  _rewrite(saved, strip)
  _, loaded = gpt2.load(saved)
  _assert_same(loaded, params)


def test_float16_and_bfloat16_weights_load_as_float32(saved, params):
  import ml_dtypes

  for dt in (np.float16, ml_dtypes.bfloat16):
    gpt2.save(saved, CONFIG, params)  # fresh float32 file each time (no double rounding)
    _rewrite(saved, lambda t: {k: v.astype(dt) for k, v in t.items()})
    _, loaded = gpt2.load(saved)
    want = jax.tree_util.tree_map(lambda a: np.asarray(a).astype(dt).astype(np.float32), params)
    _assert_same(loaded, want)
    assert loaded["wte"]["weight"].dtype == np.float32


def test_sharded_safetensors_with_index(saved, params):
  tensors = load_file(str(saved / "model.safetensors"))
  (saved / "model.safetensors").unlink()
  names = sorted(tensors)
  halves = {"model-00001-of-00002.safetensors": names[::2],
            "model-00002-of-00002.safetensors": names[1::2]}
  weight_map = {}
  for file, keys in halves.items():
    save_file({k: tensors[k] for k in keys}, str(saved / file), metadata={"format": "pt"})
    weight_map.update({k: file for k in keys})
  (saved / "model.safetensors.index.json").write_text(
      json.dumps({"metadata": {}, "weight_map": weight_map}))
  _, loaded = gpt2.load(saved)
  _assert_same(loaded, params)
  (saved / "model-00002-of-00002.safetensors").unlink()
  with pytest.raises(LimitsError, match="model-00002-of-00002.safetensors.*missing") as e:
    gpt2.load(saved)
  _one_line(e)


def _flax_state(params):
  """HF Flax GPT-2 layout (as FlaxGPT2LMHeadModel.save_pretrained writes; checked against HF
  itself in test_flax_msgpack_written_by_hf): Conv1D kernels (out, in), `scale`, `embedding`."""
  flat = model_lib.params_to_flat(params, CONFIG)
  state = {}
  for name, value in flat.items():
    parts = name.split(".")
    leaf = parts[-1]
    if parts[0] in ("wte", "wpe"):
      parts[-1] = "embedding"
    elif parts[-2].startswith("ln_"):
      parts[-1] = "scale" if leaf == "weight" else "bias"
    elif leaf == "weight":
      parts[-1], value = "kernel", value.T
    node = state.setdefault("transformer", {})
    for p in parts[:-1]:
      node = node.setdefault(p, {})
    node[parts[-1]] = value
  return state


def test_flax_msgpack(tmp_path, saved, params):
  from flax import serialization

  d = tmp_path / "flax"
  d.mkdir()
  shutil.copy(saved / "config.json", d / "config.json")
  (d / "flax_model.msgpack").write_bytes(serialization.msgpack_serialize(_flax_state(params)))
  _, loaded = gpt2.load(d)
  _assert_same(loaded, params)
  data = (d / "flax_model.msgpack").read_bytes()
  (d / "flax_model.msgpack").write_bytes(data[: len(data) // 2])
  with pytest.raises(LimitsError, match="flax_model.msgpack.*corrupt or truncated") as e:
    gpt2.load(d)
  _one_line(e)


DATA = pathlib.Path(__file__).parent / "data"


def test_flax_msgpack_written_by_hf():
  """A flax_model.msgpack written by HF's own Flax GPT-2 (transformers 4.57.3; transformers 5
  has no Flax classes, so the file is kept in tests/data, see its README) loads to exactly the
  weights HF's PyTorch GPT-2 wrote to model.safetensors in the same session."""
  config_f, flax = gpt2.load(DATA / "hf_gpt2_tiny_flax")
  config_s, pt = gpt2.load(DATA / "hf_gpt2_tiny_safetensors")
  assert config_f == config_s and config_f.n_layer == 2 and config_f.n_embd == 32
  fa, fb = (model_lib.params_to_flat(x, config_f) for x in (flax, pt))
  assert fa.keys() == fb.keys() and len(fa) > 10
  for k in fa:
    np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)


def test_name_resolved_from_local_hf_cache(tmp_path, saved, params, monkeypatch):
  cache = tmp_path / "hub"
  snap = cache / "models--openai-community--gpt2" / "snapshots" / "abc123"
  snap.parent.mkdir(parents=True)
  shutil.copytree(saved, snap)
  (cache / "models--openai-community--gpt2" / "refs").mkdir()
  (cache / "models--openai-community--gpt2" / "refs" / "main").write_text("abc123")
  monkeypatch.setenv("HF_HUB_CACHE", str(cache))
  monkeypatch.chdir(tmp_path)  # a relative "gpt2" must not exist as a path
  _, loaded = gpt2.load("gpt2")
  _assert_same(loaded, params)


def test_name_not_in_cache_says_where_it_looked(tmp_path, monkeypatch):
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_hub"))
  monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
  monkeypatch.chdir(tmp_path)
  with pytest.raises(LimitsError) as e:
    gpt2.load("gpt2-medium")
  msg = _one_line(e)
  assert "empty_hub" in msg and "hf_home" in msg and "hf download" in msg


# ----------------------------------------------------------------------------------------------
# Refused and broken checkpoints: one LimitsError each, naming the file and the problem.

@pytest.mark.parametrize("filename", ["pytorch_model.bin", "model.pt", "weights.pth",
                                      "last.ckpt", "params.pkl"])
def test_pickle_checkpoint_refused_when_alone(tmp_path, saved, filename):
  d = tmp_path / "pickled"
  d.mkdir()
  shutil.copy(saved / "config.json", d / "config.json")
  (d / filename).write_bytes(b"\x80\x04\x95 not really a pickle")
  for target in (d, d / filename):
    with pytest.raises(LimitsError, match="pickle") as e:
      gpt2.load(target)
    msg = _one_line(e)
    assert filename in msg and "safetensors" in msg


def test_pickle_file_alone_without_config_refused(tmp_path):
  (tmp_path / "pytorch_model.bin").write_bytes(b"x")
  with pytest.raises(LimitsError, match="refusing pickle checkpoint .*pytorch_model.bin") as e:
    gpt2.load(tmp_path / "pytorch_model.bin")
  _one_line(e)


def test_safetensors_preferred_over_pickle_in_same_dir(saved, params):
  (saved / "pytorch_model.bin").write_bytes(b"never read")
  _, loaded = gpt2.load(saved)
  _assert_same(loaded, params)


def _bad(saved, match):
  with pytest.raises(LimitsError, match=match) as e:
    gpt2.load(saved)
  return _one_line(e)


def test_non_finite_weight(saved):
  def poison(t):
    t["transformer.h.1.mlp.c_fc.weight"][0, 0] = np.nan
    return t
  _rewrite(saved, poison)
  msg = _bad(saved, "non-finite")
  assert "h.1.mlp.c_fc.weight" in msg and "model.safetensors" in msg


def test_inf_weight(saved):
  def poison(t):
    t["transformer.wpe.weight"][3, 1] = np.inf
    return t
  _rewrite(saved, poison)
  assert "wpe.weight" in _bad(saved, "non-finite")


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_truncated_safetensors(saved, cut):
  path = saved / "model.safetensors"
  data = path.read_bytes()
  path.write_bytes(data[: int(len(data) * cut)])
  assert "model.safetensors" in _bad(saved, "corrupt or truncated")


def test_garbage_safetensors(saved):
  (saved / "model.safetensors").write_bytes(b"\x00" * 7)
  _bad(saved, "corrupt or truncated")


def test_missing_tensor(saved):
  def drop(t):
    del t["transformer.h.1.ln_2.bias"]
    return t
  _rewrite(saved, drop)
  assert "h.1.ln_2.bias" in _bad(saved, "missing tensors")


def test_wrong_shape(saved):
  def reshape(t):
    t["transformer.h.0.attn.c_attn.weight"] = np.zeros((8, 20), np.float32)
    return t
  _rewrite(saved, reshape)
  assert "(8, 20)" in _bad(saved, r"h.0.attn.c_attn.weight has shape")


def test_config_does_not_match_weights(saved):
  cfg = json.loads((saved / "config.json").read_text())
  cfg["n_layer"] = 1
  (saved / "config.json").write_text(json.dumps(cfg))
  assert "h.1." in _bad(saved, "unexpected tensors")
  cfg["n_layer"] = 3
  (saved / "config.json").write_text(json.dumps(cfg))
  assert "h.2." in _bad(saved, "missing tensors")


def test_unknown_architecture(saved):
  cfg = json.loads((saved / "config.json").read_text())
  cfg["model_type"] = "bert"
  (saved / "config.json").write_text(json.dumps(cfg))
  assert "config.json" in _bad(saved, "unknown architecture")


def test_bad_or_missing_config(saved):
  (saved / "config.json").write_text("{not json")
  assert "config.json" in _bad(saved, "not valid JSON")
  (saved / "config.json").unlink()
  _bad(saved, "config.json is missing")


def test_missing_weights_empty_dir_and_no_such_path(tmp_path, saved):
  (saved / "model.safetensors").unlink()
  _bad(saved, "no model.safetensors")
  (tmp_path / "empty").mkdir()
  _bad(tmp_path / "empty", "empty")
  _bad(tmp_path / "nope" / "model", "not found")


def test_non_weight_file_refused(saved):
  _bad(saved / "config.json", "not a GPT-2 weight file")


def test_save_checks_params(tmp_path, params):
  bad = jax.tree_util.tree_map(lambda a: a, params)
  bad["ln_f"]["bias"] = bad["ln_f"]["bias"][:3]
  with pytest.raises(LimitsError, match="ln_f.bias has shape"):
    gpt2.save(tmp_path / "x", CONFIG, bad)
