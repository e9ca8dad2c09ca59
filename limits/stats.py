"""Two-sample KS test and the critical-N search of Algorithm 3 (the paper, §3.2 and Fig. 2c; docs/claims.md).

Critical N: the smallest N at which the two-sample Kolmogorov-Smirnov test on the per-head
token-averaged true distances {d̄} vs expectations {Ē} does **not** reject at level α
(p-value > α, AMBIG-9; default α = 0.01).

Two search methods over the integers [n_min, n_max]:

- ``"scan"``: N = n_min, n_min+1, ... (in batches of ``batch`` values per call of the p-value
  function, so one model forward can serve a batch) until the first non-rejection. Exact.
- ``"bisect"``: a ``batch``-ary search that **assumes monotonicity** (reject for every N below
  the critical N, not reject from it on). Every probed (N, p) is recorded and the result says
  whether the recorded decisions (and the p-values themselves) were monotone in N; if the
  decisions were not monotone the assumption is refuted and the answer may differ from a scan.

Algorithm 3 as the paper runs it is an ascending loop over N that stops at the first N whose
test does not reject. :func:`ascending_scan` runs that loop for several KS samples at once (the
E forms, head subsamples; :func:`head_subsets`, :func:`group_representatives`) and keeps going
until each named sample's first *pass window* (a run of consecutive passing N) has closed, so a
decision that is not monotone in N (passes, then rejects again) is seen, not assumed away:
:func:`pass_windows`. The bisection is only valid where the decisions are monotone, which a
scan can refute and nothing here proves.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from limits.errors import LimitsError


class KSResult(NamedTuple):
  statistic: float
  pvalue: float


def ks_2samp(a, b) -> KSResult:
  """Two-sided two-sample KS test (scipy.stats.ks_2samp, method="auto"); NaNs are dropped."""
  a = np.asarray(a, np.float64).ravel()
  b = np.asarray(b, np.float64).ravel()
  a, b = a[np.isfinite(a)], b[np.isfinite(b)]
  if a.size == 0 or b.size == 0:
    raise LimitsError(f"KS test needs two non-empty samples, got sizes {a.size} and {b.size}")
  import scipy.stats  # here, not at the top: ~1.5 s of start-up for every CLI that never tests

  r = scipy.stats.ks_2samp(a, b)
  return KSResult(float(r.statistic), float(r.pvalue))


def indistinguishable(pvalue: float, alpha: float) -> bool:
  """The KS test does not reject at level alpha (p > alpha)."""
  return bool(pvalue > alpha)


class CriticalN(NamedTuple):
  n: int | None            # smallest non-rejecting N found; None if every probed N rejected
  alpha: float
  method: str
  evaluated: dict          # {N: p-value} for every N probed, ascending N
  decisions_monotone: bool  # no "not reject" at a smaller N than a "reject"
  pvalues_monotone: bool    # p-values non-decreasing in N over the probed N

  def as_dict(self):
    return {"critical_n": self.n, "alpha": self.alpha, "method": self.method,
            "evaluated": {int(k): float(v) for k, v in self.evaluated.items()},
            "decisions_monotone": self.decisions_monotone,
            "pvalues_monotone": self.pvalues_monotone}


def _summarise(evaluated: dict, alpha: float, method: str, n: int | None) -> CriticalN:
  ns = sorted(evaluated)
  ps = [evaluated[k] for k in ns]
  dec = [indistinguishable(p, alpha) for p in ps]
  dec_mono = all(not (dec[i] and not dec[i + 1]) for i in range(len(dec) - 1))
  p_mono = all(ps[i] <= ps[i + 1] for i in range(len(ps) - 1))
  return CriticalN(n, float(alpha), method, {k: evaluated[k] for k in ns}, dec_mono, p_mono)


def _check_search(alpha: float, n_min: int, n_max: int, batch: int) -> None:
  """One-line errors for a search's level, N range and batch."""
  if not 0 < alpha < 1:
    raise LimitsError(f"alpha={alpha} must be in (0, 1)")
  if n_min < 1 or n_max < n_min:
    raise LimitsError(f"N range [{n_min}, {n_max}] is empty or starts below 1")
  if batch < 1:
    raise LimitsError(f"batch={batch} must be positive")


