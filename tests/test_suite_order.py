"""The default run's file order (tests/conftest.py): every file named in SLOWEST_FIRST exists,
once, so a renamed or deleted test file cannot leave a stale entry behind unnoticed."""

from pathlib import Path

from tests import conftest


def test_slowest_first_names_existing_test_files_once():
  here = Path(__file__).resolve().parent
  names = conftest.SLOWEST_FIRST
  assert len(set(names)) == len(names), names
  missing = [n for n in names if not (here / n).is_file()]
  assert not missing, missing
