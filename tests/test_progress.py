"""Tests for limits/runs/progress.py: the tqdm wrapper's output off a terminal and when disabled."""

import io

from limits.runs.progress import Progress


def test_off_a_terminal_each_redraw_is_one_plain_line():
  out = io.StringIO()
  with Progress(4, "sweep toy", unit="cells", stream=out, log_every=0.0) as bar:
    for _ in range(4):
      bar.update(1)
  text = out.getvalue()
  assert "\r" not in text and text.endswith("\n")
  lines = text.splitlines()
  assert lines[0].startswith("sweep toy 0/4 (  0.0%)")
  assert lines[-1].startswith("sweep toy 4/4 (100.0%)") and "cells/s" in lines[-1]
  assert bar.done == 4 and bar.line().startswith("sweep toy 4/4 (100.0%)")


def test_disabled_counts_and_writes_nothing():
  out = io.StringIO()
  with Progress(3, "x", stream=out, enabled=False) as bar:
    bar.update(2)
    bar.update(1)
  assert out.getvalue() == "" and bar.done == 3
