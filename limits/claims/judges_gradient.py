"""Judges of Corollary 3, Lemma 2 and Figure 4 (steps ``gradient``, ``gradient_synthetic``): the
softmax Jacobian norm and the finite-difference sensitivity g(T, ε)."""

from __future__ import annotations

import math

from limits.claims.core import FAILS, HOLDS, Missing, Verdict, fmt, need, num
from limits.claims.criteria import loglog_slope


def judge_cor3_printed(s, r) -> Verdict:
  """Corollary 3: ‖∇α‖₂ ≤ min{1/(4T), √2}. A bound for every logit row: fails if any row
  checked (the tied-top-two row at each T, or a data row) exceeds it (relative slack 1e-9)."""
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
  most 1/2 (relative slack 1e-6)."""
  ts, norms = need(s, "T"), need(s, "counterexample_norm")
  vals = [num(t) * num(v) for t, v in zip(ts, norms)]
  if s.get("max_T_norm") is not None:
    vals.append(num(s["max_T_norm"]))
  worst = max(vals)
  return Verdict(HOLDS if worst <= 0.5 * (1 + 1e-6) else FAILS, f"max T·‖J‖₂ = {fmt(worst)}")


def judge_lemma2(s, r) -> Verdict:
  """Lemma 2 (reconstructed bound for a general normalizer) on softmax rows: an inequality;
  holds iff no row exceeds it."""
  n = int(need(s, "lemma2_exceed"))
  rows = s.get("lemma2_rows")
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
  refer to HF-scaled logits q·k/√d_head (AMBIG-12). Under the scaled reading g itself is √d_head
  times the raw-scale g at ε·√d_head; the constant factor changes neither a log-log slope nor the
  spread between curves, but the recorded curves are for the raw-scale ε grid (not rescaled)."""
  if r.get("AMBIG-12") == "scaled":
    return math.sqrt(num(need(s, "d_head")))
  return 1.0


def judge_fig4_inverse_t(s, r) -> Verdict:
  """Fig. 4: "for T < 0.1 the curves follow the 1/T trend". Holds when, for every ε, the
  least-squares log-log slope of the max-over-heads g against T over the grid points below 0.1
  (paper units, AMBIG-12) is within 0.25 of −1: between T^−0.75 and T^−1.25, which excludes a
  flat curve and 1/√T. Needs 2 temperatures below the threshold."""
  thr = 0.1 * _t_scale(s, r)
  ts = [num(t) for t in need(s, "T")]
  low = [i for i, t in enumerate(ts) if t < thr]
  if len(low) < 2:
    raise Missing(f"2 temperatures below T = {thr:.3g}")
  slopes = {e: loglog_slope([ts[i] for i in low], [num(c[i]) for i in low])
            for e, c in need(s, "g").items()}
  ok = all(math.isfinite(v) and abs(v + 1) <= SLOPE_TOL for v in slopes.values())
  return Verdict(HOLDS if ok else FAILS, "log-log slopes " + ", ".join(
      f"ε = {e}: {fmt(v)}" for e, v in slopes.items()) + f" (T < {thr:.3g})")


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
      f"ε = {e}: {fmt(d)}" for e, d in drops.items()) + " decades")
