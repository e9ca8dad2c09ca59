"""Algorithm 4 on the model selects each causal block's top k keys on the host
(limits.selection.top_k_rows_host via limits.separability.model._block_top_host) when the
weights are the float32 records: the same indices as the device's ``lax.top_k``
(limits.separability.model._block_top) under the one tie rule (weight descending, ties to the
lower index), so the same I_N, decisions and layer sums (Theorem 2's bounds from the same
selected keys)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits.distance.kernels import causal_blocks
from limits.selection import top_k_rows_host
from tests.test_separability_top import _tied_records


def _device_top(key, k):
  return np.asarray(jax.lax.top_k(jnp.asarray(key), k)[1])


def _argpartition_only(key, k):
  """The selection without the tie repair: argpartition's k largest in (value, index) order
  (a tie across the k-th place keeps whichever tied keys the partition left there)."""
  C = key.shape[-1]
  cols = np.argpartition(key, C - k, axis=-1)[:, C - k:]
  vals = np.take_along_axis(key, cols, axis=-1)
  order = np.lexsort((cols, -vals), axis=-1)
  return np.take_along_axis(cols, order, axis=-1)


def _tied_rows(C=300, seed=0):
  rng = np.random.default_rng(seed)
  key = rng.random((40, C)).astype(np.float32)
  key[0] = np.float32(0.25)                          # every entry tied
  key[1, ::3] = np.float32(0.5)                      # 100 tied at the top, then 200 smaller
  key[2, :] = np.float32(0.125)
  key[2, 250:] = np.float32(0.75)                    # a tie across the k-th place at the end
  key[3, 10:] = -np.inf                              # fewer than k visible keys (masked −inf)
  key[4, ::2] = 0.0
  key[4, 1::2] = -0.0                                # XLA orders +0 above −0
  key[5, 200:] = -np.inf
  key[5, :200] = np.float32(1e-30)
  key[6:20] = np.round(key[6:20] * 8) / 8            # few distinct values: ties everywhere
  return key


@pytest.mark.parametrize("k", [1, 2, 5, 129, 299, 300])
def test_top_k_rows_host_is_lax_top_k(k):
  key = _tied_rows()
  got = top_k_rows_host(key, k)
  assert got.dtype == np.int32 and got.shape == (key.shape[0], k)
  np.testing.assert_array_equal(got, _device_top(key, k))


def test_the_tie_rows_tell_a_repair_from_none():
  """The data above can fail the test: without the tie repair the selection differs from
  ``lax.top_k`` (ties across the k-th place keep other keys than the lowest indices)."""
  key = _tied_rows()
  k = 129
  assert not np.array_equal(_argpartition_only(key, k), _device_top(key, k))
  # and the repaired rows are exactly those with more than k keys at or above the k-th value
  kth = -np.sort(-key, axis=-1)[:, k - 1:k]
  assert np.sum(np.count_nonzero(key >= kth, axis=-1) > k) >= 8


def _records(L):
  """tests/test_separability_top.py's tied records (3 heads), with visible keys of weight
  exactly 0 in the third head."""
  w, v = _tied_records(L, H=3)
  w[2, 50:, :30] = 0.0
  return w, v


@pytest.mark.parametrize("L,blocks,window", [(70, 4, 0), (64, 2, 0), (70, 4, 9), (45, 1, 0)])
def test_block_top_host_is_the_device_block_top(L, blocks, window):
  from limits.separability import model as sm

  w, _ = _records(L)
  ns = (1, 4, 8, 32)
  for lo, hi in causal_blocks(L, blocks):
    dev = np.asarray(sm._block_top(jnp.asarray(w[:, lo:hi, :hi]), lo, ns=ns, window=window))
    host = sm._block_top_host(w[:, lo:hi, :hi], lo, ns=ns, window=window)
    assert host.shape == dev.shape and host.dtype == dev.dtype
    np.testing.assert_array_equal(host, dev)


@pytest.mark.parametrize("L,blocks,window", [(70, 4, 0), (70, 4, 9)])
def test_layer_sums_host_top_equals_device_top(L, blocks, window):
  from limits.separability import model as sm

  with jax.enable_x64(True):
    w, v = _records(L)
    ns = (1, 4, 8, 32)
    host = np.asarray(sm.layer_sums(w, v, ns, 1.0, blocks=blocks, window=window,
                                    dtype=jnp.float64))           # NumPy float32: host top
    dev = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, 1.0, blocks=blocks,
                                   window=window, dtype=jnp.float64))
    forced = np.asarray(sm.layer_sums(w, v, ns, 1.0, blocks=blocks, window=window,
                                      dtype=jnp.float64, host_top=False))
    np.testing.assert_array_equal(host[..., 0], dev[..., 0])     # N_s/N sums
    np.testing.assert_array_equal(host[..., -1], dev[..., -1])   # kept queries
    np.testing.assert_allclose(host, dev, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(forced, dev)


def test_host_top_refuses_float64_weights():
  from limits.separability import model as sm

  with jax.enable_x64(True):
    w, v = _records(48)
    with pytest.raises(ValueError, match="float32"):
      sm.layer_sums(w.astype(np.float64), v, (1, 4), 1.0, host_top=True)


@pytest.mark.parametrize("backend,numpy_f32,want", [
    ("cpu", True, 1), ("cpu", False, 0), ("gpu", True, 0), ("tpu", True, 0)])
def test_host_top_by_default_only_for_float32_numpy_on_the_cpu(monkeypatch, backend, numpy_f32,
                                                                want):
  """The default (``host_top=None``) selects on the host only where that is the faster side:
  float32 NumPy records with JAX on the CPU; a device array, or an accelerator backend (whose
  own top-k keeps the statistics on the device, issue 27), selects in the kernel."""
  from limits.separability import model as sm

  calls = []
  real = sm._block_host_tops
  monkeypatch.setattr(sm, "_block_host_tops", lambda *a, **k: calls.append(1) or real(*a, **k))
  monkeypatch.setattr(jax, "default_backend", lambda: backend)
  with jax.enable_x64(True):
    w, v = _records(64)
    sm.layer_sums(w if numpy_f32 else jnp.asarray(w), v, (1, 4), 1.0, blocks=2)
  assert len(calls) == want


@pytest.mark.parametrize("fill", [-0.0, -1e-3, -np.inf])
def test_block_top_host_orders_negative_weights_as_lax_top_k(fill):
  """``block_top_host`` writes the mask into the weights' int32 bits, which are in order only
  for weights >= +0 (and −inf); −0 and negative weights (bits below −inf's) take the ordered
  path instead. Visible keys at −0 must rank above the masked keys, +0 above −0."""
  from limits.distance.block import block_visible
  from limits.distance.host_select import block_top_host

  L, lo = 40, 8
  rng = np.random.default_rng(3)
  a = rng.random((2, L - lo, L)).astype(np.float32)
  a[0, :, ::2] = np.float32(fill)
  a[1, :, 1::3] = 0.0
  a[1, :, ::3] = np.float32(fill)
  vis = block_visible(lo, L - lo, L, 0, xp=np)
  key = np.where(vis, a, np.float32(-np.inf)).reshape(-1, L)
  # lax.top_k's order written out in NumPy: value descending, +0 above −0, then lower index
  order = np.lexsort((np.broadcast_to(np.arange(L), key.shape), np.signbit(key), -key), axis=-1)
  for k in (5, 20, 39):
    got = block_top_host(a, lo, k).reshape(-1, k)
    np.testing.assert_array_equal(got, order[:, :k])
    if fill != 0:  # no ±0 pair to order: the device's own top k as well
      np.testing.assert_array_equal(got, _device_top(key, k))
