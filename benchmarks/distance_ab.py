r"""One layer of Theorem 1's fast path against the same module at an earlier commit, alternating.

  python -m benchmarks.distance_ab --ref=3bd29db [--model=smollm2] [--length=1024] [--pairs=3]

Loads ``limits/distance/kernels.py`` (and its ``farthest.py``) as they were at ``--ref`` (``git show``; it must import only
modules that still exist) beside the current one, takes one layer's weights and value vectors
from the model (random tokens: only the time matters), checks that both give the same
HeadStats (1e-12 relative, float64), then times ``layer_stats`` for each case, reference and
ours alternating in this process, and prints the median ratio with the spread.
``--vectors=hidden``: the residual stream (B, L, D), one array shared by every head.
Cases: N = 5 with the bound (Algorithm 1 at one L), N ∈ {1, 5, 10, 20, 100} with the bound
(Algorithm 2), 8 N without the bound in float32 (one Algorithm 3 probe), all on the
host-threshold path; ``alg1p``, ``alg2p``: the same Ns as the steps run them (the device path
with the printed E folded in, ``layer_stats_printed``, float32 weights, float64 statistics);
``alg3s``: one probe of the critical_n search (8 N near 0.8·L, float32, host-sorted rows; ours
``lean``); ``alg3top``: the scan's kept selection order per layer (the reference's top
N_max + 1 = L/4 + 1 keys, ours the top 33 padded: ``limits.distance.scan.SCAN_TOP_MIN``).
"""

from __future__ import annotations

from absl import app, flags

from benchmarks import common

flags.DEFINE_string("ref", "HEAD", "Git revision of the reference limits/distance/kernels.py.")
flags.DEFINE_string("model", "smollm2", "tiny, gpt2_124m (random weights), smollm2, or a dir.")
flags.DEFINE_integer("length", 1024, "Window length L.")
flags.DEFINE_integer("layer", 1, "Which layer's records to use.")
flags.DEFINE_integer("pairs", 3, "Alternating (reference, ours) pairs per case.")
flags.DEFINE_enum("vectors", "value", ["value", "hidden"], "x_i: the per-head value vectors "
                  "(B, H, L, d), or the residual stream (B, L, D) shared by every head "
                  "(AMBIG-7's hidden reading, as the step passes it when L >= D).")
flags.DEFINE_string("cases", "alg1,alg2,alg3", "Which cases: alg1 (N = 5, bound), alg2 (five N, "
                    "bound), alg3 (8 N, KS probe); alg1p, alg2p (device path with the printed "
                    "E, as the vary_length / vary_n steps call it); alg3s (the critical_n "
                    "search's probe: 8 N near 0.8 L, float32, as ModelEvaluator.ks_pvalues "
                    "calls it: lean where ours has it); alg3top (the scan's selection order "
                    "per L: the reference's top N_max + 1 = L/4 + 1 keys, ours the top 33 "
                    "padded, limits.distance.scan.SCAN_TOP_MIN).")
FLAGS = flags.FLAGS


def _load_ref(rev: str):
  """kernels.py at ``rev``, with the d_1 helpers (limits/distance/farthest.py) of the same
  revision where it has them (else the reference would time today's prefix maxima)."""
  ref = common.module_at(rev, "limits/distance/kernels.py", "distance_fast_ref")
  if hasattr(ref, "farthest"):
    ref.farthest = common.module_at(rev, "limits/distance/farthest.py", "distance_farthest_ref")
  return ref


