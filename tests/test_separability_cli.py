"""End-to-end tests of ``python -m experiments.separability`` (subprocesses, cwd = repo root;
the model source runs the same task in process)."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "experiments.separability", *args], cwd=REPO,
                        env=env, capture_output=True, text=True, timeout=timeout)


def read_csv(path):
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def check_outputs(out, ns, heads):
  res = json.loads((out / "results.json").read_text())
  assert set(res) == {"experiment", "config", "env", "results"}
  assert res["experiment"] == "separability" and res["results"]["complete"] is True
  # Measurements only (issue 26): the claims judge them.
  assert "verdicts" not in res["results"]
  rows = read_csv(out / "per_head.csv")
  assert len(rows) == len(ns) * heads
  frac = np.array([float(r["frac"]) for r in rows])
  assert np.all((frac >= 0) & (frac <= 1))
  # N = 1: the single selected token sits at s (X = 0 < r), so N_s/N = 1 exactly for every head.
  assert all(float(r["frac"]) == 1.0 for r in rows if r["n"] == "1")
  summary = read_csv(out / "summary.csv")
  assert [int(r["n"]) for r in summary] == ns
  assert (out / "figure3.png").stat().st_size > 1000
  return res, rows


def test_sphere_end_to_end(tmp_path):
  out = tmp_path / "sphere"
  p = run("--source=sphere", "--length=48", "--dim=8", "--samples=16", "--heads=3",
          "--n_values=1,2,4,8,16", "--alpha_kind=zipf", f"--out_dir={out}", "--seed=1")
  assert p.returncode == 0, p.stderr[-3000:]
  res, rows = check_outputs(out, [1, 2, 4, 8, 16], 3)
  assert res["config"]["samples"] == 16 and res["env"]["seed"] == 1
  # The strict count never exceeds the per-sample upper envelope by more than MC noise here is
  # not guaranteed (heuristic), but every stored bound must be a probability-like number.
  for r in rows:
    assert 0 <= float(r["lower"]) <= 1 and 0 <= float(r["upper"]) <= 1
    assert float(r["lower_raw"]) <= float(r["lower"])


def test_model_end_to_end(tmp_path):
  """--source=model through the task in this process, as the CLI's main runs it (float64,
  the output folder prepared and locked; the CLI around it: the sphere test above)."""
  import jax

  from limits.runs import results as res_lib
  from limits.separability import task as separability_task
  from limits.models.gpt2.testing import SAMPLE_TEXT, make_random_model_dir

  model = make_random_model_dir(tmp_path / "model", n_layer=2, n_head=2, n_embd=32,
                                n_positions=64)
  text = tmp_path / "text.txt"
  text.write_text(SAMPLE_TEXT * 3)
  config = separability_task.SeparabilityConfig(
      source="model", model=str(model), text=str(text), length=40, windows=2,
      n_values="1,2,4,8", out_dir=str(tmp_path / "model_run"))
  ns = separability_task.grid(config)
  out = res_lib.prepare_out_dir(config.out_dir, separability_task.EXPERIMENT, identity={},
                                overwrite=False)
  try:
    with jax.enable_x64(config.x64):
      separability_task.run(config, out, ns)
  finally:
    res_lib.release_dir(out)
  res, rows = check_outputs(out, [1, 2, 4, 8], 4)
  # AMBIG-8: queries with t <= N are skipped; 2 windows of L = 40 keep 2 (40 - N) queries.
  for r in rows:
    assert int(r["queries"]) == 2 * (40 - int(r["n"]))
  assert res["results"]["model"]["n_layer"] == 2


@pytest.mark.parametrize("args,needle", [
    (["--length=16", "--n_values=1,32"], "N=32 > L=16"),
    (["--radius=0"], "--radius must be a positive number"),
    (["--radius=-1"], "--radius must be a positive number"),
    (["--samples=0"], "--samples must be a positive integer"),
    (["--n_values=1,x"], "n_values"),
    (["--source=model", "--length=16", "--n_values=16"], "need N < L"),
])
def test_bad_values_exit_nonzero_with_one_line(tmp_path, args, needle):
  p = run(*args, f"--out_dir={tmp_path / 'bad'}", timeout=120)
  assert p.returncode != 0
  assert "Traceback" not in p.stderr
  hits = [line for line in p.stderr.splitlines() if needle in line]
  assert len(hits) == 1, p.stderr[-2000:]
  assert not (tmp_path / "bad" / "results.json").exists()


@pytest.fixture(scope="module")
def tiny3(tmp_path_factory):
  """A random 3-layer GPT-2 (64 positions) and a text file."""
  from tests.cli_helpers import make_model_and_texts

  root = make_model_and_texts(tmp_path_factory.mktemp("emit"), repeat=3, n_layer=3, n_head=2,
                              n_embd=32, n_positions=64)
  return root / "model", root / "text.txt"


def _tiny3_config(tiny3, windows: int):
  from limits.separability import task as separability_task

  model, text = tiny3
  return separability_task.SeparabilityConfig(
      source="model", model=str(model), text=str(text), length=24, windows=windows,
      n_values="1,2", plot=False)


@pytest.mark.parametrize("emit_seconds,stop_after,layers_written", [
    (1e9, None, [[0], [0, 1, 2]]),          # first layer, then the window's end
    (0.0, None, [[0], [0, 1], [0, 1, 2]]),  # every layer of the first window
    (1e9, 2, [[0], [0, 1]]),                # interrupted after layer 1: its rows are written
])
def test_model_source_writes_the_first_window_throttled(tiny3, tmp_path, monkeypatch,
                                                        emit_seconds, stop_after,
                                                        layers_written):
  """The model source writes the first window's results after its first layer, then at most
  every EMIT_SECONDS and at the window's end; an interrupt writes the layers computed since
  the last write before it stops (nothing computed is lost)."""
  import jax

  from limits.runs import interrupts
  from limits.runs import results as res_lib
  from limits.separability import task as separability_task

  config = _tiny3_config(tiny3, windows=1)
  written = []
  original = separability_task._write

  def write(c, out_dir, rows, *args):
    written.append(sorted({r["layer"] for r in rows}))
    return original(c, out_dir, rows, *args)

  calls = []

  def check():
    calls.append(1)
    if stop_after is not None and len(calls) >= stop_after:
      raise interrupts.Interrupted("test")

  monkeypatch.setattr(separability_task, "EMIT_SECONDS", emit_seconds)
  monkeypatch.setattr(separability_task, "_write", write)
  monkeypatch.setattr(interrupts, "check", check)
  out = res_lib.prepare_out_dir(tmp_path / "out", separability_task.EXPERIMENT, identity={},
                                overwrite=False)
  try:
    with jax.enable_x64(True):
      if stop_after is None:
        separability_task.run(config, out, separability_task.grid(config))
      else:
        with pytest.raises(interrupts.Interrupted):
          separability_task.run(config, out, separability_task.grid(config))
  finally:
    res_lib.release_dir(out)
  assert written == layers_written


def test_model_source_computes_two_layers_at_once(tiny3, tmp_path, monkeypatch):
  """Two layers' kernels run at once, each dispatched and waited for in its own thread
  (records.streaming.in_threads; from one thread XLA's CPU backend runs them one after the
  other): layers 0 and 1 of each window meet at a barrier inside layer_sums, which a loop
  computing one layer at a time never passes. Every layer's sums are fetched once, in layer
  order, on the caller's thread, and the result equals the layer-at-a-time sums (the same
  kernel on the same records)."""
  import threading

  import jax

  from limits import records
  from limits.runs import results as res_lib
  from limits.separability import model as separability_model
  from limits.separability import task as separability_task

  config = _tiny3_config(tiny3, windows=2)
  main = threading.current_thread().name
  pulled, fetched, barrier = [], [], threading.Barrier(2, timeout=30)
  original_sums, original_iter = separability_model.layer_sums, records.iter_layers

  def fp(weights):  # which layer of which window: its weights' bytes
    return hash(np.asarray(weights).tobytes())

  def iter_layers(*args, **kwargs):
    for i, rec in original_iter(*args, **kwargs):
      pulled.append(fp(rec.weights[0]))
      yield i, rec

  class Fetched:  # the device sums; np.asarray(...) is the fetch
    def __init__(self, value, key):
      self.value, self.key = value, key

    def __array__(self, dtype=None, copy=None):
      fetched.append((self.key, threading.current_thread().name))
      return np.asarray(self.value, dtype)

  def layer_sums(weights, *args, **kwargs):
    key = fp(weights)
    if pulled.index(key) % 3 in (0, 1):  # layers 0 and 1 of a window (3 layers)
      barrier.wait()
    return Fetched(original_sums(weights, *args, **kwargs), key)

  def run(name):  # per_head.csv of one run
    out = res_lib.prepare_out_dir(tmp_path / name, separability_task.EXPERIMENT, identity={},
                                  overwrite=False)
    try:
      with jax.enable_x64(True):
        separability_task.run(config, out, separability_task.grid(config))
    finally:
      res_lib.release_dir(out)
    return read_csv(out / "per_head.csv")

  monkeypatch.setattr(records, "iter_layers", iter_layers)
  monkeypatch.setattr(separability_model, "layer_sums", layer_sums)
  pipelined = run("out")
  assert len(pulled) == 6 and [k for k, _ in fetched] == pulled
  assert all(name == main for _, name in fetched)
  monkeypatch.setattr(separability_model, "layer_sums",  # fetched at once: no overlap
                      lambda *a, **k: np.asarray(original_sums(*a, **k)))
  assert pipelined == run("out2")
