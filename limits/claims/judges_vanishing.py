"""Judges of Lemma 1 and Corollary 1 (step ``vanishing``): weights vanish as Θ(1/L); and the
suite's attention-sink finding measured on the same weights."""

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


# A layer "has a sink" when at least half of its (head, window) pairs are sink heads: most of
# the layer's heads, not one outlier head.
SINK_SHARE = 0.5
# How the paper's vanishing-attention claims read where a sink holds the mass (report line).
SINK_READING = (
    "Where a sink holds the mass (a head with mean weight > 0.3 on token 0 at every L), that "
    "weight does not vanish as 1/L: Lemma 1's bounded-logit hypothesis fails for token 0 (its "
    "logit lead grows like log L), Corollary 1's band still holds (e^{2Δ/T} is wide), and the "
    "paper's vanishing and top-N claims describe only the remaining < 0.7 of the mass spread "
    "over the other L − 1 tokens, with token 0 taking one slot of every top-N set.")


def judge_attention_sinks(s, r) -> Verdict:
  """Attention sinks (the suite's finding; Gu et al. 2025's Sink_ε with ε = 0.3, measured by
  ``limits.vanishing.sink_scores``): holds iff at every L measured some layer's share of
  (head, window) pairs with mean weight on token 0 above ε is at least :data:`SINK_SHARE`
  (half: most heads of a layer, not one outlier head). Fails when at some L no layer reaches it."""
  sinks = need(s, "sinks")
  by_l = need(sinks, "by_L")
  if not by_l:
    raise Missing("sinks.by_L")
  tops = [(int(x["L"]), max(x["share_by_layer"]),
           sum(v >= SINK_SHARE for v in x["share_by_layer"]), len(x["share_by_layer"]))
          for x in by_l]
  ok = all(top >= SINK_SHARE for _, top, _, _ in tops)
  last = by_l[-1]
  measured = (f"layers with Sink_ε ≥ {SINK_SHARE:g}: "
              + ", ".join(f"L = {L}: {k} of {n}" for L, _, k, n in tops)
              + f"; at L = {int(last['L'])} by layer "
              + " ".join(f"{v:.2f}" for v in last["share_by_layer"]))
  return Verdict(HOLDS if ok else FAILS, measured,
                 sample=f"ε = {fmt(num(sinks.get('eps', 'nan')))}, "
                        f"{int(last.get('pairs', 0)):,} head-windows per L")
