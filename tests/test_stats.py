"""KS test wrapper and the critical-N search (limits.stats) on cases with a known answer."""

import numpy as np
import pytest
import scipy.stats

from limits import stats
from limits.errors import LimitsError


def test_ks_matches_scipy_and_closed_form():
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=50), rng.normal(0.5, 1, size=60)
  r = stats.ks_2samp(a, b)
  ref = scipy.stats.ks_2samp(a, b)
  assert r.statistic == pytest.approx(ref.statistic) and r.pvalue == pytest.approx(ref.pvalue)
  # Closed form: fully separated samples of sizes 3 and 3 -> D = 1, exact two-sided
  # p = 2 / C(6, 3) = 0.1.
  r = stats.ks_2samp([0, 1, 2], [10, 11, 12])
  assert r.statistic == 1.0 and r.pvalue == pytest.approx(0.1)
  # NaNs (heads with no counted query) are dropped, not propagated.
  assert stats.ks_2samp([0, 1, 2, np.nan], [10, 11, 12]).pvalue == pytest.approx(0.1)
  with pytest.raises(LimitsError):
    stats.ks_2samp([np.nan], [1.0])


def _step_pvalues(n_star, calls=None):
  """p(N) = 0.001 for N < n_star, 0.5 after: a monotone step with a known crossing."""

  def fn(ns):
    if calls is not None:
      calls.append(list(ns))
    return [0.001 if n < n_star else 0.5 for n in ns]

  return fn


@pytest.mark.parametrize("n_star,method,batch", [
    (n, m, b) for n in (1, 2, 7, 37, 100, 1023) for m in ("scan", "bisect") for b in (1, 8)
    if not (m == "scan" and b == 1 and n > 100)])  # a 1-at-a-time scan to 1023 adds nothing
def test_critical_n_step_function(n_star, method, batch):
  calls = []
  r = stats.critical_n(_step_pvalues(n_star, calls), 1, 1023, alpha=0.01, method=method,
                       batch=batch)
  assert r.n == n_star
  assert r.decisions_monotone and r.pvalues_monotone
  assert all(len(c) <= batch for c in calls)
  if method == "bisect":
    # ceil(log_{batch+1}(1024)) passes suffice for a batch-ary search.
    assert len(calls) <= int(np.ceil(np.log(1024) / np.log(batch + 1))) + 1


def test_critical_n_none_when_never_passing():
  for method in ("scan", "bisect"):
    r = stats.critical_n(lambda ns: [0.0] * len(ns), 1, 50, method=method)
    assert r.n is None and len(r.evaluated) > 0


def test_critical_n_reports_non_monotone_pvalues():
  # Passing at N = 5 only and again from N = 30: the scan finds 5; bisection (which assumes
  # monotonicity) may not, but must then say the decisions it saw were not monotone, or have
  # missed the pass at 5 altogether.
  fn = lambda ns: [0.5 if (n == 5 or n >= 30) else 0.001 for n in ns]
  assert stats.critical_n(fn, 1, 60, method="scan").n == 5
  r = stats.critical_n(fn, 1, 60, method="bisect", batch=4)
  if r.n != 5:
    assert (not r.decisions_monotone) or 5 not in r.evaluated
  # p-values that wiggle but never cross alpha non-monotonically are reported as such.
  r = stats.critical_n(lambda ns: [0.001 + 1e-4 * (n % 2) if n < 10 else 0.9 for n in ns], 1,
                       20, method="scan", batch=20)
  assert r.n == 10 and r.decisions_monotone and not r.pvalues_monotone


def test_critical_n_ks_on_constructed_samples():
  """End-to-end with real KS tests: sample B shifts toward A by 1/N; the crossing is where the
  shift drops below the KS resolution. Compare with an independent brute-force scan."""
  rng = np.random.default_rng(1)
  base = rng.normal(size=144)
  noise = rng.normal(size=144)

  def pv(ns):
    return [scipy.stats.ks_2samp(base, noise + 8.0 / n).pvalue for n in ns]

  brute = next(n for n in range(1, 200) if pv([n])[0] > 0.01)
  assert stats.critical_n(pv, 1, 199, method="scan").n == brute
  r = stats.critical_n(pv, 1, 199, method="bisect")
  if r.decisions_monotone:
    assert r.n == brute


