"""Algorithm 3's bisection (``ModelEvaluator.critical_n``) where the records do not fit its
cache: each probe reads a window's layers one at a time. At L = 4,096 on SmolLM2 a window's 30
layers are 18 GB of float32 weights; a probe that listed them first was killed at 19.7 GB RSS
(seventeenth session, ``experiments.distance --mode=critical_n --lengths=4096 --windows=1
--model=smollm2``)."""

import jax
import numpy as np

from limits.distance import model as distance_model
from limits.models import gpt2
from tests.live_arrays import counting_square_arrays, frozen_heap


def _live_square_arrays_per_call(n_layer, cache_bytes, monkeypatch, L=24):
  """The most arrays of shape (..., L, L) alive at any search-kernel call of a bisection
  (float64, random GPT-2 of n_layer layers × 3 heads, 2 windows), and the p-values of the
  first probe."""
  config = gpt2.Config(n_layer=n_layer, n_head=3, n_embd=24, n_positions=64, vocab_size=50)
  seen = []
  counting = counting_square_arrays(distance_model.search_stats, L, seen)
  monkeypatch.setattr(distance_model, "search_stats", counting)
  with jax.enable_x64(True):
    params = gpt2.init_params(jax.random.key(3), config, dtype=np.float64)
    ev = distance_model.ModelEvaluator(params, config, dtype=np.float64, ks_dtype=np.float64,
                                       cache_bytes=cache_bytes)
    tok = np.random.default_rng(4).integers(0, config.vocab_size, (2, L)).astype(np.int32)
    found = ev.critical_n(tok, L - 1, alpha=0.01)
  return max(seen), found


def test_bisection_without_kept_records_holds_one_layer_at_a_time(monkeypatch):
  """Streamed (cache 0): the (L, L) arrays alive at a search-kernel call do not grow from 2 to
  6 layers (by at most 1). The other side: kept records (cache 1 GiB) are all alive, so their count grows by
  ≥ 4 (a weights array per layer); a probe that lists a window's layers before reducing them
  grows the same way. Both give the same critical N. The layers run one at a time here
  (``one_behind`` in place of ``in_threads``, whose worker threads make the count at a call
  depend on timing): that ``in_threads`` holds at most two items besides the one being read
  is tests/test_streaming.py's."""
  from limits.records.streaming import one_behind

  monkeypatch.setattr(distance_model, "in_threads", one_behind)
  with frozen_heap():
    streamed = [_live_square_arrays_per_call(n, 0, monkeypatch) for n in (2, 6)]
    kept = [_live_square_arrays_per_call(n, 1 << 30, monkeypatch) for n in (2, 6)]
  # ≤ 1: the count moved by one between identical runs inside the full suite (an array in flight
  # at a call); a probe holding a window's layers adds one per layer, 4 from 2 to 6 layers.
  assert streamed[1][0] - streamed[0][0] <= 1, streamed
  assert kept[1][0] - kept[0][0] >= 4, kept
  assert [s[1] for s in streamed] == [k[1] for k in kept]
