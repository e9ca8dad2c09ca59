"""The help of the CLIs whose flags are generated from their config dataclasses (issue 26, "one
experiment protocol"): byte-identical to the hand-declared flags they replaced.

The fixtures in tests/data/cli_help/ are ``python -m experiments.X --helpshort`` and
``--helpfull`` as printed by the ORIGINAL code (commit cb9858c, flags declared by hand with
``flags.DEFINE_*``), with the checkout's path replaced by ``<REPO>``; they were not produced by
the code under test. ``--helpshort`` is compared whole; of ``--helpfull`` the section of the
module's own flags (absl's sections follow absl's version, not ours).
"""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import REPO, run_experiment

FIXTURES = REPO / "tests" / "data" / "cli_help"
MODULES = ("scorecard", "sweep", "reproduce", "compare")


def _normalised(text: str) -> str:
  return text.replace(str(REPO), "<REPO>")


def module_section(helpfull: str, module: str) -> str:
  """The lines of ``helpfull`` from the module's ``<REPO>/experiments/<module>.py:`` header up to
  the next section header (an unindented ``name:`` line)."""
  lines = helpfull.splitlines()
  start = lines.index(f"<REPO>/experiments/{module}.py:")
  end = next((i for i in range(start + 1, len(lines))
              if re.fullmatch(r"\S+:", lines[i])), len(lines))
  return "\n".join(lines[start:end])


def test_module_section_stops_at_the_next_header():
  text = "doc\n\n<REPO>/experiments/x.py:\n  --a: A\n    (default: '1')\n\nabsl.app:\n  --b: B\n"
  assert module_section(text, "x") == "<REPO>/experiments/x.py:\n  --a: A\n    (default: '1')\n"
  with pytest.raises(ValueError):
    module_section(text, "y")


@pytest.mark.parametrize("module", MODULES)
def test_helpshort_unchanged(module):
  r = run_experiment(module, ["--helpshort"], timeout=120)
  assert r.returncode == 0, r.stderr
  expected = (FIXTURES / f"{module}.helpshort").read_text(encoding="utf-8")
  assert _normalised(r.stdout) == expected


@pytest.mark.parametrize("module", MODULES)
def test_helpfull_section_unchanged(module):
  r = run_experiment(module, ["--helpfull"], timeout=120)
  assert r.returncode == 0, r.stderr
  expected = (FIXTURES / f"{module}.helpfull").read_text(encoding="utf-8")
  got = module_section(_normalised(r.stdout), module)
  assert got == module_section(expected, module)
  assert "--" in got and got.count("\n") > 5  # the section holds the flags, not an empty cut
