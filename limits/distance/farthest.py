"""d_1 of Theorem 1's bound: the largest distance between a selected and a non-selected
visible token, max ‖x_i − x_j‖ over j in I_N and non-selected i, for every query of a causal
block (the per-layer kernel is :mod:`limits.distance.kernels`).

- :func:`dist2`: the (C, C) squared distance matrix by the Gram identity;
- :func:`prefix_maxima`: per key, the running maximum of its distances over the keys a query
  can see, and the first key attaining it (one scan);
- :func:`d1_sq_prefix`: d_1² from those prefix maxima, exact, with a gather of the selected
  keys' distance rows only for rows whose farthest pair lies inside I_N (the device path);
- :func:`d1_sq_top`: d_1² from the distance rows of each row's selected keys in selection
  order, directly (the device path for small N);
- :func:`d1_sq_gather`: d_1² by that gather for every row (the path of the host-sorted rows,
  and the reference of tests/test_distance_fast.py).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def dist2(x, n2):
  """(C, C) ‖x_j − x_i‖² by the Gram identity."""
  return n2[:, None] + n2[None, :] - 2.0 * (x @ x.T)


def d1_sq_gather(sel, rest, dist2, *, cap: int, row_block: int):
  """d_1² per row: max ‖x_i − x_j‖² over selected j and non-selected visible i. (R,)

  sel, rest: (R, C); dist2: (C, C). The ≤ cap selected keys of each row are compacted to
  indices and their rows of the distance matrix gathered: cap·C work per query instead of C².
  """
  return lax.map(lambda a: _gather_one(a[0], a[1], dist2, cap), (sel, rest),
                 batch_size=max(1, min(sel.shape[0], row_block)))


def _gather_one(srow, rrow, dist2, cap: int):
  """d_1² of one row by gathering the rows of its ≤ cap selected keys. srow, rrow: (C,)."""
  C = srow.shape[-1]
  pos = jnp.arange(C, dtype=jnp.int32)
  slot = jnp.cumsum(srow) - 1
  idx = jnp.zeros((cap,), jnp.int32).at[jnp.where(srow, slot, cap)].set(pos, mode="drop")
  ok = jnp.arange(cap) < jnp.sum(srow)
  v = jnp.where(ok[:, None] & rrow[None, :], dist2[idx], -jnp.inf)  # (cap, C)
  best = jnp.max(v)
  return jnp.where(jnp.isfinite(best), best, 0.0)


def d1_sq_top(dist2, idx, in_n, rest):
  """d_1² per row (R,) from the distance rows of the selected keys, directly: max of
  dist2[j, i] over j = idx[q, r] with in_n[q, r] and i with rest[q, i]; 0 where a row has no
  such pair (not counted). The same set of entries as :func:`d1_sq_prefix` and
  :func:`d1_sq_gather` take the maximum of, so the same value (a maximum is exact).
  idx, in_n (R, k); rest (R, C); dist2 (C, C). k·C work per row and N: the path for small
  N (Algorithm 1's N = 5), where the per-key prefix maxima (C² per head, a C-step scan)
  cost more than the gathers they save."""
  rows = jnp.take(dist2, idx, axis=0, mode="clip")  # (R, k, C)
  v = jnp.where(in_n[:, :, None] & rest[:, None, :], rows, -jnp.inf)
  best = jnp.max(v, axis=(1, 2))
  return jnp.where(jnp.isfinite(best), best, 0.0)


def prefix_maxima(dist2):
  """Per-key prefix maxima of the distance matrix: P[q, j] = max_{i <= q} dist2[j, i] and
  I[q, j] the first i attaining it. dist2 (C, C) → (P, I), each (C, C) (row = query).

  One pass: a scan over i carrying the running maximum of column i of ``dist2`` (a row of its
  transpose) and where it was first set, a strict ``>`` so that a tie keeps the lower index.
  XLA's CPU ``cummax`` (a reduce-window) took 26 ms per 1,024² float64 matrix and this scan
  2.2 ms (CPU seconds; the thirteenth session's helper measured it with a scratch script)."""
  C = dist2.shape[-1]

  def step(carry, col):  # col: dist2[:, i] (C,) for i = 0, 1, …
    p, first, i = carry
    new = col > p
    p, first = jnp.where(new, col, p), jnp.where(new, i, first)
    return (p, first, i + 1), (p, first)

  init = (jnp.full((C,), -jnp.inf, dist2.dtype), jnp.zeros((C,), jnp.int32), jnp.int32(0))
  _, (P, first) = lax.scan(step, init, dist2.T)
  return P, first


def prefix_gathers(idx, P, I, vis, rank, n2):
  """The N-independent gathers of :func:`d1_sq_prefix` for one block, done once for every N:
  ``pj`` (R, k) = P at the keys ``idx``, ``arg`` = I there (each selected key's farthest
  visible key), ``vis_arg`` / ``rank_arg`` the visibility and rank of that key (a key is
  non-selected for N iff visible and rank >= N), ``vis_idx`` and ``n2_idx`` (‖x‖² of the keys
  in order). idx (R, k); P, I, vis, rank (R, C); n2 (C,)."""
  arg = jnp.take_along_axis(I, idx, -1)
  return {"pj": jnp.take_along_axis(P, idx, -1), "arg": arg,
          "vis_arg": jnp.take_along_axis(vis, arg, -1),
          "rank_arg": jnp.take_along_axis(rank, arg, -1),
          "vis_idx": jnp.take_along_axis(vis, idx, -1), "n2_idx": n2[idx]}


def d1_sq_prefix(sel, rest, dist2, idx, P, I, in_n=None, pre=None, n=None):
  """d_1² per row (R,) from the per-key prefix maxima, exact; the values of
  :func:`d1_sq_gather`.

  For query q and selected j, P[q, j] = max over all visible i of ‖x_j − x_i‖², attained first
  at I[q, j]. U = max_j P[q, j] bounds d_1² from above; when some j attains U with I[q, j] not
  selected, that pair is admissible and d_1² = U. The other rows (the farthest pair is within
  I_N) are recomputed from the distance rows of their selected keys (``idx`` holds them: no
  compaction) in a loop over those rows only.
  idx (R, k): keys in selection order (the first N of them are I_N); P, I (R, C): rows
  lo … hi − 1 of :func:`prefix_maxima`; in_n: (R, k) ``sel`` at ``idx`` when the caller has it.
  pre, n: :func:`prefix_gathers` of this block and the N of ``sel`` (selection by rank < n):
  the gathers are then not repeated per N.
  """
  R = idx.shape[0]
  if in_n is None:  # (R, k) the selected keys among them
    in_n = jnp.take_along_axis(sel, idx, -1)
  if pre is None:
    pj = jnp.where(in_n, jnp.take_along_axis(P, idx, -1), -jnp.inf)  # (R, k)
    arg = jnp.take_along_axis(I, idx, -1)  # (R, k) farthest visible key from each selected
    rest_arg = jnp.take_along_axis(rest, arg, -1)
  else:
    pj = jnp.where(in_n, pre["pj"], -jnp.inf)
    rest_arg = pre["vis_arg"] & (pre["rank_arg"] >= n)
  # admissible: the farthest key is visible and not selected (with a sliding window the
  # prefix maximum may sit before the window: then the row takes the gather below)
  ok = in_n & rest_arg
  upper = jnp.max(pj, axis=-1)
  exact = jnp.max(jnp.where(ok, pj, -jnp.inf), axis=-1)
  has_rest = jnp.any(rest, axis=-1)
  fine = ~has_rest | (exact >= upper)
  out = jnp.where(has_rest, exact, 0.0)
  todo = jnp.nonzero(~fine, size=R, fill_value=0)[0]

  def body(i, acc):
    q = todo[i]
    v = jnp.where(in_n[q][:, None] & rest[q][None, :], dist2[idx[q]], -jnp.inf)  # (k, C)
    return acc.at[q].set(jnp.max(v))  # a fallback row has a selected key and a rest key

  return lax.fori_loop(0, jnp.sum(~fine), body, out)
