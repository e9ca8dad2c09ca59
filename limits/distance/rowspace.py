"""The vectors x_i of a layer in coordinates of their own span (AMBIG-7's shared readings).

Theorems 1 and 2 read the vectors only through inner products: norms ‖x_i‖, distances
‖x_i − x_j‖, context vectors s = Σ α_i x_i and their distances, prefix means x̄ (Algorithms 1-4,
the printed E, Assumption 1's projection onto the sphere). Every one of them is unchanged by
an isometry of R^D. L vectors in R^D with L < D lie in an L-dimensional subspace, so with
Xᵀ = Q R (Householder QR, Q (D, L) orthonormal columns) the rows of Y = X Q = Rᵀ (L, L) have
the same Gram matrix Y Yᵀ = X Xᵀ, and each product the kernels form over the vector dimension
costs L/D of X's. The residual-stream reading (``--vectors=hidden``, D = 576 on SmolLM2-135M)
at L = 64 … 512 is where this pays (Algorithm 3's ``--quick`` hidden step 26.8 → 15.1 s:
``python -m benchmarks.reproduce --model=smollm2 --quick --reference_rev=598a5f2``). Householder QR is backward stable column by column, so ⟨y_i, y_j⟩ = ⟨x_i, x_j⟩ up to a
few float64 ulp of ‖x_i‖‖x_j‖: the order of the rounding the kernels' own float64 products
make. tests/test_rowspace.py checks the Gram matrix and the statistics of Algorithms 1-2 and 4
against X's.

Only the readings shared by every head (hidden, embedding: (B, L, D)) are reduced; the per-head
value and key vectors (d_head = 64 on SmolLM2: wider than L only at L = 32) are passed as they
are.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.jit, static_argnames=("dtype",))
def _row_space(x, *, dtype):
  xt = jnp.swapaxes(x.astype(dtype), -1, -2)  # (..., D, L)
  return jnp.swapaxes(jnp.linalg.qr(xt, mode="r"), -1, -2)  # (..., L, L) = Rᵀ


def row_space(x):
  """(..., L, D) → (..., L, min(L, D)) vectors with the same Gram matrix; x itself when
  L >= D. Computed in float64 when JAX's x64 mode is on (the records are float32: the result
  is then exact to float64 rounding, not float32's), else in x's dtype. A device array stays
  on the device; a host array is placed explicitly (no implicit transfer)."""
  L, D = x.shape[-2:]
  if L >= D:
    return x
  if not isinstance(x, jax.Array):
    x = jax.device_put(x)
  dtype = jnp.float64 if jax.config.jax_enable_x64 else x.dtype
  return _row_space(x, dtype=jnp.dtype(dtype))
