"""Algorithm 3's ascending scan: the fast path (limits.distance.scan) against the hook path it
replaced, and the scan's N_max (the L/4 rule)."""

import jax
import numpy as np
import pytest

from limits.distance import model as distance_model
from limits.distance.kernels import top_k_size
from limits.distance.scan import SCAN_TOP_MIN, ScanSamples, scan_n_max
from limits.errors import LimitsError
from limits.models import gpt2
from tests.live_arrays import counting_square_arrays, frozen_heap

CONFIG = gpt2.Config(n_layer=2, n_head=3, n_embd=24, n_positions=160, vocab_size=50)


def _hook_path(ev, tok, ns):
  """The scan's samples as the code before issue 27 item 5 computed them: head_stats with a
  PrintedExpectations hook (limits.distance.kernels.layer_stats_printed; N > 128 would take
  the host sort)."""
  hook = distance_model.PrintedExpectations(ns)
  st = ev.head_stats(tok, ns, bound=False, dtype=ev.ks_dtype, layer_hook=hook)
  means = distance_model.token_means(st)
  out = {k: np.asarray(means[k]) for k in ("d_sum", "d_norm", "expected")}
  out["expected_printed_output"] = np.asarray(hook.means()["expected_printed_output"])
  return out


@pytest.mark.parametrize("L,cache,batches", [
    (40, 1 << 30, ([1, 2, 3, 4], [5, 6, 7, 8], [20, 33, 38, 39])),
    (40, 0, ([1, 2, 3, 4], [5, 6, 7, 8], [20, 33, 38, 39])),
    (40, 1 << 17, ([1, 2, 3, 4], [5, 6, 7, 8], [20, 33, 38, 39])),
    # N > 128: the hook path sorted on the host (22 s on 2 loaded cores: slow)
    pytest.param(140, 1 << 30, ([2, 9], [129, 133, 139]), marks=pytest.mark.slow)])
def test_fast_scan_equals_the_hook_path_on_a_random_model(L, cache, batches):
  """Random GPT-2 (2 layers × 3 heads, d_head = 8), 2 windows, float64: the per-head token
  averages of d̃ (both forms), E and the printed E agree with the hook path to 1e-10 relative
  (float64; the two paths sum the same terms in another order) for every N of three batches,
  with the records kept between batches and without (cache 0: read and select again; 128 KiB:
  read again, the selection order kept), and
  above N = 128 where the hook path took the host sort and thresholds."""
  with jax.enable_x64(True):
    params = gpt2.init_params(jax.random.key(3), CONFIG, dtype=np.float64)
    ev = distance_model.ModelEvaluator(params, CONFIG, dtype=np.float64, ks_dtype=np.float64)
    tok = np.random.default_rng(4).integers(0, CONFIG.vocab_size, (2, L)).astype(np.int32)
    n_max = L - 1
    fast = ScanSamples(ev, tok, n_max, cache_bytes=cache)
    assert fast._keep == (cache > 1 << 20)
    if cache == 1 << 17:  # records read again per batch, the selection order kept
      assert fast._keep_top
    k_top = []
    for ns in batches:
      got, ref = fast(ns), _hook_path(ev, tok, ns)
      k_top.append(fast._k_top)
      for key, v in ref.items():
        np.testing.assert_allclose(got[key], v, rtol=1e-10, atol=1e-12, err_msg=f"{key} {ns}")
    # the kept order grows with the largest N asked (padded to kmax + 1 before it is full)
    assert k_top == [min(top_k_size(max(max(ns), SCAN_TOP_MIN), L), fast.kmax)
                     for ns in batches], k_top
    assert k_top[0] < fast.kmax and k_top[-1] == fast.kmax  # padded, then grown
    assert bool(fast._tops) == (cache == 1 << 17)  # the order kept apart only there
    assert np.isnan(fast([L - 1])["d_sum"]).sum() == 0  # t = L - 1 > N counts


def test_fast_scan_refuses_an_n_above_its_n_max():
  with jax.enable_x64(True):
    params = gpt2.init_params(jax.random.key(3), CONFIG, dtype=np.float64)
    ev = distance_model.ModelEvaluator(params, CONFIG, dtype=np.float64, ks_dtype=np.float64)
    tok = np.zeros((1, 16), np.int32)
    fast = ScanSamples(ev, tok, 4)
    with pytest.raises(LimitsError, match=r"\[1, 4\]"):
      fast([5])
    with pytest.raises(LimitsError, match="L - 1 = 15"):
      ScanSamples(ev, tok, 16)


