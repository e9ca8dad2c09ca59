"""Judges of Theorem 1 and Figure 2 (steps ``distance_vary_length``, ``distance_vary_n``,
``distance_critical_n``): the cumulative distance d̃, its bound and expectation, critical N."""

from __future__ import annotations

import math

from typing import Any, Mapping, Optional

from limits.claims.core import FAILS, HOLDS, NOT_TESTABLE, Missing, Verdict, fmt, need, num
from limits.claims.criteria import PLATEAU_RATIO, ks_min_pvalue, linear_r2, saturates, saturation
from limits.stats import loglog_slope


def _rows(s: Mapping[str, Any]) -> list[dict[str, Any]]:
  rows = s.get("rows")
  if not rows:
    raise Missing("summary")
  return rows


def _series(rows, key: str, by: str, **fixed) -> tuple[list[float], list[float]]:
  """(x, y) sorted by ``by`` for rows matching ``fixed``; Missing if ``key`` is absent."""
  sel = [r for r in rows if all(num(r.get(k, "nan")) == v for k, v in fixed.items())]
  if not sel:
    raise Missing(f"summary rows with {fixed}")
  sel.sort(key=lambda r: num(r[by]))
  if any(r.get(key) is None for r in sel):
    raise Missing(key)
  return [num(r[by]) for r in sel], [num(r[key]) for r in sel]


def _d_key(reading: Mapping[str, str]) -> str:
  return "d_norm_mean" if reading.get("AMBIG-1") == "norm" else "d_sum_mean"


def _printed_e_key(reading: Mapping[str, str]) -> str:
  return ("expected_printed_xmean_mean" if reading.get("AMBIG-17") == "mean"
          else "expected_printed_output_mean")


def _derived_e(rows, by: str, reading: Mapping[str, str], **fixed):
  """The reconstructed E series under AMBIG-3 (inclusion) and AMBIG-4 (+ Jensen bound)."""
  key = "expected_nl_mean" if reading.get("AMBIG-3") == "L" else "expected_mean"
  xs, ys = _series(rows, key, by, **fixed)
  if reading.get("AMBIG-4") == "jensen":
    _, gaps = _series(rows, "gap_mean", by, **fixed)
    ys = [y + g for y, g in zip(ys, gaps)]
  return xs, ys


def _sample_distance(s: Mapping[str, Any]) -> str:
  heads, windows = s.get("heads"), s.get("windows")
  rows = s.get("rows_checked")
  parts = []
  if heads:
    parts.append(f"{heads} heads")
  if windows:
    parts.append(f"{windows} window(s) per L")
  if rows:
    parts.append(f"{rows:,} (head, query) rows")
  return ", ".join(parts)


def judge_thm1_bound(s, r) -> Verdict:
  """Theorem 1 (Eq. 9): d̃ ≤ d_max for every head and query. An inequality: holds iff it is
  never violated (the d̃ form and its own bound follow AMBIG-1)."""
  key = "violations_norm" if r.get("AMBIG-1") == "norm" else "violations_sum"
  rows = _rows(s)
  viol = sum(int(num(need(x, key))) for x in rows)
  checked = sum(int(num(x.get("rows_checked", 0))) for x in rows)
  return Verdict(HOLDS if viol == 0 else FAILS, f"{viol} violations in {checked:,} rows",
                 sample=_sample_distance({**s, "rows_checked": checked}))


LINEAR_R2, LINEAR_EXPONENT = 0.95, (0.8, 1.2)


def linear_in_l(ls, ys) -> tuple[bool, str]:
  """"Grows roughly linearly in L": a straight line fits (R² ≥ 0.95) and the log-log exponent
  is within 0.2 of 1 ([0.8, 1.2]: far from √L (0.5) and L² (2), while allowing "roughly").
  Needs at least 3 lengths."""
  if len(ls) < 3:
    raise Missing("at least 3 lengths")
  r2, k = linear_r2(ls, ys), loglog_slope(ls, ys)
  ok = r2 >= LINEAR_R2 and LINEAR_EXPONENT[0] <= k <= LINEAR_EXPONENT[1]
  return bool(ok), f"log-log exponent {fmt(k)}, straight-line R² {fmt(r2)}"


def _n_fit(rows) -> float:
  ns = sorted({num(x["N"]) for x in rows})
  return 5.0 if 5.0 in ns else ns[0]