def test_fits():
  ls = np.array([32, 64, 128, 256])
  f = stats.fit_ratio(ls, 0.06 * ls)
  assert f["ratio"] == pytest.approx(0.06) and f["r2"] == pytest.approx(1.0)
  g = stats.linear_fit([1, 2, 3], [2, 4, 7])
  # Closed form least squares: slope = 2.5, intercept = -2/3.
  assert g["slope"] == pytest.approx(2.5) and g["intercept"] == pytest.approx(-2 / 3)
  # R² by hand: residuals (1/6, −1/3, 1/6), Σy² about the mean 12.667 → 1 − (1/6)/12.667.
  assert g["r2"] == pytest.approx(1 - (1 / 6) / (38 / 3))
  assert stats.linear_fit([1, 1, 1], [1, 2, 3]) == {"slope": None, "intercept": None, "r2": None}
  assert stats.linear_fit([1, 2, 3], [5, 5, 5])["r2"] == 1.0


def test_loglog_slope_and_the_criteria_fits():
  """The log-log fit every judge reads (limits.stats, its one home) and the criteria's r²."""
  from limits.claims import criteria

  t = np.logspace(-3, 2, 11)
  fn = stats.loglog_slope
  assert fn(t, 3.0 * t ** -0.5) == pytest.approx(-0.5, abs=1e-12)
  assert np.isnan(fn([1.0, 2.0], [1.0, 0.0]))          # one positive point left
  assert fn([1, 2, 4, np.inf], [1, 2, 4, 8]) == pytest.approx(1.0)  # non-finite points dropped
  assert criteria.linear_r2([1, 2, 3], [2, 4, 7]) == pytest.approx(1 - (1 / 6) / (38 / 3))
  assert np.isnan(criteria.linear_r2([1], [1]))


def test_bad_arguments():
  with pytest.raises(LimitsError):
    stats.critical_n(lambda ns: ns, 1, 10, method="nope")
  with pytest.raises(LimitsError):
    stats.critical_n(lambda ns: ns, 5, 4)
  with pytest.raises(LimitsError):
    stats.critical_n(lambda ns: ns, 1, 4, alpha=1.5)


# --- Algorithm 3 as the paper's ascending loop (issue 28) -------------------------------------

def _window_p(n):
  """Hand-made p-values: reject below 5, pass 5–8, reject 9–12, pass from 13 (α = 0.01)."""
  return 0.5 if 5 <= n <= 8 or n >= 13 else 0.001


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_ascending_scan_finds_a_non_monotone_pass_window(batch):
  scans = stats.ascending_scan(lambda ns: {"a": [_window_p(n) for n in ns]}, 1, 40, alpha=0.01,
                               batch=batch, until_closed=("a",))
  a = scans["a"]
  assert a.first_pass == 5 and a.windows[0] == (5, 8)
  assert not a.decisions_monotone
  assert max(a.evaluated) < 9 + batch       # stopped once the first window closed
  assert a.as_dict()["windows"][0] == [5, 8]
  # A bisection assumes monotone decisions: on the same p-values it need not find N = 5, and
  # it says its assumption was refuted when it probed both sides of the window.
  b = stats.critical_n(_window_p_list, 1, 40, alpha=0.01, method="bisect", batch=2)
  assert b.n != 5 or not b.decisions_monotone


def _window_p_list(ns):
  return [_window_p(n) for n in ns]


def test_pass_windows_and_full_scan():
  ev = {n: _window_p(n) for n in range(1, 21)}
  assert stats.pass_windows(ev, 0.01) == [(5, 8), (13, 20)]
  scans = stats.ascending_scan(lambda ns: {"a": _window_p_list(ns)}, 1, 20, batch=4)
  assert scans["a"].windows == [(5, 8), (13, 20)] and max(scans["a"].evaluated) == 20
  # A window that stays open for `confirm` consecutive N stops the scan (reported open).
  late = stats.ascending_scan(lambda ns: {"a": [0.5 if n >= 13 else 0.001 for n in ns]}, 1, 99,
                              batch=4, until_closed=("a",), confirm=6)
  assert late["a"].first_pass == 13 and max(late["a"].evaluated) == 20


