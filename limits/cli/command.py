"""The ``limits`` console command: ``limits NAME [--flag=value ...]`` is ``python -m
experiments.NAME [--flag=value ...]``.

Each experiment keeps one implementation, its ``experiments/NAME.py`` absl script; this
dispatcher only runs that module as ``__main__`` (``runpy.run_module(..., alter_sys=True)``,
what ``python -m`` does), with ``sys.argv`` = the module's file followed by the arguments after
NAME. So flags, ``--help``, the recorded settings (:func:`limits.runs.results.run_identity` keys a CLI's
flags by ``sys.argv[0]``), outputs and exit codes are those of ``python -m experiments.NAME``,
which keeps working from a checkout. ``pip install .`` (or its wheel) installs this command
(``[project.scripts]`` in pyproject.toml) together with the ``experiments`` package.

Exit codes: the experiment's own (see :mod:`limits.cli`); 0 for ``limits --help`` and
``limits --version``; 2 with one line on stderr for a missing or unknown command.
"""

from __future__ import annotations

import ast
import importlib.util
import runpy
import sys
from typing import Sequence

PACKAGE = "experiments"
# The subcommands, in the order ``limits --help`` lists them (each an experiments/ module).
COMMANDS = ("reproduce", "gradient", "vanishing", "distance", "separability", "sweep",
            "scorecard", "compare", "train_tiny")
EXIT_USAGE = 2


def _summary(name: str) -> str:
  """The first sentence of ``experiments/NAME.py``'s docstring, read without importing it (no
  JAX)."""
  try:
    spec = importlib.util.find_spec(f"{PACKAGE}.{name}")
    with open(spec.origin, encoding="utf-8") as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
  except (ImportError, AttributeError, OSError, SyntaxError, TypeError):
    return ""
  first = " ".join(doc.strip().split("\n\n")[0].split())  # the first paragraph, on one line
  sentence = first.split(". ")[0].rstrip(".")
  line = (sentence + ".").replace("``", "") if sentence else ""
  return line if len(line) <= 100 else line[:97].rsplit(" ", 1)[0] + " ..."


def usage() -> str:
  width = max(map(len, COMMANDS))
  lines = ["usage: limits COMMAND [--flag=value ...]   (limits COMMAND --help: its flags)", "",
           "Numerical verification of 'Limitations of Normalization in Attention Mechanism' "
           "(arXiv 2508.17821).", "", "commands (each is python -m experiments.COMMAND):"]
  lines += [f"  {name:<{width}}  {_summary(name)}".rstrip() for name in COMMANDS]
  return "\n".join(lines)


def _version() -> str:
  from importlib import metadata

  try:
    return metadata.version("limits")
  except metadata.PackageNotFoundError:
    return "unknown (not installed; running from a checkout)"


def main(argv: Sequence[str] | None = None) -> int:
  """Runs ``experiments.<argv[0]>`` with the remaining arguments; returns or raises its exit."""
  args = list(sys.argv[1:] if argv is None else argv)
  if not args:
    print(usage(), file=sys.stderr)
    print(f"error: give a command: {', '.join(COMMANDS)}", file=sys.stderr)
    return EXIT_USAGE
  name, rest = args[0], args[1:]
  if name in ("-h", "--help", "help"):
    print(usage())
    return 0
  if name == "--version":
    print(f"limits {_version()}")
    return 0
  if name not in COMMANDS:
    print(f"error: unknown command {name!r}; allowed: {', '.join(COMMANDS)} "
          "(limits --help lists them)", file=sys.stderr)
    return EXIT_USAGE
  module = f"{PACKAGE}.{name}"
  from limits.runs import interrupts

  interrupts.install()  # Ctrl-C deferred before the experiment's heavy imports (as `python -m`)
  # alter_sys sets sys.argv[0] to the module's file, as `python -m` does; the rest is ours.
  sys.argv = [sys.argv[0] if sys.argv else "limits", *rest]
  runpy.run_module(module, run_name="__main__", alter_sys=True)
  return 0  # an absl script exits through SystemExit; a module that returns succeeded


if __name__ == "__main__":
  sys.exit(main())
