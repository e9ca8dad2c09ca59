"""limits.vanishing.causal_check (Corollary 1 on the causal triangle, in row blocks) against an
independent float64 NumPy/SciPy reference and against limits.bounds.corollary1_causal_check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from limits import bounds, vanishing


def _inputs(seed, B, H, L, d=4, scale=0.5):
  rng = np.random.default_rng(seed)
  q = (rng.normal(size=(B, H, L, d)) * scale).astype(np.float32)
  k = (rng.normal(size=(B, H, L, d)) * scale).astype(np.float32)
  scores = np.einsum("bhqd,bhkd->bhqk", q, k).astype(np.float32)  # (B, H, L, L)
  return scores, q, k


def _numpy_reference(scores, q, k, T):
  """Row by row in float64 from the definition: log α_i·t over the t visible keys, the band
  2Δ/T with Δ = ‖q_t‖ max_{i≤t} ‖k_i‖ (AMBIG-2)."""
  s, q, k = (np.asarray(a, np.float64) for a in (scores, q, k))
  B, H, L, _ = s.shape
  log_max = np.empty((B, H, L))
  log_min = np.empty((B, H, L))
  for t in range(L):
    logits = s[..., t, :t + 1] / T
    logw = logits - logsumexp(logits, axis=-1, keepdims=True)
    log_max[..., t] = logw.max(-1) + np.log(t + 1)
    log_min[..., t] = logw.min(-1) + np.log(t + 1)
  kmax = np.maximum.accumulate(np.linalg.norm(k, axis=-1), axis=-1)
  band = 2 * np.linalg.norm(q, axis=-1) * kmax / T
  viol = (log_max > band) | (log_min < -band)
  return {"violations": viol.sum(-1), "queries": np.full((B, H), L),
          "min_margin": np.minimum(band - log_max, log_min + band).min(-1),
          "log_max_last": log_max[..., -1], "log_min_last": log_min[..., -1],
          "band_last": band[..., -1]}


def _check(scores, q, k, T, dtype=jnp.float64, rows=vanishing.CHECK_ROWS, window=0):
  f = jax.jit(lambda s, q, k: vanishing.causal_check(s, q, k, T, window=window, dtype=dtype,
                                                     rows=rows))
  return {key: np.asarray(v) for key, v in f(scores, q, k).items()}


# L on both sides of a block boundary (rows = 4: 3, 4, 5, 8, 9), one block (1), and several.
@pytest.mark.parametrize("L,rows", [(1, 4), (3, 4), (4, 4), (5, 4), (8, 4), (9, 4), (23, 4),
                                    (130, 128)])
def test_causal_check_matches_a_float64_numpy_reference(L, rows):
  """float64, relative 1e-12: the reference sums in another order (SciPy's logsumexp), so only
  rounding differs (a few ulps of numbers of order 1-10); counts exactly."""
  with jax.enable_x64(True):
    scores, q, k = _inputs(L, 2, 3, L)
    scores[0, 1] *= 40  # one head inconsistent with its q·k: violations on that head only
    ref = _numpy_reference(scores, q, k, 2.0)
    got = _check(scores, q, k, 2.0, rows=rows)
  for key in ("violations", "queries"):
    np.testing.assert_array_equal(got[key], ref[key], err_msg=key)
  for key in ("min_margin", "log_max_last", "log_min_last", "band_last"):
    np.testing.assert_allclose(got[key], ref[key], rtol=1e-12, atol=1e-13, err_msg=key)
  if L > 2:
    assert ref["violations"][0, 1] > 0 and ref["violations"][1].sum() == 0


@pytest.mark.parametrize("L", [127, 128, 129, 300])
def test_causal_check_matches_bounds_corollary1_causal_check(L):
  """Against the full-matrix reference in limits.bounds: max/min of the logits are exact, lse
  is summed in two parts, so outputs agree to a few float64 ulps (relative 1e-14) and every
  decision (violations) is the same."""
  with jax.enable_x64(True):
    scores, q, k = _inputs(7, 1, 2, L, scale=1.0)
    scores[0, 0] *= 30
    ref = jax.jit(lambda s, q, k: bounds.corollary1_causal_check(
        s.astype(jnp.float64), q.astype(jnp.float64), k.astype(jnp.float64), 8.0))(
            scores, q, k)
    got = _check(scores, q, k, 8.0)
  for key, v in ref.items():
    if key in ("violations", "queries"):
      np.testing.assert_array_equal(got[key], np.asarray(v), err_msg=key)
    else:
      np.testing.assert_allclose(got[key], np.asarray(v), rtol=1e-14, atol=0, err_msg=key)
  assert got["violations"][0, 0] > 0 and got["violations"][0, 1] == 0


def test_causal_check_never_reads_the_masked_triangle():
  """Keys after the query (j > t) are not part of its row: huge or infinite values there
  (largest float32, +inf, NaN) change nothing, in the diagonal blocks and in the rectangles."""
  with jax.enable_x64(True):
    scores, q, k = _inputs(3, 1, 2, 11)
    clean = _check(scores, q, k, 2.0, rows=4)
    dirty = scores.copy()
    upper = np.triu(np.ones((11, 11), bool), 1)
    dirty[..., upper] = np.float32(3e38)
    dirty[0, 0, 0, 5] = np.inf
    dirty[0, 1, 2, 9] = np.nan
    got = _check(dirty, q, k, 2.0, rows=4)
  for key in clean:
    np.testing.assert_array_equal(got[key], clean[key], err_msg=key)


def test_causal_check_extreme_but_legal_scores_stay_finite():
  """Scores of ±1e4 at T = 1 (weights underflow to 0 in linear space): log space keeps every
  output finite, and the band's violations are found (scores are not q·k here)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(5)
    L = 9
    scores = (rng.choice([-1e4, 1e4], size=(1, 1, L, L))).astype(np.float32)
    q = np.full((1, 1, L, 2), 0.1, np.float32)
    k = np.full((1, 1, L, 2), 0.1, np.float32)
    got = _check(scores, q, k, 1.0, rows=4)
    ref = _numpy_reference(scores, q, k, 1.0)
  for key in ("min_margin", "log_max_last", "log_min_last", "band_last"):
    assert np.all(np.isfinite(got[key])), key
    np.testing.assert_allclose(got[key], ref[key], rtol=1e-12, err_msg=key)
  np.testing.assert_array_equal(got["violations"], ref["violations"])
  assert got["violations"].sum() > 0


def test_causal_check_sliding_window_is_the_reference():
  """A local layer (W > 0) runs limits.bounds' own check (the visible keys are no prefix)."""
  with jax.enable_x64(True):
    scores, q, k = _inputs(4, 1, 2, 10)
    got = _check(scores, q, k, 2.0, window=3, rows=4)
    ref = bounds.corollary1_causal_check(*(jnp.asarray(a, jnp.float64) for a in (scores, q, k)),
                                         2.0, window=3)
    causal = _check(scores, q, k, 2.0, rows=4)
  for key, v in ref.items():
    np.testing.assert_array_equal(got[key], np.asarray(v), err_msg=key)
  assert not np.array_equal(got["band_last"], causal["band_last"])


def test_causal_check_float32_precision():
  """--nox64: the check in float32 (dtype float32) agrees with the float64 reference to float32
  rounding (relative 1e-5 on numbers of order 1-10)."""
  scores, q, k = _inputs(6, 1, 2, 20)
  got = _check(scores, q, k, 2.0, dtype=jnp.float32, rows=8)
  assert got["log_max_last"].dtype == np.float32
  ref = _numpy_reference(scores, q, k, 2.0)
  for key in ("log_max_last", "log_min_last", "band_last"):
    np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("window", [None, 0, 3, 40])
def test_sink_scores_from_key0_column_equal_the_full_weights(window):
  """sink_scores_key0 on weights[..., 0] (the records' weights_key0) gives sink_scores' bits;
  a window W < L averages the first W rows only (both sides of W: W = 3 < L = 12 < 40)."""
  rng = np.random.default_rng(8)
  w = rng.random((2, 3, 12, 12)).astype(np.float32)
  got = vanishing.sink_scores_key0(np.ascontiguousarray(w[..., 0]), window)
  np.testing.assert_array_equal(got, vanishing.sink_scores(w, window))
  rows = 3 if window == 3 else 12
  np.testing.assert_allclose(got, w[..., :rows, 0].astype(np.float64).mean(-1), rtol=1e-15)
