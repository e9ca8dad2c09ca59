"""Gradient sensitivity (Corollary 3, Lemma 2; Algorithm 5 and Figure 4 of the paper).

For each temperature T the normalizer is applied to l / T (raw-logit scale, AMBIG-12) and:

- the exact Jacobian norm ‖∂α/∂l‖₂ of a subsample of ``--rows`` rows: jacfwd + dense SVD for
  L ≤ ``--dense_max_length``, matrix-free power iteration (jvp/vjp) above; compared with the
  closed form (dense matrix, or the O(L) secular-equation norm for softmax) and with central
  differences on ``--check_rows`` rows, with the tolerances used;
- the paper's g(T, ε) = ‖α(l + εv) − α(l)‖₂/ε with a fresh random unit v over the visible
  positions, for every row and every ε (mean and max over rows; for ``--source=model`` also the
  paper's statistic: max over (layer, head) of the token-averaged g);
- Corollary 3 in the paper's form min{1/(4T), √2} and the tight bound 1/(2T), marking every row
  whose exact norm exceeds either (softmax only: the bounds are about softmax), Lemma 2's bound,
  and the tied-top-two counterexample row (α = (½, ½, 0, …), ‖J‖₂ = 1/(2T) exactly).

Synthetic source: ``--rows`` rows of length ``--length``, entries i.i.d. N(0, σ²) with
σ = ``--logit_scale`` (default 8 = √64, the scale on which GPT-2's own T is 8), all visible.
Model source: ``limits.records.sources.model_logit_rows`` (raw q·k of every layer, head and query with
the causal mask); exact Jacobians on a random subsample of ``--rows`` rows.

Writes results.json, gradient.csv (one line per T), rows.csv (one line per T and exact row, with
the violation flags) and gradient.png (Figure 4 style).

  python -m experiments.gradient --temperature=0.05
  python -m experiments.gradient --source=model --model=tiny --length=128
"""

# A thin CLI over limits.gradient.task: flags -> GradientConfig -> gradient.plan/run ->
# gradient_report.write_outputs (the computation lives in limits/gradient*.py).

from __future__ import annotations

import functools

from absl import app, flags

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits.gradient import task as gradient
from limits.gradient import report as gradient_report
from limits.runs import results as results_lib

FLAGS = flags.FLAGS

def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(gradient.GradientConfig)


def main(argv):
  del argv
  config = cli_flags.config_from_flags(gradient.GradientConfig)
  cli.setup_precision(config.x64)
  plan = gradient.plan(config)  # parses and validates; one-line errors before any output
  out_dir = results_lib.prepare_out_dir(config.out_dir, gradient.EXPERIMENT)
  write = functools.partial(results_lib.write_results, out_dir, gradient.EXPERIMENT,
                            results_lib.config_record(config), seed=config.seed)
  result = gradient.run(plan, checkpoint=write, units=gradient.resume_units(config, out_dir))
  gradient_report.write_outputs(out_dir, plan, result, write)
  if config.normalizer == "softmax":  # the paper's claims are about softmax
    from limits.claims import step_report

    step_report.print_run("gradient" if config.source == "model" else "gradient_synthetic",
                          out_dir)


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
