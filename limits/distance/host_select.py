"""Algorithms 2 and 4's top-k keys selected on the host, for float32 NumPy records on XLA's CPU
backend: the indices ``lax.top_k`` gives on the device (same order, ties and −inf included),
from :func:`limits.selection.top_k_ordered` on each causal block's rows with the keys a query
cannot see masked (:func:`limits.distance.block.block_visible`). The layer kernel
(:mod:`limits.distance.kernels`) and Algorithm 4's ``separability.model`` take these indices in
place of their own selection.
"""

from __future__ import annotations

import jax
import numpy as np

from limits.distance.block import block_visible, causal_blocks
from limits.selection import NEG_INF_BITS, top_k_ordered, top_k_rows_host


# From this largest N on, the device path selects on the host when the weights are float32
# NumPy arrays (the step's records as read) and JAX runs on the CPU (:func:`host_top`):
# XLA's CPU ``lax.top_k`` of k = 101 keys per row (Algorithm 2) took 15 % of a SmolLM2
# layer's CPU time; below it (Algorithm 1's k = 6) the device top k is cheap.
HOST_TOP_FROM = 32


def host_top(weights, kmax: int, *, blocks: int, window: int = 0):
  """:func:`limits.distance.kernels.layer_top`'s selection order (no ``width``) on the host:
  for float32 NumPy weights (G, L, L), a tuple over the causal blocks of
  (G, R_b, min(kmax + 1, hi_b)) int32 indices (:func:`block_top_host`), which is what the
  layer kernel's ``_block_top`` takes for float32 weights (no float64 tie fallback needed)."""
  w = np.asarray(weights)
  if w.dtype != np.float32:
    raise ValueError("host_top needs float32 weights (the indices of lax.top_k on them)")
  L = w.shape[-1]
  return tuple(block_top_host(w[:, lo:hi, :hi], lo, min(kmax + 1, hi), window)
               for lo, hi in causal_blocks(L, blocks))


def block_top_host(a, lo: int, k: int, window: int = 0):
  """(G, R, k) int32: the indices of ``lax.top_k`` on the float32 weights a (G, R, C) (NumPy)
  of the queries lo … lo + R − 1, the keys they cannot see at −inf (:func:`block_visible`'s
  mask, built with NumPy: no device round trip), by :func:`limits.selection.top_k_rows_host`
  (tests/test_separability_host_top.py). Shared by Algorithm 2 (:func:`host_top`) and
  Algorithm 4 (``separability.model._block_top_host``)."""
  G, R, C = a.shape
  vis = block_visible(lo, R, C, window, xp=np)                               # (R, C)
  # weights >= +0 (no negative float but −inf): their int32 bits are already in order, so
  # the mask writes −inf's bits into them and no second pass orders them
  s = np.where(vis, np.asarray(a, np.float32).view(np.int32), NEG_INF_BITS)  # (G, R, C)
  if s.min(initial=NEG_INF_BITS) < NEG_INF_BITS:                             # −0 or < 0
    return top_k_rows_host(np.where(vis, a, np.float32(-np.inf)).reshape(G * R, C),
                           k).reshape(G, R, -1)
  return top_k_ordered(s.reshape(G * R, C), k).reshape(G, R, -1)


def use_host_top(weights, kmax: int) -> bool:
  """The device path selects on the host (:func:`host_top`): float32 NumPy weights, the CPU
  backend and kmax >= :data:`HOST_TOP_FROM`."""
  return (isinstance(weights, np.ndarray) and weights.dtype == np.float32
          and kmax >= HOST_TOP_FROM and jax.default_backend() == "cpu")
