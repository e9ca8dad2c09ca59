r"""Algorithms 1-3 (Theorem 1, Fig. 2) on the GPT-2 124M architecture: limits vs a NumPy loop.

Random weights (``limits.gpt2.init_params``) and random tokens: only the time matters here.
Stages, each timed on its own (compile excluded by a warm-up where it is reused):

  forward    one streamed forward at L (12 layers, attention records), per L
  alg1       Theorem 1 stats for N = 5 at every L in --lengths (bound included)
  alg2       L = max(--lengths), N ∈ {1, 5, 10, 20, 100} (bound included)
  alg3       critical-N bisection per L (KS on 144 heads; d̃ and E only, as Algorithm 3)

Reference: a straightforward per-head, per-query NumPy loop (top-N by argsort, explicit vector
differences for d̃ and E, pairwise distances for d_1). It is timed on ``--ref_heads`` heads and
``--ref_queries`` evenly spaced queries and **extrapolated** linearly to 144 heads × all
queries (the work per query grows with t, so the evenly spaced sample is unbiased for the sum).

  python -m benchmarks.distance --out=results/benchmarks/distance.json
"""

from __future__ import annotations

import json
import time

from absl import app, flags

flags.DEFINE_string("lengths", "32,64,128,256,512,1024", "Lengths for Algorithms 1 and 3.")
flags.DEFINE_integer("ref_heads", 2, "Heads timed for the NumPy reference.")
flags.DEFINE_integer("ref_queries", 32, "Queries per head timed for the NumPy reference.")
flags.DEFINE_string("out", None, "Write the JSON report here too.")
FLAGS = flags.FLAGS


def numpy_row(a, x, n, with_e=True, with_bound=True):
  """Plain per-query reference for one row (t visible keys)."""
  import numpy as np

  t = a.shape[0]
  order = np.argsort(-a, kind="stable")
  sel, rest = order[:n], order[n:]
  s = a[sel] @ x[sel]
  d = np.linalg.norm(a[rest, None] * x[rest] - s, axis=1).sum()
  out = {"d": d}
  if with_bound:
    abar = a[sel].sum()
    d1 = np.linalg.norm(x[rest][:, None, :] - x[sel][None, :, :], axis=-1).max()
    rn = np.linalg.norm(x[sel], axis=1).max()
    out["dmax"] = (1 - abar) * d1 + rn * np.abs(abar - a[rest]).sum()
  if with_e:
    p = n / (t - 1)
    tot = a @ x
    out["e"] = (t - n) / t * np.linalg.norm(a[:, None] * x - p * (tot - a[:, None] * x),
                                            axis=1).sum()
  return out


def main(argv):
  del argv
  import jax
  import jax.numpy as jnp
  import numpy as np

  from limits import distance, gpt2

  lengths = [int(v) for v in FLAGS.lengths.split(",")]
  L_max = max(lengths)
  config = gpt2.Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
  params = gpt2.init_params(jax.random.key(0), config)
  rng = np.random.default_rng(0)
  toks = {L: rng.integers(0, config.vocab_size, size=(1, L)).astype(np.int32) for L in lengths}
  ev = distance.ModelEvaluator(params, config)
  report = {"device": str(jax.devices()[0]), "heads": 144, "stages": {}}

  def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    jax.block_until_ready(r) if r is not None and not isinstance(r, (list, dict)) else None
    return r, time.perf_counter() - t0

  # Forward alone (streamed, records materialised).
  fwd = {}
  for L in lengths:
    def go(L=L):
      last = None
      for _, rec in gpt2.iter_layers(params, toks[L], config):
        last = rec.weights
      return jax.block_until_ready(last)
    go()  # compile
    fwd[L] = timed(go)[1]
  report["stages"]["forward_s"] = fwd

  def alg(ns, L, bound):
    return ev.head_stats(toks[L], ns, n_cap=max(ns), bound=bound)

  a1 = {}
  for L in lengths:
    alg([5], L, True)  # compile
    a1[L] = timed(lambda L=L: alg([5], L, True))[1]
  report["stages"]["alg1_s"] = a1
  report["stages"]["alg1_total_s"] = sum(a1.values())
  ns2 = [n for n in (1, 5, 10, 20, 100) if n < L_max]
  alg(ns2, L_max, True)
  report["stages"]["alg2_s"] = timed(lambda: alg(ns2, L_max, True))[1]

  a3 = {}
  for L in lengths:
    t0 = time.perf_counter()
    r = ev.critical_n(toks[L], L - 1, alpha=0.01, method="bisect", batch=8)
    a3[L] = {"seconds_incl_compile": time.perf_counter() - t0, "probes": len(r.evaluated),
             "critical_n": r.n}
  report["stages"]["alg3"] = a3
  report["stages"]["alg3_total_s"] = sum(v["seconds_incl_compile"] for v in a3.values())

  # NumPy reference on a subset, extrapolated.
  recs = dict(gpt2.iter_layers(params, toks[L_max], config, layers=[0]))
  w = np.asarray(recs[0].weights[0], np.float64)  # (H, L, L)
  v = np.asarray(recs[0].v[0], np.float64)  # (H, L, d)
  qs = np.linspace(5, L_max - 1, FLAGS.ref_queries).astype(int)
  numpy_row(w[0, 20, :21], v[0, :21], 5)  # warm-up
  ref = {}
  for label, ns, bound in (("alg1_L_max", [5], True), ("alg2", ns2, True)):
    t0 = time.perf_counter()
    for h in range(FLAGS.ref_heads):
      for q in qs:
        for n in ns:
          if q + 1 > n:
            numpy_row(w[h, q, :q + 1], v[h, :q + 1], n, with_bound=bound)
    dt = time.perf_counter() - t0
    ref[label] = dt * (144 / FLAGS.ref_heads) * (L_max / len(qs))
  ref_note = (f"timed on {FLAGS.ref_heads} heads x {len(qs)} evenly spaced queries at "
              f"L={L_max}, extrapolated linearly to 144 heads x {L_max} queries")
  # Check the two agree on one row (float64 both).
  row = numpy_row(w[0, L_max - 1], v[0], 5)
  with jax.enable_x64(True):
    st = distance.row_stats(jnp.asarray(w[0, L_max - 1]), jnp.asarray(v[0]), jnp.array([5]), 5)
  agree = {"d": abs(float(st.d_sum[0]) - row["d"]) / row["d"],
           "dmax": abs(float(st.dmax_sum[0]) - row["dmax"]) / row["dmax"],
           "e": abs(float(st.expected[0]) - row["e"]) / row["e"]}
  ours_l_max = a1[L_max] - fwd[L_max]
  report["numpy_reference"] = {"extrapolated_s": ref, "note": ref_note,
                               "relative_difference_one_row": agree}
  report["ratios"] = {
      "alg1_L_max_numpy_over_limits_excl_forward": ref["alg1_L_max"] / max(ours_l_max, 1e-9),
      "alg2_numpy_over_limits_excl_forward":
          ref["alg2"] / max(report["stages"]["alg2_s"] - fwd[L_max], 1e-9),
      "alg2_numpy_over_limits_incl_forward": ref["alg2"] / report["stages"]["alg2_s"]}
  report["paper_reported"] = {"alg1_min": 24, "alg2_min": 37, "alg3_h": 17.07,
                              "hardware": "Apple M1 Pro 10-core CPU"}
  text = json.dumps(report, indent=2, default=float)
  print(text)
  if FLAGS.out:
    from limits.results import atomic_write_text

    atomic_write_text(FLAGS.out, text + "\n")


if __name__ == "__main__":
  app.run(main)
