"""benchmarks.nll: the corpus loss per window, resumable from its .jsonl file (the whole-book
Gemma 3 270M loss of issue 29 is run through it).

On the embedded tiny model with short windows: one window's scores equal an independent NumPy
log-softmax of the model's logits (float64; 1e-5 relative, the float32 log-softmax); a run cut by
an interrupt after two windows and rerun computes only the missing windows and gives the same
records and summary, bit for bit, as an uninterrupted run; a file written with other settings is
refused in one line; a write cut short (no newline) is dropped; the random order is a seeded
permutation whose prefixes are the samples; the standard error is the between-window one with
the finite-population factor (scipy.stats.sem as the reference).
"""

import json
import math

import numpy as np
import pytest
import scipy.stats

from benchmarks import nll
from limits import models
from limits.errors import LimitsError

L = 16


@pytest.fixture(scope="module")
def tiny():
  from limits.models.gpt2.testing import SAMPLE_TEXT
  from limits.records import sources

  m = sources.load_model("tiny")
  tokens = np.asarray(m.tokenizer.encode(SAMPLE_TEXT * 3), np.int32)
  return m, tokens


def _header(tokens, **kw):
  return {"format": nll.FORMAT, "model": "tiny", "length": L, "bos": 0, "order": "random",
          "seed": 3, "corpus_tokens": int(tokens.size), **kw}


def _run(m, tokens, out, windows=4, **kw):
  args = dict(length=L, windows=windows, order="random", seed=3, bos=0, plain=True, out=out,
              header=_header(tokens), log=lambda line: None)
  args.update(kw)
  return nll.run(m, tokens, **args)


def test_window_scores_equal_numpy_log_softmax(tiny):
  m, tokens = tiny
  x = tokens[5 * L:6 * L]
  rec = nll.score_window(m, x, 0, True)
  for key, seq in (("nll_sum", x), ("nll_bos_sum", np.concatenate([[0], x]))):
    out = models.forward(m.params, seq[None].astype(np.int32), m.config, layers=())
    z = np.asarray(out.logits[0], np.float64)[:-1]
    lp = z - z.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    nl = -lp[np.arange(len(seq) - 1), seq[1:]]
    want = nl[1:].sum() if key == "nll_bos_sum" else nl.sum()  # the same L - 1 targets
    assert rec[key] == pytest.approx(want, rel=1e-5), key
  assert rec["targets"] == L - 1
  assert abs(rec["nll_sum"] - rec["nll_bos_sum"]) > 1e-3  # BOS changes the score


def test_interrupted_run_resumes_to_the_uninterrupted_result(tiny, tmp_path, monkeypatch):
  m, tokens = tiny
  whole = _run(m, tokens, str(tmp_path / "whole.jsonl"))
  assert len(set(whole["order"])) == 4 and whole["n_total"] == tokens.size // L

  cut = tmp_path / "cut.jsonl"
  real, calls = nll.score_window, []

  def failing(*a, **k):
    calls.append(1)
    if len(calls) == 3:
      raise KeyboardInterrupt  # Ctrl-C during the third window
    return real(*a, **k)

  monkeypatch.setattr(nll, "score_window", failing)
  with pytest.raises(KeyboardInterrupt):
    _run(m, tokens, str(cut))
  assert len(cut.read_text().splitlines()) == 1 + 2  # header + the two finished windows
  monkeypatch.setattr(nll, "score_window", real)

  counted = []
  monkeypatch.setattr(nll, "score_window", lambda *a, **k: counted.append(1) or real(*a, **k))
  resumed = _run(m, tokens, str(cut))
  assert len(counted) == 2  # only the missing windows are computed
  strip = lambda recs: [{k: v for k, v in r.items() if k != "seconds"} for r in recs]
  assert strip(resumed["records"]) == strip(whole["records"])
  assert resumed["plain"] == whole["plain"] and resumed["bos"] == whole["bos"]
  counted.clear()
  again = _run(m, tokens, str(cut))  # a finished run: nothing to compute
  assert not counted and again["bos"] == whole["bos"]


def test_more_windows_extend_the_same_sample(tiny, tmp_path):
  m, tokens = tiny
  out = str(tmp_path / "s.jsonl")
  few = _run(m, tokens, out, windows=2)
  more = _run(m, tokens, out, windows=5)
  assert more["order"][:2] == few["order"]
  np.testing.assert_array_equal(nll.window_order(10, "random", 3),
                                np.random.default_rng(3).permutation(10))
  np.testing.assert_array_equal(nll.window_order(4, "first", 3), np.arange(4))


def test_other_settings_refused_and_partial_line_dropped(tiny, tmp_path):
  m, tokens = tiny
  out = tmp_path / "r.jsonl"
  _run(m, tokens, str(out), windows=2)
  with pytest.raises(LimitsError, match="seed: 3 .file. vs 4 .now."):
    _run(m, tokens, str(out), windows=2, header=_header(tokens, seed=4))
  with open(out, "a") as f:
    f.write('{"window": 7, "targ')  # a write cut short
  done = nll.read_store(out, _header(tokens))
  assert len(done) == 2 and out.read_text().endswith("}\n")
  with pytest.raises(LimitsError, match="nothing to score"):
    _run(m, tokens, None, plain=False, bos=-1)
  with pytest.raises(LimitsError, match="only"):
    _run(m, tokens, None, windows=tokens.size // L + 1)


def test_summary_mean_and_standard_error():
  recs = [{"targets": 10, "s": v} for v in (31.0, 35.0, 28.0, 40.0)]
  out = nll.summarize(recs, "s", 20)
  means = np.array([3.1, 3.5, 2.8, 4.0])
  assert out["mean"] == pytest.approx(134.0 / 40)
  assert out["se"] == pytest.approx(scipy.stats.sem(means) * math.sqrt(1 - 4 / 20))
  assert nll.summarize(recs, "s", 4)["se"] == 0.0  # every window scored: no sampling error
  assert math.isnan(nll.summarize(recs[:1], "s", 20)["se"])


def test_file_lines_are_json(tiny, tmp_path):
  m, tokens = tiny
  out = tmp_path / "j.jsonl"
  _run(m, tokens, str(out), windows=1)
  lines = [json.loads(s) for s in out.read_text().splitlines()]
  assert lines[0] == {"header": _header(tokens)} and set(lines[1]) >= {"window", "nll_sum"}


def test_importable_beside_the_other_benchmarks():
  """benchmarks.nll defines its absl flags only when run as a program: importing it beside
  benchmarks.accelerator (which defines --length too) in one test process is no DuplicateFlagError
  (the default suite's collection failed on that once)."""
  import importlib

  importlib.import_module("benchmarks.accelerator")
  importlib.reload(nll)
