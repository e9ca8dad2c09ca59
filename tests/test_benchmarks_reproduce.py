"""benchmarks.work (the reproduction's work model and floor) and benchmarks.accelerator's budgeted
run and per-step table: fast, no reproduction is run.

Checks: one forward's FLOP against the GPT-2 closed form n_layer·(24·D² + 4·L·D)·L and, for a
Llama block, against the weights counted in an initialised parameter tree; a (window, L)
forward is charged to the first step that needs it only; the floor is the sum of the three
terms; a budgeted run is sent SIGTERM (not killed) when the budget is spent; the table's
ratio is wall / floor and a step without a model has no floor.
"""

import json
import sys

import jax
import numpy as np
import pytest

from benchmarks import accelerator, work
from limits.models import gpt2
from limits import reproduction as rp
from limits.models import llama


def test_forward_flop_gpt2_closed_form():
  c = gpt2.Config()  # GPT-2 124M
  for L in (32, 1024):
    want = c.n_layer * (24 * c.n_embd ** 2 + 4 * L * c.n_embd) * L
    assert work.forward_flop(c, L) == pytest.approx(want, rel=1e-12)


def test_layer_params_llama_counts_the_block_weights():
  c = llama.Config(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, d_mlp=48, n_positions=64,
                   vocab_size=100)
  params = llama.init_params(jax.random.key(0), c)
  layers = params["layers"] if "layers" in params else params["model"]["layers"]
  mats = [a for a in jax.tree.leaves(layers) if a.ndim == 3]  # (n_layer, in, out) matrices
  assert sum(int(np.prod(a.shape[1:])) for a in mats) == work.layer_params(c)


def test_forward_charged_once_per_window_and_length():
  c = gpt2.Config(n_layer=2, n_head=2, n_embd=16, n_positions=64, vocab_size=300)
  seen = set()
  first = work.step_work("vanishing", {"model": "m", "windows": 2, "lengths": "32,64"}, c, seen)
  again = work.step_work("distance_vary_length", {"model": "m", "windows": 2,
                                                  "lengths": "32,64", "ns": "5"}, c, seen)
  more = work.step_work("distance_vary_n", {"model": "m", "windows": 3, "lengths": "64"}, c,
                        seen)
  assert first["forward_flop"] == 2 * (work.forward_flop(c, 32) + work.forward_flop(c, 64))
  assert again["forward_flop"] == 0 and again["flop"] > 0 and again["sort_elements"] > 0
  assert more["forward_flop"] == work.forward_flop(c, 64)  # only the third window is new
  assert work.step_work("separability_sphere", {"length": 64}, c, set()) is None


def test_floor_is_the_sum_of_the_three_terms():
  w = {"forward_flop": 4e9, "flop": 6e9, "elements": 3e9, "sort_elements": 2e6}
  rates = {"gemm_flop_s": 10e9, "elementwise_s": 1e9, "sort_s": 1e6}
  assert work.floor_seconds(w, rates) == pytest.approx(1.0 + 3.0 + 2.0)


def test_budgeted_run_gets_sigterm_when_the_budget_is_spent(tmp_path):
  mark = tmp_path / "got_sigterm"
  code = ("import signal, sys, time\n"
          f"signal.signal(signal.SIGTERM, lambda *a: (open({str(mark)!r}, 'w').close(), "
          "sys.exit(143)))\n"
          "print('ready', flush=True)\n"
          "time.sleep(60)\n")
  rc, wall = accelerator.run_budgeted([sys.executable, "-c", code], 3.0, tmp_path / "log")
  assert rc == 143 and mark.exists() and wall < 30
  rc, wall = accelerator.run_budgeted([sys.executable, "-c", "print(1)"], 30.0, tmp_path / "l2")
  assert rc == 0 and wall < 30


def test_step_table_ratio_is_wall_over_floor(tmp_path):
  steps = {"vanishing": {"status": "ok", "seconds": 12.0, "cpu_s": 20.25, "peak_rss_mb": 812.4},
           "gradient_synthetic": {"status": "ok", "seconds": 3.0},
           "distance_vary_n": {"status": "interrupted", "seconds": None}}
  (tmp_path / "results.json").write_text(json.dumps({"results": {"steps": steps}}))
  rates = {"gemm_flop_s": 1e9, "elementwise_s": 1e8, "sort_s": 1e7}
  rows, table = accelerator.step_table(tmp_path, "tiny", True, rates)
  assert list(rows) == list(rp.STEP_NAMES)
  van = rows["vanishing"]
  assert van["floor_s"] > 0 and van["ratio"] == pytest.approx(12.0 / van["floor_s"])
  assert rows["gradient_synthetic"]["floor_s"] is None  # no model: no floor
  assert rows["distance_vary_n"]["status"] == "interrupted" and rows["distance_vary_n"]["ratio"] is None
  assert rows["separability_model"]["status"] == "not reached"
  assert table.count("\n") == len(rp.STEP_NAMES) + 2
  assert (van["cpu_s"], van["peak_rss_mb"]) == (20.25, 812.4)
  line = next(ln for ln in table.splitlines() if ln.startswith("| vanishing |"))
  assert line.endswith("| 20.2 | 812 |"), line  # CPU s, peak RSS MB: the runner's record
  assert rows["gradient_synthetic"]["peak_rss_mb"] is None  # not recorded: shown as '-'


