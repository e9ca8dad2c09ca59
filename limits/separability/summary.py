"""Figure 3's per-N summary over heads (Theorem 2; measurements only) and the multi-head
coverage arithmetic."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def multi_head_coverage(p, heads):
  """1 - (1 - p)^H: the fraction of the top-N covered by H independent heads (the claim
  ``multihead-coverage`` of docs/claims.md)."""
  return 1.0 - (1.0 - np.asarray(p, np.float64)) ** np.asarray(heads, np.float64)


def figure3_summary(ns: Sequence[int], frac, lower, upper) -> dict:
  """Figure 3's per-N numbers over heads (measurements only; ``limits.claims`` judges them).

  Args:
    ns: N grid (K,). frac, lower, upper: (K, heads) per-head N_s/N and per-head bounds
      (token- or sample-averaged, lower clipped at 0 as Algorithm 4 averages it).

  Returns:
    {"n", "median", "mean", "min", "max", "q25", "q75" of N_s/N over heads; "lower_median",
    "lower_max"; "upper_at_max_head" (the bound of the head with the largest N_s/N),
    "upper_max"}, each (K,).
  """
  ns = [int(n) for n in ns]
  frac = np.asarray(frac, np.float64)
  lower = np.asarray(lower, np.float64)
  upper = np.asarray(upper, np.float64)
  arg = np.nanargmax(frac, axis=1)
  return {
      "n": ns, "median": np.nanmedian(frac, axis=1), "mean": np.nanmean(frac, axis=1),
      "min": np.nanmin(frac, axis=1), "max": np.nanmax(frac, axis=1),
      "q25": np.nanpercentile(frac, 25, axis=1), "q75": np.nanpercentile(frac, 75, axis=1),
      "lower_median": np.nanmedian(lower, axis=1), "lower_max": np.nanmax(lower, axis=1),
      "upper_at_max_head": upper[np.arange(len(ns)), arg], "upper_max": np.nanmax(upper, axis=1),
  }
