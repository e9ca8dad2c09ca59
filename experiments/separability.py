r"""Algorithm 4 / Figure 3: geometric separability N_s/N and Theorem 2's bounds.

Two sources of (weights, vectors):

- ``--source=sphere``: ``--heads`` synthetic weight rows (``--alpha_kind``) over L tokens, with
  fresh points uniform on S^{dim-1}(M) for each of ``--samples`` Monte Carlo samples (the same
  points for every N and every row: common random numbers).
- ``--source=model``: a pretrained model (``--model``: the embedded "tiny", GPT-2, SmolLM2-135M
  or a checkpoint; default "tiny"),
  ``--windows`` windows of L corpus tokens; per head, the vectors ``--vectors`` (AMBIG-7: value
  vectors by default, key vectors, or the layer's normalised residual stream shared by the
  heads) projected onto the sphere, and the attention rows of every query with its causal
  prefix; queries with t <= N visible keys are skipped (AMBIG-8); averaged per head (and over
  windows).

Writes ``per_head.csv`` (one row per N and head), ``summary.csv`` (per N), ``figure3.png`` and
``results.json`` with the measurements (the claims it decides are printed from limits.claims).
Blocks of Monte Carlo samples (sphere) or per-layer (model) results are written as they finish,
so an interrupted run keeps them.

  python -m experiments.separability --source=sphere --out_dir=results/separability/sphere
  LIMITS_DATA_DIR=/path/to/data python -m experiments.separability --source=model \
      --out_dir=results/separability/tiny
"""

# A thin CLI over limits.separability.task: flags -> SeparabilityConfig -> separability_task.grid
# and run (the computation lives in limits/separability*.py).

from __future__ import annotations

import time

from absl import app, flags

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits.separability import task as separability_task

FLAGS = flags.FLAGS

def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(separability_task.SeparabilityConfig)


def main(argv):
  del argv
  config = cli_flags.config_from_flags(separability_task.SeparabilityConfig)
  ns = separability_task.grid(config)             # validate before JAX starts (fast errors)
  cli.setup_precision(config.x64)
  from limits.runs import results as res

  out_dir = res.prepare_out_dir(config.out_dir, separability_task.EXPERIMENT)
  t0 = time.perf_counter()
  separability_task.run(config, out_dir, ns)
  print(f"separability ({config.source}): wrote {out_dir} in {time.perf_counter() - t0:.1f} s")
  from limits.claims import step_report

  step_report.print_run(f"separability_{config.source}", out_dir)


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
