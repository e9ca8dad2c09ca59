"""The gradient step's all-rows decisions: a one-pass screen, Newton only where it is needed.

For every (row, T) the gradient experiment asks of λ = λ_max(M), M = diag α − ααᵀ,
α = softmax(l/T), ‖J‖₂ = λ/T (Corollary 3; M is PSD, so its spectral norm is λ):

- is λ/T above Corollary 3 as printed, min{1/(4T), √2}?  above the tight bound 1/(2T)?
- is λ/T above Lemma 2's bound (e^{r/T} + e^{2r/T})/(T·n) (where that bound is finite)?
- which row has the largest λ/T (the reported max T‖J‖)?

Each comparison is made, as in the reference path (every pair by Newton), with the threshold
times (1 + rtol). Most pairs are decided by a bracket λ₀ ≤ λ ≤ λ¹ computed in one pass over
the row; of the rest, most are decided by the secular test (:func:`secular_decide`: the sign
of the secular equation at the threshold, bounded from α₁, α₂ and q = Σ_{i≠(1)} α_i², which
the same pass sums); only the pairs neither can decide (and the candidates for the maximum)
go to Newton on the secular equation (``sensitivity._softmax_norm_newton``) in the run's
dtype, a few passes over the row each.

**The bracket and the secular test** are proved in :mod:`limits.gradient.bracket` (with the
float32 margin δ that makes their decisions those of the all-Newton path).

**Shapes.** Rows are grouped by visible span (last visible key + 1, rounded up to a multiple of
``sensitivity.SPAN_STEP`` = 256: a causal query at position t costs t + 128 keys on average);
each group is one jitted call that walks the rows in chunks of ≈ 2²¹ (row, T, key) elements
(:data:`SCREEN_ELEMS`, at most :data:`SCREEN_MAX_ROWS` rows) with ``lax.map``; Newton's
chunks are ≈ 2¹⁸ (row, key) elements (:data:`BLOCK_ELEMS`). Nothing per row leaves the
device: the result is a dict of (K,) per-temperature counts and maxima.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from limits.gradient import sensitivity
from limits.gradient.newton_pairs import Pairs
from limits.gradient.bracket import (ABS_SLACK, SECULAR_ETA, bracket,  # noqa: F401
                                     margin, secular_decide)

BLOCK_ELEMS = 1 << 18  # elements of one Newton chunk of (pair, key) (newton_pairs.Pairs)
# Elements of one (rows, T, keys) chunk of the bracket pass's kernel (``_screen_group_fn``): its
# exps are written out for the library's two sums, so a chunk of 2^18 (1 MB, L2-sized) paid
# the per-call cost of a dozen small fusions per 9 rows at w = 1,024; 2^21 (8 MB) is 1.17-1.27x
# faster on SmolLM2's layers 0, 15, 29 with the same bits there (``python -m
# benchmarks.screen_kernel --model=smollm2 --layer=15 --against_elems=262144``; against 2^22 or
# 2^23 the same flag; WORKSPACE, thirtieth section). Not capped at a group's rows: the chunk
# depends on (K, w) only, so a block and the whole matrix run every row in the same chunk shape
# (a chunk's shape can move a float32 sum by a rounding: tests/test_gradient_screen.py).
SCREEN_ELEMS = 1 << 21
# ... and at most this many rows (the old chunk at K = 1, w = 1,024): with few temperatures a
# 2^21-element chunk would be thousands of rows and pad a group of a few hundred to it.
SCREEN_MAX_ROWS = 256
KEEP_BYTES = 1 << 28  # rows pass 1 keeps for Newton (float32 + mask), else a second pass
_T_MIN, _T_MAX = 2.0 ** -100, 2.0 ** 100  # temperatures the float32 screen accepts


# ----------------------------------------------------------------------------- per group


def _row_facts(l, m, r_dtype=None):
  """Per row (B,): arg-max index, top logit, top logit among the other keys (−inf if none),
  visible range r (0 if fewer than one visible key) and count n. l, m (B, w). The maxima
  and minimum are exact in l's dtype; r = top − smallest is taken in ``r_dtype`` (default
  l's): float32 rows give float64 r bit for bit as rows cast to float64 first."""
  import jax.numpy as jnp

  neg = jnp.asarray(-jnp.inf, l.dtype)
  x = jnp.where(m, l, neg)
  i1 = jnp.argmax(x, axis=-1)  # (B,)
  n = jnp.sum(m, axis=-1)
  l1 = jnp.where(n > 0, jnp.max(x, axis=-1), 0)
  others = m & (jnp.arange(l.shape[-1]) != i1[:, None])
  l2 = jnp.max(jnp.where(others, l, neg), axis=-1)
  lmin = jnp.min(jnp.where(m, l, jnp.inf), axis=-1)
  rd = l.dtype if r_dtype is None else r_dtype
  r = l1.astype(rd) - lmin.astype(rd)
  return i1, l1, l2, others, jnp.where(jnp.isfinite(r), r, 0), n


