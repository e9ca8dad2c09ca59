r"""Lemma 1 / Corollary 1 on model attention: weights ×L against the softmax band.

For every L in ``--lengths``, window, layer, head and query t (t visible keys, causal prefix),
the softmax weights at the model's own temperature T = √d_head on the raw q·k scale
(AMBIG-12) must satisfy Corollary 1:

    e^{−2Δ/T} ≤ α_i·t ≤ e^{2Δ/T},   Δ = ‖q_t‖ · max_{i≤t} ‖k_i‖   (AMBIG-2).

The check is done in log space, log α_i = l_i/T − logsumexp_j(l_j/T), so neither an underflowed
weight nor an overflowing band can fake a result. The band is the one of
``limits.bounds.corollary1_band``; the check itself is ``limits.vanishing.causal_check``, which
computes ``limits.bounds.corollary1_causal_check`` on the causal triangle only (tests check that
the three agree). Per head the last query
(which sees all L keys) gives max α·L and min α·L, plotted against L with the band.

Attention sinks are measured on the same weights: per head the mean weight on token 0 over the
query rows that can see it (Sink_ε of Gu et al. 2025, sail-sg/Attention-Sink; ε = 0.3), as
``per_head.csv`` columns ``sink_score`` / ``sink_above`` and results ``sinks`` (the share of
heads × windows above ε per L and layer; ``limits.vanishing.sink_scores``).

Outputs: ``per_head.csv``, ``summary.csv``, ``vanishing.png``, ``results.json`` (measurements; the claims it decides are printed from limits.claims).

  python -m experiments.vanishing --out_dir=results/vanishing

The corpus is War and Peace from ``--text``, ``--data_dir`` or ``LIMITS_DATA_DIR``, else the
copy embedded in the package (``limits.data.resolve_corpus``).
"""

# A thin CLI over limits.vanishing: flags -> VanishingConfig -> vanishing.run (the computation
# lives in limits/vanishing.py and limits/bounds.py).

from __future__ import annotations

from absl import app

from limits import cli, vanishing
from limits.cli import shared_flags as cli_flags


def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(vanishing.VanishingConfig)


main = cli_flags.task_main(vanishing.VanishingConfig, vanishing.run,
                           step=lambda c: "vanishing")


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