def main(argv):
  del argv
  import jax

  jax.config.update("jax_enable_x64", True)
  import jax.numpy as jnp
  import numpy as np

  from limits import models
  from limits.distance import kernels as ours

  ref = _load_ref(FLAGS.ref)
  config, params = common.load_model(FLAGS.model)
  L = min(FLAGS.length, config.n_positions)
  tok = np.random.default_rng(0).integers(0, config.vocab_size, size=(1, L)).astype(np.int32)
  for i, (_, rec) in enumerate(models.iter_layers(params, jnp.asarray(tok), config)):
    if i == FLAGS.layer:
      break
  w = np.asarray(rec.weights, np.float64)
  x = np.asarray(rec.v if FLAGS.vectors == "value" else rec.x, np.float64)
  w32, x32 = w.astype(np.float32), x.astype(np.float32)
  cases = {"alg1": ("N = 5, bound, float64", w, x, [5], True),
           "alg2": ("N = 1,5,10,20,100, bound, float64", w, x, [1, 5, 10, 20, 100], True),
           "alg3": ("8 N, no bound, float32", w32, x32, list(range(1, 9)), False),
           "alg1p": ("N = 5, bound + printed E, device path", w32, x, [5], "printed"),
           "alg2p": ("N = 1,5,10,20,100, bound + printed E, device path", w32, x,
                     [1, 5, 10, 20, 100], "printed")}
  near = [int(0.8 * L) + i for i in range(8)]
  cases.update({"alg3s": ("critical_n search probe, 8 N near 0.8 L, float32", w32, x32, near,
                          "search"),
                "alg3top": ("critical_n scan selection order, N_max = L/4", w32, x32, [], "top")})
  cases = [cases[c] for c in FLAGS.cases.split(",")]
  print(f"{FLAGS.model}, L = {L}, layer {FLAGS.layer}, heads {w.shape[1]}, "
        f"{FLAGS.vectors} vectors of {x.shape[-1]} dimensions; "
        f"reference = limits/distance/kernels.py at {FLAGS.ref}", flush=True)
  for name, wc, xc, ns, bound in cases:
    if bound == "top":  # Algorithm 3's scan: the order it keeps per L (no statistics)
      import inspect

      wj = jnp.asarray(wc.reshape((-1,) + wc.shape[-2:]))
      kmax = ours.top_k_size(max(1, L // 4), L)
      k_ours = min(ours.top_k_size(32, L), kmax)
      padded = "width" in inspect.signature(ref.layer_top).parameters
      run = {ref: (lambda: ref.layer_top(wj, jnp.arange(1, kmax + 1, dtype=jnp.int32) if not
                                         padded else jnp.arange(1, k_ours + 1, dtype=jnp.int32),
                                         kmax=kmax if not padded else k_ours, blocks=4,
                                         **({"width": kmax} if padded else {}))),
             ours: (lambda: ours.layer_top(wj, jnp.arange(1, k_ours + 1, dtype=jnp.int32),
                                           kmax=k_ours, blocks=4, width=kmax))}
      jax.block_until_ready(run[ref]()), jax.block_until_ready(run[ours]())
      res = common.alternate(lambda: jax.block_until_ready(run[ref]()),
                             lambda: jax.block_until_ready(run[ours]()), pairs=FLAGS.pairs,
                             warmup=False)
      print("  " + common.line(f"{name}, per layer", res), flush=True)
      continue
    if bound == "search":
      import inspect

      srt = ours.sort_rows(wc)
      lean = {m: ({"lean": True} if "lean" in inspect.signature(m.layer_stats).parameters
                  else {}) for m in (ref, ours)}
      run = {m: (lambda m=m: m.layer_stats(wc, xc, ns, bound=False, sorted_rows=srt, **lean[m]))
             for m in (ref, ours)}
      a, b = run[ref](), run[ours]()
      same = all(np.array_equal(np.asarray(getattr(b, f)), np.asarray(getattr(a, f)))
                 for f in ("count", "d_sum", "d_norm", "expected"))
      for f in ("count", "d_sum", "d_norm", "expected"):  # what the KS test reads
        np.testing.assert_allclose(np.asarray(getattr(b, f), np.float64),
                                   np.asarray(getattr(a, f), np.float64), rtol=1e-6, err_msg=f)
      print(f"  (search probe: d̃, E and counts bitwise equal: {same})", flush=True)
      res = common.alternate(run[ref], run[ours], pairs=FLAGS.pairs, warmup=False)
      print("  " + common.line(f"{name}, per layer", res), flush=True)
      continue
    if bound == "printed":
      run = {m: (lambda m=m: m.layer_stats_printed(wc, xc, ns, bound=True, dtype=np.float64))
             for m in (ref, ours)}
    else:
      srt = ours.sort_rows(wc)
      run = {m: (lambda m=m: m.layer_stats(wc, xc, ns, bound=bound, sorted_rows=srt))
             for m in (ref, ours)}
    a, b = run[ref](), run[ours]()  # warm-up (compiles) and agreement
    if bound == "printed":
      (a, pa), (b, pb) = a, b
      for k in pa:
        np.testing.assert_allclose(pb[k], pa[k], rtol=1e-12, err_msg=k)
    for f in a._fields:
      np.testing.assert_allclose(np.asarray(getattr(b, f), np.float64),
                                 np.asarray(getattr(a, f), np.float64),
                                 rtol=1e-12 if xc.dtype == np.float64 else 1e-4, err_msg=f)
    res = common.alternate(run[ref], run[ours], pairs=FLAGS.pairs, warmup=False)
    print("  " + common.line(f"{name}, per layer", res), flush=True)


if __name__ == "__main__":
  app.run(main)
