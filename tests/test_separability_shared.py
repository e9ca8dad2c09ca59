"""Algorithm 4 with one set of vectors for every head (AMBIG-7's residual-stream reading: the
layer's (L, D) hidden states): ``layer_sums`` takes them as (L, d), projects them onto the
sphere and takes their deltas (Assumption 2's minimum pairwise distance, an (L, L) Gram)
once, where the (H, L, d) path repeats both per head. The sums must be those of the same
vectors repeated for every head: the same decisions (N_s/N and kept-query counts bit for
bit) and the same bounds, r and deltas up to the rounding of two compiled programs
(rtol 1e-13, as tests/test_separability_host_top.py allows between two programs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.test_separability_top import _tied_records


def _shared_vectors(L, d=7, seed=5):
  """(L, d) float32 vectors with two exact duplicates (deltas skip them) and a near pair."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(L, d)).astype(np.float32)
  x[30] = x[3]
  x[41] = x[40]
  x[20] = x[10] + np.float32(1e-3)
  return x


@pytest.mark.parametrize("L,blocks,window", [(70, 4, 0), (70, 4, 9), (45, 1, 0)])
@pytest.mark.parametrize("rule", ["strict", "literal"])
def test_shared_vectors_give_the_sums_of_repeated_ones(L, blocks, window, rule):
  from limits.separability import model as sm

  with jax.enable_x64(True):
    w, _ = _tied_records(L, H=3)
    x = _shared_vectors(L)
    ns = (1, 4, 8, 32)
    kw = dict(blocks=blocks, window=window, dtype=jnp.float64, rule=rule)
    shared = np.asarray(sm.layer_sums(w, x, ns, 2.0, **kw))
    repeated = np.asarray(sm.layer_sums(w, np.broadcast_to(x[None], (3, L, x.shape[1])), ns,
                                        2.0, **kw))
  assert shared.shape == repeated.shape == (3, len(ns), len(sm.LAYER_FIELDS))
  np.testing.assert_array_equal(shared[..., 0], repeated[..., 0])     # N_s/N sums
  np.testing.assert_array_equal(shared[..., -1], repeated[..., -1])   # kept queries
  np.testing.assert_allclose(shared, repeated, rtol=1e-13, atol=0)


def test_the_shared_deltas_are_each_heads_window_deltas():
  """The other side: a window changes the deltas of the shared vectors (so a shared path that
  took the causal prefix's deltas, or skipped the projection, would fail the test above)."""
  from limits.separability import model as sm

  with jax.enable_x64(True):
    w, _ = _tied_records(70, H=3)
    x = _shared_vectors(70)
    ns = (1, 4, 8, 32)
    delta = sm.LAYER_FIELDS.index("delta")
    full = np.asarray(sm.layer_sums(w, x, ns, 2.0, blocks=4, window=0, dtype=jnp.float64))
    local = np.asarray(sm.layer_sums(w, x, ns, 2.0, blocks=4, window=9, dtype=jnp.float64))
    unit = np.asarray(sm.layer_sums(w, x, ns, 1.0, blocks=4, window=0, dtype=jnp.float64))
  # N = 32 keeps no query in a 9-key window (AMBIG-8): compare the others
  assert np.all(local[:, :3, delta] > full[:, :3, delta] * 1.01)
  assert np.all(local[:, 3, -1] == 0) and np.all(full[:, 3, -1] > 0)
  np.testing.assert_allclose(unit[..., delta] * 2, full[..., delta], rtol=1e-12)
