"""Judges of Corollary 3, Lemma 2 and Figure 4 (steps ``gradient``, ``gradient_synthetic``): the
softmax Jacobian norm and the finite-difference sensitivity g(T, ε)."""

from __future__ import annotations

import math

from limits.claims.core import FAILS, HOLDS, NOT_TESTABLE, Missing, Verdict, fmt, need, num
from limits.stats import loglog_slope


def _finite(s) -> None:
  """Missing when a Jacobian norm came out NaN/inf (outside the dtype's range): every
  comparison with NaN is False, so a bound would silently read "holds"."""
  if s.get("nonfinite_T"):
    raise Missing("finite Jacobian norms (non-finite at T = "
                  + ", ".join(f"{num(t):g}" for t in s["nonfinite_T"]) + ")")


def judge_cor3_printed(s, r) -> Verdict:
  """Corollary 3: ‖∇α‖₂ ≤ min{1/(4T), √2}. A bound for every logit row: fails if any row
  checked (the tied-top-two row at each T, or a data row) exceeds it (relative slack 1e-9).
  Not testable where a norm is not finite."""
  _finite(s)
  ts, norms = need(s, "T"), need(s, "counterexample_norm")
  over = [t for t, v in zip(ts, norms) if num(v) > min(1 / (4 * num(t)), math.sqrt(2)) * (1 + 1e-9)]
  data = int(s.get("data_exceed_paper") or 0)
  pairs = s.get("data_pairs")
  ok = not over and data == 0
  return Verdict(HOLDS if ok else FAILS,
                 f"tied top-two row exceeds it at {len(over)} of {len(ts)} T; {data:,} data "
                 f"(row, T) pairs exceed it", sample=f"{pairs:,} (row, T) pairs" if pairs else "")


def judge_cor3_tight(s, r) -> Verdict:
  """The suite's tight form ‖∇α‖₂ ≤ 1/(2T): holds iff max T·‖J‖₂ over every row checked is at
  most 1/2 (relative slack 1e-6). Not testable where a norm is not finite."""
  _finite(s)
  ts, norms = need(s, "T"), need(s, "counterexample_norm")
  vals = [num(t) * num(v) for t, v in zip(ts, norms)]
  if s.get("max_T_norm") is not None:
    vals.append(num(s["max_T_norm"]))
  worst = max(vals)
  return Verdict(HOLDS if worst <= 0.5 * (1 + 1e-6) else FAILS, f"max T·‖J‖₂ = {fmt(worst)}")


def judge_lemma2(s, r) -> Verdict:
  """Lemma 2 (reconstructed bound for a general normalizer) on softmax rows: an inequality;
  holds iff no row exceeds it. Where the bound overflows to infinity (min F underflows) it
  constrains nothing: with no row above it and the bound infinite on half the (row, T) pairs or
  more, not testable."""
  n = int(need(s, "lemma2_exceed"))
  rows = s.get("lemma2_rows")
  pairs, finite = s.get("lemma2_pairs"), s.get("lemma2_finite")
  if n == 0 and pairs and 2 * int(finite) < int(pairs):
    return Verdict(NOT_TESTABLE, reason=f"the bound overflows to infinity on "
                   f"{int(pairs) - int(finite)} of {int(pairs)} (row, T) pairs: it constrains "
                   "nothing there")
  return Verdict(HOLDS if n == 0 else FAILS, f"{n} rows above the bound",
                 sample=f"{rows:,} (row, T) pairs" if rows else "")


def judge_simplex(s, r) -> Verdict:
  """g(T, ε) ≤ √2/ε (two probability vectors are at most √2 apart): holds iff no row exceeds."""
  counts = need(s, "sqrt2_exceed")
  total = sum(int(num(v)) for v in counts.values())
  return Verdict(HOLDS if total == 0 else FAILS, f"{total} rows above √2/ε")


SLOPE_TOL, COLLAPSE_FACTOR, DROP, DROP_TOL = 0.25, 2.0, 2.0, 0.5


def _t_scale(s, r) -> float:
  """Raw-T units per paper-T unit: 1 on the raw q·k scale; √d_head if the paper's T values
  refer to HF-scaled logits q·k/√d_head (AMBIG-12). Under the scaled reading a perturbation ε
  of the scaled logits is ε·√d_head on the raw ones and g is √d_head times the raw-scale g, so
  the curve recorded at raw ε is the scaled reading's curve at ε/√d_head (:func:`_eps_label`);
  the constant factor changes neither a log-log slope nor the spread between curves."""
  if r.get("AMBIG-12") == "scaled":
    return math.sqrt(num(need(s, "d_head")))
  return 1.0