def critical_n(pvalue_fn: Callable[[Sequence[int]], Sequence[float]], n_min: int, n_max: int, *,
               alpha: float = 0.01, method: str = "bisect", batch: int = 8) -> CriticalN:
  """Smallest N in [n_min, n_max] with p-value > alpha.

  Args:
    pvalue_fn: maps a list of Ns (at most ``batch``) to their KS p-values.
    method: "scan" (exact first crossing) or "bisect" (batch-ary search assuming monotone
      decisions; the result reports whether the probed decisions were monotone).
  """
  if method not in ("scan", "bisect"):
    raise LimitsError(f"method={method!r} is not one of ('scan', 'bisect')")
  _check_search(alpha, n_min, n_max, batch)
  evaluated: dict[int, float] = {}

  def probe(ns):
    ns = [int(n) for n in ns if int(n) not in evaluated]
    if ns:
      ps = list(pvalue_fn(ns))
      if len(ps) != len(ns):
        raise ValueError(f"pvalue_fn returned {len(ps)} values for {len(ns)} Ns")
      evaluated.update({n: float(p) for n, p in zip(ns, ps)})

  if method == "scan":
    start = n_min
    while start <= n_max:
      ns = list(range(start, min(start + batch, n_max + 1)))
      probe(ns)
      hits = [n for n in ns if indistinguishable(evaluated[n], alpha)]
      if hits:
        return _summarise(evaluated, alpha, method, hits[0])
      start += batch
    return _summarise(evaluated, alpha, method, None)

  lo, hi = n_min - 1, n_max + 1  # lo: rejects (or below range); hi: passes (or above range)
  while hi - lo > 1:
    width = hi - lo - 1
    k = min(batch, width)
    # k points spread evenly strictly inside (lo, hi)
    ns = sorted({lo + int(round((i + 1) * (width + 1) / (k + 1))) for i in range(k)})
    ns = [n for n in ns if lo < n < hi] or [lo + 1]
    probe(ns)
    passing = [n for n in ns if indistinguishable(evaluated[n], alpha)]
    if passing:
      hi = passing[0]
      below = [n for n in ns if n < hi]
      if below:
        lo = max(lo, below[-1])
    else:
      lo = ns[-1]
  n = hi if hi <= n_max else None
  return _summarise(evaluated, alpha, method, n)


def pass_windows(evaluated: dict, alpha: float) -> list[tuple[int, int]]:
  """Maximal runs [a, b] of consecutive integers N (all evaluated) whose p-value > alpha."""
  out: list[tuple[int, int]] = []
  for n in sorted(evaluated):
    if not indistinguishable(evaluated[n], alpha):
      continue
    if out and out[-1][1] == n - 1:
      out[-1] = (out[-1][0], n)
    else:
      out.append((n, n))
  return out


class Scan(NamedTuple):
  """An ascending scan of one KS sample: ``first_pass`` (the paper's critical N: the first N
  that does not reject; None if none did), its pass ``windows``, every ``evaluated`` (N, p)
  and whether the decisions were monotone over the scanned N."""

  first_pass: int | None
  windows: list
  evaluated: dict
  alpha: float
  decisions_monotone: bool

  def as_dict(self):
    return {"critical_n": self.first_pass, "alpha": self.alpha, "method": "ascending scan",
            "windows": [list(w) for w in self.windows],
            "evaluated": {int(k): float(v) for k, v in self.evaluated.items()},
            "decisions_monotone": self.decisions_monotone}


def ascending_scan(pvalues_fn: Callable[[Sequence[int]], dict], n_min: int, n_max: int, *,
                   alpha: float = 0.01, batch: int = 8,
                   until_closed: Sequence[str] = (), confirm: int = 16) -> dict[str, Scan]:
  """Algorithm 3's loop N = n_min, n_min + 1, … for several KS samples at once.

  Args:
    pvalues_fn: a list of Ns (at most ``batch``) -> {sample name: their p-values}.
    until_closed: the samples whose first pass window must settle before the scan stops: it
      closed (a rejection after a pass) or stayed open for ``confirm`` consecutive N (then it
      is reported open at its last N scanned); the others are recorded along. Every sample's
      scan ends at n_max.

  Returns {sample name: :class:`Scan`}: each sample's first pass and windows over the Ns scanned
  (a window still open at the last N scanned may extend beyond it).
  """
  _check_search(alpha, n_min, n_max, batch)
  evaluated: dict[str, dict[int, float]] = {}

  def closed(name: str) -> bool:
    ev = evaluated.get(name, {})
    wins = pass_windows(ev, alpha)
    return bool(wins) and (wins[0][1] < max(ev) or wins[0][1] - wins[0][0] + 1 >= confirm)

  start = n_min
  while start <= n_max:
    ns = list(range(start, min(start + batch, n_max + 1)))
    got = pvalues_fn(ns)
    for name, ps in got.items():
      ps = list(ps)
      if len(ps) != len(ns):
        raise ValueError(f"pvalues_fn returned {len(ps)} values of {name!r} for {len(ns)} Ns")
      evaluated.setdefault(name, {}).update({n: float(p) for n, p in zip(ns, ps)})
    start += batch
    if until_closed and all(closed(name) for name in until_closed):
      break
  out = {}
  for name, ev in evaluated.items():
    wins = pass_windows(ev, alpha)
    out[name] = Scan(wins[0][0] if wins else None, wins, dict(sorted(ev.items())), float(alpha),
                     _summarise(ev, alpha, "scan", None).decisions_monotone)
  return out


