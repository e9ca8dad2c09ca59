"""Weights only from inside ``--model`` (issue 30, item 2).

Each way a checkpoint can reach a file — an index's ``weight_map`` entry (``..``, absolute), a
shard, weight file, index or config.json that is a symlink, a GGUF split file — is tried once
pointing outside the model folder (one LimitsError naming the file and the folder) and once
staying inside it (loads, equal to the weights written). The outside file always holds valid
weights, so only the path check can refuse it.
"""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from limits import models
from limits.models import gpt2
from limits.errors import LimitsError
from limits.models.gpt2 import model as gpt2_model
from tests.test_models_loading import CONFIG as LLAMA_CONFIG
from tests.test_models_loading import _flat as llama_flat
from tests.test_models_loading import _write_llama_gguf

CONFIG = gpt2.Config(n_layer=1, n_head=2, n_embd=8, n_positions=16, vocab_size=20)
LOADERS = {"models.load": models.load, "gpt2.load": gpt2.load}


def _refused(load, spec, match="outside the model folder"):
  with pytest.raises(LimitsError, match=match) as e:
    load(spec)
  msg = str(e.value)
  assert msg and "\n" not in msg, msg
  return msg


@pytest.fixture()
def saved(tmp_path):
  import jax

  params = gpt2.init_params(jax.random.key(0), CONFIG)
  return gpt2.save(tmp_path / "model", CONFIG, params), params


def _same(params, loaded):
  a, b = gpt2_model.params_to_flat(params, CONFIG), gpt2_model.params_to_flat(loaded, CONFIG)
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _index(directory, shard):
  """Replaces model.safetensors by an index whose every tensor lives in ``shard``."""
  tensors = load_file(str(directory / "model.safetensors"))
  (directory / "model.safetensors").unlink()
  (directory / "model.safetensors.index.json").write_text(
      json.dumps({"metadata": {}, "weight_map": {k: shard for k in tensors}}))
  return tensors


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_index_naming_a_file_in_a_sibling_folder_is_refused(tmp_path, saved, loader):
  directory, params = saved
  tensors = _index(directory, "../other/model.safetensors")
  (tmp_path / "other").mkdir()
  save_file(tensors, str(tmp_path / "other" / "model.safetensors"), metadata={"format": "pt"})
  msg = _refused(LOADERS[loader], directory)
  assert "../other/model.safetensors" in msg and "shard named by the index" in msg
  # The same index given as the spec (a file) is refused too.
  _refused(LOADERS[loader], directory / "model.safetensors.index.json")
  # Inside: the shard moved into a subfolder of the model folder loads, equal to what was saved.
  (directory / "sub").mkdir()
  shutil.move(tmp_path / "other" / "model.safetensors", directory / "sub" / "model.safetensors")
  _index_rewrite(directory, "sub/../sub/model.safetensors")
  _, loaded = LOADERS[loader](directory)
  _same(params, loaded)


def _index_rewrite(directory, shard):
  path = directory / "model.safetensors.index.json"
  index = json.loads(path.read_text())
  index["weight_map"] = {k: shard for k in index["weight_map"]}
  path.write_text(json.dumps(index))


def test_index_naming_an_absolute_path_is_refused(tmp_path, saved):
  directory, _ = saved
  tensors = _index(directory, str(tmp_path / "elsewhere.safetensors"))
  save_file(tensors, str(tmp_path / "elsewhere.safetensors"), metadata={"format": "pt"})
  _refused(models.load, directory)
  _refused(gpt2.load, directory)


def _symlink(link, target):
  os.symlink(target, link)  # the suite runs on Linux file systems; a failure here is a failure


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_shard_symlink_pointing_out_is_refused_and_one_pointing_in_loads(tmp_path, saved,
                                                                         loader):
  directory, params = saved
  tensors = _index(directory, "model-00001-of-00001.safetensors")
  save_file(tensors, str(tmp_path / "outside.safetensors"), metadata={"format": "pt"})
  _symlink(directory / "model-00001-of-00001.safetensors", tmp_path / "outside.safetensors")
  _refused(LOADERS[loader], directory, match="model-00001-of-00001.safetensors.*outside")
  (directory / "model-00001-of-00001.safetensors").unlink()
  (directory / "blobs").mkdir()
  shutil.move(tmp_path / "outside.safetensors", directory / "blobs" / "abc")
  _symlink(directory / "model-00001-of-00001.safetensors", "blobs/abc")  # relative, inside
  _, loaded = LOADERS[loader](directory)
  _same(params, loaded)


