r"""The normalizer scorecard (issue 17): which normalizer escapes which limitation, at what cost.

Every candidate normalizer is swapped into *every* attention layer of a trained model at
inference (weights unchanged; ``limits.models.forward(normalizer=...)``), and the paper's four
limitations are measured on held-out *War and Peace* windows, next to the language-model loss
and the forward time. Logit convention (AMBIG-12): the model's logits are z = q·k / T0 with
T0 = √d_head; a candidate with multiplier c sees c·z (``temperature = T0 / c`` in the engine).

Candidates (:data:`CANDIDATES`): softmax at T0, T0×0.5 and T0×2 (c = 1, 2, 0.5); sparsemax
(computed as α-entmax with α = 2 by bisection, ~2× faster on CPU than the sort; equal to
``normalizers.sparsemax``, tested); α-entmax α = 1.5 and 4/3 (4/3 rather than 1.25: the
bisection raises to the power 1/(α−1), and XLA on CPU computes x³ by multiplication but x⁴
through exp/log, which made 1.25-entmax 3× slower than softmax on SmolLM2 and 15× on the
embedded model); SSMax with s0 = 1/ln(L) (the
model's softmax at the last query of a window of the evaluation length); the general
normalizer of Eq. 3 with F = softplus.

Fair comparison (:func:`calibrate`): per *family* (softmax at any T is one family: c absorbs T)
one scalar c minimising the mean next-token NLL on calibration windows: ``grid`` log-spaced
points on [lo, hi] plus c = 1, then Brent's bounded search (``iters`` evaluations) between the
best grid point's neighbours; the answer is the best point evaluated. Deterministic given the
windows; the calibration windows are drawn with the seed from the corpus after the evaluation
windows (:func:`split_windows`), so the two sets are disjoint by construction.

Metrics (one row per candidate and calibration; all on the evaluation windows, float32 except
the Jacobians, which are float64 because they are compared with bounds):

- LM loss: mean next-token NLL (nats/token) and its paired difference to softmax at T0 with
  the standard error over tokens.
- Lemma 1: for causal prefixes t (query t−1 of each window sees exactly t keys, identical to
  a window of length t), max α·t per (window, layer, head): median over them, and the share of
  exactly-zero weights among the t visible ones (mean); the log-log slope of the median
  max α·t against t (0 = the Θ(1/L) of Lemma 1).
- Theorem 1 (``limits.distance`` fast path, value vectors, sum form, inclusion N/(t−1)):
  per-head token-averaged d̃ at N = 5 and 100 (median over heads) and the critical N of
  Algorithm 3 over L as Fig. 2c's primary reading: the ascending scan N = 1, 2, …, first N
  where KS at α = 0.01 does not reject per-head d̄ against the printed E (the reconstructed
  E's batch bisection over [1, L−1] beside it, ``critical_n_reconstructed``).
- Theorem 2 (``limits.separability.layer_sums``, value vectors on the unit sphere, strict
  rule): per head the mean over N ∈ ``sep_ns`` of the token-averaged N_s/N ("plateau"),
  median and IQR over heads.
- Lemma 2: on ``jac_rows`` seeded rows (window, layer, head, query with t ≥ 2) of the swapped
  model's own raw scores l, the exact ‖∂α/∂l‖₂ (jacfwd + SVD) of the normalizer as it runs in
  the model (α = N(c·l/T0)); its largest value and the bound it is checked against (softmax:
  Cor. 3 tight c/(2T0); SSMax: s0·ln t·c/(2T0); entmax family: c/T0, since J = diag(s) − ssᵀ/Σs
  with 0 ≤ s ≤ 1; softplus: Lemma 2's bound per row); and g(T, ε) = ‖α(l + εv) − α(l)‖₂/ε with
  a seeded random unit v (mean over the rows).
- Cost: forward time (with the LM head, the calibration batch) relative to softmax, the median
  over ``timing_rounds`` interleaved rounds (:func:`time_forwards`; each round times every
  family once, after one compiling call each). A multiplier does not change the cost, so the
  calibrated rows and softmax at other T share their family's number.

:func:`run` drives a whole scorecard with resume: each calibration (after every evaluation)
and each finished row is written under ``out_dir/parts`` with the configuration's digest and
reused by a rerun of the same configuration.

Modules: :mod:`~limits.scorecard.candidates`, :mod:`~limits.scorecard.config`,
:mod:`~limits.scorecard.windows`, :mod:`~limits.scorecard.loss` (loss and calibration),
:mod:`~limits.scorecard.timing`, :mod:`~limits.scorecard.metrics`,
:mod:`~limits.scorecard.jacobian`, :mod:`~limits.scorecard.row`, :mod:`~limits.scorecard.tables`
(table, sentences, report) and :mod:`~limits.scorecard.driver` (:func:`run`); every public name
is re-exported here.
"""

from limits.scorecard.candidates import (CANDIDATES, FAMILY_LABELS, REFERENCE, Candidate,
                                         normalizer, parse_candidates, softplus_normalizer,
                                         ssmax_s0)
from limits.scorecard.config import Config, metric_layers, row_keys
from limits.scorecard.driver import run
from limits.scorecard.jacobian import jacobian_bound, jacobian_metrics, jacobian_norms
from limits.scorecard.loss import calibrate, next_token_nll, token_nll
from limits.scorecard.metrics import (distance_metrics, lemma1_rows, lemma1_summary,
                                      sample_rows, separability_summary, separability_sums)
from limits.scorecard.row import evaluate_row
from limits.scorecard.tables import (markdown_table, paired_delta, report, row_scale,
                                     sample_sizes, sentences, table_rows)
from limits.scorecard.timing import relative_cost, time_forwards
from limits.scorecard.windows import split_windows, take_windows

__all__ = [
    "CANDIDATES", "FAMILY_LABELS", "REFERENCE", "Candidate", "Config", "calibrate",
    "distance_metrics", "evaluate_row", "jacobian_bound", "jacobian_metrics", "jacobian_norms",
    "lemma1_rows", "lemma1_summary", "markdown_table", "metric_layers", "next_token_nll",
    "normalizer", "paired_delta", "parse_candidates", "relative_cost", "report", "row_keys",
    "row_scale", "run", "sample_rows", "sample_sizes", "sentences", "separability_summary",
    "separability_sums", "softplus_normalizer", "split_windows", "ssmax_s0", "table_rows",
    "take_windows", "time_forwards", "token_nll",
]