def test_reproduce_benchmark_reads_cpu_and_peak_per_step(tmp_path):
  from benchmarks import reproduce as bench

  steps = {"vanishing": {"status": "ok", "seconds": 12.0, "cpu_s": 20.0, "peak_rss_mb": 812.0},
           "gradient": {"status": "ok", "seconds": 3.0}}
  (tmp_path / "results.json").write_text(json.dumps({"results": {"steps": steps,
                                                                 "driver_peak_rss_mb": 95.5}}))
  run = bench._read_run(tmp_path, 15.0, 0)
  assert run["driver_peak_rss_mb"] == 95.5
  assert run["steps"] == {"vanishing": 12.0, "gradient": 3.0}
  assert run["cpu_s"] == {"vanishing": 20.0, "gradient": None}
  assert run["peak_rss_mb"] == {"vanishing": 812.0, "gradient": None}


def test_separability_model_floor_counts_every_visible_keys_distance():
  """Alg. 4: 2·L·n·d per head and n for the selected keys plus L²·d per head and n (causal
  half) for ⟨x_j, s_n⟩ over every visible key, which r needs; closed form, one window."""
  c = gpt2.Config(n_layer=2, n_head=3, n_embd=24, n_positions=64, vocab_size=300)
  got = work.step_work("separability_model", {"model": "m", "windows": 1, "length": 64,
                                               "n_values": "1,4"}, c, set())
  NL, H, L, d = 2, 3, 64, 8
  assert got["flop"] == 2.0 * NL * H * L * 5 * d + 2 * d * (NL * H * L * L / 2) * 2
  assert got["elements"] == NL * H * L * L / 2 * 3 and got["sort_elements"] == NL * H * L * L / 2


def test_end_ratios_use_the_floor_of_the_end_rates():
  """benchmarks.reproduce.end_ratios: wall / the floor from the rates measured after the runs
  (not the start's), only for steps with a floor and a wall time."""
  from benchmarks import reproduce as bench

  steps = {"vanishing": {"ours_s": 12.0, "ours_over_floor": 4.0},  # start floor 3 s
           "gradient_synthetic": {"ours_s": 5.0},                    # no model: no floor
           "distance_vary_n": {"ours_s": None}}                      # did not run
  works_end = {"vanishing": {"floor_s": 4.0}, "gradient_synthetic": None,
               "distance_vary_n": {"floor_s": 2.0}}
  out = bench.end_ratios(steps, works_end)
  assert set(out) == {"vanishing"}
  assert out["vanishing"] == {"floor_end_s": 4.0, "ours_over_floor_end": pytest.approx(3.0)}


def _timed_calls(monkeypatch, durations):
  """A fake clock: the i-th timed call of ``fn`` lasts durations[i] seconds."""
  clock = [0.0]
  calls = []

  def fn():
    calls.append(clock[0])
    clock[0] += durations[min(len(calls) - 1, len(durations) - 1)]

  monkeypatch.setattr(work.time, "perf_counter", lambda: clock[0])
  return fn, calls


def test_best_is_the_fastest_of_at_least_repeats_calls_and_min_seconds(monkeypatch):
  # Binary fractions: the fake clock's sums are exact. One untimed call (0.125 s), then timed
  # calls of 0.5, 0.25, 0.375, 0.375 s: 2 calls make 0.75 s < 1 s, a third makes 1.125 s.
  d = [0.125, 0.5, 0.25, 0.375]
  fn, calls = _timed_calls(monkeypatch, d)
  assert work._best(fn, repeats=2, min_seconds=1.0) == 0.25
  assert len(calls) == 1 + 3
  fn, calls = _timed_calls(monkeypatch, d)  # exactly the time after 3 calls: stop there
  work._best(fn, repeats=2, min_seconds=1.125)
  assert len(calls) == 1 + 3
  fn, calls = _timed_calls(monkeypatch, d)  # just over it: a fourth call
  work._best(fn, repeats=2, min_seconds=1.126)
  assert len(calls) == 1 + 4
  # The time is spent before the repeats are: the repeats still run, the fastest wins.
  fn, calls = _timed_calls(monkeypatch, [0.125, 4.0, 0.5, 0.25])
  assert work._best(fn, repeats=3, min_seconds=1.0) == 0.25
  assert len(calls) == 1 + 3