@pytest.mark.parametrize("L,expected", [(32, 8), (33, 9), (256, 64), (1024, 256), (2, 1),
                                        (5, 2)])
def test_scan_n_max_is_a_quarter_of_l_rounded_up(L, expected):
  assert scan_n_max(L) == expected
  assert scan_n_max(L) >= 0.12 * L  # covers the band's upper edge
  assert scan_n_max(L, 3) == min(3, L - 1)
  assert scan_n_max(L, 10 * L) == L - 1


def test_scan_n_max_rejects_a_nonpositive_cap():
  with pytest.raises(LimitsError, match="N_max=0"):
    scan_n_max(32, 0)


@pytest.mark.parametrize("cache", [1 << 30, 1 << 17])
def test_scan_batches_make_no_implicit_host_transfer(cache):
  """Algorithm 3's per-layer statistics (issue 27: under ``jax.transfer_guard("disallow")``):
  a batch of the scan, once its records are on the device (kept, or read again per batch with
  the selection order kept), makes no implicit host transfer: the Ns are placed explicitly and
  the batch's results fetched in one explicit transfer. The other side: the same guard refuses
  a layer kernel handed a NumPy array (the guard is on)."""
  from limits.distance import kernels

  with jax.enable_x64(True):
    params = gpt2.init_params(jax.random.key(3), CONFIG, dtype=np.float64)
    ev = distance_model.ModelEvaluator(params, CONFIG, dtype=np.float64, ks_dtype=np.float64)
    tok = np.random.default_rng(4).integers(0, CONFIG.vocab_size, (2, 40)).astype(np.int32)
    fast = ScanSamples(ev, tok, 20, cache_bytes=cache)
    want = fast([1, 2, 3, 5])  # compiles, and fills what is kept, outside the guard
    if cache < 1 << 20:  # each batch reads the records again: from memory here
      recs = {np.asarray(tok[w]).tobytes(): r for w, r in enumerate(_records(params, tok))}
      ev.layer_source = lambda t: iter(recs[np.asarray(jax.device_get(t))[0].tobytes()])
    (wj, xj, top, win) = (fast._cache[0][0] if fast._keep else next(fast._layers_of(0)))
    with jax.transfer_guard("disallow"):
      got = fast([1, 2, 3, 5])
      for key, v in want.items():
        np.testing.assert_array_equal(got[key], v, err_msg=key)
      with pytest.raises(Exception, match="[Dd]isallowed"):
        kernels.layer_kernel(np.asarray(wj), xj, jax.device_put(np.array([1], np.int32)),
                             kmax=fast.kmax, inclusion=ev.inclusion, bound=False,
                             blocks=fast.blocks, printed=True, dtype="float64", window=win,
                             top=top, lean=True)


def _live_square_arrays_per_call(n_layer, cache, monkeypatch, L=24):
  """The most device arrays of shape (..., L, L) alive at any layer-kernel call of one scan
  batch after the first (float64, random GPT-2 of n_layer layers × 3 heads, 2 windows)."""
  from limits.distance import kernels, scan

  config = gpt2.Config(n_layer=n_layer, n_head=3, n_embd=24, n_positions=64, vocab_size=50)
  seen = []
  counting = counting_square_arrays(kernels.layer_kernel, L, seen)

  with jax.enable_x64(True):
    params = gpt2.init_params(jax.random.key(3), config, dtype=np.float64)
    ev = distance_model.ModelEvaluator(params, config, dtype=np.float64, ks_dtype=np.float64)
    tok = np.random.default_rng(4).integers(0, config.vocab_size, (2, L)).astype(np.int32)
    fast = ScanSamples(ev, tok, 6, cache_bytes=cache)
    fast([1, 2])
    monkeypatch.setattr(scan.kernels, "layer_kernel", counting)
    fast([3, 4])
  return max(seen)


