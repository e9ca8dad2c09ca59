"""Algorithm 3's ascending scan on one L, at the cost of its arithmetic (issue 27 item 5).

The scan asks, batch after batch of N, for the per-head token averages of d̃ (both AMBIG-1
forms), of the reconstructed E and of the printed E with x̄ = Σ_j α_j x_j
(:mod:`limits.distance.printed`; AMBIG-18). What does not depend on N is computed once per L
and kept between batches (:class:`ScanSamples`): each layer's records (weights, vectors) on the
device and each row's selection order (:func:`limits.distance.kernels.layer_top`, the one tie
rule, for every N up to the largest asked so far: grown when a batch asks more). A batch is one :func:`limits.distance.kernels.layer_kernel`
call per layer (``lean``: only the quantities above; ``top``: the kept order), dispatched
without waiting, and one transfer to the host per batch. Same values as the hook path
(``ModelEvaluator.head_stats`` with a ``PrintedExpectations`` hook): tests/test_distance_scan.py.
The layer is cut into causal query blocks from L = 512 already
(:func:`limits.distance.search.search_blocks`; the kernel's default, one block below 1,024,
computes the full L × L square): SmolLM2, one layer, a batch of 8 N, CPU seconds 0.21 -> 0.11
at L = 512 (more compile: 4 copies of the per-N body).

Where the kept records do not fit in ``cache_bytes`` (the evaluator's, 3 GB by default),
each batch reads the records again (from the records store or a forward), one layer at a time
(a layer's records leave the device before the next layer's are read: the peak is one layer's,
not the model's), and reuses the kept selection order (int32, (kmax + 1)/L of the weights'
size) when that fits, else selects again: same values, more time.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np

from limits.distance import kernels
from limits.distance.search import search_blocks
from limits.errors import LimitsError


def scan_n_max(L: int, n_max: int | None = None) -> int:
  """The scan's largest N at length L: ``n_max`` when given, else ⌈L/4⌉ (twice the upper edge
  0.12 of the claim's band N_crit/L ∈ [0.03, 0.12], docs/claims.md fig2c-critical-n); at most
  L − 1 (a query needs a non-selected key)."""
  if n_max is not None and int(n_max) < 1:
    raise LimitsError(f"scan N_max={n_max} must be a positive integer")
  n = math.ceil(L / 4) if n_max is None else int(n_max)
  return max(1, min(n, L - 1))


# The smallest N the kept order covers: lax.top_k's CPU time is mostly fixed at small k
# (SmolLM2, L = 1,024, one layer: 0.13 s of CPU for the top 33 keys, 0.49 s for the top 257,
# scratch measurement in one process), and the SmolLM2 scan stops below N = 32 at L = 1,024
# (first pass near N = 8-13), so one selection per L usually serves it.
SCAN_TOP_MIN = 32


class ScanSamples:
  """Per-head token averages for a list of Ns, the N-independent work done once per L.

  ``evaluator``: a :class:`limits.distance.model.ModelEvaluator` (its layers, inclusion and
  ``ks_dtype``); ``tokens (W, L)``; ``n_max``: the largest N any call will ask (the selection
  order is kept for N <= n_max). Calling with ``ns`` (each in [1, n_max]) returns
  ``{"d_sum", "d_norm", "expected", "expected_printed_output": (n_layer·H, K)}``, averaged
  over the windows as the hook path averages them.
  """

  def __init__(self, evaluator, tokens, n_max: int, *, cache_bytes: int | None = None,
               pad_to: int = 8):
    self.ev = evaluator
    self.tokens = np.asarray(tokens, np.int32)  # (W, L) host; one window placed per read
    W, L = self.tokens.shape
    if not 1 <= int(n_max) <= L - 1:
      raise LimitsError(f"scan N_max={n_max} must be in [1, L - 1 = {L - 1}]")
    self.L, self.n_max = L, int(n_max)
    self.kmax = kernels.top_k_size(self.n_max, L)
    self.blocks = search_blocks(L)  # 4 causal blocks from L = 512, as the search
    self.dtype = np.dtype(evaluator.ks_dtype)
    c = evaluator.config
    d = c.d_head if evaluator.vectors in ("value", "key") else c.n_embd
    k = min(self.kmax + 1, L)
    top_bytes = W * c.n_layer * c.n_head * L * k * 4
    per_layer = c.n_head * L * (L * 4 + d * self.dtype.itemsize)
    budget = evaluator.cache_bytes if cache_bytes is None else cache_bytes
    self._keep = W * c.n_layer * per_layer + top_bytes <= budget
    # Records too large to keep: the selection order alone is kept when it fits (the records
    # are read again per batch, the rows not selected again).
    self._keep_top = top_bytes <= budget
    self._cache = None
    self._tops: dict[int, list] = {}
    # The kept order covers the top k_top + 1 keys, k_top = top_k_size of the largest N asked
    # so far (grown, and the order selected again, when a batch asks more): the scan usually
    # stops far below N_max, and lax.top_k's time grows with k (issue 27: 0.35 s of CPU per
    # SmolLM2 layer at L = 1,024 for N_max = 256). Padded to kmax + 1 columns (layer_top's
    # ``width``): the layer kernel is compiled once per L whatever k_top.
    self._k_top = 0
    self.pad_to = max(1, int(pad_to))  # calls padded to a multiple of it: one compile per L

  def _layers_of(self, w: int):
    """Yields (weights (G, L, L), x (G, L, d) or (L, d) shared by the heads, top, window) of
    window w's layers, one layer at a time, on the device (read or computed as they are asked
    for: nothing of the next layer exists before the caller moves on)."""
    tops = self._tops.get(w)
    new_tops = []
    tok = jax.device_put(self.tokens[w:w + 1])  # (1, L)
    for i, (wts, x, win) in enumerate(self.ev._layers(tok, self.dtype, cast_weights=False)):
      wj, xj, _, _ = kernels._device_arrays(wts, x, self.dtype)
      top = tops[i] if tops else self._top(wj, win)
      if self._keep_top and not self._keep and not tops:
        new_tops.append(top)
      yield wj, xj, top, win
    if new_tops:
      self._tops[w] = new_tops

  def _top(self, wj, win):
    """The selection order of one layer's rows for every N <= k_top, padded to kmax + 1."""
    ns = jax.device_put(np.arange(1, self._k_top + 1, dtype=np.int32))  # explicit
    return kernels.layer_top(wj, ns, kmax=self._k_top, blocks=self.blocks, window=win,
                             width=self.kmax)

  def _grow_top(self, n: int) -> None:
    """Makes the kept order cover N <= n: a larger k_top, every kept order selected again."""
    need = min(kernels.top_k_size(max(n, SCAN_TOP_MIN), self.L), self.kmax)
    if need <= self._k_top:
      return
    self._k_top = need
    self._tops = {}
    if self._cache is not None:
      self._cache = [[(wj, xj, self._top(wj, win), win) for wj, xj, _, win in layers]
                     for layers in self._cache]

  def _windows(self):
    """Per window, an iterable of its layers: the kept lists, or (records not kept) a
    generator that reads one layer at a time."""
    if self._cache is not None:
      yield from self._cache
      return
    kept = []
    for w in range(self.tokens.shape[0]):
      if self._keep:
        kept.append(list(self._layers_of(w)))
        yield kept[-1]
      else:
        yield self._layers_of(w)
    if self._keep:
      self._cache = kept

  def __call__(self, ns: Sequence[int]) -> dict[str, np.ndarray]:
    ns = [int(n) for n in ns]
    if not ns or min(ns) < 1 or max(ns) > self.n_max:
      raise LimitsError(f"scan Ns {ns} must lie in [1, {self.n_max}]")
    K = len(ns)
    self._grow_top(max(ns))
    nsj = jax.device_put(np.asarray(ns + [ns[-1]] * (-K % self.pad_to), np.int32))  # explicit
    per_window = []
    for layers in self._windows():
      outs = []
      for wj, xj, top, win in layers:
        outs.append(kernels.layer_kernel(wj, xj, nsj, kmax=self.kmax, inclusion=self.ev.inclusion,
                                         bound=False, blocks=self.blocks, printed=True,
                                         dtype=self.dtype.name, window=win, top=top, lean=True))
        if not self._keep:  # records read again: one layer's on the device at a time
          jax.block_until_ready(outs[-1])
        del wj, xj, top  # this loop's references (kept records live on in the cache)
      per_window.append(outs)
    got = jax.device_get(per_window)  # one transfer per batch
    sums = {"count": [], "d_sum": [], "d_norm": [], "expected": [],
            "expected_printed_output": []}
    for outs in got:
      st = [o[0] for o in outs]
      for name in ("count", "d_sum", "d_norm", "expected"):
        sums[name].append(np.concatenate([np.asarray(getattr(s, name)) for s in st], axis=0))
      sums["expected_printed_output"].append(
          np.concatenate([np.asarray(o[1][..., 0]) for o in outs], axis=0))
    cnt = [c.astype(np.float64) for c in sums.pop("count")]
    means = {}
    for name, parts in sums.items():  # per window token averages, then the mean over windows
      per = [np.where(c > 0, v / np.maximum(c, 1), np.nan) for c, v in zip(cnt, parts)]
      means[name] = (sum(per) / len(per))[:, :K]
    return means
