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

from absl import app

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits.distance import task as distance_task


def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(distance_task.DistanceConfig)


main = cli_flags.task_main(distance_task.DistanceConfig, distance_task.run,
                           step=lambda c: f"distance_{c.mode}")


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
