"""The Figure 3 claims (Theorem 2) checked on per-head results, and the multi-head coverage."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def multi_head_coverage(p, heads):
  """1 - (1 - p)^H: the fraction of the top-N covered by H independent heads (the claim
  ``multihead-coverage`` of docs/claims.md)."""
  return 1.0 - (1.0 - np.asarray(p, np.float64)) ** np.asarray(heads, np.float64)


def figure3_verdicts(ns: Sequence[int], frac, lower, upper, *, stderr=None, heads: int,
                     band=(0.70, 0.85), knee=16, flat_tol=0.05, track_tol=0.10, z=3.0):
  """The paper's Figure 3 claims checked on per-head results.

  Args:
    ns: N grid (K,). frac, lower, upper: (K, heads) per-head N_s/N and per-head bounds
      (token- or sample-averaged, lower clipped at 0 as Algorithm 4 averages it).
    stderr: optional (K, heads) Monte Carlo standard errors: a bound is violated only when it
      is off by more than z * stderr.
    heads: H for the multi-head coverage 1 - (1 - p)^H.
    band: the claimed saturation band. knee: the claimed end of the decline.
    flat_tol: a change of the median smaller than this counts as flat (saturated).
    track_tol: "tracks the maxima" means upper - max frac <= track_tol at every N.

  Returns:
    (verdicts: list of ``limits.results.verdict`` dicts, summary: dict of per-N numbers).
  """
  from limits.results import verdict

  ns = [int(n) for n in ns]
  frac = np.asarray(frac, np.float64)
  lower = np.asarray(lower, np.float64)
  upper = np.asarray(upper, np.float64)
  tol = np.zeros_like(frac) if stderr is None else z * np.nan_to_num(
      np.asarray(stderr, np.float64), posinf=0.0)
  med = np.nanmedian(frac, axis=1)
  mx = np.nanmax(frac, axis=1)
  arg = np.nanargmax(frac, axis=1)
  summary = {
      "n": ns, "median": med, "mean": np.nanmean(frac, axis=1), "min": np.nanmin(frac, axis=1),
      "max": mx, "q25": np.nanpercentile(frac, 25, axis=1),
      "q75": np.nanpercentile(frac, 75, axis=1),
      "lower_median": np.nanmedian(lower, axis=1), "lower_max": np.nanmax(lower, axis=1),
      "upper_at_max_head": upper[np.arange(len(ns)), arg], "upper_max": np.nanmax(upper, axis=1),
  }
  out = []

  # 1. Decline until N ~ knee, then flat.
  stop = None
  for k in range(len(ns)):
    if all(med[j] >= med[k] - flat_tol for j in range(k, len(ns))):
      stop = ns[k]
      break
  declined = len(ns) > 1 and med[0] - np.min(med) > flat_tol
  holds = None if len(ns) < 3 else bool(
      declined and stop is not None and knee / 2 <= stop <= knee * 2)
  out.append(verdict(
      f"N_s/N declines until N ~ {knee}, then stays flat", holds,
      {"decline_stops_at_N": stop, "median_by_N": dict(zip(ns, med.round(4).tolist()))},
      detail=f"decline stops at the first N after which the median over heads never drops by "
      f"more than {flat_tol}; holds if that N is within [{knee // 2}, {knee * 2}]",
      reason="" if len(ns) >= 3 else "needs at least 3 values of N"))

  # 2. Saturation band.
  big = [k for k, n in enumerate(ns) if n >= knee]
  if big:
    mb = med[big]
    holds = bool(np.all((mb >= band[0]) & (mb <= band[1])))
    measured = {"median_range_N_ge_knee": [float(mb.min()), float(mb.max())],
                "mean_over_N_ge_knee": float(np.mean(mb))}
  else:
    holds, measured = None, None
  out.append(verdict(
      f"N_s/N saturates between {band[0]:.2f} and {band[1]:.2f} (about 80%)", holds, measured,
      detail=f"median over heads at every N >= {knee}",
      reason="" if big else f"no N >= {knee} in the grid"))

  # 3. Lower bound.
  viol = frac < lower - tol
  margin = frac - lower
  vacuous = float(np.mean(lower <= 0))
  out.append(verdict(
      "Theorem 2 lower bound holds", bool(not viol.any()),
      {"violations": int(viol.sum()), "cases": int(viol.size),
       "worst_margin_frac_minus_lower": float(np.nanmin(margin)),
       "fraction_clipped_to_zero": vacuous},
      detail="per head and N: N_s/N >= averaged clipped lower bound"
      + ("" if stderr is None else f" - {z} stderr")
      + "; 'fraction_clipped_to_zero' is where it is vacuous"))

  # 4. Upper bound tracks the maxima.
  uviol = frac > upper + tol
  gap = summary["upper_at_max_head"] - mx
  holds = bool(not uviol.any() and np.all(gap <= track_tol))
  out.append(verdict(
      "Theorem 2 upper bound tracks the empirical maxima", holds,
      {"upper_violations": int(uviol.sum()), "cases": int(uviol.size),
       "upper_minus_max_by_N": dict(zip(ns, gap.round(4).tolist())),
       "fails_at_N": [n for n, g in zip(ns, gap) if g > track_tol]},
      detail=f"gap = upper bound of the head with the largest N_s/N minus that N_s/N; holds if "
      f"the bound is never below N_s/N and the gap is <= {track_tol} at every N"))

  # 5. Multi-head coverage.
  p = float(np.mean(med[big])) if big else float(med[-1])
  cov = {"p": p, f"H={heads}": float(multi_head_coverage(p, heads)),
         "H=3": float(multi_head_coverage(p, 3))}
  out.append(verdict(
      "multi-head coverage 1-(1-p)^H: with p ~ 0.8, H ~ 3 heads cover ~99%",
      bool(cov["H=3"] >= 0.99), cov,
      detail="p = mean over N >= knee of the median N_s/N; assumes independent heads (not "
      "tested); holds if 3 heads reach 0.99 with the measured p"))
  return out, summary
