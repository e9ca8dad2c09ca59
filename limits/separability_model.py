"""Theorem 2 on a model (Algorithm 4): one layer's heads, every query with its causal prefix,
the per-head vectors projected onto the sphere S^{d-1}(M) (Assumption 1).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from limits.distance_fast import sort_rows
from limits.separability_rows import prefix_min_pairwise_distance, row_stats, sort_desc

LAYER_FIELDS = ("frac", "lower", "lower_raw", "upper", "r", "delta", "upper_printed", "count")


def normalize_to_sphere(v, M):
  """Projects vectors onto S^{d-1}(M) (Assumption 1, "in practice we normalize"); 0 stays 0."""
  norm = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
  return jnp.asarray(M, v.dtype) * v / jnp.where(norm > 0, norm, 1)


def _head_sums(weights, v, ns, M, rule, srt=None):
  """One head: sums over queries with more than n visible keys (AMBIG-8), (K, len(LAYER_FIELDS)).

  The sort of every attention row, the projection onto the sphere and the prefix deltas are
  computed once and shared by every n in ``ns``. ``srt`` (L, L): the rows already sorted
  (:func:`sort_rows_host`); else sorted here.
  """
  L = weights.shape[-1]
  visible = jnp.tril(jnp.ones((L, L), bool))                 # causal prefix of each query
  x = normalize_to_sphere(v, M)                              # (L, d)
  if srt is None:
    srt = sort_desc(weights, visible)                        # (L, L)
  delta = prefix_min_pairwise_distance(x)                    # (L,) delta of query t's prefix
  dl = jnp.where(jnp.isfinite(delta), delta, 0)

  def one(n):
    st = row_stats(weights, srt, visible, x, n, M, dl, rule=rule)
    keep = jnp.arange(1, L + 1) > n                          # t = query index + 1 visible keys
    z = lambda a: jnp.sum(jnp.where(keep, a, 0))
    return jnp.stack([z(st.frac), z(st.lower), z(st.lower_raw), z(st.upper), z(st.r), z(dl),
                      z(st.upper_printed), jnp.sum(keep).astype(weights.dtype)])

  return jax.lax.map(one, ns)


def sort_rows_host(weights):
  """(…, L, L) causal rows sorted descending on the host, masked keys −inf last: the same
  array as ``sort_desc(weights, tril)``; NumPy's sort is ~20× XLA's on CPU, and the one sort
  per row serves every N (:func:`limits.distance_fast.sort_rows`)."""
  return sort_rows(weights)


@functools.partial(jax.jit, static_argnames=("rule",))
def layer_sums(weights, v, ns, M, *, rule: str = "strict", sorted_rows=None):
  """Sums for every head of one layer and every n: (H, K, F).

  Args:
    weights: (H, L, L) causal attention rows; v: (H, L, d) value vectors (projected onto
      S^{d-1}(M) here); ns: (K,) int32 top-N values (traced: one compilation per K); M: radius.

  F = len(LAYER_FIELDS): sums over the kept queries (t > n) of N_s/N, clipped and raw lower
  bound, upper bound, r, delta, and the number of kept queries. Heads run one at a time
  (``lax.map``) so memory is a few (L, L) arrays. ``sorted_rows`` (H, L, L): from
  :func:`sort_rows_host` (else each row is sorted inside, by XLA).
  """
  ns = jnp.atleast_1d(jnp.asarray(ns, jnp.int32))
  if sorted_rows is None:
    return jax.lax.map(lambda wv: _head_sums(wv[0], wv[1], ns, M, rule), (weights, v))
  return jax.lax.map(lambda a: _head_sums(a[0], a[1], ns, M, rule, a[2]),
                     (weights, v, sorted_rows))

