"""Algorithm 2 on the model (Theorem 1 per layer, limits.distance.kernels) selects each causal
block's top max(N) + 1 keys on the host (``host_top``, limits.selection.top_k_rows_host) when
the weights are float32 NumPy records, JAX runs on the CPU and max N >= HOST_TOP_FROM: the same
indices as the kernel's own ``lax.top_k`` (``layer_top``) under the one tie rule, hence the same
I_N, counts and violation decisions, and the same per-head statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits.distance import kernels
from tests.test_separability_top import _tied_records


def _records(L, H=2, seed=3):
  """float32 causal rows with a tie across the N = 4 places, a uniform row (every place a
  tie) and a row whose 40 largest weights are equal (a tie across N = 32's boundary)."""
  w, v = _tied_records(L, H, seed)
  if L > 60:
    w[1, 60, 3:43] = w[1, 60].max()
  return w, v.astype(np.float64)


@pytest.mark.parametrize("L,blocks,window,kmax", [(70, 4, 0, 32), (70, 1, 0, 40),
                                                   (70, 4, 9, 33), (62, 1, 0, 64)])
def test_host_top_equals_device_top(L, blocks, window, kmax):
  w, _ = _records(L)
  ns = jnp.asarray([1, 4, min(kmax, L)], jnp.int32)
  dev = kernels.layer_top(jnp.asarray(w), ns, kmax=kmax, blocks=blocks, window=window)
  host = kernels.host_top(w, kmax, blocks=blocks, window=window)
  assert len(host) == len(dev) == len(kernels.causal_blocks(L, blocks))
  for h, d in zip(host, dev):
    assert h.dtype == np.int32
    np.testing.assert_array_equal(h, np.asarray(d))


def test_host_top_refuses_float64():
  w, _ = _records(50)
  with pytest.raises(ValueError, match="float32"):
    kernels.host_top(w.astype(np.float64), 32, blocks=1)


def test_layer_stats_with_host_top_equals_device_path(monkeypatch):
  """Float64 statistics, printed E included: NumPy float32 weights take the host selection
  (checked: host_top is called), device weights the kernel's; counts and violation counts equal,
  values equal up to the compiled programs' rounding (the same keys selected; bitwise on
  SmolLM2 layers 0 and 20 at L = 1,024 at XLA's default flags)."""
  calls = []
  real = kernels.host_top
  monkeypatch.setattr(kernels, "host_top", lambda *a, **k: calls.append(1) or real(*a, **k))
  with jax.enable_x64(True):
    w, v = _records(70)
    ns = [1, 4, 10, 33]
    for blocks in (1, 4):
      args = dict(dtype=np.float64, blocks=blocks, avg_dtype=np.float32)
      ref, ref_means = kernels.layer_stats_printed(jax.device_put(w[None]),
                                                   jax.device_put(v[None]), ns, **args)
      assert not calls
      got, got_means = kernels.layer_stats_printed(w[None], v[None], ns, **args)
      assert calls
      calls.clear()
      for name in ref._fields:
        r, g = np.asarray(getattr(ref, name)), np.asarray(getattr(got, name))
        if r.dtype.kind in "iub":
          np.testing.assert_array_equal(g, r, err_msg=name)
        else:
          np.testing.assert_allclose(g, r, rtol=1e-13, atol=0, err_msg=name)
      for name in ref_means:
        np.testing.assert_allclose(got_means[name], ref_means[name], rtol=1e-13, atol=0)


def test_small_n_and_device_weights_keep_the_device_selection(monkeypatch):
  """Below HOST_TOP_FROM (Algorithm 1's N = 5) and for device arrays the kernel selects."""
  monkeypatch.setattr(kernels, "host_top", lambda *a, **k: pytest.fail("host_top called"))
  with jax.enable_x64(True):
    w, v = _records(50)
    kernels.layer_stats(w[None], v[None], [5], dtype=np.float64)
    kernels.layer_stats(jax.device_put(w[None]), jax.device_put(v[None]), [40],
                        dtype=np.float64)


def test_padded_order_with_bound_is_refused():
  with jax.enable_x64(True):
    w, v = _records(50)
    ns = jnp.asarray([4], jnp.int32)
    top = kernels.layer_top(jnp.asarray(w), ns, kmax=4, blocks=1, width=8)
    with pytest.raises(ValueError, match="padded"):
      kernels.layer_kernel(jnp.asarray(w), jnp.asarray(v), ns, kmax=4, blocks=1, top=top)
    exact = kernels.layer_top(jnp.asarray(w), ns, kmax=4, blocks=1)
    kernels.layer_kernel(jnp.asarray(w), jnp.asarray(v), ns, kmax=4, blocks=1, top=exact)


def test_host_path_makes_no_implicit_transfer():
  """The host selection places its indices and the weights explicitly: the layer kernel's call
  with NumPy float32 weights runs under jax.transfer_guard("disallow")."""
  with jax.enable_x64(True):
    w, v = _records(70)
    vj = jax.device_put(v[None])
    kernels.layer_stats_printed(w[None], vj, [1, 33], dtype=np.float64)  # compile outside
    with jax.transfer_guard("disallow"):
      st, _ = kernels.layer_stats_printed(w[None], vj, [1, 33], dtype=np.float64)
    assert st.count.shape == (1, 2, 2)
