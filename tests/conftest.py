"""Shared test set-up. Tests default to float32; those that verify a bound use
``with jax.enable_x64(True):`` (JAX 0.10's context manager) and say their tolerance.

Tests marked ``corpus`` need the real *War and Peace* and are out of the default run; run them
with ``LIMITS_DATA_DIR=/path/to/data python -m pytest -m corpus``. Asked for without the
corpus they fail, naming what is missing: they never skip.
"""

import os
from pathlib import Path

import pytest

from limits import data


@pytest.fixture
def reference_corpus() -> Path:
  """Path of war_and_peace.txt under LIMITS_DATA_DIR; fails the test if it is not there."""
  root = os.environ.get(data.ENV_DATA_DIR)
  if not root:
    pytest.fail(f"{data.ENV_DATA_DIR} is unset: corpus tests need the folder holding "
                f"{data.FILENAME} (run `{data.ENV_DATA_DIR}=/path/to/data python -m pytest -m corpus`)",
                pytrace=False)
  path = Path(root) / data.FILENAME
  if not path.is_file():
    pytest.fail(f"{path} does not exist: {data.ENV_DATA_DIR} must hold {data.FILENAME}",
                pytrace=False)
  return path