def kinds_text(s: Mapping[str, Any], measure) -> str:
  """"; local layers (W = …): … ; global layers: …" from ``s["by_layer_kind"]`` (models with
  sliding-window layers, Gemma 3), ``measure(part) -> text`` on each kind's entry (its
  ``rows`` of head means or medians per L);
  "" for models without such layers. The verdict stays the one over all heads: the split is
  reported beside it (a local layer's query sees min(t, W) keys, issue 29)."""
  split = s.get("by_layer_kind")
  if not isinstance(split, Mapping):
    return ""
  parts = []
  for kind in ("local", "global"):
    part = split.get(kind) or {}
    if not part.get("rows"):
      continue
    w = part.get("windows") or []
    label = f"local layers (W = {', '.join(map(str, w))})" if kind == "local" else "global layers"
    try:
      parts.append(f"{label}, {part.get('heads')} heads: {measure(part)}")
    except Missing as e:
      parts.append(f"{label}: missing {e}")
  return "; " + "; ".join(parts) if parts else ""


def _linear_verdict(s, series) -> Verdict:
  """:func:`linear_in_l` on ``series(rows, N)`` (the (L, y) pairs at the fitted N), with the
  local/global split beside it (:func:`kinds_text`)."""
  rows = _rows(s)
  ok, text = linear_in_l(*series(rows, _n_fit(rows)))
  split = kinds_text(s, lambda part: linear_in_l(*series(part["rows"],
                                                        _n_fit(part["rows"])))[1])
  return Verdict(HOLDS if ok else FAILS, text + split, sample=_sample_distance(s))


def judge_fig2a_true(s, r) -> Verdict:
  """Fig. 2a: at N = 5 the true distance d̃ grows roughly linearly in L (see
  :func:`linear_in_l` for the thresholds); head mean of d̃ per L."""
  return _linear_verdict(s, lambda rows, n: _series(rows, _d_key(r), "L", N=n))


def judge_fig2a_expected_printed(s, r) -> Verdict:
  """Fig. 2a: "the expectation also grows linearly in L", with E in its printed form (x̄ per
  AMBIG-17); same thresholds as the true distance (:func:`linear_in_l`)."""
  return _linear_verdict(s, lambda rows, n: _series(rows, _printed_e_key(r), "L", N=n))


def judge_fig2a_expected_derived(s, r) -> Verdict:
  """The suite's reconstructed E (AMBIG-3 inclusion, AMBIG-4 main or main + Jensen bound)
  against "grows linearly in L" (:func:`linear_in_l`)."""
  return _linear_verdict(s, lambda rows, n: _derived_e(rows, "L", r, N=n))


PLATEAU_KNEE = 20.0


def _at_largest_l(rows) -> float:
  return max(num(x["L"]) for x in rows)


def judge_fig2b_plateau(s, r) -> Verdict:
  """Fig. 2b: "beyond N ≈ 20 returns diminish: the distance plateaus" (the curve first grows,
  then tends to saturate). Growth after N = 20 is compared with growth before it: holds when
  d̃ grew by at least 10 % from the first N to N = 20 and its log-log slope from N = 20 to the
  largest N is at most half the slope before N = 20. Half: the midpoint between "the same
  power law continues" (ratio 1) and "flat" (ratio 0). A rise ×4.4 (N = 1 → 20) then +17 %
  (20 → 100) has ratio 0.2 and saturates; a straight line or √N has ratio 1 and does not."""
  rows = _rows(s)
  L = _at_largest_l(rows)
  ns, ys = _series(rows, _d_key(r), "N", L=L)
  sat = saturation(ns, ys, PLATEAU_KNEE)
  ok = saturates(sat, +1, PLATEAU_RATIO)
  return Verdict(HOLDS if ok else FAILS,
                 f"×{fmt(1 + sat['change_before'])} from N = {sat['first']:g} to 20, then "
                 f"{(ys[-1] / dict(zip(ns, ys))[PLATEAU_KNEE] - 1) * 100:+.0f} % to N = "
                 f"{sat['last']:g}; slope ratio after/before {fmt(sat['after'] / sat['before'])}"
                 if sat["before"] else "no growth before N = 20", sample=_sample_distance(s))


def judge_fig2b_tightens(s, r) -> Verdict:
  """Fig. 2b: beyond N ≈ 20 "the bound tightens". Holds when the ratio d_max/d̃ (head means,
  form per AMBIG-1) at the largest N is below its value at N = 20."""
  rows = _rows(s)
  L = _at_largest_l(rows)
  norm = r.get("AMBIG-1") == "norm"
  ns, d = _series(rows, "d_norm_mean" if norm else "d_sum_mean", "N", L=L)
  _, b = _series(rows, "dmax_norm_mean" if norm else "dmax_sum_mean", "N", L=L)
  ratio = {n: bb / dd if dd else float("inf") for n, dd, bb in zip(ns, d, b)}
  if PLATEAU_KNEE not in ratio or max(ns) <= PLATEAU_KNEE:
    raise Missing("N = 20 and a larger N")
  last = max(ns)
  ok = ratio[last] < ratio[PLATEAU_KNEE]
  shown = ", ".join(f"N = {n:g}: {fmt(v)}" for n, v in ratio.items())
  return Verdict(HOLDS if ok else FAILS, f"d_max/d̃ {shown}", sample=_sample_distance(s))


