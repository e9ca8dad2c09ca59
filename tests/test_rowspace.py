"""limits.distance.rowspace.row_space: the shared readings (hidden, embedding) in coordinates of
their own span when L < D. Checked against X itself: the Gram matrix (a closed form: Y Yᵀ = X Xᵀ),
and the statistics of Algorithms 1-2 (layer_stats with the bound and the printed E) and of
Algorithm 4 (layer_sums) computed from X and from Y, float64. Tolerances: the Gram matrix to
1e-13 of ‖x‖² (Householder QR's columnwise backward error is a few ulp, ~1e-15 measured); the
statistics to 1e-10 relative (Gram-identity sums of the same terms, products over L instead of
D coordinates; ~1e-14 measured), integer counts exactly. Returning R instead of Rᵀ, or Q's
coordinates of the wrong side, breaks the Gram test (checked)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import distance
from limits.distance import kernels as df
from limits.distance.rowspace import row_space
from limits.separability import model as sp


def _causal_weights(rng, B, H, L, sharp=2.0):
  logits = rng.normal(size=(B, H, L, L)) * sharp
  logits = np.where(np.tri(L, dtype=bool), logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  return w / w.sum(-1, keepdims=True)


def test_gram_matrix_is_kept_and_the_width_becomes_l():
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 40, 96)) * np.linspace(0.1, 3.0, 40)[None, :, None]
    y = np.asarray(row_space(x))
    assert y.shape == (2, 40, 40) and y.dtype == np.float64
    gram_x, gram_y = x @ np.swapaxes(x, -1, -2), y @ np.swapaxes(y, -1, -2)
    scale = np.max(np.sum(x * x, -1))
    assert np.max(np.abs(gram_y - gram_x)) <= 1e-13 * scale
    assert not np.allclose(np.swapaxes(y, -1, -2) @ y, gram_x)  # R Rᵀ is not X Xᵀ


def test_nothing_to_gain_returns_the_array_itself():
  x = np.ones((1, 8, 8))
  assert row_space(x) is x
  x = np.ones((1, 9, 8))
  assert row_space(x) is x


def test_float32_records_are_reduced_in_float64_under_x64():
  with jax.enable_x64(True):
    x = np.random.default_rng(1).normal(size=(1, 12, 30)).astype(np.float32)
    y = np.asarray(row_space(x))
    assert y.dtype == np.float64
    x64 = x[0].astype(np.float64)
    assert np.max(np.abs(y[0] @ y[0].T - x64 @ x64.T)) <= 1e-13 * np.max(np.sum(x64 ** 2, -1))


@pytest.mark.parametrize("blocks", [1, 2])
def test_algorithms_1_2_statistics_equal_on_x_and_its_row_space(blocks):
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    B, H, L, D = 1, 3, 48, 80
    w = _causal_weights(rng, B, H, L)
    w[0, 0, 40, 3:9] = w[0, 0, 40, 2]  # a tie straddling N = 5
    x = rng.normal(size=(B, L, D))
    ns = [1, 5, 10, 20]
    st_x, means_x = df.layer_stats_printed(w, x, ns, blocks=blocks)
    st_y, means_y = df.layer_stats_printed(w, np.asarray(row_space(x)), ns, blocks=blocks)
    for name in distance.HeadStats._fields:
      a, b = np.asarray(getattr(st_x, name)), np.asarray(getattr(st_y, name))
      if a.dtype.kind in "iub":
        np.testing.assert_array_equal(b, a, err_msg=name)
      else:
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-300, err_msg=name)
    for key in df.PRINTED:
      np.testing.assert_allclose(means_y[key], means_x[key], rtol=1e-10, err_msg=key)
    assert np.all(np.asarray(st_x.d_sum) > 0)


def test_algorithm_4_sums_equal_on_x_and_its_row_space():
  with jax.enable_x64(True):
    rng = np.random.default_rng(4)
    H, L, D = 2, 40, 72
    w = _causal_weights(rng, 1, H, L)[0]
    x = rng.normal(size=(L, D))
    ns = (1, 2, 4, 8, 16)
    y = np.asarray(row_space(x))
    got_x = np.asarray(sp.layer_sums(jnp.asarray(w), jnp.broadcast_to(jnp.asarray(x), (H, L, D)),
                                     jnp.asarray(ns), 1.0))
    got_y = np.asarray(sp.layer_sums(jnp.asarray(w), jnp.broadcast_to(jnp.asarray(y), (H, L, L)),
                                     jnp.asarray(ns), 1.0))
    np.testing.assert_allclose(got_y, got_x, rtol=1e-10, atol=1e-12)
    count = sp.LAYER_FIELDS.index("count")
    np.testing.assert_array_equal(got_y[..., count], got_x[..., count])


def test_the_evaluator_passes_the_shared_reading_in_its_span():
  """ModelEvaluator._layers on the embedded model, ``--vectors=hidden`` at L < D: the vectors
  the kernels get are (1, L, L), with X's Gram matrix."""
  from limits import models
  from limits.records import sources

  with jax.enable_x64(True):
    model = sources.load_model("tiny")
    D = model.config.n_embd
    L = min(D // 2, 32)
    tok = jnp.asarray(np.arange(L)[None] % model.config.vocab_size, jnp.int32)
    ev = distance.ModelEvaluator(model.params, model.config, vectors="hidden")
    got = [np.asarray(x) for _, x, _ in ev._layers(tok, np.float64)]
    raw = [np.asarray(rec.x, np.float64) for _, rec in models.iter_layers(model.params, tok,
                                                                          model.config)]
    assert len(got) == len(raw) == model.config.n_layer
    for y, x in zip(got, raw):
      assert y.shape == (1, L, L) and x.shape == (1, L, D)
      np.testing.assert_allclose(y[0] @ y[0].T, x[0] @ x[0].T, rtol=0,
                                 atol=1e-12 * np.max(np.sum(x * x, -1)))
