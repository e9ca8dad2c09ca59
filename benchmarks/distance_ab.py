r"""One layer of Theorem 1's fast path against the same module at an earlier commit, alternating.

  python -m benchmarks.distance_ab --ref=3bd29db [--model=smollm2] [--length=1024] [--pairs=3]

Loads ``limits/distance/kernels.py`` as it was at ``--ref`` (``git show``; it must import only
modules that still exist) beside the current one, takes one layer's weights and value vectors
from the model (random tokens: only the time matters), checks that both give the same
HeadStats (1e-12 relative, float64), then times ``layer_stats`` for each case, reference and
ours alternating in this process, and prints the median ratio with the spread.
Cases: N = 5 with the bound (Algorithm 1 at one L), N ∈ {1, 5, 10, 20, 100} with the bound
(Algorithm 2), 8 N without the bound in float32 (one Algorithm 3 probe), all on the
host-threshold path; ``alg1p``, ``alg2p``: the same Ns as the steps run them (the device path
with the printed E folded in, ``layer_stats_printed``, float32 weights, float64 statistics).
"""

from __future__ import annotations

from absl import app, flags

from benchmarks import common

flags.DEFINE_string("ref", "HEAD", "Git revision of the reference limits/distance/kernels.py.")
flags.DEFINE_string("model", "smollm2", "tiny, gpt2_124m (random weights), smollm2, or a dir.")
flags.DEFINE_integer("length", 1024, "Window length L.")
flags.DEFINE_integer("layer", 1, "Which layer's records to use.")
flags.DEFINE_integer("pairs", 3, "Alternating (reference, ours) pairs per case.")
flags.DEFINE_string("cases", "alg1,alg2,alg3", "Which cases: alg1 (N = 5, bound), alg2 (five N, "
                    "bound), alg3 (8 N, KS probe); alg1p, alg2p (device path with the printed "
                    "E, as the vary_length / vary_n steps call it).")
FLAGS = flags.FLAGS


def _load_ref(rev: str):
  return common.module_at(rev, "limits/distance/kernels.py", "distance_fast_ref")


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
  w, x = np.asarray(rec.weights, np.float64), np.asarray(rec.v, np.float64)
  w32, x32 = w.astype(np.float32), x.astype(np.float32)
  cases = {"alg1": ("N = 5, bound, float64", w, x, [5], True),
           "alg2": ("N = 1,5,10,20,100, bound, float64", w, x, [1, 5, 10, 20, 100], True),
           "alg3": ("8 N, no bound, float32", w32, x32, list(range(1, 9)), False),
           "alg1p": ("N = 5, bound + printed E, device path", w32, x, [5], "printed"),
           "alg2p": ("N = 1,5,10,20,100, bound + printed E, device path", w32, x,
                     [1, 5, 10, 20, 100], "printed")}
  cases = [cases[c] for c in FLAGS.cases.split(",")]
  print(f"{FLAGS.model}, L = {L}, layer {FLAGS.layer}, heads {w.shape[1]}, d_head {x.shape[-1]}; "
        f"reference = limits/distance/kernels.py at {FLAGS.ref}", flush=True)
  for name, wc, xc, ns, bound in cases:
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
