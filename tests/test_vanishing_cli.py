"""experiments.vanishing end to end, and its log-space band check against limits.bounds."""

import csv
import json
import os
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.cli_helpers import REPO, make_model_and_texts, run_experiment


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("vanishing_cli")
  return make_model_and_texts(root, n_layer=2, n_head=2, n_embd=16,
                              n_positions=64, vocab_size=300, seed=2)


def run(args, cwd=REPO):
  return run_experiment("vanishing", args, cwd=cwd)


def test_end_to_end(model_dir, tmp_path):
  out = tmp_path / "v"
  p = run([f"--model={model_dir / 'model'}", f"--text={model_dir / 'text.txt'}",
           f"--out_dir={out}", "--lengths=8,32", "--x64"])
  assert p.returncode == 0, p.stderr
  for f in ("results.json", "per_head.csv", "summary.csv", "vanishing.png"):
    assert (out / f).is_file(), f
  res = json.loads((out / "results.json").read_text())["results"]
  assert res["band"]["queries_checked"] == (8 + 32) * 2 * 2
  from limits import claims
  by_id = {a.claim.id: a for a in claims.assess_step("vanishing", res)}
  assert by_id["cor1-band"].verdict == "holds"  # Corollary 1 is a theorem; logits are exact
  assert "verdicts" not in res
  rows = list(csv.DictReader((out / "per_head.csv").open()))
  assert len(rows) == 2 * 4
  # Independent recomputation for one head: max α·L of the last query from HF-style softmax.
  from limits import models
  from limits.records import sources

  m = sources.load_model(str(model_dir / "model"))
  toks = sources.corpus_windows(m, 32, 1, text=model_dir / "text.txt")
  rec = dict(models.iter_layers(m.params, toks, m.config))[1]
  w = np.asarray(rec.weights[0, 0, -1], np.float64)  # (32,) last query sees all 32 keys
  got = next(r for r in rows if r["L"] == "32" and r["layer"] == "1" and r["head"] == "0")
  # float32 weights from the model vs float64 log-space: 1e-5 in log10 units.
  np.testing.assert_allclose(float(got["log10_max_aL_last"]), np.log10(w.max() * 32), atol=1e-5)
  np.testing.assert_allclose(float(got["log10_min_aL_last"]), np.log10(w.min() * 32), atol=1e-5)
  # Sink_ε (attention sinks): the head's mean weight on token 0 over all 32 query rows, from
  # the same forward's weights; float32 weights summed in float64 (CSV keeps repr digits).
  w0 = np.asarray(rec.weights[0, 0, :, 0], np.float64)  # (32,) every row's weight on token 0
  np.testing.assert_allclose(float(got["sink_score"]), w0.sum() / 32, rtol=1e-12)
  by_l = {x["L"]: x for x in res["sinks"]["by_L"]}
  layer1 = [float(r["sink_score"]) > 0.3 for r in rows if r["L"] == "32" and r["layer"] == "1"]
  assert by_l[32]["share_by_layer"][1] == sum(layer1) / 2 and by_l[32]["pairs"] == 4


def test_causal_check_agrees_with_bounds_corollary1_band():
  """The experiment's log-space band equals limits.bounds.corollary1_band (foundation module),
  and its violation counter fires on weights pushed outside the band."""
  from limits import bounds

  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    B, H, L, d = 1, 2, 6, 3
    q = jnp.asarray(rng.normal(size=(B, H, L, d)) * 0.3)
    k = jnp.asarray(rng.normal(size=(B, H, L, d)) * 0.3)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    out = bounds.corollary1_causal_check(scores, q, k, 2.0)
    assert int(out["violations"].sum()) == 0
    lo, up = bounds.corollary1_band(q[..., -1, :], k, 2.0)  # bands for α (last query)
    # band_last = 2Δ/T  ⇔  upper·L = e^{2Δ/T}; float64, rtol 1e-12.
    np.testing.assert_allclose(np.exp(out["band_last"]), up * L, rtol=1e-12)
    np.testing.assert_allclose(np.exp(-out["band_last"]), lo * L, rtol=1e-12)
    # Scores inconsistent with q·k (scaled up 50x) put weights outside the band.
    bad = bounds.corollary1_causal_check(scores * 50, q, k, 2.0)
    assert int(bad["violations"].sum()) > 0



