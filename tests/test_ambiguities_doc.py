"""docs/ambiguities.md documents every AMBIG-n label the code, the CLIs and the report use."""

import re
from pathlib import Path

from limits import claims

REPO = Path(__file__).resolve().parent.parent


def _sections() -> set[str]:
  doc = (REPO / "docs" / "ambiguities.md").read_text(encoding="utf-8")
  return set(re.findall(r"^## (AMBIG-\d+):", doc, flags=re.MULTILINE))


def test_every_label_in_the_code_has_a_section():
  used = set()
  for folder in ("limits", "experiments", "benchmarks"):
    for path in (REPO / folder).rglob("*.py"):
      used |= set(re.findall(r"AMBIG-\d+", path.read_text(encoding="utf-8")))
  missing = used - _sections()
  assert not missing, f"docs/ambiguities.md has no section for {sorted(missing)}"


def test_every_option_of_the_report_has_a_section():
  assert set(claims.AMBIGUITIES) <= _sections()
