"""Algorithm 4's per-layer kernel selects every head's top k keys per causal block in one
``lax.top_k`` (limits.separability.model._block_top) instead of once per chunk of ROW_CHUNK
rows inside the loop: the same indices (checked bit for bit), so the same decisions and
layer sums on float32 records (the step's input) with ties across the N-th places; float64 weights whose float32
rounding ties across an N-th place take the exact stable sort for the whole block (the
fallback of limits.selection.top_k_rows), with the same top-N sets.

The previous kernel is ``_layer_kernel(..., block_top=False)``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits.distance.kernels import causal_blocks
from limits.selection import top_k_rows


def _per_chunk_sums(sm, w, v, ns, M, blocks, window, dt):
  """The previous kernel: each chunk of ROW_CHUNK rows selects its own top k in the loop."""
  return np.asarray(sm._layer_kernel(jnp.asarray(w), jnp.asarray(v), M, ns=ns, rule="strict",
                                     blocks=blocks, window=window, dtype=dt, block_top=False))


def _tied_records(L, H=2, seed=3):
  rng = np.random.default_rng(seed)
  logits = np.where(np.tri(L, dtype=bool), rng.normal(size=(H, L, L)) * 2, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  w = w.astype(np.float32)
  w[0, 40, 1:8] = w[0, 40, 0]      # seven equal weights across the N = 4 places
  q = L - 10
  w[1, q, :q + 1] = np.float32(1 / (q + 1))  # a uniform row: every place a tie
  return w, rng.normal(size=(H, L, 5)).astype(np.float32)


@pytest.mark.parametrize("L,blocks,window", [(70, 4, 0), (64, 2, 0), (70, 4, 9)])
def test_block_top_k_gives_the_per_chunk_sums_bitwise(L, blocks, window):
  from limits.separability import model as sm

  with jax.enable_x64(True):
    w, v = _tied_records(L)
    ns = (1, 4, 8, 32)
    got = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, 1.0, blocks=blocks,
                                   window=window, dtype=jnp.float64))
    ref = _per_chunk_sums(sm, w, v, ns, 1.0, blocks, window, jnp.float64)
    # The same indices give the same decisions; the two compiled programs may still round the
    # sums of the bounds apart by an ulp (seen under the tests' XLA flags, LLVM -O0; at XLA's
    # defaults a SmolLM2 layer's sums are bitwise equal).
    np.testing.assert_array_equal(got[..., 0], ref[..., 0])   # N_s/N sums
    np.testing.assert_array_equal(got[..., -1], ref[..., -1])  # kept queries
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=0)
    # the indices themselves: one call per block == one call per chunk of ROW_CHUNK rows
    for lo, hi in causal_blocks(L, blocks):
      top = np.asarray(sm._block_top(jnp.asarray(w[:, lo:hi, :hi]), lo, ns=ns, window=window))
      rc = min(sm.ROW_CHUNK, hi - lo)
      assert top.shape[1] == -(-(hi - lo) // rc) * rc
      for c0 in range(0, hi - lo, rc):
        q = lo + c0 + np.arange(min(rc, hi - lo - c0))
        vis = np.arange(hi)[None, :] <= q[:, None]
        if window:
          vis &= np.arange(hi)[None, :] > q[:, None] - window
        for h in range(w.shape[0]):
          a = jnp.asarray(np.where(vis, w[h, q, :hi], 0))
          one = np.asarray(top_k_rows(a, jnp.asarray(vis), top.shape[-1],
                                      jnp.asarray(ns, jnp.int32)))
          np.testing.assert_array_equal(top[h, c0:c0 + len(q)], one)


def test_block_top_k_float64_tie_straddling_takes_the_exact_sort_for_the_block():
  """float64 weights with a float32-rounding tie across head 1's N = 4 place: the batched
  (heads, rows, C) call falls back to the stable float64 sort (the per-chunk call would have
  done so for that chunk only); every top-N set equals the float64 one, and the layer sums
  equal the per-chunk path's to rounding (the order inside a set may differ)."""
  from limits.separability import model as sm

  with jax.enable_x64(True):
    L = 48
    w, v = _tied_records(L)
    w = w.astype(np.float64)
    w[1, 30, :31] = 0.01
    w[1, 30, 2] = 0.01 * (1 + 2.0 ** -40)   # equal to 0.01 in float32, larger in float64
    w[1, 30, 5] = 0.01 * (1 + 2.0 ** -41)
    ns = (1, 4, 8)
    top = np.asarray(sm._block_top(jnp.asarray(w), 0, ns=ns))
    assert top[1, 30, 0] == 2 and top[1, 30, 1] == 5      # float64 order, not index order
    for h in range(2):
      for q in range(L):
        order = sorted(range(q + 1), key=lambda j: (-w[h, q, j], j))
        for n in ns:
          assert set(top[h, q, :min(n, q + 1)]) == set(order[:n])
    got = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, 1.0, blocks=1))
    ref = _per_chunk_sums(sm, w, v, ns, 1.0, 1, 0, jnp.float64)
    np.testing.assert_array_equal(got[..., 0], ref[..., 0])   # N_s/N sums
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=0)
