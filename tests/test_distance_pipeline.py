"""Algorithms 1-2 streamed layer by layer with one layer in flight
(limits.distance.kernels.Pending, ModelEvaluator.head_stats): the statistics read back one
layer behind the dispatch are the synchronous calls' own, bit for bit, in layer order, and
every layer is counted once (the last one too)."""

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
