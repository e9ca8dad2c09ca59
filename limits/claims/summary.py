"""Step summaries: what each step recorded (``results.json``, CSV tables), read by key into the
dict the judges read, and the fields the suite's own forms still need (:data:`WANTED_FIELDS`)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from limits.claims.core import num

# Fields the suite's own forms need and that steps do not record yet: step -> field -> meaning.
WANTED_FIELDS = {
    "distance_vary_length / distance_vary_n": {
        "expected_printed_output_mean": "summary row: head mean of the printed E "
        "((L−N)/L)·Σ_i ‖(α_i + N/(L−1))·x_i − x̄‖ with x̄ = Σ_j α_j x_j (limits.distance.printed)",
        "expected_printed_xmean_mean": "the same with x̄ = the plain mean of the x_j",
        "expected_nl_mean": "summary row: the reconstructed E with inclusion N/L (AMBIG-3)",
    },
    "separability_model / separability_sphere": {
        "upper_printed": "per_head.csv column: the printed upper bound "
        "(1/N)·Σ exp[−(r − ξ_i)²/(16M²)] averaged like 'upper' (limits.separability.printed)",
        "coverage_union": "results: fraction of the top-N covered by the union of the heads of "
        "one layer, per N (the multi-head claim measured directly)",
    },
}


def _copy_mappings(out: dict, results: Mapping, **keys: str) -> None:
  """``out[name] = results[key]`` for each ``name=key`` whose value is a mapping (a block the
  step recorded; absent or malformed blocks are left out)."""
  for name, key in keys.items():
    if isinstance(results.get(key), Mapping):
      out[name] = results[key]


def summarize(step: str, results: Mapping[str, Any], tables: Mapping[str, list] | None = None,
              context: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """The summary the judges read, from a step's ``results.json`` "results" block (``results``),
  its CSV tables by file name (``tables``) and the run's context (``d_head``, ``windows``).
  Absent fields are left out; judges raise :class:`Missing` for what they need."""
  tables = tables or {}
  context = dict(context or {})
  out: dict[str, Any] = {k: v for k, v in context.items() if v is not None}
  model = results.get("model") if isinstance(results.get("model"), Mapping) else {}
  if model.get("n_layer") and model.get("n_head"):
    out["heads"] = int(model["n_layer"]) * int(model["n_head"])
  if model.get("d_head"):
    out["d_head"] = model["d_head"]
  if step.startswith("gradient"):
    per_t = results.get("per_temperature") or []
    if per_t:
      out["T"] = [p.get("T") for p in per_t]
      cex = [(p.get("counterexample") or {}).get("norm") for p in per_t]
      if all(v is not None for v in cex):
        out["counterexample_norm"] = cex
      if all("all_rows_n_exceed_paper" in p for p in per_t):
        out["data_exceed_paper"] = sum(int(p["all_rows_n_exceed_paper"]) for p in per_t)
        out["data_pairs"] = sum(int(p.get("all_rows", 0)) for p in per_t)
      vals = [num(p[k]) for p in per_t for k in ("max_T_norm", "all_rows_max_T_norm") if k in p]
      if vals:
        out["max_T_norm"] = max(vals)
      if all("n_exceed_lemma2" in p for p in per_t):
        out["lemma2_exceed"] = sum(int(p["n_exceed_lemma2"]) + int(p.get(
            "all_rows_n_exceed_lemma2", 0)) for p in per_t)
        out["lemma2_rows"] = sum(int(p.get("exact_rows", 0)) for p in per_t)
        if all("all_rows_lemma2_finite" in p for p in per_t):
          out["lemma2_pairs"] = sum(int(p.get("all_rows", 0)) for p in per_t)
          out["lemma2_finite"] = sum(int(p["all_rows_lemma2_finite"]) for p in per_t)
      # A NaN/inf norm makes every comparison False: a bound would silently read "holds".
      bad = [p.get("T") for p in per_t if p.get("all_rows_nonfinite_norm")
             or not math.isfinite(num(p.get("max_norm", 0.0)))
             or not math.isfinite(num((p.get("counterexample") or {}).get("T_norm", 0.0)))]
      if bad:
        out["nonfinite_T"] = bad
      gs = [p.get("g") or {} for p in per_t]
      eps = list(gs[0])
      if eps and all(set(g) == set(eps) for g in gs):
        if all(g[e].get("paper_stat") is not None for g in gs for e in eps):
          out["g"] = {e: [g[e]["paper_stat"] for g in gs] for e in eps}
        if all("n_above_sqrt2_over_eps" in g[e] for g in gs for e in eps):
          out["sqrt2_exceed"] = {e: sum(int(g[e]["n_above_sqrt2_over_eps"]) for g in gs)
                                 for e in eps}
  elif step == "vanishing":
    summary = results.get("summary") or []
    if summary and all("violations" in x for x in summary):
      out["band_violations"] = sum(int(x["violations"]) for x in summary)
    band = results.get("band")
    if isinstance(band, Mapping) and "queries_checked" in band:
      out["band_queries"] = int(band["queries_checked"])
    _copy_mappings(out, results, lemma1="lemma1_synthetic", lemma1_slopes="lemma1_slopes",
                   by_layer_kind="by_layer_kind", sinks="sinks")
  elif step.startswith("distance"):
    rows = results.get("summary")
    if isinstance(rows, list) and rows:
      out["rows"] = rows
      out["rows_checked"] = sum(int(num(x.get("rows_checked", 0))) for x in rows)
    _copy_mappings(out, results, critical="critical_n", critical_scan="critical_scan",
                   by_layer_kind="by_layer_kind")
  elif step.startswith("separability"):
    summary = results.get("summary")
    if isinstance(summary, Mapping):
      out.update({k: summary[k] for k in ("n", "median", "max", "mean") if k in summary})
    for k in ("samples", "coverage_union"):
      if results.get(k) is not None:
        out[k] = results[k]
    if results.get("heads") and step.endswith("sphere"):
      out["heads"] = results["heads"]
    rows = tables.get("per_head.csv")
    if rows:
      out["per_head"] = rows
      if "heads" not in out:
        out["heads"] = len({(x.get("layer"), x.get("head")) for x in rows})
  return out
