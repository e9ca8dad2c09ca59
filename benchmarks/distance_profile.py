r"""Where one window of Algorithms 1-2 spends its time, and this machine's matmul rate.

  python -m benchmarks.distance_profile [--model=gpt2_124m|tiny|smollm2] [--length=1024]

Prints, best of ``--repeats`` after one warm-up: the matmul rate (jit'd 2048² products, float32
and float64), the rate of the narrow float64 products (12 heads of (1024×1024)·(1024×64), jit
and NumPy) that Algorithms 1-3 consist of, the forward with every record streamed layer by layer, one NumPy sort per row of
one layer, ``distance.layer_stats`` of one layer for N = 5 with and without the bound (float64),
for N ∈ {1, 5, 10, 20, 100} with the bound, and one Algorithm 3 probe (8 N, no bound, float32),
and the whole ``ModelEvaluator.head_stats`` for N = 5 (Algorithm 1 at one L). Random tokens: only
the time matters. These are the numbers behind WORKSPACE.md's hardware-floor paragraph.
"""

from __future__ import annotations

import time

from absl import app, flags

flags.DEFINE_string("model", "gpt2_124m", "tiny, gpt2_124m (random weights), smollm2, or a dir.")
flags.DEFINE_integer("length", 1024, "Window length L.")
flags.DEFINE_integer("repeats", 2, "Timed runs per item (best reported).")
FLAGS = flags.FLAGS


def _best(fn, repeats):
  fn()
  ts = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t0)
  return min(ts)


def main(argv):
  del argv
  import jax

  jax.config.update("jax_enable_x64", True)
  import jax.numpy as jnp
  import numpy as np

  from benchmarks import common
  from limits import distance, models, selection

  r = FLAGS.repeats
  for dt in (jnp.float32, jnp.float64):
    a = jnp.ones((2048, 2048), dt)
    mm = jax.jit(lambda a: a @ a)
    s = _best(lambda: mm(a).block_until_ready(), max(r, 3))
    print(f"matmul {jnp.dtype(dt).name}: {2 * 2048 ** 3 / s / 1e9:.1f} GFLOP/s", flush=True)
  # The narrow products Algorithms 1-3 consist of: (heads × L × L) weights times (L × d_head)
  # vectors, batched over 12 heads as in one GPT-2 124M layer (float64, jit and NumPy).
  rng = np.random.default_rng(0)
  w = rng.standard_normal((12, 1024, 1024))
  x = rng.standard_normal((12, 1024, 64))
  flop = 2 * 12 * 1024 * 1024 * 64
  bmm = jax.jit(lambda w, x: w @ x)
  wj, xj = jnp.asarray(w), jnp.asarray(x)
  s = _best(lambda: bmm(wj, xj).block_until_ready(), max(r, 3))
  print(f"narrow (12×1024×1024)·(12×1024×64) float64, jit: {flop / s / 1e9:.1f} GFLOP/s",
        flush=True)
  s = _best(lambda: np.matmul(w, x), max(r, 3))
  print(f"narrow (12×1024×1024)·(12×1024×64) float64, NumPy: {flop / s / 1e9:.1f} GFLOP/s",
        flush=True)
  config, params = common.load_model(FLAGS.model)
  L = min(FLAGS.length, config.n_positions)
  tok = np.random.default_rng(0).integers(0, config.vocab_size, size=(1, L)).astype(np.int32)

  def fwd():
    for _, rec in models.iter_layers(params, jnp.asarray(tok), config):
      np.asarray(rec.weights), np.asarray(rec.v)

  print(f"{FLAGS.model}, L = {L}: forward with records {_best(fwd, r):.2f} s", flush=True)
  _, rec = next(iter(models.iter_layers(params, jnp.asarray(tok), config)))
  w, x = np.asarray(rec.weights, np.float64), np.asarray(rec.v, np.float64)
  srt = selection.sort_rows(w)
  items = [
      ("sort_rows, one layer", lambda: selection.sort_rows(w)),
      ("layer_stats N = 5, bound, float64", lambda: distance.layer_stats(w, x, [5], sorted_rows=srt)),
      ("layer_stats N = 5, no bound, float64",
       lambda: distance.layer_stats(w, x, [5], bound=False, sorted_rows=srt)),
      ("layer_stats N = 1,5,10,20,100, bound, float64",
       lambda: distance.layer_stats(w, x, [1, 5, 10, 20, 100], sorted_rows=srt)),
  ]
  w32, x32 = w.astype(np.float32), x.astype(np.float32)
  s32 = selection.sort_rows(w32)
  items.append(("layer_stats 8 N, no bound, float32 (one KS probe)",
                lambda: distance.layer_stats(w32, x32, list(range(1, 9)), bound=False,
                                             sorted_rows=s32)))
  for name, fn in items:
    print(f"  {name}: {_best(fn, r):.2f} s per layer", flush=True)
  ev = distance.ModelEvaluator(params, config)
  print(f"  head_stats N = 5, whole model (Algorithm 1 at L = {L}): "
        f"{_best(lambda: ev.head_stats(tok, [5]), 1):.2f} s", flush=True)


if __name__ == "__main__":
  app.run(main)
