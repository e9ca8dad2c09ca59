r"""Per-layer kernels of Algorithms 1, 2 and 4 on real records: old path vs new, and the floor.

  python -m benchmarks.distance_layers [--model=smollm2] [--length=1024] [--layers=0,15,29]
      [--pairs=3] [--only=alg1,alg2,alg4] [--out=FILE]

One forward over the first corpus window (War and Peace: LIMITS_DATA_DIR or --data_dir as
for the experiments) gives the records of the chosen
layers (float32, as the model returns them; cast to float64 as the steps do). Then, alternating
in this process (benchmarks.common), per layer:

  alg1  N = 5, bound verified, printed E  (distance_vary_length at one L)
        old: host sort + thresholds + d_1 gather (layer_stats(sorted_rows=...)), then the
             printed-E hook on the full L² (limits.distance.printed.layer_expectation_means)
        new: limits.distance.layer_stats_printed (device top-k, prefix-max d_1, printed E in
             the same causal blocks)
  alg2  N ∈ {1, 5, 10, 20, 100}, the same two paths (distance_vary_n)
  alg4  N ∈ {1, 2, …, 128}, value vectors on the unit sphere (separability_model)
        old: host sort + separability_model.layer_sums_reference
        new: separability_model.layer_sums

The floor is the work the formulas need at the rates measured at the start of this run: the
GEMMs (per head: the context products s_N = A_N X and c_N = s_N Xᵀ per N, plus the shared
s_all, c_all, x̄ and Gram products, each over the causal half (L²/2)·d) at the measured float64
GEMM rate, plus the elementwise passes over the causal half per N (alg1/2: d̃, E, ε, three
printed-E sums, the d_max spread: 7; alg4: the distance and the r / count pass: 2) at the
measured float64 fused elementwise rate (sqrt + multiply-add + masked sum). Sorting is not in
the floor. Both paths must agree: the benchmark reports the largest relative difference of the
outputs (float64).
"""

from __future__ import annotations

import json
import time

from absl import app, flags

flags.DEFINE_string("model", "smollm2", "Model spec (limits.models.load): smollm2, tiny, a dir.")
flags.DEFINE_integer("length", 1024, "Window length L.")
flags.DEFINE_string("layers", "0,15,29", "Layers whose records are timed (clipped to the model).")
flags.DEFINE_integer("pairs", 3, "Alternating (old, new) pairs per stage.")
flags.DEFINE_string("only", "", "Comma-separated subset of alg1,alg2,alg4.")
flags.DEFINE_string("out", None, "Write the JSON report here too.")
FLAGS = flags.FLAGS

ALG1_NS = (5,)
ALG2_NS = (1, 5, 10, 20, 100)
ALG4_NS = (1, 2, 4, 8, 16, 32, 64, 128)


def rates(reps: int = 5) -> dict:
  """Measured float64 rates: GEMM (FLOP/s, a (1024, 1024)·(1024, 64) product as the kernels
  use) and fused elementwise (elements/s of sum(sqrt(a·b + c)) over a (1024, 1024) array)."""
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.key(0), (1024, 1024), jnp.float64)
  x = jax.random.normal(jax.random.key(1), (1024, 64), jnp.float64)
  gemm = jax.jit(lambda a, x: (a @ x) @ x.T)  # two narrow products, as per N
  elem = jax.jit(lambda a: jnp.sum(jnp.sqrt(jnp.abs(a * a + 0.5 * a))))

  def best(fn, *args):
    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(reps):
      t0 = time.perf_counter()
      jax.block_until_ready(fn(*args))
      ts.append(time.perf_counter() - t0)
    return min(ts)

  return {"gemm_flops": 2 * 2 * 1024 * 1024 * 64 / best(gemm, a, x),
          "elem_per_s": 1024 * 1024 / best(elem, a)}


def floor_s(kind: str, heads: int, L: int, d: int, ns, r: dict) -> float:
  """Floor seconds for one layer (see the module docstring)."""
  half = L * L / 2
  K = len(ns)
  if kind == "alg4":
    flops, passes = heads * K * 2 * half * d * 2, heads * K * 2 * half
  else:
    flops = heads * (2 * K + 4) * half * d * 2
    passes = heads * K * 7 * half
  return flops / r["gemm_flops"] + passes / r["elem_per_s"]


