"""A CLI's own verdicts: the registry's claims of one step judged on that run's outputs.

Experiments record measurements only; a CLI prints :func:`step_lines` for the claims its own
run measured, so CLI, report and README read one set of criteria (limits/claims)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Mapping

from limits.claims.assessment import Assessment, assess
from limits.claims.registry import CLAIMS
from limits.claims.summary import summarize


def assess_step(step: str, results: Mapping[str, Any], tables: Mapping[str, list] | None = None,
                context: Mapping[str, Any] | None = None) -> list[Assessment]:
  """Every claim decided by ``step`` judged on one run's ``results`` block (and CSV tables),
  primary reading; readings that need another run (AMBIG-7 reruns) stay not testable."""
  summary = summarize(step, results, tables, context)
  return [assess(c, summary) for c in CLAIMS if c.step == step]


def step_lines(step: str, results: Mapping[str, Any], tables: Mapping[str, list] | None = None,
               context: Mapping[str, Any] | None = None) -> list[str]:
  """One line per claim: 'claim id: verdict (primary reading): measured [evidence]'."""
  out = []
  for a in assess_step(step, results, tables, context):
    what = a.default.measured or a.default.reason or a.label
    out.append(f"{a.claim.id}: {a.verdict}: {what}"
               + (f" [{a.claim.evidence}]" if a.claim.evidence != "empirical" else ""))
  return out


def print_run(step: str, out_dir: str | Path, note: str = "") -> None:
  """Prints :func:`step_lines` for the run in ``out_dir`` (its results.json and per_head.csv):
  the CLI's verdicts are the registry's, so CLI, report and README cannot disagree."""
  out = Path(out_dir)
  data = json.loads((out / "results.json").read_text(encoding="utf-8"))
  results = data.get("results") or {}
  tables = {}
  if (out / "per_head.csv").is_file():
    with open(out / "per_head.csv", newline="", encoding="utf-8") as f:
      tables["per_head.csv"] = list(csv.DictReader(f))
  lines = step_lines(step, results, tables)
  if lines:
    print(f"claims decided by step {step} (limits.claims, primary reading{note}; "
          "docs/claims.md):")
    for line in lines:
      print("  " + line)
