"""Algorithms 1-3 streamed layer by layer (limits.distance.kernels.Pending,
ModelEvaluator.head_stats and _cached_stats): two layers computed at once in worker threads,
or one in flight where a layer is too large or a hook is called at dispatch; the statistics
read back are the synchronous calls' own, bit for bit, in layer order, and every layer is
counted once (the last one too)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import distance
from limits.distance import kernels as df


def _layers(seed, n_layer, H, L, d):
  """Distinct synthetic causal layers: (weights (1, H, L, L) float32, v (1, H, L, d))."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n_layer):
    logits = np.where(np.tri(L, dtype=bool), rng.normal(size=(1, H, L, L)) * 2.0, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    out.append(((w / w.sum(-1, keepdims=True)).astype(np.float32),
                rng.normal(size=(1, H, L, d)).astype(np.float32)))
  return out


def _assert_equal(a, b):
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_pending_result_is_the_waited_call():
  """layer_stats / layer_stats_printed with wait=False: a Pending whose result() is what the
  waited call returns (bitwise), and result() can be read twice."""
  with jax.enable_x64(True):
    (w, v), = _layers(3, 1, 2, 40, 3)
    ns = [1, 5]
    p = df.layer_stats(w, v, ns, dtype=np.float64, wait=False)
    assert isinstance(p, df.Pending)
    _assert_equal(p.result(), df.layer_stats(w, v, ns, dtype=np.float64))
    _assert_equal(p.result(), df.layer_stats(w, v, ns, dtype=np.float64))
    q = df.layer_stats_printed(w, v, ns, dtype=np.float64, avg_dtype=np.float32, wait=False)
    _assert_equal(q.result(), df.layer_stats_printed(w, v, ns, dtype=np.float64,
                                                     avg_dtype=np.float32))


@pytest.mark.parametrize("printed", [True, False])
def test_streamed_head_stats_equal_layer_by_layer_synchronous_calls(printed):
  """head_stats over 2 windows of 3 distinct layers (records from a layer_source) equals the
  synchronous per-layer calls concatenated in layer order and summed over windows, bitwise;
  the printed E hook gets each layer once, in order; on_layer runs once per layer. A loop
  that dropped the last layer, read layers out of order or counted one twice fails here."""
  n_layer, H, L, d, ns = 3, 2, 36, 3, [1, 5]
  windows = {0: _layers(10, n_layer, H, L, d), 1: _layers(11, n_layer, H, L, d)}

  def source(tok):
    w = int(np.asarray(tok)[0, 0])
    for i, (wt, v) in enumerate(windows[w]):
      yield i, types.SimpleNamespace(weights=wt, v=v, k=None, x=None, window=0)

  config = types.SimpleNamespace(n_layer=n_layer, n_head=H)
  with jax.enable_x64(True):
    ev = distance.ModelEvaluator(None, config, dtype=np.float64, avg_dtype=np.float32,
                                 layer_source=source)
    tokens = jnp.asarray([[0] * L, [1] * L], jnp.int32)
    calls = []
    hook = distance.PrintedExpectations(ns) if printed else None
    st = ev.head_stats(tokens, ns, layer_hook=hook, on_layer=lambda: calls.append(1))
    assert len(calls) == 2 * n_layer
    # the reference: waited calls, layer by layer
    total, ref_means = None, []
    for w in (0, 1):
      per_layer, means = [], []
      for wt, v in windows[w]:
        if printed:
          hs, m = df.layer_stats_printed(wt, v, ns, dtype=np.float64, avg_dtype=np.float32)
          means.append({k: a[0] for k, a in m.items()})
        else:
          hs = df.layer_stats(wt, v, ns, dtype=np.float64, avg_dtype=np.float32)
        per_layer.append(jax.tree.map(lambda a: a[0], hs))
      part = distance.concat_heads(per_layer)
      total = part if total is None else distance.combine(total, part)
      ref_means.append(means)
    _assert_equal(st, jax.tree.map(np.asarray, total))
    if printed:
      got = hook.means()
      for key in df.PRINTED:
        want = sum(np.concatenate([m[key] for m in ms], axis=0) for ms in ref_means) / 2
        np.testing.assert_array_equal(got[key], want, err_msg=key)


def _evaluator(pulled=None, n_layer=3, H=2, L=36, d=3):
  """A ModelEvaluator over 2 windows of ``n_layer`` distinct synthetic layers, and the tokens
  that select them (window w's tokens are all w). ``pulled`` gets each layer's weights key
  (:func:`_key`) as the source yields it."""
  windows = {0: _layers(20, n_layer, H, L, d), 1: _layers(21, n_layer, H, L, d)}

  def source(tok):
    w = int(np.asarray(tok)[0, 0])
    for i, (wt, v) in enumerate(windows[w]):
      if pulled is not None:
        pulled.append(_key(wt))
      yield i, types.SimpleNamespace(weights=wt, v=v, k=None, x=None, window=0)

  config = types.SimpleNamespace(n_layer=n_layer, n_head=H, d_head=d, n_embd=H * d)
  ev = distance.ModelEvaluator(None, config, dtype=np.float64, avg_dtype=np.float32,
                               layer_source=source)
  return ev, jnp.asarray([[0] * L, [1] * L], jnp.int32)


def _key(weights):
  """Which layer of which window: its weights' bytes."""
  return hash(np.asarray(weights).tobytes())


@pytest.mark.parametrize("printed", [True, False])
def test_head_stats_computes_two_layers_at_once(printed, monkeypatch):
  """Two layers' kernels run at once, each dispatched and waited for in its own thread
  (records.streaming.in_threads; from one thread XLA's CPU backend runs them one after the
  other): layers 0 and 1 of each window meet at a barrier inside the layer call, which a loop
  dispatching from one thread never passes. Every layer is read back once, in layer order, on
  the caller's thread, and the statistics equal the one-layer-at-a-time loop's bitwise."""
  import threading

  from limits.distance import model as dm
  from limits.records import streaming

  name = "layer_stats_printed" if printed else "layer_stats"
  original = getattr(dm, name)
  main = threading.current_thread().name
  pulled, called, read = [], [], []
  barrier = threading.Barrier(2, timeout=30)

  class Tracked:  # the layer's Pending; result() is the read back
    def __init__(self, pending, key):
      self.pending, self.key = pending, key

    def block_until_ready(self):
      self.pending.block_until_ready()
      return self

    def result(self):
      read.append((self.key, threading.current_thread().name))
      return self.pending.result()

  def layer_call(weights, *args, **kwargs):
    key = _key(weights)
    called.append(threading.current_thread().name)
    if pulled.index(key) % 3 in (0, 1):  # layers 0 and 1 of a window
      barrier.wait()
    return Tracked(original(weights, *args, **kwargs), key)

  ns = [1, 5]
  with jax.enable_x64(True):
    ev, tokens = _evaluator(pulled)
    monkeypatch.setattr(dm, name, layer_call)
    hook = distance.PrintedExpectations(ns) if printed else None
    st = ev.head_stats(tokens, ns, layer_hook=hook)
    assert len(pulled) == 6 and len(called) == 6 and main not in called
    assert [k for k, _ in read] == pulled and all(t == main for _, t in read)
    monkeypatch.setattr(dm, name, original)
    monkeypatch.setattr(dm, "in_threads", streaming.one_behind)  # one layer at a time
    hook2 = distance.PrintedExpectations(ns) if printed else None
    _assert_equal(st, ev.head_stats(tokens, ns, layer_hook=hook2))
    if printed:
      _assert_equal(hook.means(), hook2.means())


def test_head_stats_one_layer_in_flight_with_a_hook_or_past_the_budget(monkeypatch):
  """One layer in flight, dispatched from the caller's thread, where threads could change what
  is computed or held: a hook called at dispatch (it may add up state in layer order: it sees
  every layer once, in order, on the caller's thread), and layers whose float32 weights pass
  records.READ_AHEAD_BYTES; at exactly the budget, two layers at once."""
  import threading

  from limits import records
  from limits.distance import model as dm

  main = threading.current_thread().name
  ns = [1, 5]
  H, L = 2, 36
  with jax.enable_x64(True):
    pulled, order = [], []
    ev, tokens = _evaluator(pulled, H=H, L=L)

    def hook(window, weights, x):  # not a PrintedExpectations: called at dispatch
      order.append((_key(np.asarray(weights, np.float32)), threading.current_thread().name))

    ev.head_stats(tokens, ns, layer_hook=hook)
    assert [k for k, _ in order] == pulled and all(t == main for _, t in order)

    threads = []
    original = dm.layer_stats

    def layer_call(*args, **kwargs):
      threads.append(threading.current_thread().name)
      return original(*args, **kwargs)

    monkeypatch.setattr(dm, "layer_stats", layer_call)
    monkeypatch.setattr(records, "READ_AHEAD_BYTES", H * L * L * 4 - 1)
    ev.head_stats(tokens, ns)
    assert threads == [main] * 6
    threads.clear()
    monkeypatch.setattr(records, "READ_AHEAD_BYTES", H * L * L * 4)
    ev.head_stats(tokens, ns)
    assert len(threads) == 6 and main not in threads


@pytest.mark.parametrize("cached", [True, False])
def test_search_stats_two_layers_at_once(cached, monkeypatch):
  """Algorithm 3's per-layer search statistics (ModelEvaluator._cached_stats, behind
  ks_pvalues and critical_n) compute two layers at once in worker threads: layers 0 and 1 of
  each window meet at a barrier inside search_stats, which a one-thread loop never passes;
  with the records cache (sorted rows kept) and without it (records read again per probe).
  The parts are taken in layer order: the p-values equal those of one layer at a time, and
  past records.READ_AHEAD_BYTES every layer runs on the caller's thread."""
  import threading

  from limits import records
  from limits.distance import model as dm
  from limits.records import streaming

  pulled, called = [], []
  barrier = threading.Barrier(2, timeout=30)
  original = dm.search_stats
  main = threading.current_thread().name

  def search(weights, *args, **kwargs):
    called.append(threading.current_thread().name)
    if pulled.index(_key(np.asarray(weights, np.float32))) % 3 in (0, 1):
      barrier.wait()
    return original(weights, *args, **kwargs)

  probe = [1, 5, 9]
  with jax.enable_x64(True):
    ev, tokens = _evaluator(pulled)
    cache = ev._build_cache(tokens) if cached else None
    if cached:
      assert cache is not None
    monkeypatch.setattr(dm, "search_stats", search)
    got = ev.ks_pvalues(tokens, probe, cache=cache)
    assert len(called) == 6 and main not in called
    monkeypatch.setattr(dm, "search_stats", original)
    monkeypatch.setattr(dm, "in_threads", streaming.one_behind)
    np.testing.assert_array_equal(got, ev.ks_pvalues(tokens, probe, cache=cache))
    called.clear()
    monkeypatch.setattr(dm, "in_threads", streaming.in_threads)
    monkeypatch.setattr(dm, "search_stats", lambda *a, **k: called.append(
        threading.current_thread().name) or original(*a, **k))
    monkeypatch.setattr(records, "READ_AHEAD_BYTES", 2 * 36 * 36 * 4 - 1)
    np.testing.assert_array_equal(got, ev.ks_pvalues(tokens, probe, cache=cache))
    assert called == [main] * 6
