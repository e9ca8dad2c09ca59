"""Every ``experiments`` module imports beside the others: flags are defined only when a module
runs as a program (``define_flags`` under ``__main__``), so a notebook or a test can import any
two CLIs in one process. (The help texts and bad-flag errors are covered by the CLI tests.)"""

import importlib

from absl import app, flags  # noqa: F401  (absl.app defines its own flags on import)

from limits import cli  # noqa: F401  (the CLI layer: importing it defines no flag either)
from limits.cli import shared_flags as cli_flags  # noqa: F401

MODULES = ("compare", "distance", "gradient", "reproduce", "scorecard", "separability", "sweep",
           "train_tiny", "vanishing")


def test_all_experiment_modules_import_in_one_process_without_defining_flags():
  before = set(flags.FLAGS)
  mods = [importlib.import_module(f"experiments.{name}") for name in MODULES]
  assert set(flags.FLAGS) - before == set()  # importing defined no flag
  for mod in mods:
    assert callable(mod.define_flags) and callable(mod.main), mod.__name__
