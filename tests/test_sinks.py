"""Attention sinks (issue 28 Build 7): Sink_ε of sail-sg/Attention-Sink in limits.vanishing, and
the `attention-sinks` finding judged from it (limits.claims)."""

import numpy as np
import pytest

from limits import claims as C
from limits import vanishing


def _causal_rows(rng, L, window=0, sink=None):
  """(L, L) row-stochastic weights, 0 where masked (key j visible from query t iff j <= t and,
  with a window W, t − W < j); ``sink`` puts that weight on key 0 wherever it is visible."""
  w = np.zeros((L, L))
  for t in range(L):
    lo = 0 if not window else max(0, t - window + 1)
    row = rng.random(t + 1 - lo) + 0.05
    row /= row.sum()
    if sink is not None and lo == 0 and t > 0:
      row = row * (1 - sink) / row[1:].sum()
      row[0] = sink
    w[t, lo:t + 1] = row
  return w


def _plain_sink_score(w, window=0):
  """Independent: sail-sg's formula written out for key 0, loop over rows, the visible rows
  counted from the mask itself (eval_sink_open_source.py: Σ_t α_{t,0} / (number of rows that
  can see key 0))."""
  L = w.shape[0]
  seen, total = 0, 0.0
  for t in range(L):
    visible = 0 <= t and (not window or t - window < 0)
    if visible:
      seen += 1
      total += w[t, 0]
  return total / seen


def _sail_sg(weights):
  """sail-sg's compute_attention_sink on one sample (numpy transcription of the torch code:
  ratios = arange(L, 0, -1) broadcast on the key axis, sum over the query axis)."""
  L = weights.shape[-1]
  ratios = np.arange(L, 0, -1)[None, None, :]
  return (weights / ratios).sum(axis=-2)  # (H, L): importance of every key


def test_sink_score_matches_plain_numpy_and_sail_sg_on_causal_layers():
  rng = np.random.default_rng(0)
  L = 12
  heads = [_causal_rows(rng, L, sink=s) for s in (None, 0.1, 0.5, 0.9)]
  w = np.stack(heads)[None]  # (1, 4, L, L)
  got = vanishing.sink_scores(w)
  assert got.shape == (1, 4)
  want = [_plain_sink_score(h) for h in heads]
  np.testing.assert_allclose(got[0], want, rtol=1e-12)  # float64, same sums in another order
  np.testing.assert_allclose(got[0], _sail_sg(w[0])[:, 0], rtol=1e-12)
  # Row 0 (α_{0,0} = 1) is one of the L equally weighted rows: a sink of weight s on rows
  # 1..L−1 gives (1 + (L − 1)·s)/L exactly.
  np.testing.assert_allclose(got[0, 2], (1 + (L - 1) * 0.5) / L, rtol=1e-12)


def test_sink_score_on_a_sliding_window_layer_averages_the_rows_that_see_token_0():
  rng = np.random.default_rng(1)
  L, W, s = 16, 5, 0.6
  w = _causal_rows(rng, L, window=W, sink=s)
  assert np.all(w[W:, 0] == 0)  # token 0 is outside every window from t = W on
  got = vanishing.sink_scores(w[None, None], window=W)[0, 0]
  np.testing.assert_allclose(got, _plain_sink_score(w, window=W), rtol=1e-12)
  np.testing.assert_allclose(got, (1 + (W - 1) * s) / W, rtol=1e-12)
  # Read as a causal layer (all L rows) the same weights give a diluted score W/L as large:
  # the window must be passed (the record's ``window``), and 0 / None mean a global layer.
  causal = vanishing.sink_scores(w[None, None])[0, 0]
  np.testing.assert_allclose(causal, got * W / L, rtol=1e-12)
  assert vanishing.sink_scores(w[None, None], window=0)[0, 0] == causal
  # A window longer than L is a causal layer.
  full = _causal_rows(rng, 8, sink=s)
  assert vanishing.sink_scores(full[None, None], window=64)[0, 0] == pytest.approx(
      _plain_sink_score(full), rel=1e-12)


def _head_rows(L, layer, scores):
  """Per-head rows of one L from limits.vanishing.length_rows with the given sink scores, a
  number (one window) or a list (one per window) per head; the band fields are placeholders."""
  acc = {(layer, h): [{"violations": 0, "queries": 1, "min_margin": 1.0, "log_max_last": 0.0,
                       "log_min_last": 0.0, "band_last": 1.0, "sink_score": float(x)}
                      for x in (xs if isinstance(xs, list) else [xs])]
         for h, xs in enumerate(scores)}
  return vanishing.length_rows(L, acc)[0]


@pytest.mark.parametrize("score,above", [(0.3 + 1e-9, 1), (0.3, 0), (0.3 - 1e-9, 0)])
def test_sink_share_counts_scores_strictly_above_eps(score, above):
  # Both sides of ε, and ε itself (sail-sg's "importance_scores > epsilon" is strict).
  w = np.zeros((1, 1, 4, 4))
  w[0, 0, :, 0] = score  # every row puts `score` on token 0 (only column 0 is read)
  s = vanishing.sink_scores(w)[0, 0]
  assert s == pytest.approx(score, abs=1e-15)
  rows = _head_rows(4, 0, [score])
  assert rows[0]["sink_above"] == above
  assert vanishing.sink_summary(rows)["by_L"][0]["share_by_layer"] == [above]


