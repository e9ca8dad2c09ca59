"""Shared test set-up. Tests default to float32; those that verify a bound use
``with jax.enable_x64(True):`` (JAX 0.10's context manager) and say their tolerance.

Tests that need the real *War and Peace* take the ``reference_corpus`` fixture: the file under
``LIMITS_DATA_DIR`` when that is set (it must then hold the corpus: the test fails, never
skips), else the corpus embedded in the package (``limits/assets/corpus``), so they run with no
set-up at all.
"""

import os
from pathlib import Path

import pytest

from limits import data


@pytest.fixture(scope="session")
def reference_corpus(tmp_path_factory) -> Path:
  """Path of a plain-text war_and_peace.txt: LIMITS_DATA_DIR's, else the embedded copy's."""
  root = os.environ.get(data.ENV_DATA_DIR)
  if root:
    path = Path(root) / data.FILENAME
    if not path.is_file():
      pytest.fail(f"{path} does not exist: {data.ENV_DATA_DIR} must hold {data.FILENAME} "
                  f"(or unset it to use the embedded corpus)", pytrace=False)
    return path
  path = tmp_path_factory.mktemp("embedded_corpus") / data.FILENAME
  path.write_text(data.embedded_corpus().text, encoding="utf-8", newline="")
  return path


@pytest.fixture(autouse=True)
def _hub_offline(monkeypatch):
  """No test reaches the internet: hub downloads are off unless a test serves a fake hub on
  127.0.0.1 and lifts this itself (tests/test_hub.py)."""
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
