"""Newton on the gradient screen's open (row, T) pairs: the pairs the bracket and the secular
test could not decide (:mod:`limits.gradient.screen`), gathered block by block and sent to
Newton on the secular equation (``sensitivity._softmax_norm_newton``, Corollary 3's exact norm)
in fixed-size jitted calls; their counts, maxima and NaN flags are added to the screen's totals.
"""

from __future__ import annotations

import functools

import numpy as np

from limits.gradient import sensitivity


NEWTON_CHUNKS = 8  # Newton's chunks of pairs per jitted call (a power of two)


def _pow2(n: int) -> int:
  return 1 << max(0, int(n - 1).bit_length())


@functools.lru_cache(maxsize=None)
def _newton_pairs_fn(width: int, chunk: int, size: int, dtype_name: str, max_iters: int,
                     rtol: float):
  """jit: Newton's exact norm λ/T of ``size`` (row, T) pairs, in chunks of ``chunk`` pairs
  (one ``lax.map`` step each; the while loop of a chunk runs until its slowest pair converged,
  so the chunks are those of the group's pairs in (row, T) order, whatever the call);
  l, m (size, w) the pairs' rows cut to w keys, k (size,) their temperature index, lem (size,)
  Lemma 2's bound, ok (size,) False for padding. Returns their counts per T, max norm per T
  and whether a NaN norm occurred per T."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  from limits import normalizers

  dtype = jnp.dtype(dtype_name)

  def fn(l, m, k, lem, ok, T, paper, tight):
    K = T.shape[0]

    def one(args):
      lb, mb, kk = args
      t = T[kk]  # (P,)
      a = normalizers.softmax(lb.astype(dtype), t[:, None], mb)  # (P, w)
      return sensitivity._softmax_norm_newton(a, max_iters) / t

    norm = lax.map(one, (l.reshape(-1, chunk, width), m.reshape(-1, chunk, width),
                         k.reshape(-1, chunk))).reshape(-1)
    seg = lambda x: jax.ops.segment_sum((x & ok).astype(jnp.int32), k, num_segments=K)
    counts = {"n_exceed_paper": seg(norm > (paper * (1 + rtol))[k]),
              "n_exceed_tight": seg(norm > (tight * (1 + rtol))[k]),
              "n_exceed_lemma2": seg(jnp.isfinite(lem) & (norm > lem * (1 + rtol))),
              "nonfinite": seg(~jnp.isfinite(norm))}
    max_k = jax.ops.segment_max(jnp.where(ok & ~jnp.isnan(norm), norm, -jnp.inf), k,
                                num_segments=K)
    nan_k = seg(jnp.isnan(norm)) > 0
    return counts, max_k, nan_k

  return jax.jit(fn)


class Pairs:
  """One span group's undecided (row, T) pairs, in (row, T) order, gathered block by block
  and sent to Newton ``size`` at a time; the last call (a power of two of chunks) is padded
  with the group's first row at T index 0, the padding of the all-rows path (``ok`` False)."""

  def __init__(self, screen, width, rows, k, lem, first, consts):
    self.s, self.w = screen, width
    self.rows, self.k, self.lem = rows, k, lem  # (P,) global row, T index, Lemma 2 bound
    self.first = first  # the group's first row and mask, cut to w
    self.consts = consts  # (T, paper, tight) on the device
    self.chunk = max(1, screen.block_elems // width)
    self.size = self.chunk * NEWTON_CHUNKS
    self.done = 0  # pairs sent so far
    self.buf: list = []  # [(l (p, w), m (p, w))] gathered, not yet sent
    self.n_buf = 0

  def take(self, start, rows, mask):
    """Gathers the pairs whose rows are in the block ``rows[0]`` = row ``start``."""
    b = int(np.searchsorted(self.rows, start + rows.shape[0]))
    self._feed(b, lambda sel: (rows[sel - start, :self.w], mask[sel - start, :self.w]))

  def take_kept(self, ids, rows, mask):
    """Gathers every pair from rows kept by the bracket pass: ``ids`` (M,) ascending global
    rows (a superset of the pairs' rows), ``rows``, ``mask`` (M, w) those rows cut to w."""
    pos = np.searchsorted(ids, self.rows)  # (P,)
    assert pos.size == 0 or (pos.max() < ids.size and np.array_equal(ids[pos], self.rows))
    self._feed(self.rows.size, lambda sel: (rows[np.searchsorted(ids, sel)],
                                            mask[np.searchsorted(ids, sel)]))

  def _feed(self, b, get):
    """Buffers the pairs done + buffered .. b (``get(global rows)`` → their (l, m) cut to w)
    and sends every full ``size`` to Newton: the same calls, in the same order, whichever
    way the rows come."""
    a = self.done + self.n_buf
    for lo in range(a, b, self.size):
      hi = min(b, lo + self.size)
      l, m = get(self.rows[lo:hi])
      self.buf.append((np.asarray(l), np.asarray(m)))
      self.n_buf += hi - lo
      while self.n_buf >= self.size:
        self._send(self.size)

  def finish(self):
    while self.n_buf:
      self._send(min(self.n_buf, self.size))

  def _send(self, n):
    """Newton on the next n buffered pairs, padded to a power-of-two number of chunks."""
    import jax

    l = np.concatenate([b[0] for b in self.buf])
    m = np.concatenate([b[1] for b in self.buf])
    rest_l, rest_m = l[n:], m[n:]
    self.buf = [(rest_l, rest_m)] if len(rest_l) else []
    self.n_buf = len(rest_l)
    size = self.chunk * _pow2(-(-n // self.chunk))  # <= self.size
    pad = size - n
    fl, fm = self.first
    l = np.concatenate([l[:n], np.broadcast_to(fl, (pad, self.w))])
    m = np.concatenate([m[:n], np.broadcast_to(fm, (pad, self.w))])
    sl = slice(self.done, self.done + n)
    k = np.concatenate([self.k[sl], np.zeros(pad, self.k.dtype)])
    lem = np.concatenate([self.lem[sl], np.full(pad, self.lem[0])])
    ok = np.arange(size) < n
    self.done += n
    fn = _newton_pairs_fn(self.w, self.chunk, size, self.s.dtype.name, self.s.max_iters,
                          self.s.rtol)
    counts, max_k, nan_k = jax.device_get(fn(*jax.device_put((l, m, k, lem, ok)),
                                             *self.consts))
    for key, v in counts.items():
      self.s.total[key] += v
    self.s.max_norm = np.maximum(self.s.max_norm, max_k)
    self.s.nan |= nan_k
