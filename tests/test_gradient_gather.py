"""The largest |visible logit| of the gradient step (``blocks.Gatherer``, read by
``task.check_temperature_range``) from each chunk's visible maximum and minimum equals the
previous rule, the maximum of |where(mask, rows, 0)| per chunk of 8,192 rows, on rows built to
separate them; a visible NaN entry is left out alone (the previous rule skipped its whole chunk;
since the twenty-ninth session the host rule is the screen's device rule,
``screen.visible_abs_max``)."""

import numpy as np
import pytest

from limits.gradient import blocks


def _previous(rows, mask):
  big = 0.0
  for lo in range(0, rows.shape[0], 8192):
    x = np.where(mask[lo:lo + 8192], rows[lo:lo + 8192], 0)
    big = max(big, float(np.abs(x).max()) if x.size else 0.0)
  return big


def _big(rows, mask):
  g = blocks.Gatherer(rows.shape[0], rows.shape[1], rows.dtype, ())
  g.add(0, rows, mask)
  return g.result()[0]


def _case(name):
  """20,000 rows of 8 keys (3 chunks); each case puts its extreme in a chosen place."""
  rng = np.random.default_rng(0)
  rows = rng.normal(size=(20_000, 8)).astype(np.float32)
  mask = rng.random((20_000, 8)) < 0.7
  if name == "negative":  # the largest |.| is a visible minimum
    rows[12_000, 3], mask[12_000, 3] = -50.0, True
  elif name == "masked_extreme":  # an invisible entry is the largest: ignored
    rows[5, 0], mask[5, 0] = 1e6, False
  elif name == "visible_nan":  # a NaN in the chunk of rows 8,192..16,383, beside the largest
    rows[9_000, 1], mask[9_000, 1] = np.nan, True
    rows[9_001, 1], mask[9_001, 1] = 90.0, True
  elif name == "masked_nan":
    rows[9_000, 1], mask[9_000, 1] = np.nan, False
  elif name == "inf":
    rows[19_999, 7], mask[19_999, 7] = -np.inf, True
  elif name == "nothing_visible":
    mask[:] = False
  elif name == "all_negative":
    rows = -np.abs(rows) - 1
  return rows, mask


@pytest.mark.parametrize("name", ["plain", "negative", "masked_extreme", "visible_nan",
                                  "masked_nan", "inf", "nothing_visible", "all_negative"])
def test_big_equals_the_previous_rule(name):
  rows, mask = _case(name)
  # the previous rule on the rows as the new one reads them: visible NaN entries left out
  want = _previous(rows, mask & ~np.isnan(rows))
  assert _big(rows, mask) == want
  expected = {"negative": 50.0, "inf": np.inf, "nothing_visible": 0.0, "visible_nan": 90.0}
  if name in expected:
    assert want == expected[name]
  if name == "visible_nan":  # the previous rule skipped the NaN's chunk, and the 90 with it
    assert _previous(rows, mask) < 90.0
