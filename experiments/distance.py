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
blue, bound red; mean and IQR over heads, AMBIG-15) and ``results.json`` with the
measurements; the claims the run decides are printed from ``limits.claims``. Results are rewritten after every L so an interrupted run keeps what finished.

  LIMITS_DATA_DIR=/path/to/data python -m experiments.distance --mode=vary_length \
      --out_dir=results/distance/vary_length
"""

# A thin CLI over limits.distance.task: flags -> DistanceConfig -> distance_task.run (the
# computation lives in limits/distance*.py).

from __future__ import annotations

from absl import app, flags

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits.distance import task as distance_task

D = distance_task.DistanceConfig()  # the defaults

def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  flags.DEFINE_enum("mode", D.mode, list(distance_task.MODES), "Which Algorithm / panel of "
                    "Figure 2.")
  cli_flags.define_corpus_flags(D, model=cli_flags.MODEL_HELP)
  flags.DEFINE_string("lengths", D.lengths, "Comma-separated L values; default 32,64,...,"
                      "min(1024, context) for vary_length/critical_n and min(1024, context) for "
                      "vary_n.")
  flags.DEFINE_string("ns", D.ns, "Comma-separated top-N values; default 5 (vary_length) or "
                      "1,5,10,20,100 (vary_n). Ignored by critical_n (it searches N).")
  flags.DEFINE_enum("form", D.form, ["sum", "norm"], "d̃ reading for the plots and KS (AMBIG-1); "
                    "both are always computed and written.")
  flags.DEFINE_enum("vectors", D.vectors, ["value", "key", "hidden", "embedding"],
                    "Vectors x_i (AMBIG-7).")
  flags.DEFINE_enum("inclusion", D.inclusion, ["n_over_l_minus_1", "n_over_l"],
                    "Inclusion probability in E (AMBIG-3).")
  flags.DEFINE_float("ks_alpha", D.ks_alpha, "KS significance level (AMBIG-9).")
  flags.DEFINE_enum("search", D.search, ["bisect", "scan"], "critical_n: search over N.")
  flags.DEFINE_integer("batch", D.batch, "critical_n: Ns evaluated per forward pass.")
  flags.DEFINE_integer("max_n", D.max_n, "critical_n: largest N searched (default L-1).")
  cli_flags.define_run_flags(D, distance_task.EXPERIMENT, x64="Compute the distance statistics in "
                             "float64 where the bound is verified (vary_length, vary_n); "
                             "--nox64 for float32 everywhere.", plot="Write the figure.")
  flags.DEFINE_bool("ks_x64", D.ks_x64, "critical_n: float64 for the KS-only search too (default "
                    "float32: only a KS decision depends on it; tests/test_distance_fast.py shows "
                    "both precisions give the same decisions on the embedded model).")

  cli.require_positive_ints("batch", "max_n")
  cli.require("ks_alpha", lambda v: v is not None and 0 < v < 1, "be in (0, 1)")


main = cli_flags.task_main(distance_task.DistanceConfig, distance_task.run,
                           step=lambda c: f"distance_{c.mode}")


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