def _screen_chunk(l, m, T, *, dtype):
  """The float32 bracket for a chunk: l, m (B, w) (l in ``dtype``, or float32: a model's
  rows, whose differences l − l₁ are then rounded once in float32, as before from their
  exact float64 difference, and whose row facts cost half as much); T (K,) in ``dtype``.
  Returns λ₀, λ¹ (B, K) float32 (NaN where the screen cannot be trusted), the secular
  test's inputs (α₁, α₂, q) (B, K) float32 each (:func:`secular_decide`; q = Σ_{i≠(1)} α_i²,
  one more multiply-add per key) and the row facts (r, n) of Lemma 2's bound
  (:func:`lemma2`): the visible range (B,) in ``dtype`` and the visible count (B,)."""
  import jax.numpy as jnp

  f32 = jnp.float32
  _, l1, l2, others, r, n = _row_facts(l, m, dtype)
  T32 = T.astype(f32)
  inv = (1 / T).astype(f32)  # (K,) 1/T rounded once: d·(1/T) has the 3u error of d/T
  d = jnp.where(others, l - l1[:, None], 0).astype(f32)  # (B, w) <= 0, rounded once
  e = jnp.where(others[:, None, :], jnp.exp(d[:, None, :] * inv[None, :, None]), 0)  # (B,K,w)
  s_o = jnp.sum(e, axis=-1)  # (B, K) Σ over the keys other than the arg-max
  q_o = jnp.sum(e * e, axis=-1)  # (B, K) Σ e² over the same keys
  S = 1 + s_o
  d2 = jnp.where(n >= 2, (l2 - l1).astype(f32), -jnp.inf)  # (B,)
  a1, rho = 1 / S, s_o / S
  a2 = jnp.exp(d2[:, None] * inv[None, :]) / S
  lo, hi = bracket(a1, a2, rho)
  ok = (T32 >= _T_MIN) & (T32 <= _T_MAX)
  lo = jnp.where(ok[None, :], lo, jnp.nan)
  hi = jnp.where(ok[None, :], hi, jnp.nan)
  q = q_o / (S * S)
  return lo, hi, (a1, a2, q), (r.astype(dtype), n)


def lemma2(r, n, T):
  """Lemma 2's softmax bound (``bounds.softmax_lemma2_from_range``): r, n (N,) a row's visible
  range and count, T (K,) → (N, K) in T's dtype (inf where it overflows)."""
  import jax.numpy as jnp

  from limits import bounds

  rc = r.astype(T.dtype)[:, None]
  nn = jnp.maximum(n, 1).astype(T.dtype)[:, None]
  return bounds.softmax_lemma2_from_range(rc, nn, T[None, :])


def _gather(rows, mask, idx, width, dtype):
  """Rows ``idx`` cut to their first ``width`` keys, cast to ``dtype`` unless they are
  float32 (kept: :func:`_screen_chunk` rounds to float32 anyway): (B, w), (B, w)."""
  import jax.numpy as jnp

  l = rows[idx, :width]
  return (l if l.dtype == jnp.float32 else l.astype(dtype)), mask[idx, :width]


def visible_abs_max(l, m):
  """The largest |visible entry| of rows l, m (B, w) (a scalar in l's dtype) from each row's
  visible maximum and minimum, for ``check_temperature_range``: NaN entries are left out
  (masked before the reductions: XLA's CPU max and min do not order NaN, so NaN is not left
  to them), ±inf gives inf, −inf when nothing is visible. Padding that repeats a row changes
  nothing."""
  import jax.numpy as jnp

  ok = m & ~jnp.isnan(l)
  hi = jnp.max(jnp.where(ok, l, -jnp.inf), axis=-1)
  lo = jnp.min(jnp.where(ok, l, jnp.inf), axis=-1)
  return jnp.max(jnp.maximum(hi, -lo))


