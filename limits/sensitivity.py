"""Figure 4's claims about the curves g(T, ε) (PAPER.md §3.4, "Figure 4").

The paper reads two statements off its log–log plot of the max over heads of the token-averaged
g(T, ε) = ‖α((l + εv)/T) − α(l/T)‖₂ / ε:

1. **"For T < 0.1 the curves follow the 1/T trend of Corollary 3."** We fit the log–log slope of
   each ε-curve over the grid points T < ``low_t`` (default 0.1) by least squares; the claim holds
   when every slope lies in [−1 − ``slope_tol``, −1 + ``slope_tol``] (default tolerance 0.25, a
   quarter of the predicted exponent: loose enough for a visual "trend", tight enough that a flat
   or saturated curve, slope ≈ 0, fails).
2. **"For T ≥ 1 all curves collapse together and drop by about two orders of magnitude."**
   *Collapse*: at every grid point T ≥ ``high_t`` (default 1) the ε-curves agree within a factor
   ``collapse_factor`` (default 2, i.e. 0.3 decades on the log axis). *Drop*: each curve falls by
   ``2 ± drop_tol`` decades (default 0.5) between the smallest and largest T ≥ 1 of the grid; this
   part is only testable when that range spans two decades (the paper's 1…100), since over a
   shorter range the 1/T law cannot drop by two orders.

Both verdicts are "not testable" (with the reason) when the grid has fewer than two points in the
range. Pure NumPy on the small (K temperatures × E epsilons) table the experiment already has.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from limits.results import verdict


def loglog_slope(t, y) -> float:
  """Least-squares slope of log10 y against log10 t (nan if fewer than 2 finite positive points)."""
  t, y = np.asarray(t, np.float64), np.asarray(y, np.float64)
  ok = (t > 0) & (y > 0) & np.isfinite(t) & np.isfinite(y)
  if ok.sum() < 2:
    return float("nan")
  return float(np.polyfit(np.log10(t[ok]), np.log10(y[ok]), 1)[0])


def figure4_verdicts(temperatures: Sequence[float], curves: Mapping[str, Sequence[float]], *,
                     low_t: float = 0.1, high_t: float = 1.0, slope_tol: float = 0.25,
                     collapse_factor: float = 2.0, drop_decades: float = 2.0,
                     drop_tol: float = 0.5) -> list[dict]:
  """Verdicts for Fig. 4's two claims.

  Args:
    temperatures: the T grid (K,).
    curves: {ε label: (K,) values of the plotted statistic (max over heads of the token mean)}.

  Returns:
    two ``limits.results.verdict`` records: the "1/T" trend below ``low_t`` and the "collapse"
    above ``high_t``.
  """
  T = np.asarray(temperatures, np.float64)
  labels = list(curves)
  Y = np.asarray([np.asarray(curves[k], np.float64) for k in labels])   # (E, K)
  out = []

  low = T < low_t
  if low.sum() < 2:
    out.append(verdict(f"for T < {low_t:g} the max-over-heads g(T, eps) follows the 1/T trend",
                       None, None, reason=f"needs >= 2 temperatures below {low_t:g} in the grid"))
  else:
    slopes = {k: loglog_slope(T[low], Y[i, low]) for i, k in enumerate(labels)}
    holds = all(np.isfinite(s) and abs(s + 1) <= slope_tol for s in slopes.values())
    out.append(verdict(
        f"for T < {low_t:g} the max-over-heads g(T, eps) follows the 1/T trend", holds,
        {"loglog_slope_by_eps": slopes, "temperatures": int(low.sum())},
        detail=f"least-squares log-log slope per eps over T < {low_t:g}; holds when every slope "
        f"is within {slope_tol:g} of -1"))

  high = T >= high_t
  claim = (f"for T >= {high_t:g} the curves for all eps collapse and drop by about "
           f"{drop_decades:g} orders of magnitude")
  if high.sum() < 2:
    out.append(verdict(claim, None, None,
                       reason=f"needs >= 2 temperatures at or above {high_t:g} in the grid"))
    return out
  Yh = Y[:, high]
  with np.errstate(divide="ignore", invalid="ignore"):
    spread = np.log10(Yh.max(axis=0) / Yh.min(axis=0))                 # (K_high,) decades
  collapsed = bool(np.all(np.isfinite(spread)) and spread.max() <= np.log10(collapse_factor))
  th = T[high]
  i_lo = int(np.argmin(th))
  within = np.where(th <= th[i_lo] * 10**drop_decades * (1 + 1e-9), th, -np.inf)
  i_hi = int(np.argmax(within))          # largest T within drop_decades of the smallest T >= 1
  span = float(np.log10(th[i_hi] / th[i_lo]))
  with np.errstate(divide="ignore", invalid="ignore"):
    drops = {k: float(np.log10(Yh[i, i_lo] / Yh[i, i_hi])) for i, k in enumerate(labels)}
  measured = {"max_spread_decades": float(np.nanmax(spread)) if spread.size else float("nan"),
              "drop_decades_by_eps": drops, "T_range": [float(th[i_lo]), float(th[i_hi])]}
  if span < drop_decades - drop_tol:
    out.append(verdict(claim, None, measured,
                       reason=f"the grid spans only {span:.2g} decades above T = {th[i_lo]:g}; the "
                       f"claimed drop is over {drop_decades:g}"))
    return out
  dropped = all(np.isfinite(d) and abs(d - drop_decades) <= drop_tol for d in drops.values())
  out.append(verdict(
      claim, collapsed and dropped, measured,
      detail=f"collapse: eps-curves within a factor {collapse_factor:g} at every T >= "
      f"{high_t:g}; drop: each curve falls {drop_decades:g} +- {drop_tol:g} decades from "
      f"T = {th[i_lo]:g} to T = {th[i_hi]:g}"))
  return out
