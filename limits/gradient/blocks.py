"""The gradient step's logit rows, one block of rows at a time (peak memory: one block).

The step reads every row several times (the scan for the exact rows, the g(T, ε) sample and
the largest logit; per batch of temperatures the screen's bracket and then Newton on the pairs
it leaves open), but never needs the whole (R, L) matrix at once: with a model, R = windows ·
layers · heads · L (4 windows of SmolLM2 at L = 1,024: 1.1M rows, 4.5 GB in float32; 18 GB at
L = 2,048). :class:`RowBlocks` yields consecutive row blocks ``(start, rows (n, L), mask
(n, L))`` in row order:

- from arrays (synthetic rows, tests): one block, the arrays themselves;
- from a model: one block per (window, layer), the H·L rows of ``limits.records.sources
  .iter_logit_blocks`` with their mask built from the layer's (L, L) pattern (causal, and the
  sliding window of a local layer), never an (R, L) mask. When all rows fit in
  ``memory_bytes`` they are kept after the first pass; otherwise every pass reads them again
  from the records store (``limits.records``: the forward once, then memory-mapped reads; a
  temporary store when ``$LIMITS_RECORDS_DIR`` is unset), so memory stays one layer's rows.

The records are the forward's own float32 output, so every pass yields the same bits.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

MEMORY_BYTES = 1 << 30  # model rows up to this size stay in memory after the first pass


class RowBlocks:
  """Rows (R, L) and their mask, as consecutive blocks; :meth:`blocks` starts a pass.

  Attributes: ``n_rows`` (R), ``length`` (L), ``dtype`` (the rows' dtype). A context manager:
  leaving it removes a temporary records store.
  """

  def __init__(self, n_rows: int, length: int, dtype, passes, close=None):
    self.n_rows, self.length, self.dtype = int(n_rows), int(length), np.dtype(dtype)
    self._passes = passes  # () -> iterator of (start, rows, mask)
    self._close = close

  @classmethod
  def from_arrays(cls, rows, mask) -> "RowBlocks":
    """One block: rows (R, L), mask (R, L) bool (JAX arrays are copied to the host once)."""
    import jax

    rows, mask = (np.asarray(jax.device_get(a)) for a in (rows, mask))
    return cls(rows.shape[0], rows.shape[1], rows.dtype,
               lambda: iter([(0, rows, mask.astype(bool, copy=False))]))

  @classmethod
  def from_model(cls, model, tokens, layers=None, *,
                 memory_bytes: int | None = None) -> "RowBlocks":
    """The rows of ``sources.model_logit_rows`` for the windows ``tokens`` (n, L), one
    (window, layer) block of H·L rows at a time, in that function's row order; kept after
    the first pass when they fit in ``memory_bytes`` (None: :data:`MEMORY_BYTES`)."""
    from limits import records
    from limits.records import sources

    meta = sources.logit_row_meta(model, tokens, layers)
    kept, length = meta["layers"], tokens.shape[1]
    n_rows = meta["query"].size
    stack = contextlib.ExitStack()
    kept_blocks: list = []
    keep = n_rows * length * 4 <= (MEMORY_BYTES if memory_bytes is None else memory_bytes)
    store = None if keep else stack.enter_context(records.session_store())

    def passes():
      if kept_blocks:
        for start, block, vis in kept_blocks:
          yield start, block, _head_mask(vis, block.shape[0])
        return
      for start, block, vis in sources.iter_logit_blocks(model, tokens, kept, store=store,
                                                         zero_masked=False):
        if keep:  # a copy: the block is a view of the layer's record (its whole array)
          kept_blocks.append((start, np.array(block), vis))
        yield start, block, _head_mask(vis, block.shape[0])

    out = cls(n_rows, length, np.float32, passes, stack.close)
    out.meta = meta
    return out

  def blocks(self):
    """A new pass: ``(start, rows (n, L), mask (n, L))`` NumPy, for consecutive row ranges.
    A model's rows are its raw scores, read-only, with the masked entries as the forward left
    them: every user masks (the gathered rows of :meth:`gather` have them 0)."""
    return self._passes()

  def gather(self, *indices):
    """One pass: the largest |visible logit| and, per sorted index array (X,), its rows
    (X, L) (masked entries 0) and mask (X, L) (NumPy, the rows' dtype). :meth:`gatherer`
    does the same inside another pass (the screen's)."""
    g = self.gatherer(*indices)
    for start, rows, mask in self.blocks():
      g.add(start, rows, mask)
    return g.result()

  def gatherer(self, *indices, big: bool = True) -> "Gatherer":
    """A :class:`Gatherer` of ``indices`` for these rows: feed it every block of one pass.
    ``big=False``: it does not take the largest |visible entry| (the pass that feeds it takes
    it: the gradient screen's, from its row facts on the device); its ``big`` stays NaN."""
    return Gatherer(self.n_rows, self.length, self.dtype, indices, big=big)

  def close(self) -> None:
    if self._close is not None:
      self._close()
      self._close = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


class Gatherer:
  """What :meth:`RowBlocks.gather` collects, block by block: ``add(start, rows, mask)`` for
  each block of a pass (in any pass over the rows, e.g. the gradient screen's, so the step
  reads its rows once), then :meth:`result` ``(big, [(rows (X, L), mask (X, L)), ...])``;
  ``big`` NaN when built with ``big=False``."""

  def __init__(self, n_rows, length, dtype, indices, big: bool = True):
    self.n_rows = int(n_rows)
    self.track_big = bool(big)
    self.big = 0.0 if big else math.nan
    self.indices = [np.asarray(ix) for ix in indices]
    self.out = [(np.zeros((len(ix), length), dtype), np.zeros((len(ix), length), bool))
                for ix in self.indices]
    self.seen = 0  # rows fed so far: every row once, in order, before result()

  def add(self, start, rows, mask) -> None:
    if start != self.seen:
      raise ValueError(f"blocks out of order: row {start} after {self.seen} rows")
    stop = start + rows.shape[0]
    # row chunks of 8,192 (a NaN entry is left out alone: _chunk_big)
    for lo in range(0, rows.shape[0] if self.track_big else 0, 8192):
      self.big = max(self.big, _chunk_big(rows[lo:lo + 8192], mask[lo:lo + 8192]))
    for ix, (r, m) in zip(self.indices, self.out):
      a, b = np.searchsorted(ix, start), np.searchsorted(ix, stop)
      r[a:b], m[a:b] = rows[ix[a:b] - start], mask[ix[a:b] - start]
      r[a:b][~m[a:b]] = 0  # masked entries 0, whatever the block holds there
    self.seen = stop

  def result(self):
    if self.seen != self.n_rows:
      raise ValueError(f"gathered {self.seen} of {self.n_rows} rows: a pass was cut short")
    return self.big, self.out


def _chunk_big(rows, mask) -> float:
  """The largest |visible entry| of a chunk of rows as a float, from its visible maximum and
  minimum (no (n, L) temporary; half the time of |where(mask, rows, 0)|.max()); NaN entries
  are left out one by one, as the gradient screen's device rule does
  (``screen.visible_abs_max``): only a chunk whose maximum comes out NaN pays a second pass
  with them masked (until the twenty-ninth session a NaN skipped its whole chunk). −inf when
  nothing is visible (the previous 0 changed nothing either: ``big`` starts at 0)."""
  hi = np.max(rows, where=mask, initial=-np.inf)
  lo = np.min(rows, where=mask, initial=np.inf)
  big = float(np.maximum(hi, -lo))
  if math.isnan(big):  # a visible NaN: the other entries' maximum, without it
    ok = mask & ~np.isnan(rows)
    hi = np.max(rows, where=ok, initial=-np.inf)
    lo = np.min(rows, where=ok, initial=np.inf)
    big = float(np.maximum(hi, -lo))
  return big


def _head_mask(vis, n_rows):
  """(n_rows, L) bool: the layer's (L, L) mask repeated for each head of the block."""
  length = vis.shape[0]
  return np.ascontiguousarray(np.broadcast_to(vis, (n_rows // length, length, length))).reshape(
      n_rows, length)
