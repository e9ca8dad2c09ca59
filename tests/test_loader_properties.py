"""Property tests of the loaders (issue 30, item 7): absurd config.json files and GGUF headers.

Hypothesis starts from a valid GPT-2 / Llama config.json or GGUF header and replaces or drops
fields with values of every JSON / GGUF type (wrong types, missing keys, zero, negative and
huge sizes, non-dividing head counts, NaN and inf). Every outcome must be either a loaded
model whose config equals what the file says (no silent conversion, checked field by field
against an independent predicate of validity) or one ``LimitsError`` whose message is one line;
any other exception fails the test. Loading the weights runs under ``tracemalloc``: the peak of
Python/NumPy allocations stays below a bound set by the weight file's own size, so a config
that declares 10^12 of anything is refused before anything that size is built.

Fast by design: tiny models, no forward pass, no JAX compile; ``max_examples`` modest.
"""

import itertools
import json
import math
import shutil
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from limits import models
from limits.models import gpt2
from limits.errors import LimitsError
from limits.models.gpt2.config import Config as Gpt2Config
from limits.models.llama.config import Config as LlamaConfig
from tests.test_models_loading import CONFIG as LLAMA_CONFIG
from tests.test_models_loading import _flat as llama_flat
from tests.test_models_loading import add_llama_tensors

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HUGE = 10 ** 12
_counter = itertools.count()

# Values a hand-edited or hostile file may hold: every JSON type, extreme numbers, NaN.
ANY_JSON = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, -1, -64, 1, 2, 3, 7, 64, HUGE, 2 ** 63, 2 ** 80]),
    st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.sampled_from([0.0, -1.0, 0.5, 2.0, 64.0, math.nan, math.inf, -math.inf, 1e300]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "64", "false", "true", "gelu_new", "silu", "nan"]),
    st.lists(st.integers(min_value=-3, max_value=100), max_size=3),
    st.dictionaries(st.sampled_from(["type", "factor"]), st.integers(), max_size=2))


def _one_line(e: LimitsError) -> str:
  msg = str(e)
  assert msg and "\n" not in msg, msg
  return msg


def _mutated(base: dict, data) -> dict:
  """``base`` with some keys dropped and some replaced by ``ANY_JSON`` values."""
  out = dict(base)
  keys = data.draw(st.lists(st.sampled_from(sorted(base)), max_size=4, unique=True))
  for key in keys:
    if data.draw(st.booleans()):
      del out[key]
    else:
      out[key] = data.draw(ANY_JSON)
  return out