def head_subsets(n_heads: int, size: int = 144, draws: int = 5, seed: int = 0) -> list:
  """``draws`` seeded subsets of ``size`` head indices (without replacement, sorted), so a KS
  sample has the paper's GPT-2 head count (12 layers × 12 heads = 144); [] when there are no
  more than ``size`` heads (every head is used, nothing to subsample)."""
  if n_heads <= size:
    return []
  rng = np.random.default_rng(seed)
  return [np.sort(rng.choice(n_heads, size, replace=False)) for _ in range(draws)]


def group_representatives(n_layer: int, n_head: int, n_kv_head: int, seed: int = 0):
  """One seeded head per (layer, key/value group), layer-major indices: heads of one group share
  their values (GQA), so per-head samples within a group are not independent; a KS on one head
  per group is. With n_kv_head = n_head every head is its own group (all heads)."""
  if n_kv_head < 1 or n_head % n_kv_head:
    raise LimitsError(f"n_head={n_head} is not a multiple of n_kv_head={n_kv_head}")
  per = n_head // n_kv_head
  rng = np.random.default_rng(seed)
  return np.asarray([layer * n_head + g * per + int(rng.integers(per))
                     for layer in range(n_layer) for g in range(n_kv_head)])


def fit_ratio(ls, ns) -> dict:
  """Least-squares N ≈ c·L through the origin, plus a free line N ≈ a + b·L and its R²."""
  ls = np.asarray(ls, np.float64)
  ns = np.asarray(ns, np.float64)
  ok = np.isfinite(ls) & np.isfinite(ns)
  ls, ns = ls[ok], ns[ok]
  if ls.size == 0:
    return {"ratio": None, "slope": None, "intercept": None, "r2": None, "points": 0}
  c = float(ls @ ns / (ls @ ls))
  out = {"ratio": c, "points": int(ls.size)}
  out.update(linear_fit(ls, ns))
  return out


def linear_fit(xs, ys) -> dict:
  """y ≈ intercept + slope·x by least squares (``scipy.stats.linregress``), with R² (None when
  under-determined: fewer than 2 points or every x equal; R² = 1 when y is constant)."""
  xs = np.asarray(xs, np.float64)
  ys = np.asarray(ys, np.float64)
  if xs.size < 2 or np.ptp(xs) == 0:
    return {"slope": None, "intercept": None, "r2": None}
  import scipy.stats

  fit = scipy.stats.linregress(xs, ys)
  r2 = 1.0 if np.ptp(ys) == 0 else float(fit.rvalue) ** 2
  return {"slope": float(fit.slope), "intercept": float(fit.intercept), "r2": r2}


def loglog_slope(xs, ys) -> float:
  """Least-squares slope of log y against log x over the finite positive points (nan if fewer
  than 2 such points, or all their x equal); the base of the logarithm does not matter."""
  x, y = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
  ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
  fit = linear_fit(np.log10(x[ok]), np.log10(y[ok]))
  return float("nan") if fit["slope"] is None else fit["slope"]


def by_layer_kind(rows, layer_windows, keys, *, by=("L",), stat: str = "mean"):
  """Per-head rows (each with a ``layer``) split into local (sliding-window) and global layers,
  each reduced over its heads per value of ``by``: ``{kind: {"layers", "windows", "heads",
  "rows": [{**by, "heads", f"{key}_{stat}"}]}}`` with kind "local" (window W > 0) and
  "global" (0); None when every layer is global (``layer_windows`` None or all 0). ``stat``:
  "mean" or "median" over the kind's heads (NaN ignored). For a claim about growth in L, a
  local layer's queries see min(t, W) keys, so its trend past W is reported apart from the
  global layers' (issue 29)."""
  if not layer_windows or not any(layer_windows):
    return None
  reduce = {"mean": np.nanmean, "median": np.nanmedian}[stat]
  out = {}
  for kind in ("local", "global"):
    layers = [i for i, w in enumerate(layer_windows) if (int(w) > 0) == (kind == "local")]
    sel = [r for r in rows if int(r["layer"]) in layers]
    groups: dict = {}
    for r in sel:
      groups.setdefault(tuple(r[b] for b in by), []).append(r)
    out[kind] = {
        "layers": layers, "windows": sorted({int(layer_windows[i]) for i in layers}),
        "heads": len({(r["layer"], r.get("head")) for r in sel}),
        "rows": [{**dict(zip(by, g)), "heads": len(rs),
                  **{f"{k}_{stat}": float(reduce(np.asarray([float(r[k]) for r in rs])))
                     for k in keys}}
                 for g, rs in sorted(groups.items())]}
  return out