def _eps_label(e: str, scale: float) -> str:
  """The curve's ε in the reading's logit units (raw ε / √d_head under the scaled reading)."""
  if scale == 1.0:
    return e
  try:
    return f"{fmt(float(e) / scale)} (raw {e})"
  except ValueError:
    return e


def judge_fig4_inverse_t(s, r) -> Verdict:
  """Fig. 4: "for T < 0.1 the curves follow the 1/T trend". Holds when, for every ε, the
  least-squares log-log slope of the max-over-heads g against T over the grid points below 0.1
  (paper units, AMBIG-12; ε rescaled with the logits, :func:`_eps_label`) is within 0.25 of −1:
  between T^−0.75 and T^−1.25, which excludes a flat curve and 1/√T. Needs 2 temperatures
  below the threshold. An ε whose curve cannot follow the trend by mathematics is left out and
  named: g ≤ √2/ε at every T (the simplex diameter), so where g at the largest T below the
  threshold, raised by the shallowest admitted slope (T^−0.75) down to the smallest T, would
  exceed √2/ε, the trend is impossible (e.g. ε = 10: g ≤ 0.14). No ε left: not testable."""
  scale = _t_scale(s, r)
  thr = 0.1 * scale
  ts = [num(t) for t in need(s, "T")]
  low = [i for i, t in enumerate(ts) if t < thr]
  if len(low) < 2:
    raise Missing(f"2 temperatures below T = {thr:.3g}")
  lo_t, hi_t = min(ts[i] for i in low), max(ts[i] for i in low)
  i_hi = next(i for i in low if ts[i] == hi_t)
  slopes, vac = {}, []
  for e, c in need(s, "g").items():
    try:
      cap = math.sqrt(2) / float(e)
    except (ValueError, ZeroDivisionError):
      cap = math.inf
    need_top = num(c[i_hi]) * (hi_t / lo_t) ** (1 - SLOPE_TOL)
    if need_top > cap:
      vac.append(f"ε = {_eps_label(e, scale)}: a 1/T trend is impossible (g ≤ √2/ε = "
                 f"{fmt(cap)} raw at every T, a T^−0.75 rise from T = {hi_t:.3g} would need "
                 f"{fmt(need_top)} at T = {lo_t:.3g})")
      continue
    slopes[e] = loglog_slope([ts[i] for i in low], [num(c[i]) for i in low])
  if not slopes:
    raise Missing("an ε whose curve could follow 1/T (" + "; ".join(vac) + ")")
  ok = all(math.isfinite(v) and abs(v + 1) <= SLOPE_TOL for v in slopes.values())
  return Verdict(HOLDS if ok else FAILS, "log-log slopes " + ", ".join(
      f"ε = {_eps_label(e, scale)}: {fmt(v)}" for e, v in slopes.items()) + f" (T < {thr:.3g})",
      vacuous="; ".join(vac))


def judge_fig4_collapse(s, r) -> Verdict:
  """Fig. 4: "for T ≥ 1 all curves collapse together and drop by about two orders of
  magnitude". Collapse: at every T ≥ 1 (paper units) the ε-curves are within a factor 2 of each
  other. Drop: each curve falls 2 ± 0.5 decades from the first T ≥ 1 to 100 times that T;
  the grid must reach that far."""
  t0 = 1.0 * _t_scale(s, r)
  ts = [num(t) for t in need(s, "T")]
  hi = [i for i, t in enumerate(ts) if t >= t0 * (1 - 1e-9)]
  if len(hi) < 2:
    raise Missing(f"2 temperatures at or above T = {t0:.3g}")
  curves = {e: [num(c[i]) for i in hi] for e, c in need(s, "g").items()}
  t_hi = [ts[i] for i in hi]
  end = max(range(len(t_hi)), key=lambda k: t_hi[k] if t_hi[k] <= t_hi[0] * 100 * (1 + 1e-9)
            else -1)
  if t_hi[end] < t_hi[0] * 100 * (1 - 1e-9):
    raise Missing(f"a temperature up to {t_hi[0] * 100:.3g} in its grid (two decades above "
                  f"{t_hi[0]:.3g})")
  spread = max(math.log10(max(v) / min(v)) for v in zip(*curves.values()))
  drops = {e: math.log10(c[0] / c[end]) for e, c in curves.items()}
  ok = (spread <= math.log10(COLLAPSE_FACTOR) + 1e-12
        and all(abs(d - DROP) <= DROP_TOL for d in drops.values()))
  return Verdict(HOLDS if ok else FAILS, f"spread {fmt(spread)} decades; drop " + ", ".join(
      f"ε = {_eps_label(e, _t_scale(s, r))}: {fmt(d)}" for e, d in drops.items()) + " decades")
