"""The claim record and its verdict: statuses, :class:`Verdict`, :class:`Reading`,
:class:`Claim`, :class:`Missing`, and the small pure helpers every judge reads a summary with
(:func:`need`, :func:`num`, :func:`fmt`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

HOLDS, FAILS, NOT_TESTABLE, DEPENDS, NOT_RUN = (
    "holds", "fails", "not testable", "depends on an ambiguity", "not run")
PAPER, FINDING = "paper", "finding"
# Evidence classes (issue 28): what a verdict can tell about the model it was measured on.
EMPIRICAL, MATHEMATICAL, BY_CONSTRUCTION, MODEL_FREE = (
    "empirical", "mathematical", "by construction", "model-free")
EVIDENCE = {
    EMPIRICAL: "empirical on this model (the model could have failed it)",
    MATHEMATICAL: "mathematical (any input passes, or fails, by a theorem; checks the code and "
                  "the reconstruction, not the model)",
    BY_CONSTRUCTION: "by construction (the measured quantity has the claimed shape for any input)",
    MODEL_FREE: "model-free (synthetic data or the sphere; the model is not used)",
}


class Missing(Exception):
  """A quantity a criterion needs is not in the step's summary (message: the field)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One verdict: ``status`` holds / fails / not testable, what was measured (one line), why
  (when not testable), the sample behind it (size, power) and ``vacuous``: the parts of the
  criterion left out because mathematics decides them whatever the data (cannot fail, or
  cannot hold), one line each with the reason; they count as evidence neither way."""

  status: str
  measured: str = ""
  reason: str = ""
  sample: str = ""
  vacuous: str = ""


@dataclasses.dataclass(frozen=True)
class Reading:
  """An ambiguity a claim depends on and its options ``(key, label)``; the first is the
  default and the claim's *primary* reading (docs/claims.md). ``by_step``: the options other than the default are not columns of
  the claim's step but reruns of it (the reproduction's reading steps), judged on their own
  summaries (:func:`limits.claims.assess`)."""

  ambig: str
  options: tuple[tuple[str, str], ...]
  by_step: bool = False


@dataclasses.dataclass(frozen=True)
class Claim:
  """One row of the report (see :mod:`limits.claims` for the fields). ``excluded``: options
  that are no reading of this claim, ``(AMBIG-n, option, reason)``; ``evidence``: one of
  :data:`EVIDENCE`, with ``evidence_why`` (one line)."""

  id: str
  kind: str
  where: str
  words: str
  setting: str
  step: str
  criterion: str
  judge: Callable[[Mapping[str, Any], Mapping[str, str]], Verdict]
  readings: tuple[Reading, ...] = ()
  derived_from: tuple[str, ...] = ()
  figure: str = ""
  excluded: tuple[tuple[str, str, str], ...] = ()
  evidence: str = EMPIRICAL
  evidence_why: str = ""

  def exclusion(self, reading: Mapping[str, str]) -> str:
    """Why the combination ``reading`` is no reading of this claim ("" when admissible)."""
    return "; ".join(f"{a} {k}: {why}" for a, k, why in self.excluded if reading.get(a) == k)


def need(d: Mapping[str, Any], *path: Any) -> Any:
  """d[path[0]][path[1]]..., raising Missing("a.b") when a key is absent or None."""
  cur: Any = d
  for i, k in enumerate(path):
    if not isinstance(cur, Mapping) or cur.get(k) is None:
      raise Missing(".".join(str(p) for p in path[:i + 1]))
    cur = cur[k]
  return cur


def num(v: Any) -> float:
  """A float from a JSON/CSV value ("nan" and "inf" strings included)."""
  return float(v)


def fmt(v: float) -> str:
  """Four significant digits."""
  return f"{v:.4g}"
