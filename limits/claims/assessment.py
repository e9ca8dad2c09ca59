"""A claim under its readings: the primary reading's verdict, the robustness column ("same
under every admissible reading" or "flips under AMBIG-k (option): …", naming only the
ambiguities whose change flips it), "not run", and the tally.

Each ambiguity a claim depends on has one *primary* reading (the documented default, the first
option), *admissible* ones, and options *excluded for this claim* (``Claim.excluded``, with the
reason: e.g. the norm of the sum, bounded by max‖x‖, is no reading of a claim that the distance
grows linearly in L). The verdict is the primary reading's; an excluded reading is judged and
shown but can change neither the verdict nor the robustness column.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Iterable, Mapping, Sequence

from limits.claims.core import (EMPIRICAL, EVIDENCE, FAILS, HOLDS, NOT_RUN, NOT_TESTABLE, PAPER,
                                Claim, Missing, Verdict)

SAME = "same under every admissible reading"


@dataclasses.dataclass(frozen=True)
class Assessment:
  """A claim's verdict: ``verdict`` (the primary reading's: holds, fails, not testable, not
  run), ``label`` (the robustness column), ``default`` (the primary reading's Verdict),
  ``readings`` ((label, Verdict) per combination of options, primary first), ``robust`` (True:
  the same verdict under every admissible reading, all judged; False: an admissible reading
  flips it; None: nothing to compare or some admissible reading could not be judged) and
  ``excluded`` ((label, reason) of the combinations that are no reading of the claim)."""

  claim: Claim
  verdict: str
  label: str
  default: Verdict
  readings: tuple[tuple[str, Verdict], ...] = ()
  robust: bool | None = None
  excluded: tuple[tuple[str, str], ...] = ()


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


def _flip_text(claim: Claim, primary: Mapping[str, str], combo: Mapping[str, str],
               v: Verdict) -> str:
  names = dict((rd.ambig, dict(rd.options)) for rd in claim.readings)
  diff = [f"{a} ({names[a][combo[a]]})" for a in names if combo[a] != primary[a]]
  return f"{' with '.join(diff)}: {v.status}" + (f", {v.measured}" if v.measured else "")


def assess(claim: Claim, summary: Mapping[str, Any],
           alternates: Mapping[tuple[str, str], Any] | None = None) -> Assessment:
  """The claim under every reading; the verdict is the primary reading's, the robustness
  column compares it with the admissible readings only (see the module docstring).

  ``alternates``: {(AMBIG-n, option): summary or reason} for the options of ``by_step``
  readings (the reproduction's reading steps); a missing one leaves that reading not testable.
  """
  combos = combinations(claim)
  verdicts = [_judge_reading(claim, summary, c, alternates or {}) for c in combos]
  labelled = tuple((reading_label(claim, c), v) for c, v in zip(combos, verdicts))
  excluded = tuple((reading_label(claim, c), claim.exclusion(c)) for c in combos
                   if claim.exclusion(c))
  primary, pv = combos[0], verdicts[0]
  if pv.status not in (HOLDS, FAILS):
    return Assessment(claim, NOT_TESTABLE, pv.reason or "not testable", pv, labelled, None,
                      excluded)
  admissible = [(c, v) for c, v in zip(combos[1:], verdicts[1:]) if not claim.exclusion(c)]
  if not claim.readings:
    return Assessment(claim, pv.status, "single reading", pv, labelled, True, excluded)
  flips = [(c, v) for c, v in admissible if v.status in (HOLDS, FAILS) and v.status != pv.status]
  # Name only what flips it: a flipping combination is left out when a smaller set of changed
  # ambiguities (a subset of its own) already flips the verdict.
  changed = [frozenset(a for a in c if c[a] != primary[a]) for c, _ in flips]
  minimal = [(c, v) for (c, v), ch in zip(flips, changed)
             if not any(o < ch for o in changed)]
  untested = sorted({v.reason for _, v in admissible if v.status not in (HOLDS, FAILS)})
  if minimal:
    label = "flips under " + "; ".join(_flip_text(claim, primary, c, v) for c, v in minimal)
    return Assessment(claim, pv.status, label, pv, labelled, False, excluded)
  if untested:
    n_ok = sum(v.status in (HOLDS, FAILS) for _, v in admissible)
    label = (f"same under every computable admissible reading ({n_ok + 1} of "
             f"{len(admissible) + 1}; not computable: " + "; ".join(untested) + ")")
    return Assessment(claim, pv.status, label, pv, labelled, None, excluded)
  label = SAME if admissible else "single admissible reading"
  return Assessment(claim, pv.status, label, pv, labelled, True, excluded)


def not_run(claim: Claim, reason: str) -> Assessment:
  """The assessment of a claim whose step did not run or failed."""
  return Assessment(claim, NOT_RUN, reason, Verdict(NOT_RUN, reason=reason))


VERDICT_ORDER = (HOLDS, FAILS, NOT_TESTABLE, NOT_RUN)


def count_verdicts(entries: Iterable[tuple[Any, ...]]) -> dict[str, int]:
  """The tally rule, for judged claims and stored records alike: counts by verdict of the
  ``(kind, derived_from, verdict[, evidence])`` entries that are the paper's own claims with
  empirical evidence (derived claims, findings and the other evidence classes are left out;
  an entry without an evidence class, from a run before issue 28, counts)."""
  out = {k: 0 for k in VERDICT_ORDER}
  for kind, derived_from, verdict, *rest in entries:
    evidence = rest[0] if rest else None
    if kind == PAPER and not derived_from and evidence in (None, EMPIRICAL):
      out[verdict] = out.get(verdict, 0) + 1
  return out


def tally(assessments: Sequence[Assessment]) -> dict[str, int]:
  """Counts of the paper's own empirical claims by primary verdict (:func:`count_verdicts`)."""
  return count_verdicts((a.claim.kind, a.claim.derived_from, a.verdict, a.claim.evidence)
                        for a in assessments)


def robust_count(assessments: Sequence[Assessment]) -> tuple[int, int]:
  """(robust, judged): of the counted claims (:func:`tally`) whose primary verdict holds or
  fails, how many keep it under every admissible reading."""
  counted = [a for a in assessments if a.claim.kind == PAPER and not a.claim.derived_from
             and a.claim.evidence == EMPIRICAL and a.verdict in (HOLDS, FAILS)]
  return sum(a.robust is True for a in counted), len(counted)


def by_evidence(assessments: Sequence[Assessment]) -> dict[str, list[Assessment]]:
  """The paper's own claims that the tally leaves out, by evidence class (never hidden)."""
  out: dict[str, list[Assessment]] = {}
  for a in assessments:
    if a.claim.kind == PAPER and not a.claim.derived_from and a.claim.evidence != EMPIRICAL:
      out.setdefault(a.claim.evidence, []).append(a)
  return {k: out[k] for k in EVIDENCE if k in out}
