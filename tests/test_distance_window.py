"""Theorem 1 (Algorithms 1-3) on windowed attention (Gemma 3's local layers, issue 29 item 3).

A query t of a local layer with sliding window W sees its last min(t + 1, W) keys; the keys
before the window have weight exactly 0 and are not tokens of the row (neither selected nor
non-selected, and not counted in the row's length). The independent reference is plain NumPy
on each row cut to its window (a stable sort for I_N, direct norms, no Gram identities), so it
shares no code with the paths under test. Both sides: the same windowed rows read as global
(window = 0) must give other numbers, and a global layer's numbers must not change.

float64 throughout, tolerance 1e-10 relative: the paths use Gram identities, whose rounding
on these sizes (d = 4, |x| ~ 2) is ~1e-14; a wrong length or a counted masked key moves the
sums by > 1e-2.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import distance
from limits.distance.kernels import layer_stats_printed
from limits import selection
from limits.selection import visible_window

L, W, D = 32, 8, 4
NS = [1, 3, 5]


def _weights(rng, H, window):
  """(1, H, L, L) softmax rows over each query's visible keys (exact zeros elsewhere), with
  exact zeros inside some windows (ties at 0 with the masked keys)."""
  logits = rng.normal(size=(1, H, L, L)) * 2.0
  logits[0, 0, 20, 14:20] = -1e4  # one nonzero weight in the window: N = 3, 5 select zeros
  logits[0, -1, 30, 25:30] = -1e4
  vis = visible_window(L, window)
  logits = np.where(vis, logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  return w / w.sum(-1, keepdims=True)


def _row_reference(a, x, n):
  """Theorem 1's quantities of one row (t visible keys: a (t,), x (t, d)), plain NumPy."""
  t = a.shape[0]
  order = np.argsort(-a, kind="stable")  # ties: the lower index first
  sel = np.zeros(t, bool)
  sel[order[:n]] = True
  rest = ~sel
  s = a[sel] @ x[sel]
  ax = a[:, None] * x
  d_sum = np.linalg.norm(ax[rest] - s, axis=-1).sum()
  d_norm = np.linalg.norm(ax[rest].sum(0) - s)
  abar, m = a[sel].sum(), a.sum()
  d1 = max(np.linalg.norm(x[i] - x[j]) for i in np.nonzero(rest)[0] for j in np.nonzero(sel)[0])
  r_n = np.linalg.norm(x[sel], axis=-1).max()
  dmax_sum = (m - abar) * d1 + r_n * np.abs(abar - a[rest]).sum()
  dmax_norm = (m - abar) * d1 + abs(m - 2 * abar) * r_n
  total = ax.sum(0)

  def e_sum(p):
    return (t - n) / t * np.linalg.norm(ax - p * (total - ax), axis=-1).sum()

  coef = (a + n / (t - 1))[:, None] * x
  printed_out = (t - n) / t * np.linalg.norm(coef - total, axis=-1).sum()
  printed_mean = (t - n) / t * np.linalg.norm(coef - x.mean(0), axis=-1).sum()
  return dict(d_sum=d_sum, d_norm=d_norm, expected=e_sum(n / (t - 1)), dmax_sum=dmax_sum,
              dmax_norm=dmax_norm, expected_printed_output=printed_out,
              expected_printed_xmean=printed_mean, expected_nl=e_sum(n / t))


def _layer_reference(w, x, ns, window):
  """{field: (H, K) sums over counted rows}, count (H, K): every row cut to its window."""
  H = w.shape[1]
  out, count = {}, np.zeros((H, len(ns)), int)
  for h in range(H):
    xh = x[0, h] if x.ndim == 4 else x[0]
    for q in range(L):
      lo = max(0, q - window + 1) if window else 0
      a, xq = w[0, h, q, lo:q + 1], xh[lo:q + 1]
      for k, n in enumerate(ns):
        if a.shape[0] <= n:
          continue
        count[h, k] += 1
        for f, v in _row_reference(a, xq, n).items():
          out.setdefault(f, np.zeros((H, len(ns))))[h, k] += v
  return out, count


def _check(st, ref, count, fields=("d_sum", "d_norm", "expected", "dmax_sum", "dmax_norm")):
  np.testing.assert_array_equal(np.asarray(st.count)[0], count)
  for f in fields:
    np.testing.assert_allclose(np.asarray(getattr(st, f))[0], ref[f], rtol=1e-10, err_msg=f)


@pytest.fixture(scope="module")
def local_layer():
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    w = _weights(rng, 2, W)
    x = rng.normal(size=(1, 2, L, D))
    return w, x, _layer_reference(w, x, NS, W)


def test_visible_window_counts():
  """min(t + 1, W) keys per query; W = 0 (and W >= L) is the causal prefix."""
  np.testing.assert_array_equal(visible_window(L, W).sum(-1), np.minimum(np.arange(1, L + 1), W))
  np.testing.assert_array_equal(visible_window(L, 0), np.tri(L, dtype=bool))
  np.testing.assert_array_equal(visible_window(L, L), np.tri(L, dtype=bool))
  assert not visible_window(L, W)[20, 20 - W] and visible_window(L, W)[20, 21 - W]


