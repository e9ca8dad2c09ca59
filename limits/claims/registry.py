"""The registry: every :class:`Claim` in report order (:data:`CLAIMS`, :data:`BY_ID`), the
readings (one per ambiguity a claim depends on) and the ambiguity options (:data:`AMBIGUITIES`).

The claims' words, settings and criteria are prose, so they are data: ``claims.toml`` beside this
module holds them in report order. This module loads that file once and binds each claim's
``judge`` to the function of that name in the ``judges_*`` modules; a file that names an
unknown judge, ambiguity, step field or claim stops the import with one line saying which.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any, Mapping

from limits.claims import (judges_distance, judges_gradient, judges_separability,
                           judges_vanishing)
from limits.claims.core import EMPIRICAL, EVIDENCE, FINDING, PAPER, Claim, Reading
from limits.errors import LimitsError

CLAIMS_FILE = "claims.toml"
# Every judge by name: the public ``judge_*`` functions of the four judge modules.
JUDGES = {name: fn for mod in (judges_vanishing, judges_distance, judges_separability,
                               judges_gradient)
          for name, fn in vars(mod).items() if name.startswith("judge_") and callable(fn)}
_CLAIM_KEYS = {"id", "kind", "where", "words", "setting", "step", "criterion", "judge",
               "readings", "derived_from", "figure", "excluded", "evidence", "evidence_why"}


def _fail(what: str) -> LimitsError:
  return LimitsError(f"limits/claims/{CLAIMS_FILE}: {what}")


def parse_registry(data: Mapping[str, Any]):
  """(claims, readings, ambiguities) from the parsed ``claims.toml``.

  A by-step reading (``by_step = true``) is appended to the readings of every claim of its
  ``steps``. An option excluded under ``[readings.AMBIG-n.excluded]`` is excluded for every
  claim with that reading; a claim's own ``excluded = [[AMBIG-n, option, reason], …]`` adds
  to that. The first option (the primary reading) cannot be excluded. Raises LimitsError
  naming the entry and value for anything unknown or missing.
  """
  ambiguities = dict(data.get("ambiguities", {}))
  readings, by_step, reading_excl = {}, [], {}
  for ambig, spec in data.get("readings", {}).items():
    if ambig not in ambiguities:
      raise _fail(f"reading {ambig} is not listed under [ambiguities]")
    opts = tuple((str(k), str(label)) for k, label in spec["options"])
    readings[ambig] = Reading(ambig, opts, by_step=bool(spec.get("by_step", False)))
    reading_excl[ambig] = tuple((ambig, str(k), str(why))
                                for k, why in dict(spec.get("excluded", {})).items())
    if readings[ambig].by_step:
      by_step.append((readings[ambig], tuple(spec.get("steps", ()))))
  claims, seen = [], set()
  for entry in data.get("claim", []):
    cid = entry.get("id", "?")
    unknown = set(entry) - _CLAIM_KEYS
    missing = {"id", "kind", "where", "words", "setting", "step", "criterion", "judge"} - set(entry)
    if unknown or missing:
      raise _fail(f"claim {cid!r} has unknown key(s) {sorted(unknown)} or lacks {sorted(missing)}")
    if cid in seen:
      raise _fail(f"claim id {cid!r} appears twice")
    if entry["kind"] not in (PAPER, FINDING):
      raise _fail(f"claim {cid!r} has kind={entry['kind']!r}; allowed: {PAPER!r}, {FINDING!r}")
    if entry["judge"] not in JUDGES:
      raise _fail(f"claim {cid!r} names judge {entry['judge']!r}, which no judges_* module "
                  "defines")
    for ambig in entry.get("readings", ()):
      if ambig not in readings:
        raise _fail(f"claim {cid!r} depends on reading {ambig!r}, not under [readings]")
    for ref in entry.get("derived_from", ()):
      if ref not in seen:
        raise _fail(f"claim {cid!r} is derived from {ref!r}, which no earlier claim is")
    rds = tuple(readings[a] for a in entry.get("readings", ()))
    rds += tuple(rd for rd, steps in by_step if entry["step"] in steps)
    excl = tuple(x for rd in rds for x in reading_excl[rd.ambig])
    excl += tuple((str(a), str(k), str(why)) for a, k, why in entry.get("excluded", ()))
    opts = {rd.ambig: [k for k, _ in rd.options] for rd in rds}
    for a, k, why in excl:
      if a not in opts or k not in opts[a]:
        raise _fail(f"claim {cid!r} excludes {a} option {k!r}, which is no reading of it")
      if k == opts[a][0]:
        raise _fail(f"claim {cid!r} excludes {a} option {k!r}, its primary reading; the "
                    "primary reading is the documented default and cannot be excluded")
      if not why.strip():
        raise _fail(f"claim {cid!r} excludes {a} option {k!r} without a reason")
    evidence = entry.get("evidence", EMPIRICAL)
    if evidence not in EVIDENCE:
      raise _fail(f"claim {cid!r} has evidence={evidence!r}; allowed: "
                  + ", ".join(repr(e) for e in EVIDENCE))
    if evidence != EMPIRICAL and not str(entry.get("evidence_why", "")).strip():
      raise _fail(f"claim {cid!r} has evidence={evidence!r} without evidence_why")
    claims.append(Claim(cid, entry["kind"], entry["where"], entry["words"], entry["setting"],
                        entry["step"], entry["criterion"], JUDGES[entry["judge"]], rds,
                        tuple(entry.get("derived_from", ())), entry.get("figure", ""),
                        excl, evidence, str(entry.get("evidence_why", ""))))
    seen.add(cid)
  return tuple(claims), readings, ambiguities


def load_registry():
  """Parses the packaged ``claims.toml`` (see :func:`parse_registry`)."""
  text = resources.files("limits.claims").joinpath(CLAIMS_FILE).read_text(encoding="utf-8")
  try:
    data = tomllib.loads(text)
  except tomllib.TOMLDecodeError as e:
    raise _fail(f"not valid TOML ({e})") from None
  return parse_registry(data)


CLAIMS, READINGS, AMBIGUITIES = load_registry()
BY_ID = {c.id: c for c in CLAIMS}
R_DFORM, R_INCL, R_JENSEN, R_VECTORS, R_KS, R_LOGIT, R_XBAR = (
    READINGS[a] for a in ("AMBIG-1", "AMBIG-3", "AMBIG-4", "AMBIG-7", "AMBIG-9", "AMBIG-12",
                          "AMBIG-17"))
