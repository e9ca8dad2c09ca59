"""Reproduction runs side by side: one column of measured values and verdicts per model.

Reads the ``results.json`` that :mod:`limits.reproduction` writes at the top of a run directory
(its ``results.claims`` records: id, kind, where, verdict, label, measured, sample,
derived_from) and renders the README's tables: the paper's claims with a tally per run (derived
claims shown, not counted, as in :func:`limits.claims.tally`), the suite's own findings apart,
and one line per failing claim saying on which runs it fails. Nothing is re-judged here: the
verdicts are the runs' own.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from limits.claims.assessment import count_verdicts
from limits.claims.core import DEPENDS, FAILS, FINDING, HOLDS, NOT_RUN, PAPER
from limits.errors import LimitsError
from limits.runs import options

Run = tuple[str, list[Mapping[str, Any]]]  # (column label, claim records of one run)


@dataclasses.dataclass(frozen=True)
class CompareConfig:
  """The ``compare`` command's settings: the runs (``LABEL=DIR``, repeated), where the markdown
  goes, values instead of claims, the figures folder and the widest cell. Each field declares
  its flag (:mod:`limits.runs.options`)."""

  run: tuple[str, ...] = options.option(
      (), "LABEL=DIR of a reproduction run (repeat, at least one; with --values, two runs of "
      "reproduce or of any one experiment).", multi=True)
  out: str = options.option("", "Write the markdown here instead of printing it.")
  values: bool = options.option(False, "Compare two runs' recorded values file by file instead "
                                "of their claim tables.")
  figures: str = options.option("", "Also draw Figs. 2a, 2b, 2c, 3, 4 with every run's curves, "
                                "the sink shares by layer and the verdict map into this folder "
                                "(PNG files).")
  width: int = options.option(90, "Longest 'measured' cell, in characters.",
                              check=(lambda v: v is not None and v >= 20, "be an integer >= 20"))


def load_run(label: str, run_dir: str | Path) -> Run:
  """(label, claim records) of the reproduction run in ``run_dir`` (one-line errors)."""
  path = Path(run_dir) / "results.json"
  if not path.is_file():
    raise LimitsError(f"{run_dir}: no results.json (not a reproduction run directory; run "
                      "python -m experiments.reproduce --out_dir=DIR first)")
  try:
    claims = json.loads(path.read_text())["results"]["claims"]
  except (ValueError, KeyError, TypeError) as e:
    raise LimitsError(f"{path}: not a reproduction results.json ({type(e).__name__}: {e})")
  if not isinstance(claims, list) or not all(isinstance(c, Mapping) and "id" in c
                                              for c in claims):
    raise LimitsError(f"{path}: results.claims is not a list of claim records")
  return label, claims


def short_verdict(record: Mapping[str, Any]) -> str:
  """'holds (every reading)', 'depends (AMBIG-1, AMBIG-7)', 'fails (derived; not counted)'…"""
  verdict, label = record.get("verdict", NOT_RUN), record.get("label", "")
  if verdict in (HOLDS, FAILS) and "robust" in record:  # primary-reading records (issue 28)
    out = verdict
    if record["robust"] is False:
      flips = sorted(set(re.findall(r"AMBIG-\d+", label)), key=lambda a: int(a.split("-")[1]))
      out += f" (flips under {', '.join(flips)})"
    elif record["robust"] is True and label != "single reading":
      out += " (every admissible reading)"
    ev = record.get("evidence")
    if ev and ev != "empirical":
      out += f"; {ev}, not counted"
  elif verdict in (HOLDS, FAILS):
    out = verdict
    if "under every reading" in label:
      out += " (every reading)"
    else:
      m = re.search(r"every computable reading \((\d+) of (\d+)", label)
      if m:
        out += f" ({m.group(1)} of {m.group(2)} readings computable, all {verdict})"
  elif verdict == DEPENDS:
    m = re.match(r"depends on ([^:]+):", label)
    out = f"depends ({m.group(1)})" if m else "depends"  # a record from before issue 28
  else:
    out = verdict
  if record.get("derived_from"):
    out += "; derived, not counted"
  return out


def _cell(text: str, width: int) -> str:
  text = " ".join(str(text).split()).replace("|", "/")
  return text if len(text) <= width else text[:width - 1] + "…"


def tally(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
  """Counts of the paper's own claims by verdict, by the rule of the judged tally
  (:func:`limits.claims.assessment.count_verdicts`)."""
  return count_verdicts((r.get("kind"), r.get("derived_from"), r.get("verdict", NOT_RUN),
                         r.get("evidence")) for r in records)


def _table(runs: Sequence[Run], kind: str, width: int) -> list[str]:
  ids: list[str] = []
  where: dict[str, str] = {}
  for _, recs in runs:
    for r in recs:
      if r.get("kind") == kind and r["id"] not in where:
        ids.append(r["id"])
        where[r["id"]] = r.get("where", "")
  head = "| id | Where | " + " | ".join(f"{lab}: measured [sample] | verdict"
                                         for lab, _ in runs) + " |"
  lines = [head, "|" + "---|" * (2 + 2 * len(runs))]
  for cid in ids:
    cells = [f"`{cid}`", where[cid]]
    for _, recs in runs:
      r = next((x for x in recs if x["id"] == cid), None)
      if r is None:
        cells += ["not in this run", "—"]
        continue
      measured = r.get("measured") or r.get("reason") or ""
      if r.get("sample") and r.get("verdict") in (HOLDS, FAILS, DEPENDS):
        measured += f" [{r['sample']}]"
      cells += [_cell(measured, width), short_verdict(r)]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def failing_lines(runs: Sequence[Run]) -> list[str]:
  """One line per paper claim that fails (or depends) on at least one run: where it fails."""
  out = []
  ids = [r["id"] for r in runs[0][1] if r.get("kind") == PAPER]
  for _, recs in runs[1:]:
    ids += [r["id"] for r in recs if r.get("kind") == PAPER and r["id"] not in ids]
  for cid in ids:
    status = {}
    for lab, recs in runs:
      r = next((x for x in recs if x["id"] == cid), None)
      status[lab] = short_verdict(r) if r is not None else "not in this run"
    bad = [lab for lab, s in status.items() if s.startswith(("fails", "depends"))]
    if not bad:
      continue
    fails = [lab for lab in bad if status[lab].startswith("fails")]
    if len(fails) == len(runs):
      head = "fails on every run"
    elif fails:
      head = "fails on " + " and ".join(fails)
    else:
      head = "depends on a reading on " + " and ".join(bad)
    rest = "; ".join(f"{lab}: {s}" for lab, s in status.items() if lab not in fails
                     and (fails or lab not in bad))
    out.append(f"- `{cid}`: {head}" + (f" ({rest})" if rest else "") + ".")
  return out


def side_by_side(runs: Sequence[Run], width: int = 90) -> str:
  """Markdown: tally per run, the paper's claims, the suite's findings, the failing claims."""
  if not runs:
    raise LimitsError("no runs to compare")
  parts = []
  for lab, recs in runs:
    t = tally(recs)
    parts.append(f"{lab}: " + ", ".join(f"{n} {k}" for k, n in t.items() if n))
  lines = ["Tally of the paper's claims (derived claims shown, not counted): "
           + "; ".join(parts) + ".", "", "**The paper's claims**", ""]
  lines += _table(runs, PAPER, width)
  lines += ["", "**The suite's own findings**", ""]
  lines += _table(runs, FINDING, width)
  fl = failing_lines(runs)
  if fl:
    lines += ["", "**Claims that fail or depend on a reading, run by run**", ""] + fl
  return "\n".join(lines) + "\n"