def _pos_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _pos_num(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _given(hf, key, default):
  """What the file says for ``key`` (HF default when absent or null)."""
  return default if hf.get(key) is None else hf[key]


# ----------------------------------------------------------------------------------------------
# config.json alone (both families): Config.from_hf.

GPT2_BASE = Gpt2Config(n_layer=1, n_head=2, n_embd=8, n_positions=16, vocab_size=20).to_hf()
LLAMA_BASE = LLAMA_CONFIG.to_hf()


def _check_gpt2(hf, config):
  """Independent validity of a GPT-2 config.json that loaded: fields equal the file's."""
  defaults = dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
  for key, default in defaults.items():
    value = _given(hf, key, default)
    assert _pos_int(value) and getattr(config, key) == value, key
  assert config.n_embd % config.n_head == 0
  eps = _given(hf, "layer_norm_epsilon", 1e-5)
  assert _pos_num(eps) and config.layer_norm_epsilon == eps
  assert config.tie_word_embeddings is _given(hf, "tie_word_embeddings", True)
  assert hf.get("n_inner") is None or (_pos_int(hf["n_inner"])
                                       and config.d_mlp == hf["n_inner"])
  assert config.activation == _given(hf, "activation_function", "gelu_new")


def _check_llama(hf, config):
  defaults = dict(num_hidden_layers=("n_layer", 32), num_attention_heads=("n_head", 32),
                  hidden_size=("n_embd", 4096), intermediate_size=("d_mlp", 11008),
                  max_position_embeddings=("n_positions", 2048), vocab_size=("vocab_size", 32000))
  for key, (attr, default) in defaults.items():
    value = _given(hf, key, default)
    assert _pos_int(value) and getattr(config, attr) == value, key
  n_kv = _given(hf, "num_key_value_heads", config.n_head)
  assert _pos_int(n_kv) and config.n_kv_head == n_kv and config.n_head % n_kv == 0
  head_dim = hf.get("head_dim")
  if head_dim is None:
    assert config.n_embd % config.n_head == 0
  else:
    assert _pos_int(head_dim) and head_dim % 2 == 0 and config.d_head == head_dim
  for key, attr, default in (("rms_norm_eps", "rms_norm_eps", 1e-6),
                             ("rope_theta", "rope_theta", 10000.0)):
    value = _given(hf, key, default)
    assert _pos_num(value) and getattr(config, attr) == value, key
  assert config.tie_word_embeddings is _given(hf, "tie_word_embeddings", False)
  assert hf.get("mlp_bias") in (None, False)
  bias = hf.get("attention_bias") in (True,)  # q, k, v and o biases (HF LlamaAttention)
  assert config.qkv_bias is bias and config.o_bias is bias


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@SETTINGS
@given(data=st.data())
def test_config_json_is_a_config_equal_to_the_file_or_one_line(family, data):
  base, cls, check = ((GPT2_BASE, Gpt2Config, _check_gpt2) if family == "gpt2"
                      else (LLAMA_BASE, LlamaConfig, _check_llama))
  hf = _mutated(base, data)
  try:
    config = cls.from_hf(hf, source="config.json")
  except LimitsError as e:
    _one_line(e)
    return
  check(hf, config)


@pytest.mark.parametrize("hf, words", [
    ({**GPT2_BASE, "n_head": 3}, "not divisible by n_head=3"),
    ({**GPT2_BASE, "n_layer": 0}, "n_layer=0 must be a positive integer"),
    ({**GPT2_BASE, "n_embd": "8"}, "n_embd='8' must be an integer"),
    ({**GPT2_BASE, "layer_norm_epsilon": math.nan}, "layer_norm_epsilon=nan must be a finite"),
    ({**GPT2_BASE, "layer_norm_epsilon": "1e-5"}, "layer_norm_epsilon='1e-5' must be a finite"),
    ({**GPT2_BASE, "tie_word_embeddings": "false"}, "tie_word_embeddings='false' must be true"),
    ({**LLAMA_BASE, "num_key_value_heads": 0}, "n_kv_head=0 must be a positive integer"),
    ({**LLAMA_BASE, "num_key_value_heads": 3}, "not a multiple of n_kv_head=3"),
    ({**LLAMA_BASE, "rope_theta": [1, 2]}, r"rope_theta=\[1, 2\] must be a finite number"),
    ({**LLAMA_BASE, "vocab_size": list(range(10 ** 4))}, r"vocab_size=\[0, 1, .*\.\.\. must"),
])
def test_named_bad_configs_are_one_line(hf, words):
  cls = Gpt2Config if hf["model_type"] == "gpt2" else LlamaConfig
  with pytest.raises(LimitsError, match=words) as e:
    cls.from_hf(hf, source="config.json")
  assert len(_one_line(e.value)) < 200


# ----------------------------------------------------------------------------------------------
# config.json beside real weights: the whole loader, under tracemalloc.

@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
  import jax

  config = Gpt2Config.from_hf(GPT2_BASE)
  return gpt2.save(tmp_path_factory.mktemp("gpt2") / "m", config,
                   gpt2.init_params(jax.random.key(0), config))


def _load_bounded(spec, weight_bytes):
  """models.load(spec) -> (config, params) or LimitsError; Python/NumPy peak allocation
  below 4 copies of the weight file + 8 MiB (reading, float32 cast, stacking)."""
  tracemalloc.start()
  try:
    return models.load(spec)
  finally:
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * weight_bytes + 8 * 2 ** 20, peak


@SETTINGS
@given(data=st.data())
def test_gpt2_directory_with_any_config_loads_or_is_one_line(gpt2_dir, tmp_path_factory, data):
  directory = tmp_path_factory.mktemp("case")
  shutil.copy(gpt2_dir / "model.safetensors", directory / "model.safetensors")
  hf = _mutated(GPT2_BASE, data)
  if data.draw(st.booleans()):  # often a huge size, the allocation this test watches for
    hf[data.draw(st.sampled_from(["n_layer", "vocab_size", "n_positions", "n_embd"]))] = HUGE
  (directory / "config.json").write_text(json.dumps(hf))
  try:
    config, _ = _load_bounded(directory, (directory / "model.safetensors").stat().st_size)
  except LimitsError as e:
    _one_line(e)
    return
  _check_gpt2(hf, config)
  assert config.vocab_size == 20 and config.n_embd == 8  # only the file's own shapes load


@pytest.mark.parametrize("key", ["n_layer", "vocab_size", "n_positions", "n_embd", "n_inner"])
def test_huge_gpt2_size_is_refused_without_allocating(gpt2_dir, tmp_path, key):
  shutil.copy(gpt2_dir / "model.safetensors", tmp_path / "model.safetensors")
  hf = {**GPT2_BASE, key: HUGE}
  if key == "n_embd":
    hf["n_head"] = 1
  (tmp_path / "config.json").write_text(json.dumps(hf))
  with pytest.raises(LimitsError, match="(config does not match|shape)") as e:
    _load_bounded(tmp_path, (tmp_path / "model.safetensors").stat().st_size)
  _one_line(e.value)


# ----------------------------------------------------------------------------------------------
# GGUF headers, written with the gguf package's GGUFWriter.

# llama.* keys -> the valid value of the test model (uint32 / float32 in a real file).
GGUF_BASE = {"block_count": LLAMA_CONFIG.n_layer, "context_length": LLAMA_CONFIG.n_positions,
             "embedding_length": LLAMA_CONFIG.n_embd,
             "feed_forward_length": LLAMA_CONFIG.d_mlp,
             "attention.head_count": LLAMA_CONFIG.n_head,
             "attention.head_count_kv": LLAMA_CONFIG.n_kv_head,
             "vocab_size": LLAMA_CONFIG.vocab_size, "rope.freq_base": LLAMA_CONFIG.rope_theta,
             "attention.layer_norm_rms_epsilon": LLAMA_CONFIG.rms_norm_eps}
# (writer method, strategy of values it can store)
GGUF_VALUES = st.one_of(
    st.tuples(st.just("add_uint32"), st.sampled_from([0, 1, 2, 3, 7, 16, 64, 2 ** 32 - 1])),
    st.tuples(st.just("add_int32"), st.sampled_from([-1, -64, 0])),
    st.tuples(st.just("add_uint64"), st.sampled_from([HUGE, 2 ** 64 - 1])),
    st.tuples(st.just("add_float32"), st.sampled_from([math.nan, math.inf, -1.0, 0.0, 64.0])),
    st.tuples(st.just("add_string"), st.sampled_from(["", "64", "llama"])),
    st.tuples(st.just("add_bool"), st.booleans()),
    st.tuples(st.just("add_array"), st.lists(st.integers(0, 64), min_size=1, max_size=3)))


@pytest.fixture(scope="module")
def llama_tensors():
  return llama_flat()[1]


def _write_gguf(path, header: dict, flat) -> None:
  """A GGUF with ``header`` ({llama.* key: (writer method, value)}) and the test model's
  tensors (``add_llama_tensors``)."""
  import gguf

  w = gguf.GGUFWriter(str(path), "llama")
  for key, (method, value) in header.items():
    getattr(w, method)(f"llama.{key}", value)
  add_llama_tensors(w, LLAMA_CONFIG, flat)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()


def _valid_header():
  return {k: ("add_float32" if isinstance(v, float) else "add_uint32", v)
          for k, v in GGUF_BASE.items()}


def test_gguf_writer_helper_round_trips(tmp_path, llama_tensors):
  """The unmutated header loads to the test model (the property test's base case is valid)."""
  path = tmp_path / "base.gguf"
  _write_gguf(path, _valid_header(), llama_tensors)
  config, params = models.load(path)
  assert config == LLAMA_CONFIG
  np.testing.assert_array_equal(params["layers"]["self_attn"]["q_proj"]["weight"][1],
                                llama_tensors["layers.1.self_attn.q_proj.weight"])


@SETTINGS
@given(data=st.data())
def test_gguf_with_any_header_loads_or_is_one_line(tmp_path_factory, llama_tensors, data):
  header = _valid_header()
  for key in data.draw(st.lists(st.sampled_from(sorted(GGUF_BASE) + ["attention.key_length",
                                                                     "rope.dimension_count"]),
                                max_size=3, unique=True)):
    if key in header and data.draw(st.booleans()):
      del header[key]
    else:
      header[key] = data.draw(GGUF_VALUES)
  path = tmp_path_factory.mktemp("gguf") / f"m{next(_counter)}.gguf"
  _write_gguf(path, header, llama_tensors)
  try:
    config, _ = _load_bounded(path, path.stat().st_size)
  except LimitsError as e:
    _one_line(e)
    return
  # Loaded: every header value is a positive integer / finite positive number that matches.
  values = {k: v for k, (_, v) in header.items()}
  assert config.n_layer == values["block_count"] and config.n_embd == values["embedding_length"]
  assert config.n_head == values["attention.head_count"] and _pos_int(config.n_head)
  assert config.n_kv_head == values.get("attention.head_count_kv", config.n_head)
  assert config.vocab_size == values["vocab_size"] and config.d_mlp == values["feed_forward_length"]
  assert all(_pos_num(getattr(config, a)) for a in ("rms_norm_eps", "rope_theta"))
  assert config.d_head * config.n_head == LLAMA_CONFIG.d_head * LLAMA_CONFIG.n_head


@pytest.mark.parametrize("key, method, value, words", [
    ("attention.head_count", "add_uint32", 7, "embedding_length=64 is not divisible by "
                                              "llama.attention.head_count=7"),
    ("attention.head_count", "add_uint32", 0, "head_count=0 must be a positive integer"),
    ("embedding_length", "add_int32", -64, "embedding_length=-64 must be a positive integer"),
    ("attention.head_count", "add_array", [4, 4], r"head_count=\[4, 4\] must be an integer"),
    ("block_count", "add_string", "2", "block_count='2' must be an integer"),
    ("block_count", "add_uint64", HUGE, "n_layer=1000000000000 but the file holds only"),
    ("vocab_size", "add_uint64", HUGE, "token_embd|embed_tokens.weight has shape"),
    ("rope.freq_base", "add_float32", math.nan, "freq_base=nan must be a finite number"),
    ("attention.layer_norm_rms_epsilon", "add_float32", -1.0, "rms_norm_eps=-1.0 must be"),
])
def test_named_bad_gguf_headers_are_one_line(tmp_path, llama_tensors, key, method, value, words):
  header = {**_valid_header(), key: (method, value)}
  path = tmp_path / "bad.gguf"
  _write_gguf(path, header, llama_tensors)
  with pytest.raises(LimitsError, match=words) as e:
    _load_bounded(path, path.stat().st_size)
  assert str(path) in _one_line(e.value)