def test_uniform_attention_with_reconstructed_e_passes_from_small_n():
  """Uniform weights over vectors with a shared direction (as value vectors have) and per-head
  scales: α_i x_i − s and the reconstructed E's α_i x_i − p·Σ_{j≠i} α_j x_j have the same mean
  part μ(1 − N)/L, so d̃ and E agree head by head and the KS test over 144 heads passes from
  small N (the issue: reconstructed E passes for uniform attention from N ≈ 12). A scan that
  never reported a pass here would be wrong."""
  L, heads, d = 64, 144, 16
  rng = np.random.default_rng(0)
  mu = rng.normal(size=(heads, 1, d))
  scale = rng.lognormal(0.0, 0.5, size=(heads, 1, 1))
  xs = scale * (mu + 0.05 * rng.normal(size=(heads, L, d)))   # (heads, L, d)
  total = xs.sum(1, keepdims=True)

  def pvalues(ns):
    # Closed forms at α_i = 1/L, top-N = the first N tokens (every subset is a top-N set):
    # d̃ = Σ_{i>N} ‖x_i/L − s‖, s = Σ_{j≤N} x_j/L; E = ((L−N)/L)·Σ_i ‖x_i/L − p·Σ_{j≠i} x_j/L‖.
    out = []
    for n in ns:
      s_ = xs[:, :n].sum(1, keepdims=True) / L
      dt = np.linalg.norm(xs[:, n:] / L - s_, axis=-1).sum(-1)
      p = n / (L - 1)
      e = (L - n) / L * np.linalg.norm(xs / L - p * (total - xs) / L, axis=-1).sum(-1)
      out.append(stats.ks_2samp(dt, e).pvalue)
    return {"reconstructed": out}

  scan = stats.ascending_scan(pvalues, 1, 16, batch=4, until_closed=("reconstructed",))
  first = scan["reconstructed"].first_pass
  assert first is not None and first <= 4, scan["reconstructed"].evaluated