def test_scan_without_kept_records_holds_one_layer_at_a_time(monkeypatch):
  """Records too large to keep (L = 4,096 on SmolLM2: 30 layers × 604 MB) are read again per
  batch, one layer at a time: the (L, L) arrays alive at a layer-kernel call do not grow with
  the number of layers (2 → 6 layers). The other side: kept records (cache 1 GiB) are all
  alive, so their count grows with the layers (by ≥ 4 from 2 to 6 layers: a weights array
  per layer)."""
  with frozen_heap():
    streamed = [_live_square_arrays_per_call(n, 0, monkeypatch) for n in (2, 6)]
    kept = [_live_square_arrays_per_call(n, 1 << 30, monkeypatch) for n in (2, 6)]
  assert streamed[1] == streamed[0], streamed
  assert kept[1] - kept[0] >= 4, kept


def _records(params, tok):
  """Each window's layer records, computed outside the guard (the forward itself is not a
  per-layer statistic: it runs once per window and L and is kept in the records store)."""
  from limits import models

  for w in range(tok.shape[0]):
    yield [(i, rec) for i, rec in models.iter_layers(params, jax.device_put(tok[w:w + 1]),
                                                      CONFIG)]


def test_padded_selection_order_selects_the_same_keys():
  """layer_top(width=...) pads the top kmax + 1 order with the block's end index (no key):
  ranks_from_top drops the padding, so for every N <= kmax the selection equals the unpadded
  order's, and the rank of a key beyond the first kmax + 1 is the padded width (not a real
  rank). The other side: without the drop (scatter clamped into the last column) the last key
  would get a rank."""
  import jax.numpy as jnp

  from limits import selection
  from limits.distance import kernels

  rng = np.random.default_rng(0)
  L = 24
  w = np.where(np.tri(L, dtype=bool), rng.random((2, L, L)), 0.0).astype(np.float32)
  w[0, 20, :10] = w[0, 20, 10]  # ties at the boundary
  ns = jnp.arange(1, 5, dtype=jnp.int32)
  small = kernels.layer_top(jnp.asarray(w), ns, kmax=4, blocks=2, width=12)
  full = kernels.layer_top(jnp.asarray(w), jnp.arange(1, 13, dtype=jnp.int32), kmax=12, blocks=2)
  for (lo, hi), s, f in zip(kernels.causal_blocks(L, 2), small, full):
    assert s.shape == f.shape == (2, hi - lo, min(13, hi))
    assert (np.asarray(s[..., 5:]) == hi).all()  # the padding: no key
    for g in range(2):
      rs, rf = (np.asarray(selection.ranks_from_top(v[g], hi)) for v in (s, f))
      for n in range(1, 5):
        np.testing.assert_array_equal(rs < n, rf < n)
      assert (rs[rf >= 5] == 13).all() or hi < 13
      clamped = np.asarray(jnp.full((hi - lo, hi), 13, jnp.int32).at[
          jnp.arange(hi - lo)[:, None], jnp.minimum(s[g], hi - 1)].set(
              jnp.arange(s.shape[-1], dtype=jnp.int32)[None, :]))
      assert (clamped[:, hi - 1] >= 5).any()  # a clamped pad would give key hi - 1 a rank


def test_evaluator_loads_lazy_params_only_when_it_runs_the_forward():
  """``ModelEvaluator(params=callable)``: with a ``layer_source`` (records on disk) the weights
  are never loaded; without one the callable runs once, and the statistics equal those of the
  evaluator given the pytree itself (same forward)."""
  params = gpt2.init_params(jax.random.key(3), CONFIG)
  tok = np.random.default_rng(4).integers(0, CONFIG.vocab_size, (1, 24)).astype(np.int32)
  calls = []

  def load():
    calls.append(1)
    return params

  from limits import models

  records = list(models.iter_layers(params, tok, CONFIG))
  from_records = distance_model.ModelEvaluator(load, CONFIG,
                                               layer_source=lambda t: iter(records))
  st = from_records.head_stats(tok, [2, 5], bound=False)
  assert calls == []
  lazy = distance_model.ModelEvaluator(load, CONFIG)
  a = lazy.head_stats(tok, [2, 5], bound=False)
  lazy.head_stats(tok, [2, 5], bound=False)
  assert calls == [1]
  b = distance_model.ModelEvaluator(params, CONFIG).head_stats(tok, [2, 5], bound=False)
  for x, y, z in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(st)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(x), np.asarray(z))
