r"""Compile time and run time of Theorem 1's device layer kernel, against an earlier commit.

  python -m benchmarks.distance_compile --ref=c5f0aa7 [--model=tiny] [--cases=...] [--pairs=2]

Loads ``limits/distance/kernels.py`` as it was at ``--ref`` beside the current one (as
benchmarks.distance_ab), takes layer 0's records of one forward of the model on random
tokens (float32, as the experiments get them), and per case times, alternating reference and
ours in this process with JAX's in-memory caches cleared before every first call and the
persistent compilation cache off:

  first  the first call: trace + compile + one run (what a step pays once per shape)
  run    a later call of the same shapes (median of 3)

Cases (``--cases``, comma-separated ``alg1@L``, ``alg2@L``, ``hidden@L``, ``ks@L``):
  alg1@L    N = 5, bound, printed E, value vectors, float64 (distance_vary_length at L)
  alg2@L    N ∈ {1, 5, 10, 20, 100} (those < L), otherwise as alg1 (distance_vary_n)
  hidden@L  as alg1 with the layer's residual stream (B, L, D) shared by the heads (AMBIG-7)
  ks@L      8 N ∈ {1, …, 8}, no bound, printed E, float32 (one Algorithm 3 scan probe)

Both must agree: the largest relative difference of every output is printed (float64 cases:
1e-12 is the tolerance of tests/test_distance_fast.py).
"""

from __future__ import annotations

import statistics
import time

from absl import app, flags

flags.DEFINE_string("ref", "c5f0aa7", "Git revision of the reference limits/distance/kernels.py.")
flags.DEFINE_string("model", "tiny", "Model spec (benchmarks.common.load_model).")
flags.DEFINE_string("cases", "alg1@128,alg1@512,alg2@512,hidden@512,ks@256",
                    "Comma-separated cases (see the module docstring).")
flags.DEFINE_integer("pairs", 2, "Alternating (reference, ours) pairs per case.")
FLAGS = flags.FLAGS

ALG2_NS = (1, 5, 10, 20, 100)


def _case(kind: str, L: int, rec):
  """(ns, x, dtype, bound) of one case from one layer record."""
  import numpy as np

  if kind == "alg1":
    return [5], rec.v, np.float64, True
  if kind == "alg2":
    return [n for n in ALG2_NS if n < L], rec.v, np.float64, True
  if kind == "hidden":
    return [5], rec.x, np.float64, True
  if kind == "ks":
    return list(range(1, 9)), rec.v, np.float32, False
  raise SystemExit(f"error: case {kind!r} is not one of alg1, alg2, hidden, ks")


def main(argv):
  del argv
  import jax

  jax.config.update("jax_enable_x64", True)
  jax.config.update("jax_enable_compilation_cache", False)
  import os

  import jax.numpy as jnp
  import numpy as np

  from benchmarks import common
  from limits import models
  from limits.distance import kernels as ours

  ref = common.module_at(FLAGS.ref, "limits/distance/kernels.py", "distance_fast_ref")
  config, params = common.load_model(FLAGS.model)
  print(f"{FLAGS.model}; reference = limits/distance/kernels.py at {FLAGS.ref}; device "
        f"{jax.devices()[0]}; load {os.getloadavg()[0]:.1f}", flush=True)
  for spec in FLAGS.cases.split(","):
    kind, L = spec.split("@")
    L = min(int(L), config.n_positions)
    tok = np.random.default_rng(0).integers(0, config.vocab_size, size=(1, L)).astype(np.int32)
    _, rec = next(iter(models.iter_layers(params, jnp.asarray(tok), config)))
    ns, x, dtype, bound = _case(kind, L, rec)
    w = rec.weights  # float32 device arrays, as ModelEvaluator passes them
    run = {m: (lambda m=m: jax.block_until_ready(m.layer_stats_printed(w, x, ns, bound=bound,
                                                                       dtype=dtype)))
           for m in (ref, ours)}
    first = {ref: [], ours: []}
    steady = {ref: [], ours: []}
    outs = {}
    for _ in range(FLAGS.pairs):
      for m in (ref, ours):
        jax.clear_caches()
        first[m].append(common.timed(run[m]))
        ts = []
        for _ in range(3):
          t0 = time.perf_counter()
          outs[m] = run[m]()
          ts.append(time.perf_counter() - t0)
        steady[m].append(statistics.median(ts))
    diff = 0.0
    for a, b in zip(jax.tree.leaves(outs[ours]), jax.tree.leaves(outs[ref])):
      a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
      ok = np.isfinite(a) & np.isfinite(b)
      if ok.any():
        diff = max(diff, float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]),
                                                                            1e-300))))
    med = lambda v: statistics.median(v)
    rf = [r / o for r, o in zip(first[ref], first[ours])]
    print(f"  {kind} L = {L}, N = {ns}, d = {x.shape[-1]}, {np.dtype(dtype).name}: first call "
          f"(compile) reference {med(first[ref]):.2f} s, ours {med(first[ours]):.2f} s "
          f"(ratio {med(rf):.1f}x, {min(rf):.1f}-{max(rf):.1f}); run reference "
          f"{med(steady[ref]):.3f} s, ours {med(steady[ours]):.3f} s; max rel diff {diff:.1e}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
  app.run(main)
