r"""Algorithms 1-3 / Figure 2: Theorem 1 on real attention (distance collapse, critical N).

Modes (AMBIG-14 grids by default):

- ``--mode=vary_length`` (Alg. 1, Fig. 2a): N = 5 (``--ns``), L ∈ ``--lengths`` (default
  32, 64, ..., up to min(1024, model context)).
- ``--mode=vary_n`` (Alg. 2, Fig. 2b): L = 1024 (or the model context), N ∈ {1, 5, 10, 20, 100}.
- ``--mode=critical_n`` (Alg. 3, Fig. 2c): for each L, the smallest N whose two-sample KS test
  on the per-head token-averaged d̃ vs E does not reject at ``--ks_alpha`` (AMBIG-9), by a
  batch-ary bisection (``--search=bisect``; monotonicity recorded and checked) or a scan.

Every query t uses its causal prefix (t visible keys), queries with t <= N are skipped and the
first-token sink is kept (AMBIG-8); per head the values are token-averaged (over queries and
``--windows`` consecutive L-token corpus windows). Vectors x_i (AMBIG-7, ``--vectors``):
``value`` = per-head value vectors (default), ``key`` = per-head key vectors, ``hidden`` = the
layer's normalised residual stream (ln_1 / input RMSNorm output, shared by the heads),
``embedding`` = wte[token]. One forward per L (and per bisection step) serves every
N; the model is streamed layer by layer.

Outputs in ``--out_dir``: ``per_head.csv`` (one row per L, N, layer, head; both d̃ forms),
``summary.csv``, ``critical_n.csv``, ``fig2_<mode>.png`` (true distance green, expectation
blue, bound red; mean and IQR over heads, AMBIG-15) and ``results.json`` with the claims'
verdicts. Results are rewritten after every L so an interrupted run keeps what finished.

  LIMITS_DATA_DIR=/work/shared/data python -m experiments.distance --mode=vary_length \
      --out_dir=results/distance/vary_length
"""

from __future__ import annotations

import time

from absl import app, flags

from limits import cli
from limits import data as data_lib

FLAGS = flags.FLAGS

MODES = ("vary_length", "vary_n", "critical_n")
flags.DEFINE_enum("mode", "vary_length", list(MODES), "Which Algorithm / panel of Figure 2.")
flags.DEFINE_string("model", "tiny", "'tiny' (embedded), a GPT-2 name, or a model directory.")
flags.DEFINE_string("text", None, "A text file to use instead of the corpus.")
flags.DEFINE_string("data_dir", None, data_lib.DATA_DIR_HELP)
flags.DEFINE_integer("windows", 1, "Consecutive non-overlapping L-token windows per L.")
flags.DEFINE_string("lengths", "", "Comma-separated L values; default 32,64,...,min(1024, "
                    "context) for vary_length/critical_n and min(1024, context) for vary_n.")
flags.DEFINE_string("ns", "", "Comma-separated top-N values; default 5 (vary_length) or "
                    "1,5,10,20,100 (vary_n). Ignored by critical_n (it searches N).")
flags.DEFINE_enum("form", "sum", ["sum", "norm"], "d̃ reading for the plots and KS (AMBIG-1); "
                  "both are always computed and written.")
flags.DEFINE_enum("vectors", "value", ["value", "key", "hidden", "embedding"],
                  "Vectors x_i (AMBIG-7).")
flags.DEFINE_enum("inclusion", "n_over_l_minus_1", ["n_over_l_minus_1", "n_over_l"],
                  "Inclusion probability in E (AMBIG-3).")
flags.DEFINE_float("ks_alpha", 0.01, "KS significance level (AMBIG-9).")
flags.DEFINE_enum("search", "bisect", ["bisect", "scan"], "critical_n: search over N.")
flags.DEFINE_integer("batch", 8, "critical_n: Ns evaluated per forward pass.")
flags.DEFINE_integer("max_n", None, "critical_n: largest N searched (default L-1).")
flags.DEFINE_integer("seed", 0, "Random seed (recorded; the computation is deterministic).")
flags.DEFINE_bool("x64", True, "Compute the distance statistics in float64 where the bound is "
                  "verified (vary_length, vary_n); --nox64 for float32 everywhere.")
flags.DEFINE_bool("ks_x64", False, "critical_n: float64 for the KS-only search too (default "
                  "float32: only a KS decision depends on it; tests/test_distance_fast.py shows "
                  "both precisions give the same decisions on the embedded model).")
flags.DEFINE_string("out_dir", None, "Run directory (default results/distance/<time>).")
flags.DEFINE_bool("plot", True, "Write the figure.")

for _name in ("windows", "batch", "max_n"):
  flags.register_validator(_name, cli.positive, message=f"--{_name} must be a positive integer")
flags.register_validator("ks_alpha", lambda v: v is not None and 0 < v < 1,
                         message="--ks_alpha must be in (0, 1)")

EXPERIMENT = "distance"
CONFIG_FLAGS = ("mode", "model", "text", "data_dir", "windows", "lengths", "ns", "form",
                "vectors", "inclusion", "ks_alpha", "search", "batch", "max_n", "seed", "x64",
                "ks_x64")


def _lengths(model, mode):
  ctx = model.config.n_positions
  if mode == "vary_n" and not FLAGS.lengths.strip():
    return [min(1024, ctx)]
  return cli.parse_lengths(FLAGS.lengths, ctx, model.name, minimum=2)


