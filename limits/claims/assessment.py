"""A claim under every combination of its readings: the robustness sentence ("holds under every
reading", "fails under every reading", "depends on AMBIG-k"), "not run", and the tally."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Iterable, Mapping, Sequence

from limits.claims.core import (DEPENDS, FAILS, HOLDS, NOT_RUN, NOT_TESTABLE, PAPER, Claim,
                                Missing, Verdict)


@dataclasses.dataclass(frozen=True)
class Assessment:
  """A claim's verdict over its readings: ``verdict`` (holds, fails, depends on an ambiguity,
  not testable, not run), ``label`` (the robustness sentence), ``default`` (the verdict under
  the default reading) and ``readings`` ((label, Verdict) per combination of options)."""

  claim: Claim
  verdict: str
  label: str
  default: Verdict
  readings: tuple[tuple[str, Verdict], ...] = ()


def judge_safely(claim: Claim, summary: Mapping[str, Any], reading: Mapping[str, str]) -> Verdict:
  """claim.judge, with a missing or malformed field turned into "not testable" (the field)."""
  try:
    return claim.judge(summary, reading)
  except Missing as e:
    return Verdict(NOT_TESTABLE, reason=f"step {claim.step} did not record {e}")
  except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as e:
    return Verdict(NOT_TESTABLE, reason=f"step {claim.step}'s summary is malformed "
                   f"({type(e).__name__}: {e})")


def combinations(claim: Claim) -> list[dict[str, str]]:
  """Every combination of the claim's reading options (the default first)."""
  axes = [[(rd.ambig, key) for key, _ in rd.options] for rd in claim.readings]
  return [dict(c) for c in itertools.product(*axes)] if axes else [{}]


def reading_label(claim: Claim, reading: Mapping[str, str]) -> str:
  """'AMBIG-1 d̃ = …; AMBIG-17 x̄ = …' for one combination."""
  parts = []
  for rd in claim.readings:
    labels = dict(rd.options)
    parts.append(f"{rd.ambig} {labels[reading[rd.ambig]]}")
  return "; ".join(parts) or "single reading"


def _judge_reading(claim: Claim, summary: Mapping[str, Any], reading: Mapping[str, str],
                   alternates: Mapping[tuple[str, str], Any]) -> Verdict:
  """One combination; a non-default option of a ``by_step`` reading is judged on the summary
  of its own step (``alternates[(ambig, option)]``: a summary, or a string saying why there is
  none), never on the default step's."""
  for rd in claim.readings:
    key = reading[rd.ambig]
    if rd.by_step and key != rd.options[0][0]:
      alt = alternates.get((rd.ambig, key))
      if alt is None:
        return Verdict(NOT_TESTABLE, reason=f"no outputs for the {rd.ambig} reading '{key}'")
      if isinstance(alt, str):
        return Verdict(NOT_TESTABLE, reason=alt)
      summary = alt
  return judge_safely(claim, summary, reading)


def assess(claim: Claim, summary: Mapping[str, Any],
           alternates: Mapping[tuple[str, str], Any] | None = None) -> Assessment:
  """The claim under every reading, and the robustness sentence (see the module docstring).

  ``alternates``: {(AMBIG-n, option): summary or reason} for the options of ``by_step``
  readings (the reproduction's reading steps); a missing one leaves that reading not testable.
  """
  combos = combinations(claim)
  verdicts = [_judge_reading(claim, summary, c, alternates or {}) for c in combos]
  labelled = tuple((reading_label(claim, c), v) for c, v in zip(combos, verdicts))
  default = verdicts[0]
  ok = [(c, v) for c, v in zip(combos, verdicts) if v.status in (HOLDS, FAILS)]
  if not ok:
    return Assessment(claim, NOT_TESTABLE, default.reason or "not testable", default, labelled)
  statuses = {v.status for _, v in ok}
  skipped = [(lab, v) for lab, v in labelled if v.status not in (HOLDS, FAILS)]
  if len(statuses) == 1:
    status = statuses.pop()
    if not claim.readings:
      label = status
    elif not skipped:
      label = f"{status} under every reading"
    else:
      label = (f"{status} under every computable reading ({len(ok)} of {len(combos)}; "
               f"not computable: " + "; ".join(sorted({v.reason for _, v in skipped})) + ")")
    return Assessment(claim, status, label, default, labelled)
  flips = []
  for rd in claim.readings:
    for (c1, v1), (c2, v2) in itertools.combinations(ok, 2):
      if v1.status != v2.status and all(c1[a] == c2[a] for a in c1 if a != rd.ambig):
        flips.append(rd.ambig)
        break
  holds = [reading_label(claim, c) for c, v in ok if v.status == HOLDS]
  fails = [reading_label(claim, c) for c, v in ok if v.status == FAILS]
  label = (f"depends on {', '.join(flips) or 'the combination of readings'}: holds with "
           f"{' | '.join(holds)}; fails with {' | '.join(fails)}")
  return Assessment(claim, DEPENDS, label, default, labelled)


def not_run(claim: Claim, reason: str) -> Assessment:
  """The assessment of a claim whose step did not run or failed."""
  return Assessment(claim, NOT_RUN, reason, Verdict(NOT_RUN, reason=reason))


VERDICT_ORDER = (HOLDS, FAILS, DEPENDS, NOT_TESTABLE, NOT_RUN)


def count_verdicts(entries: Iterable[tuple[str, Any, str]]) -> dict[str, int]:
  """The tally rule, for judged claims and stored records alike: counts by verdict of the
  ``(kind, derived_from, verdict)`` entries that are the paper's own claims (derived claims
  and findings are left out)."""
  out = {k: 0 for k in VERDICT_ORDER}
  for kind, derived_from, verdict in entries:
    if kind == PAPER and not derived_from:
      out[verdict] = out.get(verdict, 0) + 1
  return out


def tally(assessments: Sequence[Assessment]) -> dict[str, int]:
  """Counts of the paper's own claims by verdict (:func:`count_verdicts`)."""
  return count_verdicts((a.claim.kind, a.claim.derived_from, a.verdict) for a in assessments)