def test_corollary1_check_on_a_sliding_window_uses_the_effective_length():
  """A local layer (window W < L): the last query sees its last W keys only, so its band is
  Corollary 1 over those W keys with n = W (not L); float64, rtol 1e-12."""
  from limits import bounds

  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    B, H, L, d, W = 1, 2, 9, 3, 4
    q = jnp.asarray(rng.normal(size=(B, H, L, d)) * 0.3)
    k = jnp.asarray(rng.normal(size=(B, H, L, d)) * 0.3)
    k = k.at[..., 0, :].multiply(20.0)  # a large key outside the last query's window
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    out = bounds.corollary1_causal_check(scores, q, k, 2.0, window=W)
    assert int(out["violations"].sum()) == 0
    lo, up = bounds.corollary1_band(q[..., -1, :], k[..., L - W:, :], 2.0)
    np.testing.assert_allclose(np.exp(out["band_last"]), up * W, rtol=1e-12)
    # The last query's α·n over its W keys, from a softmax computed here.
    z = np.asarray(scores[..., -1, L - W:]) / 2.0
    alpha = np.exp(z - z.max(-1, keepdims=True))
    alpha /= alpha.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.exp(out["log_max_last"]), alpha.max(-1) * W, rtol=1e-12)
    # The causal reading of the same layer is a different check (n = L, the far key counted).
    full = bounds.corollary1_causal_check(scores, q, k, 2.0)
    assert not np.allclose(np.asarray(full["band_last"]), np.asarray(out["band_last"]))
    bad = bounds.corollary1_causal_check(scores * 50, q, k, 2.0, window=W)
    assert int(bad["violations"].sum()) > 0


@pytest.mark.parametrize("args,needle", [
    (["--lengths=128"], "L=128, beyond the context"),
    (["--windows=0"], "windows"),
    (["--lengths=a,b"], "--lengths"),
    (["--lemma1_a=-1"], "--lemma1_a must be in [0, 300]"),
])
def test_bad_values(model_dir, tmp_path, args, needle):
  p = run([f"--model={model_dir / 'model'}", f"--text={model_dir / 'text.txt'}",
           f"--out_dir={tmp_path / 'b'}", *args])
  assert p.returncode != 0 and "Traceback" not in p.stderr
  assert len([ln for ln in p.stderr.splitlines() if needle in ln]) == 1, p.stderr


def test_empty_corpus_and_unknown_model(model_dir, tmp_path):
  p = run([f"--model={model_dir / 'model'}", f"--text={model_dir / 'empty.txt'}",
           f"--out_dir={tmp_path / 'e'}", "--lengths=8"])
  assert p.returncode != 0 and "Traceback" not in p.stderr
  assert p.stderr.strip().splitlines()[-1].startswith("error:"), p.stderr
  p = run([f"--model={tmp_path / 'nope'}", f"--out_dir={tmp_path / 'e'}"])
  assert p.returncode != 0 and "Traceback" not in p.stderr
  assert p.stderr.strip().splitlines()[-1].startswith("error:"), p.stderr


WAYS = ("--data_dir=FOLDER", "LIMITS_DATA_DIR=FOLDER", "--text=FILE")


def test_no_corpus_is_one_line_naming_the_three_ways(model_dir, tmp_path):
  # The Gutenberg download asked for (--data_dir=gutenberg; without it the embedded copy is
  # used), an empty cache and downloads off (tests/conftest.py): one line, exit 2.
  out = tmp_path / "n"
  p = run([f"--model={model_dir / 'model'}", f"--out_dir={out}", "--lengths=8",
           "--data_dir=gutenberg"])
  assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
  lines = p.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:"), p.stderr[-2000:]
  assert "LIMITS_ALLOW_DOWNLOAD=0" in lines[0] and all(w in lines[0] for w in WAYS), lines[0]


def test_failed_download_is_announced_then_one_error_line(model_dir, tmp_path):
  # --data_dir=gutenberg, downloads on (the default) but nothing listens at the URL: the notice of the download, then
  # one error line with the reason and the three ways; the cache stays empty.
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}/pg2600.txt"  # closed once the block ends
  cache = tmp_path / "cache"
  env = dict(os.environ, LIMITS_CACHE_DIR=str(cache), LIMITS_CORPUS_URL=url)
  env.pop("LIMITS_ALLOW_DOWNLOAD")
  p = run_experiment("vanishing", [f"--model={model_dir / 'model'}",
                                   f"--out_dir={tmp_path / 'd'}", "--lengths=8",
                                   "--data_dir=gutenberg"], env=env)
  assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
  lines = p.stderr.strip().splitlines()
  assert len(lines) == 2, p.stderr[-2000:]
  assert "downloading" in lines[0] and url in lines[0] and str(cache) in lines[0], lines[0]
  assert lines[1].startswith("error:") and "refused" in lines[1].lower(), lines[1]
  assert all(w in lines[1] for w in WAYS), lines[1]
  assert not cache.exists() or not any(cache.iterdir())