CONVERGE_GAP = 0.10


def _converge(ns, d, e) -> tuple[bool, str]:
  """"True and expected distances converge as N → 100": the relative gap |d̃ − E|/d̃ at the
  largest N is below 0.10 (within 10 %, the usual "agree" tolerance of the suite) and smaller
  than at the smallest N (the gap closes)."""
  gap = [abs(dd - ee) / abs(dd) if dd else float("inf") for dd, ee in zip(d, e)]
  ok = gap[-1] < CONVERGE_GAP and gap[-1] < gap[0]
  return bool(ok), (f"relative gap {fmt(gap[0])} at N = {ns[0]:g}, {fmt(gap[-1])} at "
                    f"N = {ns[-1]:g}")


def _converge_verdict(s, r, expected) -> Verdict:
  """:func:`_converge` of d̃ (AMBIG-1) and ``expected(rows, L)`` (the (N, E) pairs) at the
  largest L."""
  rows = _rows(s)
  L = _at_largest_l(rows)
  ns, d = _series(rows, _d_key(r), "N", L=L)
  _, e = expected(rows, L)
  ok, text = _converge(ns, d, e)
  return Verdict(HOLDS if ok else FAILS, text, sample=_sample_distance(s))


def judge_fig2b_converge_printed(s, r) -> Verdict:
  """Fig. 2b / Cor. 2(ii) with E in its printed form (AMBIG-17) and d̃ per AMBIG-1;
  criterion in :func:`_converge`."""
  return _converge_verdict(s, r, lambda rows, L: _series(rows, _printed_e_key(r), "N", L=L))


def judge_fig2b_converge_derived(s, r) -> Verdict:
  """The same criterion (:func:`_converge`) with the reconstructed E (AMBIG-3, AMBIG-4)."""
  return _converge_verdict(s, r, lambda rows, L: _derived_e(rows, "N", r, L=L))


CRITICAL_RATIO, CRITICAL_BAND = 0.06, (0.03, 0.12)


def _critical_n(entry: Mapping[str, Any], alpha: float) -> tuple[Optional[float], Optional[float]]:
  """(low, high) bracket of the smallest N whose KS p-value exceeds alpha, from the p-values the
  search evaluated (exact when the step's own alpha is asked and it recorded critical_n)."""
  if entry.get("critical_n") and entry.get("alpha") is not None and \
     abs(num(entry["alpha"]) - alpha) < 1e-12:
    c = num(entry["critical_n"])
    return c, c
  ev = sorted((num(n), num(p)) for n, p in need(entry, "evaluated").items())
  above = [n for n, p in ev if p > alpha]
  if not above:
    return None, None
  hi = above[0]
  below = [n for n, p in ev if p <= alpha and n < hi]
  lo = below[-1] + 1 if below else 1.0
  return lo, hi


def _scan_range(ranges) -> str:
  """The scan's N range as the report states it: "scan N = 1…⌈L/4⌉" when every L used the
  default rule, else N_max per L; "" for entries without a recorded N_max (a bisection, or a
  scan before the cap)."""
  if not ranges:
    return ""
  if all(n == max(1, min(math.ceil(L / 4), L - 1)) for L, n in ranges):
    return "scan N = 1…⌈L/4⌉"
  return "scan N = 1…N_max (" + ", ".join(f"L = {L:g}: {n:g}" for L, n in ranges) + ")"


