"""Reports split local (sliding-window) and global layers where a claim is about growth in L
(issue 29 item 3): limits.stats.by_layer_kind, the vanishing step's per-kind slopes and the
judges' text (lemma1-model, fig2a). Expected values are computed by hand from the rows built
here; a model without windows gets no split (both sides)."""

import math

import numpy as np
import pytest

from limits import stats, vanishing
from limits.claims import judges_distance, judges_vanishing

WINDOWS = [8, 8, 0]  # layers 0, 1 local (W = 8), layer 2 global


def _distance_rows():
  """Per-head rows: local heads d = 10·min(L, 8)·(1 + head), global d = L·(1 + head)."""
  rows = []
  for L in (4, 8, 16, 32):
    for layer, w in enumerate(WINDOWS):
      for head in range(2):
        d = (10 * min(L, w) if w else L) * (1 + head)
        rows.append({"L": L, "N": 1, "layer": layer, "head": head, "d_sum": d,
                     "expected": 2.0 * d})
  return rows


def test_by_layer_kind_means_and_medians():
  split = stats.by_layer_kind(_distance_rows(), WINDOWS, ["d_sum"], by=("L", "N"))
  assert split["local"]["layers"] == [0, 1] and split["local"]["windows"] == [8]
  assert split["global"]["layers"] == [2] and split["global"]["heads"] == 2
  local = {r["L"]: r["d_sum_mean"] for r in split["local"]["rows"]}
  glob = {r["L"]: r["d_sum_mean"] for r in split["global"]["rows"]}
  assert local == {4: 60.0, 8: 120.0, 16: 120.0, 32: 120.0}  # mean of 10·n and 20·n
  assert glob == {4: 6.0, 8: 12.0, 16: 24.0, 32: 48.0}
  med = stats.by_layer_kind(_distance_rows(), WINDOWS, ["d_sum"], by=("L", "N"), stat="median")
  assert med["local"]["rows"][0]["heads"] == 4 and med["local"]["rows"][0]["d_sum_median"] == 60.0


def test_a_window_of_one_key_is_a_local_layer():
  """W = 1 (a query sees itself only) is still a sliding window: the smallest W > 0 counts as
  local, 0 as global (kills `int(w) > 0` → `> 1` in stats.by_layer_kind)."""
  split = stats.by_layer_kind(_distance_rows(), [1, 0, 0], ["d_sum"], by=("L", "N"))
  assert split["local"]["layers"] == [0] and split["local"]["windows"] == [1]
  assert split["global"]["layers"] == [1, 2]


@pytest.mark.parametrize("windows", [None, [0, 0, 0]])
def test_no_split_without_sliding_windows(windows):
  assert stats.by_layer_kind(_distance_rows(), windows, ["d_sum"]) is None


def test_fig2a_judge_reports_each_kind():
  """Global heads grow exactly linearly (exponent 1), local heads stop at W = 8: over
  L = 4…32 their exponent is that of 60, 120, 120, 120 (hand: the least-squares slope of
  log y on log L)."""
  rows = _distance_rows()
  split = stats.by_layer_kind(rows, WINDOWS, ["d_sum"], by=("L", "N"))
  summary = [{"L": L, "N": 1, "d_sum_mean": float(np.mean([r["d_sum"] for r in rows
                                                           if r["L"] == L]))}
             for L in (4, 8, 16, 32)]
  v = judges_distance.judge_fig2a_true({"rows": summary, "by_layer_kind": split}, {})
  x, y = np.log([4, 8, 16, 32]), np.log([60, 120, 120, 120])
  k_local = np.polyfit(x, y, 1)[0]
  assert f"local layers (W = 8), 4 heads: log-log exponent {k_local:.3g}" in v.measured
  assert "global layers, 2 heads: log-log exponent 1," in v.measured
  plain = judges_distance.judge_fig2a_true({"rows": summary}, {})
  assert "local" not in plain.measured and plain.status == v.status
  assert v.measured.startswith(plain.measured)


def _vanishing_rows():
  """Per-head rows of the last query: log10 max α·n = 1 + 0.5·log10 n_last and log10 min
  α·n = −2·log10 n_last, n_last = min(L, W) in local layers and L in global ones."""
  rows = []
  for L in (4, 8, 16):
    for layer, w in enumerate(WINDOWS):
      n = min(L, w) if w else L
      rows.append({"L": L, "layer": layer, "head": 0, "violations": 0, "queries": L,
                   "min_log_margin": 1.0, "log10_max_aL_last": 1 + 0.5 * math.log10(n),
                   "log10_min_aL_last": -2 * math.log10(n), "log10_band_upper_last": 3.0})
  return rows


def test_vanishing_slopes_by_kind_and_judge():
  rows = _vanishing_rows()
  summary = [{"L": L, "log10_max_median": 0.0, "log10_min_median": 0.0,
              "log10_band_upper_median": 3.0} for L in (4, 8, 16)]
  out = vanishing.measurements(rows, summary, WINDOWS)
  local, glob = out["by_layer_kind"]["local"], out["by_layer_kind"]["global"]
  steps = [(b["loglog_slope_median_max_aL"], b["loglog_slope_median_min_aL"])
           for b in local["slopes_between"]]
  assert steps == [pytest.approx((0.5, -2.0)), pytest.approx((0.0, 0.0), abs=1e-12)]
  assert glob["lemma1_slopes"]["loglog_slope_median_min_aL"] == pytest.approx(-2.0)
  assert [b["L"] for b in glob["slopes_between"]] == [[4, 8], [8, 16]]
  v = judges_vanishing.judge_lemma1_model(
      {"lemma1_slopes": out["lemma1_slopes"], "by_layer_kind": out["by_layer_kind"]}, {})
  assert "local layers (W = 8), 2 heads: log-log slopes of the median max/min α·n_t" in v.measured
  assert "8→16: max 0, min 0" in v.measured and "8→16: max 0.5, min -2" in v.measured
  assert "by_layer_kind" not in vanishing.measurements(rows, summary, None)
