"""Fig. 4 verdicts on curves with known shape (closed forms, not the code's own output)."""

import numpy as np
import pytest

from limits import sensitivity

T = np.logspace(-3, 2, 11)  # the paper-like grid 1e-3 ... 1e2, half-decade steps


def _by_claim(vs, word):
  return next(v for v in vs if word in v["claim"])


def test_loglog_slope_of_power_laws():
  t = np.logspace(-2, 1, 7)
  for p in (-1.0, -0.5, 0.0, 2.0):
    assert sensitivity.loglog_slope(t, 3.0 * t**p) == pytest.approx(p, abs=1e-12)
  assert np.isnan(sensitivity.loglog_slope([1.0], [1.0]))


def test_exact_inverse_t_curves_hold_both_claims():
  curves = {"0.001": 0.25 / T, "0.1": 0.25 / T, "10": 0.25 / T * 1.3}  # collapsed within 1.3x
  vs = sensitivity.figure4_verdicts(T, curves)
  low, high = _by_claim(vs, "1/T"), _by_claim(vs, "collapse")
  assert low["verdict"] == "holds" and high["verdict"] == "holds"
  for s in low["measured"]["loglog_slope_by_eps"].values():
    assert s == pytest.approx(-1, abs=1e-12)
  for d in high["measured"]["drop_decades_by_eps"].values():
    assert d == pytest.approx(2, abs=1e-12)  # 1/T from T = 1 to T = 100


def test_saturated_low_t_and_split_high_t_fail():
  flat = np.where(T < 0.1, 5.0, 0.5 / T)     # saturates below 0.1: slope 0 there
  vs = sensitivity.figure4_verdicts(T, {"a": flat, "b": 3 * flat})  # 3x apart everywhere
  assert _by_claim(vs, "1/T")["verdict"] == "fails"
  assert _by_claim(vs, "1/T")["measured"]["loglog_slope_by_eps"]["a"] == pytest.approx(0)
  assert _by_claim(vs, "collapse")["verdict"] == "fails"  # factor 3 > collapse factor 2


def test_slow_drop_fails_and_short_grids_are_not_testable():
  slow = {"a": 1 / np.sqrt(T)}  # one decade from 1 to 100, not two
  assert _by_claim(sensitivity.figure4_verdicts(T, slow), "collapse")["verdict"] == "fails"
  short = np.array([0.5, 1.0, 3.0])
  vs = sensitivity.figure4_verdicts(short, {"a": 1 / short})
  assert _by_claim(vs, "1/T")["verdict"] == "not testable"
  assert "below 0.1" in _by_claim(vs, "1/T")["reason"]
  assert _by_claim(vs, "collapse")["verdict"] == "not testable"  # 1 ... 3: under 1.5 decades