def judge_fig2c(s, r) -> Verdict:
  """Fig. 2c: "critical N ≈ 0.06 L" (fewer than 6 % of tokens). The least-squares ratio
  c = Σ L·N_crit / Σ L² (a line through the origin) must lie in [0.03, 0.12], i.e. 0.06 within
  a factor 2 ("≈"). Significance level per AMBIG-9. A level the KS test cannot reach with the
  number of heads per sample (smallest attainable p-value above α) makes the claim not
  testable: every N would pass. Levels other than the step's own are read from the p-values
  its search evaluated; when the bracket they leave straddles the band, not testable.

  E form per AMBIG-18: the printed E (the paper's) is read from the step's ascending scan
  (Algorithm 3's loop: the first passing N; the pass windows are shown, since the decision need
  not be monotone in N); the reconstructed E from the bisection (its first pass sits near
  0.8·L, beyond the scan's range), or from the scan where no bisection was recorded.

  Scan range: N = 1 … N_max, N_max = ⌈L/4⌉ by default (``scan_max_n``), about twice the
  band's upper edge 0.12·L, so every N_crit the claim admits, and as much again, is scanned;
  beyond it no finding could change the verdict (N_crit/L > 0.12 is outside the band whatever
  its value). The cap was set on cost grounds, from the claim, after SmolLM2's uncapped scan
  (to N = L − 1) was seen to be infeasible at paper settings (L = 256 still scanning after 12
  min, L = 1,024 projected to hours) and before any SmolLM2 scan result beyond L = 128 was known
  (issue 27 item 5, issue 28 item 3). An L where no N up to N_max passes is no number to fit:
  N_crit/L > N_max/L >= 0.12 there, above the band, and the claim fails; where the N searched
  stop below 0.12·L (a shorter scan asked for), that L is reported as not found."""
  alpha = float(r.get("AMBIG-9", "0.01"))
  form = r.get("AMBIG-18", "printed")
  scan = s.get("critical_scan")
  if form == "reconstructed" and isinstance(s.get("critical"), Mapping) and s["critical"]:
    crit = need(s, "critical")
  elif isinstance(scan, Mapping) and scan:
    crit = {L: need(v, form) for L, v in scan.items()}
  elif form == "printed":
    raise Missing("critical_scan (the ascending scan with the printed E)")
  else:
    crit = need(s, "critical")
  heads = s.get("heads")
  pmin = ks_min_pvalue(int(heads)) if heads else None
  power = (f"KS on {heads} per-head means per sample; smallest attainable p = {pmin:.2g}"
           if heads else "")
  if pmin is not None and pmin > alpha:
    return Verdict(NOT_TESTABLE, "", reason=f"with {heads} heads per sample the KS test cannot "
                   f"reject at α = {alpha:g} (smallest p = {pmin:.2g})", sample=power)
  lo_pts, hi_pts, shown, missing, above, ranges = [], [], [], [], [], []
  for L, entry in sorted(crit.items(), key=lambda kv: num(kv[0])):
    lo, hi = _critical_n(entry, alpha)
    if entry.get("n_max") is not None:
      ranges.append((num(L), num(entry["n_max"])))
    if lo is None:
      searched = max((num(n) for n in entry.get("evaluated", {})), default=0.0)
      (above if searched >= CRITICAL_BAND[1] * num(L) else missing).append(
          f"{num(L):g} (no pass for N ≤ {searched:g})")
      continue
    lo_pts.append((num(L), lo))
    hi_pts.append((num(L), hi))
    wins = entry.get("windows") if abs(num(entry.get("alpha", alpha)) - alpha) < 1e-12 else None
    shown.append(f"L = {num(L):g}: {lo:g}" + ("" if lo == hi else f"–{hi:g}")
                 + (" (passes at N = " + ", ".join(
                     f"{a}" if a == b else f"{a}–{b}" for a, b in wins[:3]) + ")"
                    if wins and (len(wins) > 1 or wins[0][1] < max(
                        num(n) for n in entry.get("evaluated", {0: 0}))) else ""))
  scope = _scan_range(ranges)
  if above:  # N_crit/L above N_max/L >= the band's upper edge at these L: fails there
    text = "; ".join(filter(None, [
        f"above the band at L = {', '.join(above)}: N_crit/L > {CRITICAL_BAND[1]:g}",
        ("passes: " + "; ".join(shown)) if shown else "",
        f"not found at L = {', '.join(missing)}" if missing else "", scope]))
    return Verdict(FAILS, text, sample=power)
  if not lo_pts:
    return Verdict(NOT_TESTABLE, scope, reason=f"the KS test rejected at every N searched "
                   f"(α = {alpha:g}): " + ", ".join(missing), sample=power)

  def ratio(pts):
    return sum(L * n for L, n in pts) / sum(L * L for L, _ in pts)

  c_lo, c_hi = ratio(lo_pts), ratio(hi_pts)
  inside = [CRITICAL_BAND[0] <= c <= CRITICAL_BAND[1] for c in (c_lo, c_hi)]
  text = (f"N_crit ≈ {fmt(c_lo)}·L" if c_lo == c_hi else
          f"N_crit ≈ {fmt(c_lo)}–{fmt(c_hi)}·L") + f" ({'; '.join(shown)})"
  if missing:
    text += f"; not found at L = {', '.join(missing)}"
  if scope:
    text += f"; {scope}"
  if inside[0] != inside[1]:
    return Verdict(NOT_TESTABLE, text, reason="the N_crit bracket left by the recorded p-values "
                   "straddles the band edge", sample=power)
  return Verdict(HOLDS if inside[0] else FAILS, text, sample=power)
