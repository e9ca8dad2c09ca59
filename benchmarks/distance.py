r"""Algorithms 1-3 (Theorem 1, Fig. 2) for one window: the fast path against the previous one.

  python -m benchmarks.distance [--model=tiny|gpt2_124m|smollm2] [--lengths=...] [--pairs=3]

Random tokens (only the time matters). Each algorithm is timed as its experiment step runs it,
forward passes included:

  alg1  Theorem 1 for N = 5 at every L in --lengths, bound verified (float64)
  alg2  L = max(--lengths), N ∈ {1, 5, 10, 20, 100}, bound verified (float64)
  alg3  critical-N bisection (batch 8, KS at α = 0.01) at every L (d̃ and E only)

ours = ``limits.distance.ModelEvaluator`` (rows sorted once on the host, per-N matrix products,
float32 for the KS-only search with the layers' sorted rows kept between probes). reference =
the previous path (``head_stats``: per-row ``lax.top_k`` and matrix-vector products, float64
everywhere as the experiment ran it, one forward per bisection round). Both run in this process,
alternating (benchmarks.common), and must agree: the benchmark checks the head means of d̃, E,
d_max (relative 1e-9 for the float64 stages) and the critical N of every L.
"""

from __future__ import annotations

import json

from absl import app, flags

flags.DEFINE_string("model", "tiny", "tiny, gpt2_124m (random weights), smollm2, or a model dir.")
flags.DEFINE_string("lengths", "32,64,128,256,512,1024", "Lengths for Algorithms 1 and 3.")
flags.DEFINE_integer("pairs", 3, "Alternating (reference, ours) pairs per stage.")
flags.DEFINE_string("only", "", "Comma-separated subset of alg1,alg2,alg3.")
flags.DEFINE_string("out", None, "Write the JSON report here too.")
FLAGS = flags.FLAGS


class Reference:
  """The previous evaluation path, kept here as the benchmark's reference."""

  def __init__(self, params, config):
    self.params, self.config = params, config

  def head_stats(self, tok, ns, bound, dtype):
    import jax
    import jax.numpy as jnp

    from limits import distance, models

    parts = []
    for _, rec in models.iter_layers(self.params, tok, self.config):
      hs = distance.head_stats(rec.weights.astype(dtype), rec.v.astype(dtype),
                               jnp.asarray(ns, jnp.int32), n_cap=max(ns), bound=bound)
      parts.append(jax.tree.map(lambda v: v[0], hs))
    return jax.tree.map(lambda v: __import__("numpy").asarray(v), distance.concat_heads(parts))

  def critical_n(self, tok, n_max, dtype):
    from limits import distance, stats

    def pv(ns):
      padded = list(ns) + [ns[-1]] * (8 - len(ns))
      m = distance.token_means(self.head_stats(tok, padded, False, dtype))
      return [stats.ks_2samp(m["d_sum"][:, k], m["expected"][:, k]).pvalue
              for k in range(len(ns))]

    return stats.critical_n(pv, 1, n_max, alpha=0.01, method="bisect", batch=8)


def main(argv):
  del argv
  import jax

  jax.config.update("jax_enable_x64", True)
  import numpy as np

  from benchmarks import common
  from limits import distance

  config, params = common.load_model(FLAGS.model)
  lengths = [int(v) for v in FLAGS.lengths.split(",") if int(v) <= config.n_positions]
  L_max = max(lengths)
  only = set(FLAGS.only.split(",")) if FLAGS.only else {"alg1", "alg2", "alg3"}
  rng = np.random.default_rng(0)
  toks = {L: rng.integers(0, config.vocab_size, size=(1, L)).astype(np.int32) for L in lengths}
  ours = distance.ModelEvaluator(params, config)  # float64 bound stages, float32 KS search
  ref = Reference(params, config)
  heads = config.n_layer * config.n_head
  report = {"model": FLAGS.model, "heads": heads, "lengths": lengths,
            "device": str(jax.devices()[0]), "stages": {}, "agreement": {}}
  f64 = np.float64

  def means(st):
    return {k: np.asarray(v) for k, v in distance.token_means(st).items()}

  def agree(a, b):
    return max(float(np.nanmax(np.abs(a[k] - b[k]) / np.maximum(np.abs(b[k]), 1e-300)))
               for k in ("d_sum", "expected", "dmax_sum"))

  if "alg1" in only:
    run_ours = lambda: [ours.head_stats(toks[L], [5], bound=True) for L in lengths]
    run_ref = lambda: [ref.head_stats(toks[L], [5], True, f64) for L in lengths]
    report["stages"]["alg1"] = common.alternate(run_ref, run_ours, FLAGS.pairs)
    report["agreement"]["alg1_max_rel"] = max(agree(means(a), means(b)) for a, b in
                                              zip(run_ours(), run_ref()))
    print(common.line("alg1 (N = 5, every L, bound)", report["stages"]["alg1"]), flush=True)
  if "alg2" in only:
    ns2 = [n for n in (1, 5, 10, 20, 100) if n < L_max]
    run_ours = lambda: ours.head_stats(toks[L_max], ns2, bound=True)
    run_ref = lambda: ref.head_stats(toks[L_max], ns2, True, f64)
    report["stages"]["alg2"] = common.alternate(run_ref, run_ours, FLAGS.pairs)
    report["agreement"]["alg2_max_rel"] = agree(means(run_ours()), means(run_ref()))
    print(common.line(f"alg2 (L = {L_max}, N = {ns2}, bound)", report["stages"]["alg2"]),
          flush=True)
  if "alg3" in only:
    found = {}
    run_ours = lambda: found.__setitem__("ours", [ours.critical_n(toks[L], L - 1).n
                                                  for L in lengths])
    run_ref = lambda: found.__setitem__("ref", [ref.critical_n(toks[L], L - 1, f64).n
                                                for L in lengths])
    report["stages"]["alg3"] = common.alternate(run_ref, run_ours, FLAGS.pairs)
    report["agreement"]["alg3_critical_n"] = {"ours": found["ours"], "reference": found["ref"],
                                              "equal": found["ours"] == found["ref"]}
    print(common.line("alg3 (critical-N bisection, every L)", report["stages"]["alg3"]),
          flush=True)
  total_ours = sum(s["ours_median_s"] for s in report["stages"].values())
  total_ref = sum(s["ref_median_s"] for s in report["stages"].values())
  report["total"] = {"ours_s": total_ours, "reference_s": total_ref,
                     "ratio": total_ref / max(total_ours, 1e-12)}
  report["paper_reported"] = {"alg1_min": 24, "alg2_min": 37, "alg3_h": 17.07,
                              "hardware": "Apple M1 Pro 10-core CPU, GPT-2 124M"}
  print(f"total ({'+'.join(report['stages'])}): reference {total_ref:.1f} s, ours "
        f"{total_ours:.1f} s ({report['total']['ratio']:.1f}x); agreement "
        f"{json.dumps(report['agreement'])}")
  text = json.dumps(report, indent=2, default=float)
  if FLAGS.out:
    from limits.runs.results import atomic_write_text

    atomic_write_text(FLAGS.out, text + "\n")


if __name__ == "__main__":
  app.run(main)
