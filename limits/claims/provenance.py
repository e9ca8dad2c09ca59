"""Where each criterion comes from in git history (issue 28): per claim, the commit and date its
criterion was last changed, and whether a result for the claim had been reported before then.

``python -m limits.claims.provenance`` rewrites ``provenance.json`` beside this module from the
repository's history; :func:`limits.claims.render_docs` shows it in docs/claims.md (a file, not
a live ``git log``, so the docs test needs no git and a criterion change shows up in the next
commit that regenerates it). The method, stated so a reader can check it:

- *criterion changed*: for each of the claim's current ``criterion`` line (claims.toml), the
  full source of its judge function and of each helper the judge cites by ``:func:`` (where
  the thresholds live), the oldest commit in which that exact text appears under ``limits/``
  (``git log -S``); the latest of these is when the criterion took its present form (text
  moved between files unchanged keeps its first commit; any edit, even of a comment, counts);
- *reported before*: the oldest commit whose README.md, WORKSPACE.md or docs/reports/ mention
  the claim id in backquotes (a result table or prose about it); "yes" when that commit is an
  ancestor of the criterion commit (a result for the claim was on record before the criterion
  took its present form). Results reported before claim ids existed are not found this way.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILE = HERE / "provenance.json"
REPORTS = ("README.md", "WORKSPACE.md", "docs/reports")


def _git(root: Path, *args: str) -> str:
  return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                        text=True).stdout


def _oldest(root: Path, text: str, *paths: str) -> tuple[str, str] | None:
  """(hash, date) of the oldest commit whose diff changes the count of ``text`` in ``paths``."""
  out = _git(root, "log", "--format=%h %cs", "-S", text, "--", *paths).split("\n")
  lines = [x for x in out if x.strip()]
  return tuple(lines[-1].split()) if lines else None


def _ancestor(root: Path, a: str, b: str) -> bool:
  return subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", a, b],
                        capture_output=True).returncode == 0


def build(root: Path) -> dict:
  """{claim id: {criterion_commit, criterion_date, reported_first_commit, reported_first_date,
  reported_before}} from the history of the repository at ``root``."""
  from limits.claims.registry import CLAIMS

  out = {}
  for c in CLAIMS:
    texts = [c.criterion, inspect.getsource(c.judge).rstrip()]
    for name in dict.fromkeys(re.findall(r":func:`(\w+)`", c.judge.__doc__ or "")):
      helper = c.judge.__globals__.get(name)
      if callable(helper):
        texts.append(inspect.getsource(helper).rstrip())
    found = [x for x in (_oldest(root, t, "limits") for t in texts) if x]
    crit = None
    for h, d in found:  # the latest (each is an ancestor or descendant of the others)
      if crit is None or _ancestor(root, crit[0], h):
        crit = (h, d)
    rep = _oldest(root, f"`{c.id}`", *REPORTS)
    out[c.id] = {
        "criterion_commit": crit[0] if crit else None, "criterion_date": crit[1] if crit else None,
        "reported_first_commit": rep[0] if rep else None,
        "reported_first_date": rep[1] if rep else None,
        "reported_before": bool(rep and crit and rep[0] != crit[0]
                                and _ancestor(root, rep[0], crit[0])),
    }
  return out


def load() -> dict:
  """The recorded provenance ({} when the file is absent)."""
  try:
    return json.loads(FILE.read_text(encoding="utf-8"))
  except (OSError, ValueError):
    return {}


def line(claim_id: str, prov: dict) -> str:
  """One docs/claims.md line for a claim ("" when nothing is recorded)."""
  p = prov.get(claim_id)
  if not p or not p.get("criterion_commit"):
    return ""
  out = f"- Provenance: criterion last changed in {p['criterion_commit']} ({p['criterion_date']})"
  if p.get("reported_before"):
    out += (f"; a result for this claim had been reported before (first in "
            f"{p['reported_first_commit']}, {p['reported_first_date']})")
  elif p.get("reported_first_commit"):
    out += (f"; first reported with or after it ({p['reported_first_commit']}, "
            f"{p['reported_first_date']})")
  else:
    out += "; no result for it reported in README.md, WORKSPACE.md or docs/reports"
  return out + "."


if __name__ == "__main__":
  root = Path(_git(HERE, "rev-parse", "--show-toplevel").strip())
  FILE.write_text(json.dumps(build(root), indent=1, sort_keys=True) + "\n", encoding="utf-8")
  print(f"wrote {FILE}")
