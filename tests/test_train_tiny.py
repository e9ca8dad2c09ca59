"""Tests for limits/training/__init__.py and its CLI experiments/train_tiny.py: loss, optimiser, data order,
exact resume, the CLI.

Everything runs on a tiny config (1-2 layers, width 32) and a synthetic or built-in text, so
no test needs the corpus.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import models
from limits.models import gpt2
from limits import training as tt

REPO = Path(__file__).resolve().parent.parent
TINY = gpt2.Config(n_layer=1, n_head=2, n_embd=32, n_positions=32, vocab_size=48)


def _params(seed=0, config=TINY):
  return gpt2.init_params(jax.random.key(seed), config)


def _optimizer(params, steps=30, lr=1e-2):
  return tt.make_optimizer(steps, lr, 3, 0.1, 0.1, 1.0, params)[0]


def test_lm_loss_matches_numpy_cross_entropy():
  params = _params()
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, TINY.vocab_size, (2, 17)), jnp.int32)
  logits = np.asarray(models.forward(params, tokens[:, :-1], TINY).logits, np.float64)
  # Independent log-softmax in float64 NumPy.
  m = logits.max(-1, keepdims=True)
  logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
  tgt = np.asarray(tokens[:, 1:])
  expected = -np.take_along_axis(logp, tgt[..., None], -1).mean()
  # float32 forward vs float64 reference on a ~ln(48) = 3.9 loss: 1e-5 relative is ample.
  np.testing.assert_allclose(float(tt.lm_loss(params, tokens, TINY)), expected, rtol=1e-5)


def test_train_step_decreases_loss_on_synthetic_corpus():
  # A periodic token sequence is perfectly predictable after one period: a working step must
  # cut the loss well below its initial ~ln(48) = 3.87 within 30 steps.
  period = np.array([3, 17, 5, 40, 11, 29, 7, 23])
  seq = np.tile(period, 40)
  stream = tt.Stream(seq, 16, seed=0)
  params = _params()
  opt = _optimizer(params)
  state = opt.init(params)
  step = tt.make_train_step(TINY, opt)
  losses = []
  for i in range(30):
    params, state, loss, gnorm = step(params, state, jnp.asarray(stream.batch(4 * i, 4)))
    losses.append(float(loss))
    assert math.isfinite(float(gnorm))
  assert losses[0] > 3.5  # near-uniform at GPT-2 initialisation
  assert losses[-1] < 0.5 * losses[0], losses


def test_weight_decay_only_on_weight_matrices():
  params = _params()
  opt = tt.make_optimizer(10, 1e-2, 0, 0.1, 0.5, 1.0, params)[0]
  state = opt.init(params)
  zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
  updates, _ = jax.jit(opt.update)(zeros, state, params)
  flat = {jax.tree_util.keystr(p): np.asarray(u)
          for p, u in jax.tree_util.tree_leaves_with_path(updates)}
  # With zero gradients, AdamW's only update is -lr * wd * param: nonzero exactly for decayed
  # tensors (weight matrices and embeddings), zero for biases and LayerNorm gains.
  for name, u in flat.items():
    decayed = name.endswith("['weight']") and "ln_" not in name
    assert (np.abs(u).max() > 0) == decayed, name


def test_stream_is_reproducible_and_non_overlapping_per_epoch():
  tokens = np.arange(1000)
  s1, s2 = tt.Stream(tokens, 10, seed=3), tt.Stream(tokens, 10, seed=3)
  n = s1.per_epoch
  b1 = s1.batch(0, n)  # one whole epoch
  np.testing.assert_array_equal(b1, s2.batch(0, n))
  # Each row is consecutive tokens (arange): row = start + 0..10.
  np.testing.assert_array_equal(b1 - b1[:, :1], np.broadcast_to(np.arange(11), b1.shape))
  starts = np.sort(b1[:, 0])
  assert np.all(np.diff(starts) == 10)  # distinct, non-overlapping inputs in an epoch
  # Position p in a fresh stream equals position p in one that has already moved on.
  np.testing.assert_array_equal(tt.Stream(tokens, 10, 3).batch(n + 5, 3), s1.batch(n + 5, 3))
  assert not np.array_equal(s1.batch(n, n)[:, 0], b1[:, 0])  # a new order next epoch


def test_split_short_covers_the_same_targets_once():
  batch = np.arange(2 * 17).reshape(2, 17)  # two windows of L=16 (+1)
  short = tt.split_short(batch, 4)
  assert short.shape == (8, 5)
  pairs = {(int(a), int(b)) for row in short for a, b in zip(row[:-1], row[1:])}
  full = {(int(a), int(b)) for row in batch for a, b in zip(row[:-1], row[1:])}
  assert pairs == full and len(pairs) == 2 * 16
  assert [tt.is_full_step(s, 4, 16, 4) for s in range(1, 9)] == [False, False, False, True] * 2
  assert tt.is_full_step(1, 0, 16, 4) and tt.is_full_step(1, 16, 16, 4)


def test_eval_windows_and_heldout_loss():
  tokens = np.arange(50) % TINY.vocab_size
  w = tt.eval_windows(tokens, 16)
  assert w.shape == (3, 17)
  targets = np.concatenate([r[1:] for r in w])
  np.testing.assert_array_equal(targets, tokens[1:49])  # every target once, in order
  params = _params()
  per_window = [float(tt.lm_loss(params, jnp.asarray(r[None]), TINY)) for r in w]
  # Mean over equal-length windows = mean of per-window means; float32 sums, 1e-5 relative.
  np.testing.assert_allclose(tt.heldout_loss(params, TINY, w, batch=2), np.mean(per_window),
                             rtol=1e-5)


def test_checkpoint_resume_matches_uninterrupted(tmp_path):
  seq = np.random.default_rng(1).integers(0, TINY.vocab_size, 600)
  stream = tt.Stream(seq, 16, seed=0)
  p0 = _params()
  opt = _optimizer(p0, steps=6)
  step = tt.make_train_step(TINY, opt)

  def run(params, state, start, stop):
    for i in range(start, stop):
      params, state, _, _ = step(params, state, jnp.asarray(stream.batch(2 * i, 2)))
    return params, state

  full, _ = run(p0, opt.init(p0), 0, 6)
  half_p, half_s = run(p0, opt.init(p0), 0, 3)
  tt.save_checkpoint(tmp_path, {"params": half_p, "opt_state": half_s, "step": 3,
                                "position": 6}, {"losses": []})
  template = {"params": p0, "opt_state": opt.init(p0), "step": 0, "position": 0}
  restored, meta = tt.load_checkpoint(tmp_path, template)
  assert restored["step"] == 3 and restored["position"] == 6 and meta == {"losses": []}
  resumed, _ = run(restored["params"], restored["opt_state"], 3, 6)
  # Same compiled step on the same inputs: bitwise identical, not merely close.
  for a, b in zip(jax.tree_util.tree_leaves(full), jax.tree_util.tree_leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # ...and training actually moved the parameters.
  assert not np.array_equal(np.asarray(full["wte"]["weight"]), np.asarray(p0["wte"]["weight"]))


def test_generate_greedy_is_argmax_of_forward():
  params = _params(2)
  prompt = [1, 2, 3]
  new = tt.generate(params, TINY, prompt, 4, buffer=16)
  seq = list(prompt)
  for _ in range(4):  # independent: re-run the full prefix each time, no padding buffer
    logits = models.forward(params, jnp.asarray([seq], jnp.int32), TINY).logits[0, -1]
    seq.append(int(jnp.argmax(logits)))
  assert new == seq[3:]


# ---------------------------------------------------------------------------------------------
# CLI (subprocesses, cwd = repo root).

TEXT = ("It was in July, 1805, and the speaker was the well-known Anna Pavlovna. "
        "Prince Vasili answered in French, as he always did. The guests arrived one by one, "
        "and the old aunt received them in the drawing room.\n\n") * 60
CLI_ARGS = ["--steps=6", "--batch_size=2", "--seq_len=32", "--short_len=16", "--full_every=2",
            "--n_positions=32", "--n_layer=1", "--n_head=2", "--n_embd=32", "--vocab_size=300",
            "--warmup_steps=2", "--ckpt_every=2", "--sample_tokens=3", "--log_every=1",
            "--probe_windows=1"]


def _run(args, tmp_path, **env):
  import os

  e = dict(os.environ)
  e.pop("LIMITS_DATA_DIR", None)
  e["LIMITS_CACHE_DIR"] = str(tmp_path / "empty_cache")
  e.update(env)
  return subprocess.run([sys.executable, "-m", "experiments.train_tiny", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300, env=e)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
  p = tmp_path_factory.mktemp("corpus") / "text.txt"
  p.write_text(TEXT)
  return p


@pytest.fixture(scope="module")
def trained(tmp_path_factory, text_file):
  d = tmp_path_factory.mktemp("run")
  r = _run(CLI_ARGS + [f"--text={text_file}", f"--out_dir={d / 'model'}",
                       f"--ckpt_dir={d / 'ckpt'}"], d)
  assert r.returncode == 0, r.stderr[-2000:]
  return d


def test_cli_writes_a_loadable_model_directory(trained):
  from limits.records import sources

  model_dir = trained / "model"
  for name in ("config.json", "model.safetensors", "tokenizer.json", "training.json",
               "MODEL_CARD.md"):
    assert (model_dir / name).is_file(), name
  report = json.loads((model_dir / "training.json").read_text())
  assert report["training"]["steps_done"] == 6
  h = report["heldout"]
  # bits/byte is nats/token rescaled by tokens/bytes/ln 2: check the arithmetic independently.
  np.testing.assert_allclose(
      h["bits_per_byte"], h["nats_per_token"] * h["target_tokens"] / h["target_bytes"]
      / math.log(2), rtol=1e-12)
  model = sources.load_model(str(model_dir))
  assert model.config.n_layer == 1 and model.tokenizer.vocab_size <= 300
  assert "not GPT-2" in (model_dir / "MODEL_CARD.md").read_text()


@pytest.mark.slow  # two more subprocess runs; the in-process resume test covers the default run
def test_cli_resume_is_exact(trained, text_file, tmp_path):
  args = CLI_ARGS + [f"--text={text_file}", f"--out_dir={tmp_path / 'model'}",
                     f"--ckpt_dir={tmp_path / 'ckpt'}"]
  r1 = _run(args + ["--stop_after=3"], tmp_path)
  assert r1.returncode == 0, r1.stderr[-2000:]
  assert not (tmp_path / "model" / "model.safetensors").exists()
  r2 = _run(args, tmp_path)
  assert r2.returncode == 0, r2.stderr[-2000:]
  assert "resumed from" in r2.stdout + r2.stderr
  # Interrupted + resumed training writes byte-identical weights to the uninterrupted run.
  assert ((tmp_path / "model" / "model.safetensors").read_bytes()
          == (trained / "model" / "model.safetensors").read_bytes())


@pytest.mark.parametrize("flag", ["--steps=0", "--seq_len=64", "--lr=-1", "--short_len=5",
                                  "--heldout_fraction=0.9", "--vocab_size=100"])
def test_cli_bad_values_are_usage_errors(flag, tmp_path, text_file):
  r = _run(CLI_ARGS + [f"--text={text_file}", f"--out_dir={tmp_path}/m", flag], tmp_path)
  assert r.returncode != 0
  assert "Traceback" not in r.stderr
  assert r.stderr.strip(), "expected an error message"
  assert not (tmp_path / "m").exists()


def test_cli_missing_corpus_is_one_line(tmp_path):
  r = _run(CLI_ARGS + [f"--out_dir={tmp_path}/m", f"--data_dir={tmp_path}/nowhere"], tmp_path)
  assert r.returncode == 2
  assert "Traceback" not in r.stderr
  lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
  # Names the folder given and the file it lacks (no silent switch to the cache or a download).
  assert len(lines) == 1 and f"{tmp_path}/nowhere" in lines[0], r.stderr[-1000:]
  assert "war_and_peace.txt" in lines[0]
