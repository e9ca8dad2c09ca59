"""docs/claims.md, generated from the registry (a test keeps the file in sync)."""

from __future__ import annotations

from limits.claims import provenance
from limits.claims.core import EVIDENCE, FINDING, PAPER
from limits.claims.registry import AMBIGUITIES, CLAIMS
from limits.claims.summary import WANTED_FIELDS


def _doc_with_helpers(fn) -> str:
  """A judge's docstring on one line, with the docstring of each helper it cites by
  :func:`name` appended, so docs/claims.md states every threshold in full."""
  import inspect
  import re

  doc = " ".join((inspect.getdoc(fn) or "").split())
  extra = []
  for name in dict.fromkeys(re.findall(r":func:`(\w+)`", doc)):
    helper = fn.__globals__.get(name)  # the judge's own module
    if callable(helper) and helper.__doc__:
      extra.append(f"`{name}`: " + " ".join(inspect.getdoc(helper).split()))
  doc = re.sub(r":func:`(\w+)`", r"`\1`", doc)
  return doc + ("" if not extra else " " + " ".join(extra))


def _reading_line(c, rd) -> str:
  """'AMBIG-1 (primary d̃ = …; admissible …; excluded …)' for one reading of claim ``c``."""
  out = {k: lab for k, lab in rd.options}
  gone = {k for a, k, _ in c.excluded if a == rd.ambig}
  (_, l0), rest = rd.options[0], rd.options[1:]
  parts = [f"primary {l0}"]
  adm = [lab for k, lab in rest if k not in gone]
  if adm:
    parts.append("admissible " + " / ".join(adm))
  if gone:
    parts.append("excluded " + " / ".join(out[k] for k, _ in rest if k in gone))
  return f"{rd.ambig} ({'; '.join(parts)})"


def render_docs() -> str:
  """docs/claims.md: every claim with its words, setting, criterion and readings, the
  ambiguity options and the fields the suite still needs from its steps."""
  lines = ["# The claims the suite checks", "",
           "Generated from `limits/claims/` (`python -c 'from limits import claims; "
           "print(claims.render_docs(), end=\"\")' > docs/claims.md`); a test keeps it in sync.",
           "", "Each claim has a stable id. *Paper* claims are the paper's statements (the "
           "report's tally counts them, a claim derived from another's measurement once); "
           "*findings* are the suite's own statements, reported in a separate table. A claim's "
           "verdict is its *primary* reading's (the documented default of each ambiguity); the "
           "*admissible* readings give the robustness column; readings *excluded* for a claim "
           "(with the reason) are shown but change nothing. Only *empirical* paper claims are "
           "tallied; the other evidence classes are listed apart.", "",
           "Provenance (`python -m limits.claims.provenance`, from git history; the method is "
           "in `limits/claims/provenance.py`): per claim, the commit in which its criterion "
           "line, judge and cited helpers took their present form, and whether a result for "
           "the claim (by id) had been reported in README.md, WORKSPACE.md or docs/reports "
           "before that. Criteria were not all written before any result was seen: results "
           "reported before the claim ids existed are not detected by id; for example the "
           "Fig. 2b plateau was reported as failing under the experiments' own 10 % criterion "
           "(WORKSPACE, 2ef1a39, 2026-12-02) before the registry's slope-ratio criterion "
           "(f7202d4, 2026-12-04).",
           ""]
  prov = provenance.load()
  for kind, title in ((PAPER, "Claims of the paper"), (FINDING, "The suite's own findings")):
    lines += [f"## {title}", ""]
    for c in CLAIMS:
      if c.kind != kind:
        continue
      doc = _doc_with_helpers(c.judge)
      lines += [f"### `{c.id}` ({c.where})", "", f"> {c.words}", "",
                f"- Setting: {c.setting}; step `{c.step}`.",
                f"- Criterion: {c.criterion}.", f"- Why: {doc}"]
      if c.readings:
        lines.append("- Readings: " + "; ".join(_reading_line(c, rd) for rd in c.readings))
        for a, k, why in c.excluded:
          label = dict(next(rd for rd in c.readings if rd.ambig == a).options)[k]
          lines.append(f"- Excluded for this claim: {a} {label}: {why}")
      lines.append(f"- Evidence: {EVIDENCE[c.evidence]}"
                   + (f": {c.evidence_why}" if c.evidence_why else ""))
      if provenance.line(c.id, prov):
        lines.append(provenance.line(c.id, prov))
      if c.derived_from:
        lines.append(f"- Derived from: {', '.join(c.derived_from)} (not counted again)")
      lines.append("")
  lines += ["## Ambiguity options (the first named is the default)", ""]
  lines += [f"- **{k}**: {v}" for k, v in AMBIGUITIES.items()]
  lines += ["", "## Printed and derived forms", "",
            "One public summary of the paper prints two formulas differently from the "
            "suite's reconstructions. The paper's claim rows use the printed forms; the "
            "derived forms are the suite's findings, reported beside them (`limits/distance/printed.py` "
            "evaluates both):", "",
            "- Theorem 2 upper bound: printed (1/N)·Σ exp[−(r − ξ_i)²/(16M²)]; derived "
            "(1/N)·Σ exp[−(ξ_i − r)_+²/(2M²)] (Hoeffding on X_i ∈ [0, 2M]).",
            "- Random-set expectation: printed ((L − N)/L)·Σ_{i=1}^{L} ‖(α_i + N/(L − 1))·x_i "
            "− x̄‖₂ + ε (x̄ per AMBIG-17); reconstructed ((L − N)/L)·Σ_i ‖α_i x_i − "
            "(N/(L − 1))·Σ_{j≠i} α_j x_j‖ (+ ε per AMBIG-4).", "",
            "## Fields the suite still needs from its steps", ""]
  for step, fields in WANTED_FIELDS.items():
    for f, what in fields.items():
      lines.append(f"- `{step}`: `{f}`: {what}")
  return "\n".join(lines) + "\n"