def layer_records(spec: str, L: int, layers):
  """[(layer, weights (1, H, L, L) float64, v (1, H, L, d) float64)] from one forward."""
  import numpy as np

  from limits import models
  from limits.records import sources

  model = sources.load_model(spec)
  tok = sources.corpus_windows(model, L, 1)
  keep = [l for l in layers if l < model.config.n_layer]
  out = []
  for layer, rec in models.iter_layers(model.params, np.asarray(tok[:1]), model.config):
    if layer in keep:
      out.append((layer, np.asarray(rec.weights, np.float64), np.asarray(rec.v, np.float64)))
  return model, out


def _max_rel(a, b) -> float:
  import numpy as np

  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  ok = np.isfinite(a) & np.isfinite(b)
  if not ok.any():
    return 0.0
  return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300)))


def distance_paths(w, v, ns):
  """(old, new) callables for one layer of Algorithms 1/2; each returns (HeadStats, means)."""
  from limits.distance import printed
  from limits import selection
  from limits.distance import kernels as distance_fast

  def old():
    st = distance_fast.layer_stats(w, v, ns, sorted_rows=selection.sort_rows(w))
    return st, printed.layer_expectation_means(w[0], v[0], ns)

  def new():
    st, means = distance_fast.layer_stats_printed(w, v, ns)
    return st, {k: m[0] for k, m in means.items()}

  return old, new


def separability_paths(w, v, ns):
  import jax.numpy as jnp
  import numpy as np

  from limits.separability import model as sm

  wj, vj = jnp.asarray(w[0]), jnp.asarray(v[0])

  def old():
    srt = sm.sort_rows_host(w[0])
    return np.asarray(sm.layer_sums_reference(wj, vj, jnp.asarray(ns, jnp.int32), 1.0,
                                              sorted_rows=jnp.asarray(srt)))

  def new():
    return np.asarray(sm.layer_sums(wj, vj, ns, 1.0))

  return old, new


def main(argv):
  del argv
  import jax

  jax.config.update("jax_enable_x64", True)
  import os

  from benchmarks import common

  only = set(FLAGS.only.split(",")) if FLAGS.only else {"alg1", "alg2", "alg4"}
  model, recs = layer_records(FLAGS.model, FLAGS.length, [int(x) for x in
                                                         FLAGS.layers.split(",")])
  r = rates()
  H, d = recs[0][1].shape[1], recs[0][2].shape[-1]
  report = {"model": FLAGS.model, "L": FLAGS.length, "layers": [l for l, _, _ in recs],
            "heads_per_layer": H, "d": d, "rates": r, "device": str(jax.devices()[0]),
            "load_1min": os.getloadavg()[0], "stages": {}}
  print(f"{FLAGS.model}, L = {FLAGS.length}, layers {report['layers']}, H = {H}, d = {d}; "
        f"rates: GEMM {r['gemm_flops'] / 1e9:.1f} GFLOP/s f64, elementwise "
        f"{r['elem_per_s'] / 1e9:.2f} Gelem/s f64; load {report['load_1min']:.1f}", flush=True)
  stages = [("alg1", ALG1_NS, distance_paths), ("alg2", ALG2_NS, distance_paths),
            ("alg4", ALG4_NS, separability_paths)]
  for name, ns, paths in stages:
    if name not in only:
      continue
    ns = tuple(n for n in ns if n < FLAGS.length)
    pairs = [paths(w, v, ns) for _, w, v in recs]
    run_old = lambda: [p[0]() for p in pairs]
    run_new = lambda: [p[1]() for p in pairs]
    res = common.alternate(run_old, run_new, FLAGS.pairs)
    fl = len(recs) * floor_s(name, H, FLAGS.length, d, ns, r)
    res["floor_s"] = fl
    res["new_over_floor"] = res["ours_median_s"] / fl
    res["old_over_floor"] = res["ref_median_s"] / fl
    res["max_rel_diff"] = _max_rel(jax.tree.leaves(run_new()), jax.tree.leaves(run_old())) \
        if name == "alg4" else max(_max_rel(a, b) for a, b in
                                   zip(jax.tree.leaves(run_new()), jax.tree.leaves(run_old())))
    report["stages"][name] = res
    print(common.line(f"{name} N = {list(ns)}, {len(recs)} layers (old = reference)", res)
          + f"; floor {fl:.2f} s: new {res['new_over_floor']:.1f}x, old "
          f"{res['old_over_floor']:.1f}x floor; max rel diff {res['max_rel_diff']:.1e}",
          flush=True)
  report["load_1min_end"] = os.getloadavg()[0]
  if FLAGS.out:
    from limits.runs.results import atomic_write_text

    atomic_write_text(FLAGS.out, json.dumps(report, indent=2, default=float) + "\n")


if __name__ == "__main__":
  app.run(main)