@pytest.mark.parametrize("name", ["model.safetensors", "model.safetensors.index.json",
                                  "config.json"])
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_file_of_the_folder_symlinked_out_is_refused(tmp_path, saved, loader, name):
  directory, params = saved
  if name.endswith("index.json"):
    _index(directory, "model.safetensors")
    shutil.move(directory / "model.safetensors.index.json", tmp_path / name)
    # The shard the outside index names sits beside it, outside the model folder too.
    save_file(_tensors(params), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
  else:
    shutil.move(directory / name, tmp_path / name)
  _symlink(directory / name, tmp_path / name)
  _refused(LOADERS[loader], directory, match=f"{name}.*outside the model folder")


def _tensors(params):
  return {("" if k.startswith("lm_head") else "transformer.") + k: np.ascontiguousarray(v)
          for k, v in gpt2_model.params_to_flat(params, CONFIG).items()}


def test_hf_cache_snapshot_symlinks_into_its_blobs_load(tmp_path, saved, monkeypatch):
  """The Hugging Face cache layout: snapshot files are symlinks to ../../blobs (allowed), but
  one pointing out of the cached repo folder is not."""
  directory, params = saved
  repo = tmp_path / "hub" / "models--org--tiny"
  snap = repo / "snapshots" / "rev1"
  (repo / "blobs").mkdir(parents=True)
  snap.mkdir(parents=True)
  for f in directory.iterdir():
    shutil.copy(f, repo / "blobs" / f.name)
    _symlink(snap / f.name, f"../../blobs/{f.name}")
  for load in LOADERS.values():
    _same(params, load(snap)[1])
  (snap / "model.safetensors").unlink()
  _symlink(snap / "model.safetensors", directory / "model.safetensors")
  _refused(models.load, snap)
  _refused(gpt2.load, snap)


# ----------------------------------------------------------------------------------------------
# Llama checkpoint directories and GGUF splits.

def test_llama_index_naming_a_file_outside_is_refused(tmp_path):
  from limits.models.llama.model import checkpoint_shapes

  _, flat = llama_flat()
  assert set(flat) == set(checkpoint_shapes(LLAMA_CONFIG))
  directory = tmp_path / "llama"
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(LLAMA_CONFIG.to_hf()))
  tensors = {"model." + k: np.ascontiguousarray(v) for k, v in flat.items()}
  save_file(tensors, str(tmp_path / "shard.safetensors"), metadata={"format": "pt"})
  (directory / "model.safetensors.index.json").write_text(
      json.dumps({"weight_map": {k: "../shard.safetensors" for k in tensors}}))
  _refused(models.load, directory)
  shutil.move(tmp_path / "shard.safetensors", directory / "shard.safetensors")
  _index_rewrite(directory, "shard.safetensors")
  config, params = models.load(directory)
  assert config.to_hf() == LLAMA_CONFIG.to_hf()
  np.testing.assert_array_equal(params["embed_tokens"]["weight"], flat["embed_tokens.weight"])


def _write_split_gguf(directory, flat):
  """The Llama test model written by GGUFWriter in splits of 4 tensors: returns the paths."""
  import gguf

  real = gguf.GGUFWriter
  try:
    gguf.GGUFWriter = lambda path, arch: real(path, arch, split_max_tensors=4)
    _write_llama_gguf(directory / "m.gguf", LLAMA_CONFIG, flat)
  finally:
    gguf.GGUFWriter = real
  return sorted(directory.glob("m-*-of-*.gguf"))


def test_gguf_splits_load_from_the_folder_and_one_symlinked_out_is_refused(tmp_path):
  _, flat = llama_flat()
  directory = tmp_path / "gguf"
  directory.mkdir()
  splits = _write_split_gguf(directory, flat)
  assert len(splits) == (len(flat) + 3) // 4 > 2
  config, params = models.load(splits[0])
  assert config == LLAMA_CONFIG
  np.testing.assert_array_equal(params["embed_tokens"]["weight"], flat["embed_tokens.weight"])
  with pytest.raises(LimitsError, match="first file") as e:
    models.load(splits[1])
  assert "\n" not in str(e.value)
  # The last split moved out and replaced by a symlink to it: refused, naming the split.
  outside = tmp_path / splits[-1].name
  shutil.move(splits[-1], outside)
  _symlink(splits[-1], outside)
  _refused(models.load, splits[0], match=f"{splits[-1].name}: GGUF split file .*outside")
  _refused(models.load_config, splits[0], match="GGUF split file")
