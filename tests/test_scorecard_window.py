"""The scorecard on sliding-window layers (Gemma 3's local layers, issue 29 item 3).

A query t of a local layer with window W sees its last min(t + 1, W) keys; every scorecard
metric must use that effective length, as limits.distance and limits.separability do: Lemma 1's
max α·n and exact-zero share over the n = min(t, W) keys of a t-token prefix, Theorem 1's d̃ and
printed E (critical-N scan) over the row cut to its window, Theorem 2's N_s/N, and Lemma 2's
Jacobian on the window's scores only. The reference is plain NumPy (or the row functions of
limits.distance / limits.separability) on each record row *cut to its window*, so it shares no
windowing code with the paths under test.

A random tiny Gemma 3 (local, local, global; W = 8 at L = 32) is scored by
``scorecard.evaluate_row`` (softmax at c = 1) on two windows. Both sides of the window: the
prefixes t = 4 (inside), 8 (= W), 20 and 32 (beyond); the sampled Jacobian rows include local
queries before and after W; and each test checks that reading the local rows as global (no
window) gives other numbers, so a dropped ``window`` turns it red. query_pre_attn_scalar = 9
(T0 = 3 ≠ √d_head = 2): the softmax row at c = 1 must be the model itself.

Tolerances: the records are float32 and the metrics run in float32 (as on a real model); the
references run in float64 on the same float32 records: 1e-4 relative for token means, 1e-6
for KS p-values (the statistic is exact unless two samples tie within rounding, as in
tests/test_scorecard.py), 1e-5 for Jacobian norms (float64 on both sides; the scores are float32).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import models
from limits import scorecard as sc
from limits.distance import printed as printed_lib

L, W, H = 32, 8, 2
TS = (4, 8, 20, 32)
NS_SEP = (3, 6)
WINDOWS = (W, W, 0)  # per layer


@pytest.fixture(scope="module")
def scored():
  from limits.models.gemma3.config import Config

  config = Config(n_layer=3, n_head=H, n_kv_head=1, n_embd=16, head_dim=4, d_mlp=32,
                  n_positions=64, vocab_size=50, sliding_window=W, query_pre_attn_scalar=9.0,
                  layer_types=("sliding_attention", "sliding_attention", "full_attention"))
  params = models.init_params(jax.random.key(3), config)
  tokens = np.random.default_rng(0).integers(0, 50, size=(2, L)).astype(np.int32)
  cfg = sc.Config(candidates=("softmax",), length=L, eval_windows=2, lemma1_lengths=TS,
                  distance_ns=(5,), sep_ns=NS_SEP, jac_rows=40, seed=0)
  row = sc.evaluate_row(params, config, tokens, "softmax", 1.0, cfg)
  recs = []  # per window: (weights (nL, H, L, L), v, scores) of the model's own forward
  logits = []
  for w in range(2):
    out = models.forward(params, jnp.asarray(tokens[w:w + 1]), config)
    assert [int(x) for x in out.attn.window] == list(WINDOWS)
    recs.append(tuple(np.asarray(a[:, 0], np.float64) for a in
                      (out.attn.weights, out.attn.v, out.attn.scores)))
    logits.append(np.asarray(out.logits[0], np.float64))
  return dict(config=config, params=params, tokens=tokens, cfg=cfg, row=row, recs=recs,
              logits=logits)


def _cut(length_t, window):
  """(lo, n): query t − 1 of a t-token prefix sees keys lo … t − 1, n of them."""
  n = min(length_t, window) if window else length_t
  return length_t - n, n


def test_softmax_row_is_the_model_at_its_own_temperature(scored):
  """c = 1 is the model (T0 = √query_pre_attn_scalar = 3, not √d_head = 2): loss equal to the
  model's own next-token NLL."""
  nll = []
  for w, lg in enumerate(scored["logits"]):
    z = lg[:-1] - lg[:-1].max(-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    nll.append(-lp[np.arange(L - 1), scored["tokens"][w, 1:]])
  assert scored["row"]["loss"]["mean"] == pytest.approx(np.mean(nll), rel=1e-5)
  assert scored["row"]["temperature"] == pytest.approx(3.0)
  other = sc.token_nll(scored["params"], scored["config"], scored["tokens"], "softmax",
                       3.0 / 2.0, L)  # c = 1.5 is the √d_head reading
  assert abs(float(other.mean()) - np.mean(nll)) > 1e-3


def _lemma1_reference(recs, windows, layers=range(len(WINDOWS))):
  mx, zs = [], []
  for wts, _, _ in recs:
    for li, win in enumerate(WINDOWS):
      if li not in layers:
        continue
      win = win if windows else 0
      for h in range(H):
        m_row, z_row = [], []
        for t in TS:
          lo, n = _cut(t, win)
          row = wts[li, h, t - 1, lo:t]
          m_row.append(row.max() * n)
          z_row.append(np.mean(row == 0))
        mx.append(m_row)
        zs.append(z_row)
  return np.median(np.array(mx), axis=0), np.mean(np.array(zs), axis=0)


def test_lemma1_uses_the_effective_length(scored):
  got = scored["row"]["lemma1"]
  med, zero = _lemma1_reference(scored["recs"], True)
  np.testing.assert_allclose(got["median_max_aL"], med, rtol=1e-5)
  np.testing.assert_allclose(got["zero_share"], zero, atol=1e-12)
  assert np.all(zero == 0)  # softmax: no exact zero among the visible keys
  # the other side: read as global, the keys before the window are zeros at t > W only
  med_g, zero_g = _lemma1_reference(scored["recs"], False)
  assert zero_g[0] == zero_g[1] == 0 and zero_g[2] > 0.2 and zero_g[3] > 0.3
  assert np.all(med_g[:2] == med[:2]) and np.all(np.abs(med_g[2:] - med[2:]) > 1e-3 * med[2:])
  # local and global layers apart (growth in t stops at W in the local ones)
  kinds = scored["row"]["lemma1_by_kind"]
  assert kinds["local"]["layers"] == [0, 1] and kinds["global"]["layers"] == [2]
  for name, layers in (("local", (0, 1)), ("global", (2,))):
    med_k, _ = _lemma1_reference(scored["recs"], True, layers)
    np.testing.assert_allclose(kinds[name]["median_max_aL"], med_k, rtol=1e-5)


def _row_d_and_printed(a, x, n):
  """Theorem 1's d̃ (sum form) and the printed E (x̄ = output) of one row of t visible keys."""
  t = a.shape[0]
  sel = np.zeros(t, bool)
  sel[np.argsort(-a, kind="stable")[:n]] = True
  ax = a[:, None] * x
  s = ax[sel].sum(0)
  d_sum = np.linalg.norm(ax[~sel] - s, axis=-1).sum()
  e = (t - n) / t * np.linalg.norm((a + n / (t - 1))[:, None] * x - ax.sum(0), axis=-1).sum()
  return d_sum, e


def _per_head_d_and_e(recs, n, windows):
  """Per head (layer-major): d̄ pooled over windows and counted queries, E the window mean of
  the token means (as the scorecard); NaN for a head with no query of more than n keys."""
  d_out, e_out = [], []
  for li, win in enumerate(WINDOWS):
    win = win if windows else 0
    for h in range(H):
      ds, es = [], []
      for wts, v, _ in recs:
        dw, ew = [], []
        for q in range(L):
          lo, m = _cut(q + 1, win)
          if m <= n:
            continue
          d, e = _row_d_and_printed(wts[li, h, q, lo:q + 1], v[li, h, lo:q + 1], n)
          dw.append(d)
          ew.append(e)
        ds += dw
        es.append(np.mean(ew) if ew else np.nan)
      d_out.append(np.mean(ds) if ds else np.nan)
      e_out.append(np.mean(es))
  return np.array(d_out), np.array(e_out)


def test_theorem1_d_and_critical_scan_use_the_window(scored):
  from scipy import stats as sst

  t1 = scored["row"]["theorem1"]
  d5, _ = _per_head_d_and_e(scored["recs"], 5, True)
  assert t1["d_sum_median"]["5"] == pytest.approx(np.median(d5), rel=1e-4)
  d5g, _ = _per_head_d_and_e(scored["recs"], 5, False)
  assert abs(np.median(d5g) / np.median(d5) - 1) > 1e-2  # the global reading is another number
  scan = t1["critical_scan"]
  assert scan["evaluated"]
  beyond = False
  for n, p in scan["evaluated"].items():
    d, e = _per_head_d_and_e(scored["recs"], n, True)
    keep = np.isfinite(d) & np.isfinite(e)
    assert p == pytest.approx(sst.ks_2samp(d[keep], e[keep]).pvalue, rel=1e-6, abs=1e-9), n
    beyond |= n >= W  # local heads have no query of more than n keys: global heads only
  first = next((n for n in sorted(scan["evaluated"]) if scan["evaluated"][n] > 0.01), None)
  assert t1["critical_n"] == first


def test_printed_e_rows_use_the_window():
  """limits.distance.printed.head_expectations(window=W) (the scorecard's printed E) row by row
  against NumPy on the row cut to its window (x̄ of the output; length min(t + 1, W); queries
  with no more than N keys NaN), inside and beyond W; the causal reading differs beyond W."""
  rng = np.random.default_rng(4)
  logits = np.where(np.tri(L, dtype=bool), rng.normal(size=(L, L)) * 2, -np.inf)
  vis = np.tri(L, dtype=bool) & ~np.tri(L, k=-W, dtype=bool)
  wts = np.exp(np.where(vis, logits, -np.inf))
  wts /= wts.sum(-1, keepdims=True)
  v = rng.normal(size=(L, 4))
  ns = (2, 5)
  with jax.enable_x64(True):
    po, pm, _ = (np.asarray(a) for a in printed_lib.head_expectations(
        jnp.asarray(wts), jnp.asarray(v), jnp.asarray(ns), window=W))
    pg = np.asarray(printed_lib.head_expectations(jnp.asarray(wts), jnp.asarray(v),
                                                  jnp.asarray(ns))[0])
  for q in (1, 3, 7, 8, 20, 31):  # inside and beyond the window
    lo, m = _cut(q + 1, W)
    for k, n in enumerate(ns):
      if m <= n:
        assert np.isnan(po[q, k]) and np.isnan(pm[q, k])
        continue
      a, x = wts[q, lo:q + 1], v[lo:q + 1]
      assert po[q, k] == pytest.approx(_row_d_and_printed(a, x, n)[1], rel=1e-10)
      want_m = (m - n) / m * np.linalg.norm((a + n / (m - 1))[:, None] * x - x.mean(0),
                                            axis=-1).sum()
      assert pm[q, k] == pytest.approx(want_m, rel=1e-10)  # x̄ = the mean of the window
      if q >= W:
        assert abs(pg[q, k] / po[q, k] - 1) > 1e-3  # the causal reading differs beyond W
      else:
        assert pg[q, k] == pytest.approx(po[q, k], rel=1e-12)


def _separable_fraction(a, x, n):
  """N_s/N of one row of t visible keys (strict rule, AMBIG-10), NumPy: the top n selected,
  r the least ‖α_i x_i − s‖ over the non-selected, N_s the selected closer than r."""
  sel = np.zeros(a.shape[0], bool)
  sel[np.argsort(-a, kind="stable")[:n]] = True
  ax = a[:, None] * x
  dist = np.linalg.norm(ax - ax[sel].sum(0), axis=-1)
  return np.sum(sel & (dist < dist[~sel].min())) / n


def _separability_plateau(recs, windows, radius=1.0):
  """Per head: the mean over N of the N_s/N pooled over windows and queries of more than N keys
  (values on the sphere of radius M)."""
  plateau = []
  for li, win in enumerate(WINDOWS):
    win = win if windows else 0
    for h in range(H):
      fr = {n: [] for n in NS_SEP}
      for wts, v, _ in recs:
        x = radius * v[li, h] / np.linalg.norm(v[li, h], axis=-1, keepdims=True)
        for q in range(L):
          lo, m = _cut(q + 1, win)
          for n in NS_SEP:
            if m > n:
              fr[n].append(_separable_fraction(wts[li, h, q, lo:q + 1], x[lo:q + 1], n))
      plateau.append(np.mean([np.mean(fr[n]) for n in NS_SEP]))
  return np.array(plateau)


def test_theorem2_uses_the_window(scored):
  got = scored["row"]["theorem2"]
  ref = _separability_plateau(scored["recs"], True)
  ref_g = _separability_plateau(scored["recs"], False)
  assert got["heads"] == 3 * H
  assert got["plateau_median"] == pytest.approx(np.median(ref), rel=1e-4)
  q25, q75 = np.percentile(ref, [25, 75])
  assert got["plateau_q25"] == pytest.approx(q25, rel=1e-4)
  assert got["plateau_q75"] == pytest.approx(q75, rel=1e-4)
  assert np.max(np.abs(ref_g[:2 * H] - ref[:2 * H])) > 1e-3  # local heads: another number
  np.testing.assert_allclose(ref_g[2 * H:], ref[2 * H:])  # the global layer is the same


def test_jacobian_rows_are_the_window(scored):
  """Lemma 2's rows: softmax's ‖J‖₂ = λ_max(diag α − ααᵀ)/T on the window's scores only."""
  cfg, row = scored["cfg"], scored["row"]
  T = row["temperature"]
  samples = sc.sample_rows(2, 3, H, L, cfg.jac_rows, cfg.seed)
  local = samples[np.asarray(WINDOWS)[samples[:, 1]] > 0]
  assert np.any(local[:, 3] < W) and np.any(local[:, 3] >= W)  # both sides of the window

  def norms(windows):
    out = []
    for w, li, h, q in samples:
      win = WINDOWS[li] if windows else 0
      lo = max(0, q - win + 1) if win else 0
      z = scored["recs"][w][2][li, h, q, lo:q + 1] / T
      a = np.exp(z - z.max())
      a /= a.sum()
      out.append(np.linalg.eigvalsh(np.diag(a) - np.outer(a, a))[-1] / T)
    return np.array(out)

  ref, ref_g = norms(True), norms(False)
  jac = row["lemma2"]
  assert jac["rows"] == len(samples)
  assert jac["max_norm"] == pytest.approx(ref.max(), rel=1e-5)
  assert jac["mean_norm"] == pytest.approx(ref.mean(), rel=1e-5)
  assert abs(ref_g.mean() / ref.mean() - 1) > 1e-3
  assert jac["bound_violations"] == 0 and jac["max_bound"] == pytest.approx(1 / (2 * T))


def test_lemma1_rows_window_by_hand():
  """One row by hand: a local query beyond W counts only its W keys (one-hot: max α·n = W,
  zeros W − 1), inside W its t keys; the global reading counts t."""
  w = np.zeros((1, 12, 12))
  w[0, 11, 9] = 1.0  # query 11 puts everything on key 9 (inside a window of 4: keys 8..11)
  w[0, 2, 0] = 1.0  # query 2 on key 0 (t = 3 < W)
  mx, zs = sc.lemma1_rows(w, [3, 12], window=4)
  np.testing.assert_array_equal(mx, [[3.0, 4.0]])
  np.testing.assert_allclose(zs, [[2 / 3, 3 / 4]])
  mx, zs = sc.lemma1_rows(w, [3, 12])
  np.testing.assert_array_equal(mx, [[3.0, 12.0]])
  np.testing.assert_allclose(zs, [[2 / 3, 11 / 12]])
  assert math.isclose(sc.lemma1_rows(w, [12], window=12)[0][0, 0], 12.0)


def test_report_names_local_layers_and_the_model_temperature(scored):
  """scorecard.md: the kept local layers, W, the Lemma 1 split by kind and T0 = 3 (not √d_head);
  nothing about windows for a model without them."""
  row = {**scored["row"], "key": "softmax", "label": "softmax (T0)", "family": "softmax",
         "calibrated": False, "multiplier": 1.0, "row_seconds": 1.0}
  result = {"rows": [row], "costs": {"softmax": 1.0}, "calibrations": {},
            "windows": {"evaluation": [0, 1], "calibration": [2], "length": L},
            "compute_s": {"total_s": 1.0, "calibration_s": 0.0, "timing_s": 0.0, "rows_s": 1.0},
            "wall_s": 1.0}
  info = {"name": "g", "family": "gemma3", "n_layer": 3, "n_head": H, "d_head": 4,
          "layer_windows": list(WINDOWS)}
  _, md = sc.report(result, scored["cfg"], info)
  assert "Sliding-window (local) layers among them: [0, 1] (W = 8)" in md
  assert "local layers [0, 1]: " in md and "global layers [2]: " in md
  assert "T0 = the model's own scale (Gemma 3: √query_pre_attn_scalar) = 3 " in md
  info.pop("layer_windows")
  _, md = sc.report(result, scored["cfg"], info)
  assert "Sliding-window" not in md
