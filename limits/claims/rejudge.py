"""Re-judge a stored report.md under today's verdict layer without rerunning its steps.

A reproduction's report lists every reading's verdict ("Every reading") and each single-reading
claim's verdict (the tables). The verdict layer (primary reading, admissible and excluded
readings, robustness, evidence class) is a function of those per-reading verdicts, so a report
written before issue 28 can be re-read: ``python -m limits.claims.rejudge REPORT.md`` prints the
re-judged section to prepend. What a per-reading verdict itself would change (parts decided by
mathematics, Fig. 2c's ascending scan with the printed E) needs the step's files or a rerun;
those readings are marked "not testable: needs a rerun" and named.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from limits.claims.assessment import assess, combinations, reading_label, robust_count, tally
from limits.claims.core import EMPIRICAL, EVIDENCE, NOT_TESTABLE, PAPER, Verdict
from limits.claims.registry import CLAIMS

_ROW = re.compile(r"^\| \d+ \| `([^`]+)` \|(.*)\|$")
_READ = re.compile(r"^  - (.*?): \*\*([^*]+)\*\*(?:, (.*?))?(?: \((.*)\))?$")
# Per-reading verdicts that today's judges would decide differently (issue 28): they need the
# step's files (per-head rows, the g curves) or a rerun (the scan with the printed E).
RERUN = {
    "fig2c-critical-n": "the ascending scan with the printed E (AMBIG-18) was not run",
    "fig3-upper-tracks": "parts decided by mathematics are no longer counted (N = 1; cases at or "
                         "below the bound's floor e^(−1/16); maxima below 0.839, where the "
                         "printed bound cannot be within 0.10): likely not testable after a rerun",
    "thm2-upper-derived": "parts decided by mathematics are no longer counted (N = 1; cases at or "
                          "below the bound's floor e^(−1/2); maxima below 0.507)",
    "fig4-inverse-t": "an ε whose 1/T trend is impossible (g ≤ √2/ε) is left out; AMBIG-12 "
                      "rescales ε",
}


def parse(text: str) -> tuple[dict, dict]:
  """({id: Verdict} from the tables, {id: {old reading label: Verdict}} from 'Every reading')."""
  single, every, cur = {}, {}, None
  for line in text.splitlines():
    m = _ROW.match(line)
    if m:
      cells = [c.strip() for c in re.split(r"(?<!\\) \| ", m.group(2))]
      measured, verdict = cells[3], cells[4]
      status = re.match(r"\*\*([^*]+)\*\*", verdict).group(1)
      single[m.group(1)] = Verdict(status, re.sub(r" \[[^\]]*\]$", "", measured))
      continue
    m = re.match(r"^- `([^`]+)`:$", line)
    if m:
      cur = every.setdefault(m.group(1), {})
      continue
    m = _READ.match(line)
    if m and cur is not None:
      cur[m.group(1)] = Verdict(m.group(2), m.group(3) or "", m.group(4) or "")
  return single, every


def rejudge(text: str):
  """Assessments of every claim from a stored report's per-reading verdicts."""
  single, every = parse(text)
  out = []
  for c in CLAIMS:
    old = every.get(c.id, {})

    def judge(s, r, c=c, old=old):
      if r.get("AMBIG-18") == "printed":
        return Verdict(NOT_TESTABLE, reason=f"needs a rerun: {RERUN[c.id]}")
      keep = dataclasses.replace(c, readings=tuple(rd for rd in c.readings
                                                   if rd.ambig != "AMBIG-18"))
      label = reading_label(keep, r)
      v = old.get(label) if keep.readings else None
      if v is None and (not keep.readings or len(combinations(keep)) == 1 or not old):
        v = single.get(c.id)
      return v or Verdict(NOT_TESTABLE, reason="not in the stored report")

    alternates = {(rd.ambig, k): {} for rd in c.readings if rd.by_step for k, _ in rd.options}
    out.append(assess(dataclasses.replace(c, judge=judge), {}, alternates))
  return out


def render(text: str, source: str) -> str:
  """The re-judged section: tally, then one row per claim."""
  got = rejudge(text)
  t = tally(got)
  robust, judged = robust_count(got)
  lines = ["## Re-judged under the primary-reading layer (issue 28), from the readings below",
           "", f"Re-read from the per-reading verdicts of {source} (no step rerun: "
           "`python -m limits.claims.rejudge`). Paper's claims, empirical on this model, primary "
           "reading: " + ", ".join(f"{n} {k}" for k, n in t.items() if n)
           + f". Of the {judged} judged, {robust} keep their verdict under every admissible "
           "reading.", ""]
  for ev, words in EVIDENCE.items():
    if ev == EMPIRICAL:
      continue
    xs = [a for a in got if a.claim.kind == PAPER and not a.claim.derived_from
          and a.claim.evidence == ev]
    if xs:
      lines.append(f"Not counted, {words}: "
                   + ", ".join(f"`{a.claim.id}` {a.verdict}" for a in xs) + ".")
  lines += ["", "| id | kind | Verdict (primary reading) | Robustness | Evidence | Needs a rerun |",
            "|---|---|---|---|---|---|"]
  for a in got:
    c = a.claim
    rob = a.label.replace("|", "\\|") if a.verdict in ("holds", "fails") else a.label
    lines.append(f"| `{c.id}` | {c.kind}{' (derived, not counted)' if c.derived_from else ''} "
                 f"| **{a.verdict}** | {rob[:400]} | {c.evidence} | {RERUN.get(c.id, '')} |")
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  path = Path(sys.argv[1])
  print(render(path.read_text(encoding="utf-8"), path.name))
