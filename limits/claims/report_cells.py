"""Cells of report.md's claim tables: a claim record (``limits.claims`` assessment as stored in
results.json) formatted for one Markdown table cell. Formatting only: the verdict, robustness
label and measured text are the assessment's (:mod:`limits.claims.assessment`)."""

from __future__ import annotations

from typing import Any, Mapping

from limits.claims.core import FAILS, HOLDS, NOT_RUN


def cell(text: str, limit: int = 220) -> str:
  text = " ".join(str(text).split()).replace("|", "\\|")
  return text if len(text) <= limit else text[:limit - 1] + "…"


def verdict_cell(r: Mapping[str, Any]) -> str:
  v = f"**{r['verdict']}**"
  if r["verdict"] not in (HOLDS, FAILS) and r["label"]:
    v += f": {r['label']}"
  if r["derived_from"]:
    v += f" (derived from {', '.join(r['derived_from'])}; not counted)"
  return cell(v, 400)


def robust_cell(r: Mapping[str, Any]) -> str:
  if r["verdict"] not in (HOLDS, FAILS):
    return "—"
  return cell(r["label"], 300)


def measured_cell(r: Mapping[str, Any]) -> str:
  m = r["measured"] or (r["reason"] if r["verdict"] != NOT_RUN else "")
  if r["sample"]:
    m += f" [{r['sample']}]"
  if r.get("vacuous"):
    m += f" (not counted, decided by mathematics: {r['vacuous']})"
  return cell(m, 600)