@pytest.mark.parametrize("path", ["device", "device_4_blocks", "host", "rows"])
def test_local_layer_uses_the_window_on_every_path(local_layer, path):
  """Device top-k path (one and four causal blocks), host thresholds, and the per-row
  reference path head_stats: each equals the rows cut to their windows."""
  w, x, (ref, count) = local_layer
  with jax.enable_x64(True):
    if path == "device":
      st = distance.layer_stats(w, x, NS, window=W)
    elif path == "device_4_blocks":
      st = distance.layer_stats(w, x, NS, window=W, blocks=4)
    elif path == "host":
      st = distance.layer_stats(w, x, NS, window=W, sorted_rows=selection.sort_rows(w, W))
    else:
      st = distance.head_stats(jnp.asarray(w), jnp.asarray(x), jnp.array(NS), n_cap=max(NS),
                               window=W)
    _check(st, ref, count)


def test_printed_expectations_use_the_window(local_layer):
  """The printed E (x̄ = output and x̄ = mean of the window) and the E with p = N/L."""
  w, x, (ref, count) = local_layer
  with jax.enable_x64(True):
    st, means = layer_stats_printed(w, x, NS, window=W)
  _check(st, ref, count)
  for f, v in means.items():
    np.testing.assert_allclose(v[0], ref[f] / count, rtol=1e-10, err_msg=f)


def test_windowed_rows_read_as_global_give_other_numbers(local_layer):
  """The other side: ignoring the window (keys before it counted as non-selected tokens of
  weight 0, lengths t + 1) moves d̃ and E by far more than rounding."""
  w, x, (ref, count) = local_layer
  with jax.enable_x64(True):
    st = distance.layer_stats(w, x, NS, window=0)
  for f in ("d_sum", "expected"):
    rel = np.abs(np.asarray(getattr(st, f))[0] - ref[f]) / ref[f]
    assert rel.max() > 1e-2, f


def test_global_layer_is_unaffected():
  """A global layer (window 0): the full causal prefix, as the NumPy reference on whole rows;
  and a window >= L is the same layer."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    w = _weights(rng, 2, 0)
    x = rng.normal(size=(1, L, D))  # shared by the heads (hidden states)
    ref, count = _layer_reference(w, x, NS, 0)
    st = distance.layer_stats(w, x, NS, window=0)
    _check(st, ref, count)
    for window in (None, L, 4 * L):
      same = distance.layer_stats(w, x, NS, window=window)
      for f in distance.HeadStats._fields:
        np.testing.assert_array_equal(np.asarray(getattr(same, f)), np.asarray(getattr(st, f)))
    # ... while a window shorter than L is another layer
    other = np.asarray(distance.layer_stats(w, x, NS, window=W).d_sum)[0]
    assert (np.abs(other - ref["d_sum"]) / ref["d_sum"]).max() > 1e-2


def test_negative_window_refused():
  from limits.errors import LimitsError

  with pytest.raises(LimitsError, match="sliding window -3"):
    distance.layer_stats(np.zeros((1, 1, 4, 4)), np.zeros((1, 4, 2)), [1], window=-3)


def test_model_evaluator_passes_each_layer_window():
  """A tiny random Gemma 3 (local, local, global; W = 8 at L = 32) through ModelEvaluator
  (the path of every distance step): each local layer equals the NumPy reference on rows cut
  to W, the global layer the reference on whole prefixes; the critical-N cache (host sort with
  the window) gives the same KS p-values as the uncached path."""
  from limits import models
  from limits.models.gemma3.config import Config

  config = Config(n_layer=3, n_head=2, n_kv_head=1, n_embd=16, head_dim=4, d_mlp=32,
                  n_positions=64, vocab_size=50, sliding_window=W, query_pre_attn_scalar=4.0,
                  layer_types=("sliding_attention", "sliding_attention", "full_attention"))
  with jax.enable_x64(True):
    params = models.init_params(jax.random.key(0), config, jnp.float64)
    tokens = np.random.default_rng(0).integers(0, 50, size=(1, L))
    ev = distance.ModelEvaluator(params, config)
    st = ev.head_stats(tokens, NS)  # (n_layer·H, K)
    for layer, rec in models.iter_layers(params, jnp.asarray(tokens), config):
      window = W if layer < 2 else 0
      assert int(rec.window) == window
      ref, count = _layer_reference(np.asarray(rec.weights), np.asarray(rec.v), NS, window)
      rows = slice(2 * layer, 2 * layer + 2)
      np.testing.assert_array_equal(st.count[rows], count)
      for f in ("d_sum", "expected", "dmax_sum"):
        np.testing.assert_allclose(getattr(st, f)[rows], ref[f], rtol=1e-8, err_msg=f)
    cached = ev.ks_pvalues(tokens, [2, 6], cache=ev._build_cache(tokens))
    np.testing.assert_allclose(cached, ev.ks_pvalues(tokens, [2, 6]), rtol=1e-6)