def _ns(mode, lengths):
  from limits.errors import check

  if mode == "critical_n":
    return []
  default = "5" if mode == "vary_length" else "1,5,10,20,100"
  ns = sorted(set(cli.parse_ints(FLAGS.ns or default, "ns")))
  for n in ns:
    check(n >= 1, f"--ns contains N={n}; every N must be >= 1")
    check(n < min(lengths), f"--ns contains N={n} >= L={min(lengths)}; need N < L (queries "
          "with t <= N have no non-selected key, AMBIG-8)")
  return ns


def main(argv):
  del argv
  cli.setup_precision(FLAGS.x64)
  import numpy as np

  from limits import distance as dist_lib
  from limits import results as res
  from limits import sources
  from limits.progress import Progress

  mode = FLAGS.mode
  model = sources.load_model(FLAGS.model)
  lengths = _lengths(model, mode)
  ns = _ns(mode, lengths)
  out_dir = res.prepare_out_dir(FLAGS.out_dir, EXPERIMENT)
  config = res.flags_config(FLAGS, CONFIG_FLAGS)
  config.update({"lengths_used": lengths, "ns_used": ns, "model_info": model.info()})
  # Windows first (cheap), so a too-short corpus fails before any compute.
  tokens_by_l = {L: sources.corpus_windows(model, L, FLAGS.windows, text=FLAGS.text,
                                           data_dir=FLAGS.data_dir) for L in lengths}
  dtype = np.float64 if FLAGS.x64 else np.float32
  ks_dtype = np.float64 if (FLAGS.x64 and FLAGS.ks_x64) else np.float32
  evaluator = dist_lib.ModelEvaluator(model.params, model.config, vectors=FLAGS.vectors,
                                      inclusion=FLAGS.inclusion, dtype=dtype, ks_dtype=ks_dtype)
  config["dtype"] = np.dtype(dtype).name
  config["ks_dtype"] = np.dtype(ks_dtype).name
  n_layer = model.config.n_layer
  per_head_rows, summary_rows, crit_rows = [], [], []
  state = {"timings": {}, "per_l": {}}
  t_start = time.perf_counter()

  def flush(final=False):
    res.write_csv(out_dir / "per_head.csv", per_head_rows) if per_head_rows else None
    res.write_csv(out_dir / "summary.csv", summary_rows) if summary_rows else None
    res.write_csv(out_dir / "critical_n.csv", crit_rows) if crit_rows else None
    results = dist_lib.figure2_verdicts(mode, summary_rows, crit_rows, per_head_rows,
                                        form=FLAGS.form, ks_alpha=FLAGS.ks_alpha)
    results.update({"complete": final, "timings_s": state["timings"],
                    "wall_s": time.perf_counter() - t_start, "model": model.info(),
                    "critical_n": state.get("critical"), "ks": state.get("ks")})
    res.write_results(out_dir, EXPERIMENT, config, results, seed=FLAGS.seed)

  if mode in ("vary_length", "vary_n"):
    state["ks"] = []
    total = len(lengths) * FLAGS.windows * n_layer
    with Progress(total, f"distance {mode}", unit="layer") as bar:
      for L in lengths:
        t0 = time.perf_counter()
        # The paper's printed E (both readings of x̄) and the reconstruction with N/L, from the
        # same forward, so every reading of the claims can be judged.
        extra = dist_lib.PrintedExpectations(ns)
        stats = evaluator.head_stats(tokens_by_l[L], ns, n_cap=max(ns), bound=True,
                                     on_layer=lambda: bar.update(1), layer_hook=extra)
        state["timings"][f"L={L}"] = time.perf_counter() - t0
        rows, summ, ks = dist_lib.tabulate(stats, L, ns, n_layer, model.config.n_head,
                                           form=FLAGS.form)
        dist_lib.add_head_means(rows, summ, extra.means(), ns)
        per_head_rows += rows
        summary_rows += summ
        state["ks"] += ks
        flush()
  else:
    crit = {}
    state["critical"] = crit
    with Progress(len(lengths), "distance critical_n", unit="L") as bar:
      for L in lengths:
        t0 = time.perf_counter()
        n_hi = min(FLAGS.max_n or (L - 1), L - 1)
        found = evaluator.critical_n(tokens_by_l[L], n_hi, alpha=FLAGS.ks_alpha,
                                     form=FLAGS.form, method=FLAGS.search, batch=FLAGS.batch)
        state["timings"][f"L={L}"] = time.perf_counter() - t0
        crit[str(L)] = found.as_dict()
        crit_rows.append({"L": L, "critical_n": found.n,
                          "ratio": (found.n / L) if found.n else None,
                          "probes": len(found.evaluated),
                          "decisions_monotone": found.decisions_monotone,
                          "pvalues_monotone": found.pvalues_monotone,
                          "seconds": state["timings"][f"L={L}"]})
        bar.update(1)
        flush()
  flush(final=True)
  if FLAGS.plot:
    from limits.plotting import distance as plot_lib

    plot_lib.figure2(mode, summary_rows, crit_rows, out_dir / f"fig2_{mode}.png",
                     form=FLAGS.form)
  print(f"wrote {out_dir}")


if __name__ == "__main__":
  app.run(cli.guard(main))
