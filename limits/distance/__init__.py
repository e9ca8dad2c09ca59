"""Theorem 1 and Corollary 2: cumulative distance d̃, its bound d_max, the expectation E.

The public module (``limits.distance.*``): every name is defined in one of the modules below,
each one concept, and re-exported here.

- :mod:`limits.distance.rows`: one query row (the notation, the formulas and their readings,
  AMBIG-1/3/4/8 of docs/ambiguities.md): :func:`cumulative_distance` (d̃),
  :func:`theorem1_bound` (d_max), :func:`expected_distance` (E), :func:`jensen_gap_bound`,
  :func:`context_vector`, :func:`top_n_terms`, :func:`monte_carlo_distance`, and the multi-N
  core :func:`row_stats`.
- :mod:`limits.distance.heads`: per-head sums over queries (:class:`HeadStats`), the reference
  batched path :func:`head_stats` over per-layer records (traceable, used by the sweep engine),
  :func:`reduce_windows`, :func:`concat_heads`, :func:`token_means`.
- :mod:`limits.distance.kernels`: the fast per-layer path :func:`layer_stats` (top-N selection
  on the device, every N a threshold, per-N work as matrix products), same values as
  :func:`head_stats`. Selection itself (sorting, thresholds, the tie rule) is
  :mod:`limits.selection`.
- :mod:`limits.distance.model`: a model's layers → per-head statistics
  (:class:`ModelEvaluator`, :func:`record_vectors`, :class:`PrintedExpectations`) and the
  experiment's tables (:func:`tabulate`, :func:`add_head_means`).
"""

from limits.distance.kernels import causal_blocks, default_blocks, layer_stats
from limits.distance.heads import (HeadStats, combine, concat_heads, head_stats, reduce_rows,
                                   reduce_windows, token_means)
from limits.distance.model import (FIELDS, VECTORS, ModelEvaluator, PrintedExpectations,
                                   add_head_means, record_vectors, tabulate)
from limits.distance.rows import (FORMS, INCLUSIONS, MonteCarloEstimate, RowStats, TopN,
                                  check_form, check_inclusion, context_vector,
                                  cumulative_distance, expected_distance, jensen_gap_bound,
                                  monte_carlo_distance, row_stats, selection_terms, sqrt0,
                                  theorem1_bound, top_n_terms)

__all__ = [
    "FIELDS", "FORMS", "INCLUSIONS", "VECTORS", "HeadStats", "ModelEvaluator",
    "MonteCarloEstimate", "PrintedExpectations", "RowStats", "TopN",
    "add_head_means", "causal_blocks", "check_form", "check_inclusion", "combine",
    "concat_heads", "default_blocks", "context_vector", "cumulative_distance", "expected_distance",
    "head_stats", "jensen_gap_bound", "layer_stats", "monte_carlo_distance",
    "record_vectors", "reduce_rows", "reduce_windows", "row_stats", "selection_terms",
    "sqrt0", "tabulate", "theorem1_bound", "token_means", "top_n_terms",
]