def screen_chunk(K: int, w: int, elems: int = SCREEN_ELEMS) -> int:
  """Rows per chunk of the bracket pass's kernel for span w at K temperatures: ≈ ``elems``
  (row, T, key) elements, at least 1 row and at most :data:`SCREEN_MAX_ROWS`; a group is padded
  to a multiple of it. A function of (K, w) only, so every block of a run uses the chunk shapes
  of the whole matrix."""
  return max(1, min(SCREEN_MAX_ROWS, int(elems) // (K * w)))


@functools.lru_cache(maxsize=None)
def _screen_group_fn(width: int, chunk: int, n: int, dtype_name: str):
  """jit: (rows (R, L), mask (R, L), idx (C·B,), T (K,)) → one span group's λ₀/T and λ¹/T
  widened by the margin (n, K) (NaN where the bracket is not finite), the secular test's
  float32 (α₁, α₂, q) stacked (n, 3, K) (NaN there too), its rows' visible range
  r and count (n,) (Lemma 2's bound: :func:`lemma2`), the largest λ₀/T per T (K,) and the
  largest |visible logit| of its rows (:func:`visible_abs_max`). The first ``n`` of the
  N = C·B positions are rows; the rest is padding (repeats of the first row)."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  dtype = jnp.dtype(dtype_name)
  delta = margin(width)

  def fn(rows, mask, idx, T):
    def one(ix):
      l, m = _gather(rows, mask, ix, width, dtype)
      return _screen_chunk(l, m, T, dtype=dtype), visible_abs_max(l, m)

    (lo, hi, abq, (r, cnt)), big = lax.map(one, idx.reshape(-1, chunk))
    lo, hi, r, cnt = (o.reshape((-1,) + o.shape[2:]) for o in (lo, hi, r, cnt))
    abq = tuple(o.reshape((-1,) + o.shape[2:]) for o in abq)
    lo_n = (lo.astype(dtype) * (1 - delta) - ABS_SLACK) / T  # (N, K), norm units
    hi_n = (hi.astype(dtype) * (1 + delta) + ABS_SLACK) / T
    live = (jnp.arange(lo.shape[0]) < n)[:, None]
    valid = jnp.isfinite(lo_n) & jnp.isfinite(hi_n)
    max_lo = jnp.max(jnp.where(live & valid, lo_n, -jnp.inf), axis=0)  # (K,)
    nan = jnp.asarray(jnp.nan, dtype)
    abq = jnp.stack([jnp.where(valid, o, jnp.nan) for o in abq], axis=1)  # (N, 3, K) f32
    # the n rows' values only (the padding cut here, not by a dispatch per output per group)
    return (jnp.where(valid, lo_n, nan)[:n], jnp.where(valid, hi_n, nan)[:n], abq[:n], r[:n],
            cnt[:n], max_lo, jnp.max(big))

  return jax.jit(fn)


@functools.lru_cache(maxsize=None)
def _decide_fn(n: int, rtol: float, width: int):
  """jit: the decisions of the bracket and the secular test (:func:`secular_decide`). A pair is
  left to Newton (``und``) unless, for each threshold (Lemma 2's only where finite), its
  widened bracket is on one side of it or the secular test decides it, and its upper end is
  below the largest lower end of its T (then it cannot be the max). Also returns Lemma 2's
  bound (N, K), from the rows' range r and count (N,)."""
  import jax
  import jax.numpy as jnp

  delta = margin(width)

  def fn(lo_n, hi_n, abq, r, count, max_lo, T, paper, tight):
    lem = lemma2(r, count, T)  # (N, K)
    valid = jnp.isfinite(lo_n) & jnp.isfinite(hi_n)
    thr_p, thr_t = paper * (1 + rtol), tight * (1 + rtol)  # (K,)
    thr_l = lem * (1 + rtol)  # (N, K)
    fin = jnp.isfinite(lem)
    live = (jnp.arange(lo_n.shape[0]) < n)[:, None]
    a, b, q = (abq[:, i].astype(T.dtype) for i in range(3))  # (N, K) each

    def side(thr):  # (below, above): λ/T ≤ thr / > thr decided
      s_below, s_above = secular_decide(a, b, q, thr * T, delta)
      return (valid & ((hi_n <= thr) | s_below)), (valid & ((lo_n > thr) | s_above))

    (bp, ap), (bt, at), (bl, al) = side(thr_p), side(thr_t), side(thr_l)
    und = ~((bp | ap) & (bt | at) & (bl | al | ~fin) & (hi_n < max_lo)) & live  # (N, K)
    keep = live & ~und
    cnt = lambda x: jnp.sum(x & keep, axis=0, dtype=jnp.int32)
    counts = {"n_exceed_paper": cnt(ap), "n_exceed_tight": cnt(at),
              "n_exceed_lemma2": cnt(fin & al),
              "lemma2_finite": jnp.sum(fin & live, axis=0, dtype=jnp.int32),
              "newton": jnp.sum(und, axis=0, dtype=jnp.int32)}
    return und, counts, jnp.sum(und), lem

  return jax.jit(fn)


class Screen:
  """The all-rows decisions of a run: :meth:`stats` for any number of temperatures, one pass
  over the rows (the bracket of every pair; the rows of the pairs it may leave open are kept,
  up to :data:`KEEP_BYTES`, for Newton; past that, a second pass reads them).
  The task calls it once for every temperature its memory allows (``task.SCREEN_PAIR_BYTES``:
  the 26 of the paper grid at SmolLM2 paper settings), so the rows are read, cut to their
  span and their per-row facts computed once, not once per batch of temperatures; each pair
  keeps 28 bytes on the device between the passes (its widened λ₀/T, λ¹/T in float64, the
  secular test's float32 α₁, α₂, q) and
  Lemma 2's bound is recomputed at decision time from the rows' range and count.

  rows (R, L) any float dtype (the model's float32 rows stay float32; they are cast to
  ``dtype`` chunk by chunk), mask (R, L) bool; or ``rows`` a
  :class:`limits.gradient.blocks.RowBlocks` and ``mask`` None (a model's rows, one
  (window, layer) block at a time: memory is one block plus a few numbers per (row, T)).
  ``dtype`` is the run's dtype (Newton, Lemma 2 and the thresholds); ``rtol`` the relative
  tolerance of every comparison. Blocks give the same numbers as one (R, L) array: every
  per-row value is computed by the same jitted code on the same (chunk, w) slices, the
  maxima and counts do not depend on the order, and Newton's chunks are the same pairs.
  ``screen_elems``: the bracket pass's chunk size (:func:`screen_chunk`); ``block_elems``:
  Newton's.
  After :meth:`stats`, ``big`` is the largest |visible logit| its pass read (NaN entries
  left out; 0 when nothing is visible), for the task's ``check_temperature_range``.
  """

  big = math.nan  # set by each pass over the rows (_bracket_pass)

  def __init__(self, rows, mask, dtype, rtol: float, *, block_elems: int = BLOCK_ELEMS,
               screen_elems: int = SCREEN_ELEMS,
               max_iters: int = 60):
    from limits.gradient.blocks import RowBlocks

    self.dtype = np.dtype(dtype)
    self.rtol = float(rtol)
    self.block_elems = int(block_elems)
    self.screen_elems = int(screen_elems)
    self.max_iters = int(max_iters)
    self.source = rows if isinstance(rows, RowBlocks) else RowBlocks.from_arrays(rows, mask)

  def _padded(self, idx, chunk):
    import jax

    pad = (-idx.size) % chunk
    return jax.device_put(np.concatenate([idx, np.full(pad, idx[0] if idx.size else 0,
                                                        idx.dtype)]))

  def _bracket_pass(self, Td, K, pd, td, tap=None):
    """Pass 1: per span group w, its parts (one per block, in row order): rows (global,
    ascending), the widened bracket (n, K), the secular test's inputs and the row facts of
    Lemma 2's bound (n,) on the device; the group's first row; the largest
    λ₀/T per T over every row; and ``kept``: per w, (global rows (M,), rows, mask (M, w)) the
    rows that may need Newton, or None when they exceed :data:`KEEP_BYTES` (then Newton reads
    the rows in a pass of their own).

    A row is kept when one of its pairs is open by :func:`_decide_fn` with the largest λ₀/T
    so far (this group's included) in place of the final one: that maximum only grows, so
    every pair open at the end was open then, and the kept rows hold every row Newton needs.
    ``tap(start, rows, mask)``, if given, sees every block of the pass (the task gathers its
    exact and sampled rows there: one pass over the records, not two).
    """
    import jax
    import jax.numpy as jnp

    dt = self.dtype
    parts: dict = {}  # w -> [(rows (n,), lo_n, hi_n (n, K), abq (n, 3, K), r, count (n,))]
    first: dict = {}
    kept: dict | None = {}  # w -> [(global rows (m,), rows (m, w) f32, mask (m, w))]
    kept_bytes = 0
    max_lo = np.full(K, -np.inf, dt)
    big = 0.0  # the largest |visible logit| (the Gatherer's start value)
    for start, rows, mask in self.source.blocks():
      if tap is not None:
        tap(start, rows, mask)
      host_mask = np.asarray(mask, bool)  # blocks are host arrays (RowBlocks)
      rows_d, mask_d = jax.device_put((rows, host_mask))
      for idx, w in sensitivity.span_groups(host_mask, step=sensitivity.SPAN_STEP):
        chunk = screen_chunk(K, w, self.screen_elems)
        out = _screen_group_fn(w, chunk, idx.size, dt.name)(rows_d, mask_d,
                                                            self._padded(idx, chunk), Td)
        part = out[:5]  # each (idx.size, ...)
        parts.setdefault(w, []).append((start + idx,) + part)
        group_lo, group_big = jax.device_get((out[5], out[6]))
        max_lo = np.maximum(max_lo, np.asarray(group_lo))
        big = max(big, float(group_big))
        if w not in first:
          first[w] = (np.asarray(rows[idx[0], :w]), host_mask[idx[0], :w])
        if kept is not None:
          und = _decide_fn(idx.size, self.rtol, w)(*part, jax.device_put(max_lo), Td, pd, td)[0]
          sel = idx[np.asarray(jax.device_get(jnp.any(und, axis=1)))]
          kept_bytes += sel.size * w * 5
          if kept_bytes > KEEP_BYTES:
            kept = None
          elif sel.size:
            kept.setdefault(w, []).append((start + sel, np.asarray(rows[sel, :w]),
                                           host_mask[sel, :w]))
      del rows_d, mask_d
    self.big = big
    groups = {w: parts[w] for w in sorted(parts)}  # not concatenated: half the peak memory
    if kept is not None:
      kept = {w: tuple(np.concatenate([q[i] for q in v]) for i in range(3))
              for w, v in kept.items()}
    return groups, first, max_lo, kept

  def stats(self, temperatures, tap=None) -> dict:
    """Per temperature (K,) NumPy: ``n_exceed_paper``, ``n_exceed_tight``,
    ``n_exceed_lemma2`` (where Lemma 2's bound is finite), ``lemma2_finite``, ``nonfinite``
    (Newton norms that are not finite), ``max_norm`` (max ‖J‖₂ over rows), ``rows``,
    ``newton`` (pairs Newton decided; the rest were decided by the bracket or the secular
    test).

    Device work only, in jitted functions: the rows go in a block at a time, (K,) counts (and
    the open pairs, to gather their rows for Newton) come out. ``tap(start, rows, mask)`` sees
    every block of the first pass (:meth:`_bracket_pass`).
    """
    import jax

    from limits import bounds

    dt = self.dtype
    Ts = np.asarray(temperatures, dt)
    K = Ts.size
    with np.errstate(divide="ignore"):
      paper = np.minimum(1 / (4 * Ts), dt.type(bounds.SQRT2))  # Corollary 3 as printed
      tight = 1 / (2 * Ts)
    Td, pd, td = jax.device_put((Ts, paper, tight))
    groups, first, max_lo, kept = self._bracket_pass(Td, K, pd, td, tap)
    max_lo_d = jax.device_put(max_lo)
    self.total = {k: np.zeros(K, np.int64) for k in
                  ("n_exceed_paper", "n_exceed_tight", "n_exceed_lemma2", "lemma2_finite",
                   "nonfinite", "newton")}
    self.max_norm = np.full(K, -np.inf, dt)
    self.nan = np.zeros(K, bool)
    open_pairs = []
    for w, parts in groups.items():
      found = []  # per part: (rows, T index, Lemma 2 bound) of its open pairs, (row, T) order
      for rows, lo_n, hi_n, abq, r, cnt in parts:
        und, counts, n_und, lem = _decide_fn(rows.size, self.rtol, w)(lo_n, hi_n, abq, r, cnt,
                                                                      max_lo_d, Td, pd, td)
        counts, n_und_h = jax.device_get((counts, n_und))
        for key, v in counts.items():
          self.total[key] += v
        if int(n_und_h) == 0:
          continue
        flat = np.flatnonzero(np.asarray(jax.device_get(und)))  # (row, T) order
        pos, k = flat // K, (flat % K).astype(np.int32)
        found.append((rows[pos], k, np.asarray(jax.device_get(lem))[pos, k]))
      if found:
        open_pairs.append(Pairs(self, w, *(np.concatenate([f[i] for f in found])
                                            for i in range(3)), first[w], (Td, pd, td)))
    if open_pairs and kept is not None:  # the open pairs' rows, kept by pass 1
      for pairs in open_pairs:
        pairs.take_kept(*kept[pairs.w])
        pairs.finish()
    elif open_pairs:  # pass 2: the open pairs' rows, block by block
      for start, rows, mask in self.source.blocks():
        for pairs in open_pairs:
          pairs.take(start, rows, mask)
      for pairs in open_pairs:
        pairs.finish()
    total = self.total
    total["rows"] = np.full(K, sum(p[0].size for g in groups.values() for p in g), np.int64)
    total["max_norm"] = np.where(self.nan, np.nan, self.max_norm)
    return total
