"""Pure numerical criteria the judges share: log-log slopes, straight-line R², the smallest
attainable KS p-value, and the saturation test (a curve that moves up to a knee, then flattens)."""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

from limits import stats
from limits.claims.core import Missing

# Saturation: the slope after the knee at most this fraction of the slope before (Fig. 2b, Fig. 3).
PLATEAU_RATIO = 0.5


def linear_r2(xs: Sequence[float], ys: Sequence[float]) -> float:
  """R² of the least-squares straight line y ≈ a + b·x (nan if under-determined)."""
  r2 = stats.linear_fit(xs, ys)["r2"]
  return float("nan") if r2 is None else r2


def ks_min_pvalue(n: int, m: Optional[int] = None) -> float:
  """The smallest p-value an exact two-sided two-sample KS test can give with sample sizes n
  and m (both samples fully separated, D = 1): 2 / C(n + m, n)."""
  m = n if m is None else m
  return min(1.0, 2.0 / math.comb(n + m, n))


def saturation(ns: Sequence[float], ys: Sequence[float], knee: float) -> dict[str, float]:
  """Log-log slopes of y(N) before and after the knee: ``before`` from the first N to the knee,
  ``after`` from the knee to the last N, and ``change_before`` = y(knee)/y(first) − 1."""
  pts = sorted(zip(ns, ys))
  n0, y0 = pts[0]
  nl, yl = pts[-1]
  yk = dict(pts).get(knee)
  if yk is None or not n0 < knee < nl:
    raise Missing(f"values at N = {knee:g} and on both sides of it")
  if min(y0, yk, yl) <= 0:
    raise Missing("positive values at the first N, the knee and the last N")
  before = math.log(yk / y0) / math.log(knee / n0)
  after = math.log(yl / yk) / math.log(nl / knee)
  return {"before": before, "after": after, "change_before": yk / y0 - 1.0,
          "first": n0, "last": nl}


def saturates(sat: Mapping[str, float], direction: int, ratio: float = 0.5,
              min_change: float = 0.10) -> bool:
  """True when the curve first moves by at least ``min_change`` (relative) in ``direction``
  (+1 grows, −1 declines) up to the knee, then its log-log slope after the knee is at most
  ``ratio`` times the slope before (in absolute value)."""
  moved = direction * sat["change_before"] >= min_change * (1 - 1e-12)
  return bool(moved and abs(sat["after"]) <= ratio * abs(sat["before"]) * (1 + 1e-12))
