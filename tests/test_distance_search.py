"""Algorithm 3's search per layer (limits.distance.search): each causal block evaluated only
for the Ns its rows count gives the statistics of the full thresholds kernel
(limits.distance.kernels.layer_stats, sorted rows, lean), ties and sliding windows included."""

import jax
import numpy as np
import pytest

from limits import distance, selection
from limits.distance import search
from limits.errors import LimitsError

READ = ("count", "d_sum", "d_norm", "expected")  # what the KS search reads


def _causal_weights(rng, B, H, L, window=0, sharp=2.0):
  logits = rng.normal(size=(B, H, L, L)) * sharp
  vis = selection.visible_window(L, window)
  logits = np.where(vis, logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  return w / w.sum(-1, keepdims=True)


def test_block_counts_both_sides_of_each_block_edge():
  """A block [lo, hi) counts N iff N < hi (its last row sees hi keys; t > N): N = hi − 1
  counts, N = hi does not; with a window W the bound is min(hi, W)."""
  assert search.block_counts(16, [3, 4, 5, 11, 12, 15], blocks=4) == (1, 3, 4, 6)
  # blocks of 16: [0, 4), [4, 8), [8, 12), [12, 16)
  assert search.block_counts(16, [3, 4], blocks=4, window=4) == (1, 1, 1, 1)
  assert search.block_counts(16, [3, 4], blocks=4, window=5) == (1, 2, 2, 2)
  with pytest.raises(LimitsError):
    search.block_counts(16, [5, 3], blocks=4)


@pytest.mark.parametrize("L, blocks, window, ns", [
    (40, 4, 0, [3, 9, 10, 11, 29, 30, 31, 39]),   # every block edge crossed, N = L − 1
    (40, 4, 0, [31, 33, 35, 36]),                  # a later round: the first 3 blocks skipped
    (40, 1, 0, [31, 33, 35, 36]),
    (40, 4, 12, [3, 11, 12, 20]),                  # sliding window: N >= W counts no row
    (64, None, 0, [57, 60, 62, 63])])
def test_search_stats_equal_the_full_kernel_with_ties(L, blocks, window, ns):
  """float64: count exact, d̃ (both forms) and E equal the full kernel's to 1e-12 relative
  (the same per-row body; the full kernel computes the skipped blocks' rows and then zeroes
  them), with ties straddling the N-th place, tied zeros and a uniform row; Ns given out of
  order come back in that order."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(L + len(ns) + window)
    B, H, d = 1, 3, 5
    w = _causal_weights(rng, B, H, L, window)
    q = L - 2
    lo = max(0, q - window + 1) if window else 0
    w[0, 0, q, lo + 3:lo + 8] = w[0, 0, q, lo + 2]        # ties at several N
    w[0, 0, q] /= w[0, 0, q].sum()
    w[0, 2, q, lo:q + 1] = 1.0 / (q + 1 - lo)               # a uniform row
    x = rng.normal(size=(B, H, L, d))
    srt = selection.sort_rows(w, window)
    ref = distance.layer_stats(w, x, ns, bound=False, sorted_rows=srt, window=window,
                               lean=True, blocks=blocks)
    shuffled = ns[::-1]
    new = search.search_stats(w, x, shuffled, sorted_rows=srt, window=window, blocks=blocks)
    np.testing.assert_array_equal(new.count[..., ::-1], ref.count)
    for name in READ[1:]:
      np.testing.assert_allclose(getattr(new, name)[..., ::-1], getattr(ref, name),
                                 rtol=1e-12, atol=1e-300, err_msg=name)
    assert (ref.count > 0).any()


def test_skipped_blocks_are_the_ones_the_kernel_zeroes():
  """The skip is not vacuous: at L = 40, N = 31 the first three blocks count no row (their
  counts are 0 in the full kernel's rows), and a block the search would skip wrongly shows:
  block_counts one too small (N = hi − 1 dropped from block [20, 30)) changes the sums."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    L, ns = 40, [29, 31]
    w = _causal_weights(rng, 1, 2, L)
    x = rng.normal(size=(1, 2, L, 4))
    srt = selection.sort_rows(w)
    assert search.block_counts(L, ns, 4) == (0, 0, 1, 2)
    good = search.search_stats(w, x, ns, sorted_rows=srt, blocks=4)
    th = selection.thresholds_from_sorted(w, srt, ns)
    G = 2
    bad = search._search_kernel(w.reshape(G, L, L), x.reshape(G, L, 4),
                                th.thr.reshape(G, L, -1), th.cut.reshape(G, L, -1),
                                np.asarray(ns, np.int32), counts=(0, 0, 0, 2),
                                inclusion="n_over_l_minus_1", blocks=4)
    assert (np.asarray(bad.count)[:, 0] < good.count.reshape(G, -1)[:, 0]).all()
    np.testing.assert_array_equal(np.asarray(bad.count)[:, 1], good.count.reshape(G, -1)[:, 1])


def test_float32_search_stats_equal_the_full_kernel():
  """float32 (the KS default), L = 256 in 4 search blocks (the full kernel: 1): counts exact,
  d̃ and E within 1e-5 relative (float32 sums over up to 256 keys in another row partition)."""
  rng = np.random.default_rng(5)
  L, ns = 256, [28, 57, 199, 202, 203, 204, 205, 209]
  w = _causal_weights(rng, 1, 2, L).astype(np.float32)
  x = rng.normal(size=(1, 2, L, 8)).astype(np.float32)
  srt = selection.sort_rows(w)
  ref = distance.layer_stats(w, x, ns, bound=False, sorted_rows=srt, lean=True)
  new = search.search_stats(w, x, ns, sorted_rows=srt, blocks=4)
  np.testing.assert_array_equal(new.count, ref.count)
  for name in READ[1:]:
    np.testing.assert_allclose(getattr(new, name), getattr(ref, name), rtol=1e-5,
                               err_msg=name)


def test_search_blocks_edge():
  assert search.search_blocks(search.SEARCH_BLOCKS_FROM - 1) == 1
  assert search.search_blocks(search.SEARCH_BLOCKS_FROM) == 4


def _random_model():
  from limits.distance import model as distance_model
  from limits.models import gpt2

  config = gpt2.Config(n_layer=2, n_head=3, n_embd=24, n_positions=160, vocab_size=50)
  params = gpt2.init_params(jax.random.key(3), config, dtype=np.float64)
  return distance_model, config, params


def test_scan_and_search_in_four_blocks_equal_the_one_block_paths(monkeypatch):
  """Random GPT-2 (2 layers × 3 heads), 2 windows, L = 40, float64, with the 4-block threshold
  lowered to 32 (so the small model takes the path L >= 256 takes): the scan's samples
  (ScanSamples, 4 blocks) equal the hook path's (head_stats + PrintedExpectations, one block)
  to 1e-10 relative, and the search's p-values and statistics with the records kept, and read
  again (cache 0), equal the full one-block kernel's."""
  from limits.distance import kernels
  from limits.distance.scan import ScanSamples

  distance_model, config, params = _random_model()
  monkeypatch.setattr(search, "SEARCH_BLOCKS_FROM", 32)
  with jax.enable_x64(True):
    ev = distance_model.ModelEvaluator(params, config, dtype=np.float64, ks_dtype=np.float64)
    tok = np.random.default_rng(4).integers(0, config.vocab_size, (2, 40)).astype(np.int32)
    fast = ScanSamples(ev, tok, 39)
    assert fast.blocks == 4 and kernels.default_blocks(40) == 1
    ns = [1, 2, 3, 9, 10, 11, 29, 30]
    got = fast(ns)
    hook = distance_model.PrintedExpectations(ns)
    st = ev.head_stats(tok, ns, bound=False, dtype=ev.ks_dtype, layer_hook=hook)
    ref = {k: np.asarray(v) for k, v in distance_model.token_means(st).items()}
    ref["expected_printed_output"] = hook.means()["expected_printed_output"]
    for key in ("d_sum", "d_norm", "expected", "expected_printed_output"):
      np.testing.assert_allclose(got[key], ref[key], rtol=1e-10, atol=1e-12, err_msg=key)
    # the search: every block skipped somewhere (N = 29, 30, 39 count in the last block only)
    probe = [9, 29, 30, 39]
    full = ev.head_stats(tok, probe, bound=False, dtype=ev.ks_dtype, lean=True)
    want = ev._ks_from_stats(full, len(probe), "sum")
    cache = ev._build_cache(tok)
    assert cache is not None
    kept = ev.ks_pvalues(tok, probe, cache=cache)
    ev.cache_bytes = 0
    assert ev._build_cache(tok) is None
    again = ev.ks_pvalues(tok, probe)
    np.testing.assert_allclose(kept, want, rtol=1e-10)
    np.testing.assert_allclose(again, want, rtol=1e-10)
    means = distance_model.token_means(ev._cached_stats(cache, probe, tok.shape[1]))
    for key in ("d_sum", "d_norm", "expected"):
      np.testing.assert_allclose(means[key], np.asarray(distance_model.token_means(full)[key]),
                                 rtol=1e-10, err_msg=key)


def test_search_kernel_makes_no_implicit_host_transfer():
  """Algorithm 3's per-layer search kernel (``search._search_kernel``, what ``search_stats``
  runs on the device after the host thresholds) under jax.transfer_guard("disallow"): inputs
  placed explicitly, the result fetched explicitly, no implicit transfer inside; the same call
  with one NumPy input is refused (the guard works). Its values equal ``search_stats``'."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    B, H, L, d, ns = 1, 2, 32, 3, [3, 9, 17]
    w = _causal_weights(rng, B, H, L)
    x = rng.normal(size=(B, H, L, d))
    th = selection.thresholds_from_sorted(w, selection.sort_rows(w), ns)
    args = [jax.device_put(a) for a in (w.reshape(H, L, L), x.reshape(H, L, d),
                                        th.thr.reshape(H, L, -1), th.cut.reshape(H, L, -1),
                                        np.asarray(ns, np.int32))]
    static = dict(counts=search.block_counts(L, ns, 4), inclusion="n_over_l_minus_1",
                  blocks=4)
    search._search_kernel(*args, **static)  # compile outside the guard
    with jax.transfer_guard("disallow"):
      out = jax.device_get(search._search_kernel(*args, **static))
      with pytest.raises(Exception, match="[Dd]isallowed"):
        search._search_kernel(np.asarray(w.reshape(H, L, L)), *args[1:], **static)
    ref = search.search_stats(w, x, ns, blocks=4)
    for f in READ:
      np.testing.assert_array_equal(np.asarray(getattr(out, f)).reshape(B, H, -1),
                                    getattr(ref, f), err_msg=f)


@pytest.mark.parametrize("L, blocks, window, ns", [
    (40, 4, 0, [31, 33, 35, 36]),    # the first 3 blocks count no N: rows 30.. sorted
    (40, 4, 0, [12, 29, 35]),        # the first block counts none: rows 10..
    (40, 4, 12, [11, 20]),           # W = 12: N = 11 counted from the second block on
    (40, 4, 0, [3, 39])])            # every block counts: all rows
def test_search_sorts_only_the_rows_of_counted_blocks_same_bits(L, blocks, window, ns,
                                                                 monkeypatch):
  """Without ``sorted_rows`` the search sorts the rows of the blocks that count some N only
  (from the first such block's first row) and gives the same bits as with every row sorted."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(L + sum(ns) + window)
    w = _causal_weights(rng, 1, 3, L, window)
    q = L - 1
    w[0, 1, q, 4:9] = w[0, 1, q, 3]  # ties straddling the N-th place
    w[0, 1, q] /= w[0, 1, q].sum()
    x = rng.normal(size=(1, 3, L, 5))
    ref = search.search_stats(w, x, ns, sorted_rows=selection.sort_rows(w, window),
                              window=window, blocks=blocks)
    sorted_shapes = []
    real = search.sort_rows
    monkeypatch.setattr(search, "sort_rows",
                        lambda a, *args, **kw: sorted_shapes.append(a.shape) or real(a, *args, **kw))
    new = search.search_stats(w, x, ns, window=window, blocks=blocks)
    counts = search.block_counts(L, ns, blocks, window)
    first = next(lo for (lo, _), kb in zip(distance.kernels.causal_blocks(L, blocks), counts)
                 if kb)
    assert sorted_shapes == [(1, 3, L - first, L)]
    for name in READ:
      np.testing.assert_array_equal(getattr(new, name), getattr(ref, name), err_msg=name)


@pytest.mark.parametrize("window", [0, 5])
def test_sort_rows_and_thresholds_of_later_rows_are_those_of_the_whole_layer(window):
  """sort_rows / thresholds_from_sorted on rows row0 … L − 1 equal the whole layer's rows
  there (ties included); rows that are not the layer's are refused."""
  rng = np.random.default_rng(7)
  L, r0, ns = 24, 9, [1, 3, 4, 8, 23]
  w = _causal_weights(rng, 2, 2, L, window)
  w[1, 0, 20, 10:15] = w[1, 0, 20, 16]  # ties
  srt = selection.sort_rows(w, window)
  part = selection.sort_rows(w[..., r0:, :], window, row0=r0)
  np.testing.assert_array_equal(part, srt[..., r0:, :])
  full = selection.thresholds_from_sorted(w, srt, ns, window)
  th = selection.thresholds_from_sorted(w[..., r0:, :], part, ns, window, row0=r0)
  np.testing.assert_array_equal(th.thr, full.thr[..., r0:, :])
  np.testing.assert_array_equal(th.cut, full.cut[..., r0:, :])
  with pytest.raises(ValueError, match="not rows"):
    selection.sort_rows(w[..., r0:, :], window, row0=r0 + 1)
