"""Accelerator benchmark: GPT-2 124M forward at L = 1024 and the full reproduction, timed.

Sized to finish in under 3 minutes on one GPU. Prints tokens/s of the forward pass (with all
attention records reduced per layer, and without records) and the achieved fraction of the
device's peak FLOP/s, where "peak" is (a) the rate of a large square matmul measured here in the
same dtype (always available) and (b) the vendor's nominal dense peak for known GPUs.

    python -m benchmarks.accelerator                 # forward + reproduction at paper settings
                                                     # on GPT-2 124M shapes (random weights)
    python -m benchmarks.accelerator --skip_reproduce --batch=2   # forward only (e.g. on a CPU)

FLOP count of one forward (no causal halving, as is conventional for dense attention):
per token and layer 24·D² (qkv, proj, MLP) + 4·L·D (q·kᵀ and α·V); the LM head adds 2·D·V.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from benchmarks.common import timed

FLAGS = flags.FLAGS
flags.DEFINE_integer("length", 1024, "Sequence length L.")
flags.DEFINE_integer("batch", 8, "Sequences per forward call.")
flags.DEFINE_integer("repeats", 5, "Timed repetitions (after one compile/warm-up call).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter and activation dtype.")
flags.DEFINE_bool("skip_reproduce", False, "Only time the forward pass.")
flags.DEFINE_string("reproduce_args", "", "Extra flags for experiments.reproduce (space-separated).")
flags.DEFINE_string("reproduce_model", "random124m",
                    "Model for the timed reproduction: 'random124m' (GPT-2 124M shapes with random "
                    "weights, written to a temporary directory: the same cost as the real "
                    "checkpoint, which the hub-less machines here cannot fetch), 'tiny', 'gpt2' or "
                    "a model directory.")

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

  from limits import gpt2

  dtype = jnp.dtype(FLAGS.dtype)
  config = gpt2.Config()  # GPT-2 124M
  params = gpt2.init_params(jax.random.key(0), config, dtype=dtype)
  tokens = jax.random.randint(jax.random.key(1), (FLAGS.batch, FLAGS.length), 0,
                              config.vocab_size, dtype=jnp.int32)
  device = jax.devices()[0]
  kind = getattr(device, "device_kind", str(device))
  print(f"device: {kind} ({jax.default_backend()}, {jax.device_count()} device(s)); "
        f"dtype {FLAGS.dtype}; B={FLAGS.batch} L={FLAGS.length}")

  peak = matmul_peak(dtype)
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
    sec = _time(lambda: gpt2.forward(params, tokens, config, **kw), FLAGS.repeats)
    flops = forward_flops(config, FLAGS.batch, FLAGS.length, kw.get("lm_head", True))
    rows.append(dict(case=name, seconds=sec, tokens_per_s=FLAGS.batch * FLAGS.length / sec,
                     tflops=flops / sec / 1e12, frac_measured_peak=flops / sec / peak,
                     frac_nominal_peak=(flops / sec / nominal) if nominal else None))

  print(f"measured {FLAGS.dtype} matmul peak (4096², jit): {peak / 1e12:.2f} TFLOP/s; nominal: "
        f"{nominal / 1e12:.0f} TFLOP/s" if nominal else
        f"measured {FLAGS.dtype} matmul peak (4096², jit): {peak / 1e12:.3f} TFLOP/s; nominal: "
        "unknown for this device")
  print(f"{'case':42s} {'s/call':>8s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'/measured':>9s} "
        f"{'/nominal':>9s}")
  for r in rows:
    nom = f"{r['frac_nominal_peak']:.3f}" if r["frac_nominal_peak"] is not None else "n/a"
    print(f"{r['case']:42s} {r['seconds']:8.3f} {r['tokens_per_s']:10.0f} {r['tflops']:8.3f} "
          f"{r['frac_measured_peak']:9.3f} {nom:>9s}")

  if not FLAGS.skip_reproduce:
    with tempfile.TemporaryDirectory() as out:
      model = FLAGS.reproduce_model
      if model == "random124m":
        from limits.gpt2.testing import make_random_model_dir

        c = gpt2.Config()
        model = str(make_random_model_dir(f"{out}/model", n_layer=c.n_layer, n_head=c.n_head,
                                          n_embd=c.n_embd, n_positions=c.n_positions,
                                          vocab_size=c.vocab_size))
      cmd = [sys.executable, "-m", "experiments.reproduce", f"--out_dir={out}/run",
             f"--model={model}"]
      cmd += [a for a in FLAGS.reproduce_args.split() if a]
      t0 = time.perf_counter()
      proc = subprocess.run(cmd, capture_output=True, text=True)
      wall = time.perf_counter() - t0
      status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
      print(f"full reproduction ({' '.join(cmd[2:])}): {wall:.1f} s wall, {status}")
      steps = json.loads(open(f"{out}/run/results.json").read())["results"]["steps"] \
          if proc.returncode == 0 else {}
      for name, st in steps.items():
        print(f"  {name:24s} {st['seconds']:8.1f} s")
      if proc.returncode != 0:
        print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "(no stderr)")
  print(json.dumps({"rows": rows, "matmul_peak": peak, "nominal_peak": nominal}, default=str))


if __name__ == "__main__":
  app.run(main)