def test_head_subsets_are_seeded_and_stated():
  a = stats.head_subsets(270, 144, 3, seed=7)
  b = stats.head_subsets(270, 144, 3, seed=7)
  c = stats.head_subsets(270, 144, 3, seed=8)
  assert len(a) == 3 and all(len(x) == 144 == len(set(x.tolist())) for x in a)
  assert all((x == y).all() for x, y in zip(a, b))
  assert any((x != y).any() for x, y in zip(a, c))
  assert stats.head_subsets(16, 144) == []          # fewer heads than the paper's: all used
  g = stats.group_representatives(30, 9, 3, seed=0)  # SmolLM2: 9 heads share 3 value sets
  assert len(g) == 90 and all(g[i] // 9 == i // 3 for i in range(90))
  assert all((g[i] % 9) // 3 == i % 3 for i in range(90))
  assert (stats.group_representatives(4, 4, 4) == np.arange(16)).all()
  with pytest.raises(LimitsError, match="multiple"):
    stats.group_representatives(2, 9, 2)


# --- mutants of tools/mutation_run.py's stats group (docs/mutation_survivors.md) -------------

def test_scan_as_dict_keys_and_values():
  scans = stats.ascending_scan(lambda ns: {"a": [_window_p(n) for n in ns]}, 3, 10, batch=8)
  assert scans["a"].as_dict() == {
      "critical_n": 5, "alpha": 0.01, "method": "ascending scan", "windows": [[5, 8]],
      "evaluated": {n: _window_p(n) for n in range(3, 11)}, "decisions_monotone": False}


def test_head_subsets_defaults_and_the_paper_count_boundary():
  """Defaults: 5 seeded draws (seed 0) of 144 heads; exactly 144 heads is no subsampling."""
  d = stats.head_subsets(300)
  assert len(d) == 5 and all(len(x) == 144 for x in d)
  assert all((x == y).all() for x, y in zip(d, stats.head_subsets(300, 144, 5, seed=0)))
  assert stats.head_subsets(144) == [] and len(stats.head_subsets(145)) == 5


def test_group_representatives_mqa_seed_and_dtype():
  """One shared key/value head (MQA, n_kv_head = 1) is allowed: one head per layer; indices
  are integers, seeded (default seed 0), reproducible; n_kv_head = 0 is refused."""
  g = stats.group_representatives(3, 4, 1)
  assert g.dtype.kind == "i" and len(g) == 3
  assert all(g[i] // 4 == i for i in range(3))
  a = stats.group_representatives(20, 8, 2)
  assert a.dtype.kind == "i"
  assert (a == stats.group_representatives(20, 8, 2, seed=0)).all()
  assert (a == stats.group_representatives(20, 8, 2)).all()
  assert (a != stats.group_representatives(20, 8, 2, seed=1)).any()
  with pytest.raises(LimitsError, match="multiple"):
    stats.group_representatives(2, 4, 0)


def test_fits_compute_in_float64_from_float32_records():
  """Model records are float32: the fits must give the float64 answer for those float32
  values (rel 1e-12), not a float32 computation (off by ~1e-7)."""
  rng = np.random.default_rng(0)
  x32 = rng.uniform(1, 10, size=50).astype(np.float32)
  y32 = (3 * x32 + rng.normal(size=50)).astype(np.float32)
  x64, y64 = x32.astype(np.float64), y32.astype(np.float64)
  ref = scipy.stats.linregress(x64, y64)
  f = stats.linear_fit(x32, y32)
  assert f["slope"] == pytest.approx(ref.slope, rel=1e-12)
  assert f["intercept"] == pytest.approx(ref.intercept, rel=1e-12)
  assert f["r2"] == pytest.approx(ref.rvalue ** 2, rel=1e-12)
  g = stats.fit_ratio(x32, y32)
  assert g["ratio"] == pytest.approx(float(x64 @ y64 / (x64 @ x64)), rel=1e-12)
  h = stats.fit_ratio(x32.tolist(), y32)      # a float32 array on either side
  assert h["ratio"] == pytest.approx(g["ratio"], rel=1e-12)
  want = scipy.stats.linregress(np.log10(x64), np.log10(y64)).slope
  assert stats.loglog_slope(x32, y64) == pytest.approx(want, rel=1e-12)
  assert stats.loglog_slope(x64, y32) == pytest.approx(want, rel=1e-12)


def test_ascending_scan_range_batches_and_confirm_window():
  """Exact stopping points worked out by hand (batch 1: one N per call)."""
  calls = []

  def fn(ns):
    calls.append(list(ns))
    return {"a": [0.5 if n >= 5 else 0.001 for n in ns], "never": [0.0] * len(ns)}

  # Pass from 5, confirm 4: the window 5..n has n − 4 values, >= 4 first at n = 8.
  s = stats.ascending_scan(fn, 1, 40, batch=1, until_closed=("a",), confirm=4)
  assert max(s["a"].evaluated) == 8 and s["a"].windows == [(5, 8)]
  assert s["never"].first_pass is None and s["never"].windows == []
  # Default batch 8 and confirm 16: pass from 9 -> closed once 8k − 9 + 1 >= 16, k = 3.
  calls.clear()
  late = stats.ascending_scan(lambda ns: (calls.append(list(ns)),
                                          {"a": [0.5 if n >= 9 else 0.001 for n in ns]})[1],
                              1, 99, until_closed=("a",))
  assert calls == [list(range(1, 9)), list(range(9, 17)), list(range(17, 25))]
  assert late["a"].first_pass == 9
  # The range is [n_min, n_max] exactly, also when one batch covers it or n_min = n_max.
  assert sorted(stats.ascending_scan(fn, 1, 5, batch=8)["a"].evaluated) == [1, 2, 3, 4, 5]
  assert sorted(stats.ascending_scan(fn, 5, 5)["a"].evaluated) == [5]
  # A sample named in until_closed that the function never returns: the scan runs to n_max.
  miss = stats.ascending_scan(fn, 1, 12, batch=4, until_closed=("missing",))
  assert max(miss["a"].evaluated) == 12
  with pytest.raises(ValueError, match=r"returned 2 values of 'a' for 3 Ns"):
    stats.ascending_scan(lambda ns: {"a": [0.5, 0.5]}, 1, 3, batch=3)
