"""Judges of Lemma 1 and Corollary 1 (step ``vanishing``): weights vanish as Θ(1/L)."""

from __future__ import annotations

from typing import Mapping

from limits.claims.core import FAILS, HOLDS, NOT_TESTABLE, Missing, Verdict, fmt, need, num


def judge_cor1_band(s, r) -> Verdict:
  """Corollary 1: every weight in (1/L)·[e^{−2Δ/T}, e^{2Δ/T}]. An inequality for every weight:
  holds iff no query of any head, layer or window has a weight outside the band (0 allowed)."""
  viol = int(need(s, "band_violations"))
  queries = s.get("band_queries")
  sample = f"{queries:,} queries" if queries else ""
  return Verdict(HOLDS if viol == 0 else FAILS, f"{viol} queries outside the band", sample=sample)


def judge_lemma1_bounded(s, r) -> Verdict:
  """Lemma 1 on logits bounded in [−a, a]: C1/L ≤ α_i ≤ C2/L. An inequality: holds iff no row
  of any normalizer F checked violates it."""
  lemma = need(s, "lemma1")
  parts, viol, checked = [], 0, 0
  for f, m in sorted(lemma.items()):
    if isinstance(m, Mapping) and "violations" in m:
      viol += int(m["violations"])
      checked += int(m.get("checked", 0))
      parts.append(f"{f}: C2 = {fmt(num(m.get('C2', 'nan')))}, {int(m['violations'])} violations")
  if not parts:
    raise Missing("lemma1.<F>.violations")
  return Verdict(HOLDS if viol == 0 else FAILS, "; ".join(parts),
                 sample=f"{checked:,} rows" if checked else "")


def _kind_slopes(part) -> str:
  """Slopes of one layer kind (local / global) of max and min α·n_t (n_t = the last query's
  visible keys) between consecutive lengths."""
  between = ", ".join(
      f"{b['L'][0]}→{b['L'][1]}: max {fmt(num(b['loglog_slope_median_max_aL']))}, "
      f"min {fmt(num(b['loglog_slope_median_min_aL']))}"
      for b in part.get("slopes_between") or [])
  if not between:
    raise Missing("by_layer_kind slopes (two lengths)")
  return f"log-log slopes of the median max/min α·n_t, {between}"


def judge_lemma1_model(s, r) -> Verdict:
  """Lemma 1 on the model ("weights vanish as Θ(1/L)"). The lemma assumes logits bounded by a
  fixed a; a model's logit range changes with L, so the hypothesis is not met and the claim is
  not testable there. The slopes of α·L against L are reported for the reader."""
  from limits.claims.judges_distance import kinds_text

  slopes = need(s, "lemma1_slopes")
  shown = ", ".join(f"{k}: {fmt(num(v))}" for k, v in slopes.items())
  shown += kinds_text(s, _kind_slopes)
  return Verdict(NOT_TESTABLE, shown, reason="Lemma 1 assumes logits bounded by a fixed a; a "
                 "model's logit range changes with L")
