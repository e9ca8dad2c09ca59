"""Theorem 2 / Algorithm 4 on windowed attention (Gemma 3's local layers, issue 29 item 3).

A query of a local layer with window W sees its last min(t + 1, W) keys; keys before the
window (weight exactly 0) are not non-selected tokens (they would set r to ‖s‖), do not count
in the kept rows (t > N) and not in delta. The reference is the whole-row function
``limits.separability.rows.row_stats`` with each row's window as its visible mask (no window
code of the layer paths) and delta from a brute-force NumPy loop over each window. Both sides: reading the windowed
rows as global changes the sums, and a global layer is unchanged.

float64; tolerance 1e-9 relative: same formulas in another summation order (~1e-15 measured);
the wrong reading (the window ignored) differs by > 1e-6 relative here (r by 1e-3, delta and
the lower bound by more).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits.separability import model as sm
from limits.separability import rows as sr
from limits import selection
from limits.selection import visible_window

L, W, D, M = 32, 8, 4, 1.0
NS = [1, 2, 4, 6]
FIELDS = sm.LAYER_FIELDS


def _weights(rng, H, window):
  logits = rng.normal(size=(H, L, L)) * 2.0
  logits[0, 20, 14:20] = -1e4  # zeros inside a window: N = 2…6 select tied zeros
  logits = np.where(visible_window(L, window), logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  return w / w.sum(-1, keepdims=True)


def _window_delta(x, window):
  """delta_t of every query's window, brute force (NumPy; duplicates below 1e-12 excluded)."""
  out = np.full(L, np.inf)
  for t in range(L):
    pts = x[max(0, t - window + 1) if window else 0:t + 1]
    d = [np.linalg.norm(pts[i] - pts[j]) for i in range(len(pts)) for j in range(i)]
    d = [v for v in d if v > 1e-12]
    out[t] = min(d) if d else np.inf
  return out


def _reference(w, v, ns, window):
  """(H, K, F) sums over kept queries: the whole-row reference ``row_stats`` with each row's
  visible keys given as its mask (the window), and the brute-force delta."""
  H = w.shape[0]
  vis = visible_window(L, window)
  t_vis = vis.sum(-1)
  out = np.zeros((H, len(ns), len(FIELDS)))
  for h in range(H):
    x = sm.normalize_to_sphere(jnp.asarray(v[h]), M)
    delta = _window_delta(np.asarray(x), window)
    dl = np.where(np.isfinite(delta), delta, 0.0)
    a, mask = jnp.asarray(w[h]), jnp.asarray(vis)
    srt = selection.sort_desc(a, mask)
    for k, n in enumerate(ns):
      st = sr.row_stats(a, srt, mask, x, n, M, jnp.asarray(dl))
      keep = t_vis > n
      vals = dict(st._asdict(), delta=dl, count=np.ones(L))
      out[h, k] = [np.asarray(vals[f], np.float64)[keep].sum() for f in FIELDS]
  return out


@pytest.fixture(scope="module")
def local_layer():
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    w = _weights(rng, 2, W)
    v = rng.normal(size=(2, L, D))
    return w, v, _reference(w, v, NS, W)


def test_window_delta_matches_brute_force():
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(L, D))
    x[17] = x[12]  # a duplicate pair inside some windows: excluded
    got = np.asarray(sr.window_min_pairwise_distance(jnp.asarray(x), W))
    np.testing.assert_allclose(got, _window_delta(x, W), rtol=1e-12)
    assert np.isinf(got[0]) and np.isfinite(got[1:]).all()
    np.testing.assert_array_equal(np.asarray(sr.window_min_pairwise_distance(jnp.asarray(x), 0)),
                                  np.asarray(sr.prefix_min_pairwise_distance(jnp.asarray(x))))
    # a window of W keys does not see a closer pair further back
    assert got[20] > np.asarray(sr.prefix_min_pairwise_distance(jnp.asarray(x)))[20]


@pytest.mark.parametrize("path", ["device", "device_4_blocks", "reference"])
def test_local_layer_equals_rows_cut_to_their_windows(local_layer, path):
  w, v, ref = local_layer
  with jax.enable_x64(True):
    if path == "reference":
      got = sm.layer_sums_reference(jnp.asarray(w), jnp.asarray(v), jnp.asarray(NS), M,
                                    window=W)
    else:
      got = sm.layer_sums(jnp.asarray(w), jnp.asarray(v), NS, M, window=W,
                          blocks=4 if path == "device_4_blocks" else None)
    got = np.asarray(got)
  np.testing.assert_array_equal(got[..., FIELDS.index("count")], ref[..., FIELDS.index("count")])
  np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_windowed_rows_read_as_global_give_other_sums(local_layer):
  """The keys before the window as non-selected tokens of weight 0 (distance ‖s‖) change r,
  and a prefix delta instead of the window's moves delta and the lower bound (N_s/N itself
  moves little here: ‖s‖ is rarely the smallest non-selected distance)."""
  w, v, ref = local_layer
  with jax.enable_x64(True):
    got = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), NS, M, window=0))
  for f in ("r", "delta", "lower_raw"):
    i = FIELDS.index(f)
    assert np.abs(got[..., i] - ref[..., i]).max() > 1e-6 * np.abs(ref[..., i]).max(), f


def test_global_layer_is_unaffected():
  """window 0, None and >= L give the same bits; the global layer equals its whole-row
  reference (the causal prefix)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    w = _weights(rng, 1, 0)
    v = rng.normal(size=(1, L, D))
    base = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), NS, M, window=0))
    for window in (None, L, 2 * L):
      np.testing.assert_array_equal(
          np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), NS, M, window=window)), base)
    np.testing.assert_allclose(base, _reference(w, v, NS, 0), rtol=1e-9, atol=1e-12)