def test_sink_summary_shares_by_layer_and_overall():
  rows = (_head_rows(32, 0, [0.1, 0.2, 0.31, 0.9]) + _head_rows(32, 1, [0.5, 0.6, 0.7, 0.29])
          + _head_rows(64, 0, [0.0] * 4) + _head_rows(64, 1, [0.4] * 4))
  out = vanishing.sink_summary(rows)
  assert out["eps"] == 0.3 and out["token"] == 0
  a, b = out["by_L"]
  assert (a["L"], a["share_by_layer"], a["share"], a["pairs"]) == (32, [0.5, 0.75], 5 / 8, 8)
  assert (b["L"], b["share_by_layer"], b["share"]) == (64, [0.0, 1.0], 0.5)
  np.testing.assert_allclose(a["mean_score_by_layer"], [0.3775, 0.5225])
  # Several windows: the share is over (head, window) pairs, as sail-sg's mean over samples.
  multi = vanishing.sink_summary(_head_rows(128, 0, [[0.9, 0.1, 0.8], [0.2, 0.2, 0.35]]))
  (c,) = multi["by_L"]
  assert (c["share_by_layer"], c["pairs"]) == ([0.5], 6)
  np.testing.assert_allclose(c["mean_score_by_layer"], [(0.6 + 0.25) / 2])


def _judged(shares_by_l):
  sinks = {"eps": 0.3, "by_L": [{"L": L, "share_by_layer": s, "share": sum(s) / len(s),
                                  "pairs": 4 * len(s)} for L, s in shares_by_l]}
  return C.assess(C.BY_ID["attention-sinks"], C.summarize("vanishing", {"sinks": sinks}))


def test_attention_sinks_finding_both_sides_of_its_criterion():
  claim = C.BY_ID["attention-sinks"]
  assert claim.kind == C.FINDING and claim.step == "vanishing" and claim.evidence == C.EMPIRICAL
  assert _judged([(32, [0.0, 0.5]), (64, [0.75, 0.25])]).verdict == C.HOLDS
  # One L where no layer reaches half its heads: fails.
  assert _judged([(32, [0.0, 0.5]), (64, [0.49, 0.25])]).verdict == C.FAILS
  held = _judged([(32, [0.0, 0.5]), (64, [0.75, 0.25])])
  assert "L = 32: 1 of 2" in held.default.measured and "0.75 0.25" in held.default.measured
  # Not measured (a run from before sinks were recorded): not testable, naming the field.
  a = C.assess(claim, C.summarize("vanishing", {"band": {"queries_checked": 1}}))
  assert a.verdict == C.NOT_TESTABLE and "sinks" in a.default.reason
  # A finding: never in the paper's tally.
  assert C.tally([held])["holds"] == 0


def test_measurements_record_sinks_from_the_per_head_rows():
  rows = _head_rows(32, 0, [0.1, 0.9])
  out = vanishing.measurements(rows, [])
  assert out["sinks"]["by_L"][0]["share_by_layer"] == [0.5]
  # Old rows without sink scores record no sinks (nothing invented).
  old = [{k: v for k, v in r.items() if not k.startswith("sink")} for r in rows]
  assert "sinks" not in vanishing.measurements(old, [])


def test_report_says_how_the_vanishing_claims_read_under_a_sink():
  from limits import reproduction as rp

  held = _judged([(32, [0.0, 0.75])])
  other = C.assess(C.BY_ID["cor1-band"], {"band_violations": 0, "band_queries": 10})
  settings = rp.Settings(model="tiny", quick=True)
  text = rp.render_report([rp.row(other), rp.row(held)], {}, settings, 1.0, None,
                          C.tally([other, held]))
  findings = text.split("## The suite's own findings")[1]
  assert "| `attention-sinks` |" in findings
  assert text.count(C.SINK_READING) == 1
  assert f"Attention sinks (`attention-sinks`: {C.HOLDS}). " + C.SINK_READING in findings
  # No sink row (a run from before sinks were measured): no such line.
  text = rp.render_report([rp.row(other)], {}, settings, 1.0, None, C.tally([other]))
  assert C.SINK_READING not in text


def test_sink_scores_on_gemma3_records_match_hf_attentions(tmp_path):
  """A random Gemma 3 (tests/test_gemma3_hf.py: layers 0, 1, 3 local with W = 8, layer 2
  global), L = 20 > W: the score of each layer's record, with the record's own ``window``,
  equals the mean of HF eager attention on token 0 over the rows that see it (t < 8 in a local
  layer, all 20 in the global one); float32 weights, 1e-5 (HF parity is 1e-4 per weight,
  averaging over rows only shrinks it)."""
  from limits import models
  from tests.test_gemma3_hf import W as GW
  from tests.test_gemma3_hf import _hf, _hf_model, _tokens

  hf, path = _hf_model(tmp_path, seed=7)
  config, params = models.load(path)
  L = 20
  tokens = _tokens(config.vocab_size, (1, L), seed=7)
  ref = _hf(hf, tokens).attentions  # per layer (1, H, L, L)
  windows = []
  for n, rec in models.iter_layers(params, tokens, config):
    a = ref[n][0].double().numpy()  # (H, L, L)
    rows = GW if int(rec.window) else L
    windows.append(int(rec.window))
    want = a[:, :rows, 0].mean(axis=-1)
    np.testing.assert_allclose(vanishing.sink_scores(rec.weights, rec.window)[0], want,
                               atol=1e-5)
  assert windows == [GW, GW, 0, GW]
