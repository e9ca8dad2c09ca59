"""Theorem 2's upper bound as one public summary of the paper prints it, beside the suite's
derived form (Algorithm 4; AMBIG-5; docs/claims.md, "Printed and derived forms").

- **Printed:** E[N_s]/N <= (1/N)·Σ_{i∈I_N} exp[−(r − ξ_i)²/(16M²)], with no positive part and
  the constant 16M².
- **Derived** from Hoeffding's inequality: (1/N)·Σ exp[−(ξ_i − r)_+²/(2M²)].

Each function is pure over one selected set (``xi (N,)`` or the selected weights
``alpha_sel (N,)``) and can be ``jax.vmap``-ed over leading axes. The batched bounds the
experiments use are in :mod:`limits.separability.rows`; these are the reference forms.
"""

from __future__ import annotations

import jax.numpy as jnp


def theorem2_upper_printed(xi, r, M=1.0):
  """Printed Theorem 2 upper bound (1/N)·Σ_i exp[−(r − ξ_i)²/(16M²)] for one selected set.

  xi: (N,) the ξ_i of the selected tokens; r: the tolerance radius; M: the sphere radius.
  No positive part: the printed form decays on both sides of r = ξ_i.
  """
  return jnp.mean(jnp.exp(-((r - xi) ** 2) / (16.0 * M ** 2)), axis=-1)


def theorem2_upper_derived(xi, r, M=1.0):
  """The suite's derived form (Hoeffding on X_i ∈ [0, 2M]): (1/N)·Σ_i exp[−(ξ_i − r)_+²/(2M²)]."""
  gap = jnp.maximum(xi - r, 0.0)
  return jnp.mean(jnp.exp(-(gap ** 2) / (2.0 * M ** 2)), axis=-1)


def xi_values(alpha_sel, M=1.0, delta=0.0):
  """ξ_i for each selected token: ξ_i² = (M² − δ²/2)·(Σ_{j≠i} α_j)² + (δ²/2)·Σ_{j≠i} α_j².

  alpha_sel: (N,) the selected weights. The leave-one-out sums are taken directly over j ≠ i
  (not as total minus own, which cancels badly when one weight dominates).
  """
  n = alpha_sel.shape[-1]
  off = 1.0 - jnp.eye(n, dtype=alpha_sel.dtype)
  s1 = off @ alpha_sel
  s2 = off @ (alpha_sel ** 2)
  sq = (M ** 2 - delta ** 2 / 2.0) * s1 ** 2 + (delta ** 2 / 2.0) * s2
  return jnp.sqrt(jnp.maximum(sq, 0.0))
