"""Model records → per-head Theorem 1 statistics (Algorithms 1-3 on a model).

Records are duck-typed: ``.weights`` (B, H, L, L), ``.v``/``.k`` (B, H, L, d_head) and ``.x``
(B, L, D), as ``limits.models.iter_layers`` yields them; the models package is imported only
here, lazily. :class:`ModelEvaluator` streams a model layer by layer through the fast path
(:func:`limits.distance.kernels.layer_stats`); :func:`tabulate` and :func:`add_head_means` turn
its per-head sums into the CSV and summary rows of the ``distance`` experiment.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from limits.distance.kernels import layer_stats, layer_stats_printed, on_device
from limits.distance.search import search_stats
from limits.selection import sort_rows
from limits.distance.heads import SUMMED, HeadStats, combine, concat_heads, token_means
from limits.distance.rows import check_form, check_inclusion
from limits.distance.rowspace import row_space
from limits.errors import LimitsError
from limits import records
from limits.records.streaming import in_threads, one_behind

VECTORS = ("value", "key", "hidden", "embedding")


def record_vectors(rec, vectors: str, embeddings=None):
  """x_i for one layer record (AMBIG-7): value or key (B,H,L,d) per query head, the layer's
  normalised residual stream (hidden, the attention block's input) or wte (B,L,D)."""
  if vectors == "value":
    return rec.v
  if vectors == "key":
    return rec.k
  if vectors == "hidden":
    return rec.x
  if vectors == "embedding":
    return embeddings
  raise LimitsError(f"--vectors={vectors!r} is not one of {VECTORS}")


def record_fields(vectors: str) -> tuple[str, ...]:
  """The record fields a statistic on ``vectors`` reads (``limits.records.iter_layers``)."""
  return ("weights",) + {"value": ("v",), "key": ("k",), "hidden": ("x",)}.get(vectors, ())


def _token_embeddings(params, tok):
  """wte[token] (B, L, D) for ``--vectors=embedding`` (GPT-2 ``wte`` or Llama ``embed_tokens``)."""
  for name in ("wte", "embed_tokens"):
    if name in params:
      return params[name]["weight"][tok]
  raise LimitsError("--vectors=embedding: the model has no token-embedding table "
                    "(looked for 'wte' and 'embed_tokens')")


EVALUATOR = object()  # head_stats(avg_dtype=EVALUATOR): the evaluator's own avg_dtype


class PrintedExpectations:
  """A ``layer_hook`` for :meth:`ModelEvaluator.head_stats`: token-averaged printed E (both x̄
  readings) and reconstructed E with p = N/L per head, averaged over windows; ``means()`` ->
  ``{name: (n_layer·H, K)}``. :meth:`ModelEvaluator.head_stats` fills it from its own layer
  kernel (:func:`limits.distance.kernels.layer_stats_printed`: shared s, c and causal blocks) via
  :meth:`add`; called as a hook it computes them with ``limits.distance.printed.layer_expectation_means``
  (the reference path)."""

  def __init__(self, ns: Sequence[int]):
    self.ns = [int(n) for n in ns]
    self.parts: dict[int, list] = {}

  def add(self, window, means: dict) -> None:
    """One layer's token averages ``{name: (H, K)}`` for ``window``."""
    self.parts.setdefault(window, []).append(means)

  def __call__(self, window, weights, x):
    from limits.distance import printed

    xh = np.broadcast_to(x[:, None], weights.shape[:2] + x.shape[1:]) if x.ndim == 3 else x
    self.add(window, printed.layer_expectation_means(weights[0], xh[0], self.ns))

  def means(self) -> dict[str, np.ndarray]:
    per_window = [{k: np.concatenate([p[k] for p in parts], axis=0) for k in parts[0]}
                  for parts in self.parts.values()]
    return {k: sum(w[k] for w in per_window) / len(per_window) for k in per_window[0]}


class ModelEvaluator:
  """Streams a model (any family of ``limits.models``) layer by layer, reducing every head.

  One forward per window serves every N in a call. Each layer goes through the fast path
  :func:`layer_stats` (rows sorted once, per-N work as matrix products). ``dtype`` is the
  precision of :meth:`head_stats` (float64 by default: a bound is verified there);
  ``ks_dtype`` that of the KS-only calls (:meth:`ks_pvalues`, :meth:`critical_n`: float32 by
  default, only a decision and plotted values depend on them; tests/test_distance_fast.py
  shows both precisions give the same decisions on the embedded model). :meth:`critical_n`
  keeps every layer's weights, vectors and sorted rows between bisection probes when they fit
  in ``cache_bytes`` (one forward and one sort per row per L), else recomputes per probe.
  ``layer_source(tokens (1, L)) -> iterator of (layer, record)`` replaces the forward (e.g.
  ``limits.records.iter_layers``: one forward per window for every step and probe).
  ``params`` is the parameter pytree or a zero-argument callable returning it, called on first
  use (a step whose records are all on disk then never loads the weights: dequantizing
  SmolLM2's GGUF costs ~2-4 s per step).
  ``avg_dtype`` (None: ``dtype``; float32 in the steps): the precision of the passes of
  :meth:`head_stats` that only feed reported token averages (E, the printed E:
  :data:`limits.distance.kernels.AVERAGED`); what the bound's verification reads stays in
  ``dtype``.
  """

  def __init__(self, params, config, *, vectors: str = "value",
               inclusion: str = "n_over_l_minus_1", dtype=np.float64, ks_dtype=np.float32,
               cache_bytes: int = 3 << 30, layer_source=None, avg_dtype=None):
    if vectors not in VECTORS:
      raise LimitsError(f"--vectors={vectors!r} is not one of {VECTORS}")
    check_inclusion(inclusion)
    self._params, self.config = params, config
    self.vectors, self.inclusion = vectors, inclusion
    self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)
    self.ks_dtype = np.dtype(ks_dtype) if ks_dtype is not None else self.dtype
    self.cache_bytes = cache_bytes
    self.avg_dtype = None if avg_dtype is None else np.dtype(avg_dtype)
    self.layer_source = layer_source

  @property
  def params(self):
    """The model's parameters (a callable given at construction is called once, here)."""
    if callable(self._params):
      self._params = self._params()
    return self._params

  def _layers(self, tok, dtype, *, cast_weights: bool = True, host_weights: bool = False):
    """Yields (weights (1, H, L, L), x, window) for each layer: device arrays of ``dtype`` (the
    layer kernel reads them where they are: no host round trip) and the layer's sliding window
    (W > 0 in a local layer, else 0: the record's ``window``). ``cast_weights=False`` keeps the
    weights in the record's dtype (float32: the layer kernel selects on them exactly and casts
    after, :func:`limits.distance.kernels.layer_kernel`). ``host_weights``: float32 records read
    from the store stay NumPy arrays (the layer kernel then selects Algorithm 2's top keys on
    the host, :func:`limits.distance.host_select.host_top`, and places the weights itself)."""
    from limits import models

    emb = _token_embeddings(self.params, tok) if self.vectors == "embedding" else None
    layers = (models.iter_layers(self.params, tok, self.config) if self.layer_source is None
              else self.layer_source(tok))
    for _, rec in layers:
      x = on_device(record_vectors(rec, self.vectors, emb))
      if x.ndim == 3:  # a reading shared by every head (B, L, D): in its own span when L < D
        x = row_space(x)
      window = int(getattr(rec, "window", None) or 0)
      wts = rec.weights  # records read from the store are host arrays
      if not (host_weights and isinstance(wts, np.ndarray) and wts.dtype == np.float32):
        wts = on_device(wts)
      yield (wts.astype(dtype) if cast_weights else wts), x.astype(dtype), window
      del rec

  def _loop(self, L: int):
    """How a layer loop runs at window length L: two layers at once in worker threads
    (``records.streaming.in_threads``) when a layer's float32 weights (H, L, L) are at most
    ``records.READ_AHEAD_BYTES``, else one layer in flight (``one_behind``: SmolLM2 at
    L = 4,096 would hold one more 0.6 GB layer, and its float64 cast 1.2 GB more)."""
    return in_threads if int(self.config.n_head) * L * L * 4 <= records.READ_AHEAD_BYTES \
        else one_behind

  def head_stats(self, tokens, ns: Sequence[int], *, n_cap: int | None = None,
                 bound: bool = True, on_layer=None, dtype=None, layer_hook=None,
                 lean: bool = False, avg_dtype=EVALUATOR) -> HeadStats:
    """HeadStats (n_layer·H, K), summed over the windows ``tokens (W, L)``; layer-major heads.

    ``n_cap`` is accepted for compatibility (every N is exact, whatever the cap).
    ``layer_hook(window, weights (1, H, L, L), x)`` sees every layer's arrays of the same forward,
    so other per-layer statistics need no second pass; a :class:`PrintedExpectations` hook is
    filled from the layer kernel itself (no second pass over the L × L rows). ``lean``: the
    Jensen gap left 0 (the KS calls read only d̃ and E). ``avg_dtype``: the precision of the
    averaged-only passes for this call (default the evaluator's ``avg_dtype``; None: ``dtype``,
    e.g. the float64 recompute of :func:`limits.distance.task.ks_order_safe`'s guard).
    """
    dtype = np.dtype(dtype) if dtype is not None else self.dtype
    avg = self.avg_dtype if avg_dtype is EVALUATOR else (
        None if avg_dtype is None else np.dtype(avg_dtype))
    tokens = jnp.asarray(tokens, jnp.int32)
    ns = [int(n) for n in ns]
    folded = isinstance(layer_hook, PrintedExpectations) and layer_hook.ns == ns
    total = None

    def dispatch(w, layer):
      wts, x, win = layer
      if folded:
        pending = layer_stats_printed(wts, x, ns, inclusion=self.inclusion, bound=bound,
                                      dtype=dtype, window=win, avg_dtype=avg, wait=False)
      else:
        pending = layer_stats(wts, x, ns, inclusion=self.inclusion, bound=bound,
                              dtype=dtype, window=win, lean=lean,
                              avg_dtype=None if lean else avg, wait=False)  # KS: no
      if layer_hook is not None and not folded:
        layer_hook(w, wts.astype(dtype), x)
      return pending

    def read_back(w, layers, pending):
      # After the next layer's dispatch (kernels.Pending): host work overlaps the device's;
      # in layer order, on the caller's thread: the same sums in the same order.
      hs = pending.result()
      if folded:
        hs, means = hs
        layer_hook.add(w, {k: v[0] for k, v in means.items()})
      layers.append(jax.tree.map(lambda v: v[0], hs))  # (H, K)
      if on_layer is not None:
        on_layer()

    # Two layers computed at once, each dispatched and waited for in its own thread
    # (records.streaming.in_threads: from one thread XLA's CPU backend runs its calls one
    # after the other, and a layer's kernel with Algorithm 2's host top k leaves a core idle),
    # read back in layer order on this thread: the same sums in the same order (:meth:`_loop`:
    # one layer in flight past records.READ_AHEAD_BYTES). Not with a hook called in dispatch:
    # it may add up state in layer order.
    loop = self._loop(int(tokens.shape[1])) if layer_hook is None or folded else one_behind
    for w in range(tokens.shape[0]):
      layers = []
      loop(self._layers(tokens[w:w + 1], dtype, cast_weights=False, host_weights=True),
           functools.partial(dispatch, w), functools.partial(read_back, w, layers))
      st = concat_heads(layers)
      total = st if total is None else combine(total, st)
    return jax.tree.map(np.asarray, total)

  def _ks_from_stats(self, st, k_used, form):
    from limits import stats

    means = token_means(st)
    d = means["d_sum" if form == "sum" else "d_norm"]
    return [stats.ks_2samp(d[:, k], means["expected"][:, k]).pvalue for k in range(k_used)]

  def ks_pvalues(self, tokens, ns: Sequence[int], *, n_cap: int | None = None,
                 form: str = "sum", pad_to: int | None = None, cache=None):
    """KS p-values of per-head token-averaged d̃ vs E for each N (Algorithm 3's test)."""
    check_form(form)
    ns = [int(n) for n in ns]
    padded = ns + [ns[-1]] * max(0, (pad_to or len(ns)) - len(ns))  # fixed K: one compile
    if cache is None:  # records read (or computed) again, one layer at a time: a generator
      # per window, never a list (at L = 4,096 a SmolLM2 window's 30 layers are 18 GB)
      tokens = jnp.asarray(tokens, jnp.int32)
      cache = (((wts, x, None, win) for wts, x, win in self._layers(tokens[w:w + 1],
                                                                     self.ks_dtype))
               for w in range(tokens.shape[0]))
    return self._ks_from_stats(self._cached_stats(cache, padded, np.shape(tokens)[1]),
                               len(ns), form)

  def _build_cache(self, tokens):
    """[(window, [(weights, x, sorted rows, sliding window) per layer])] in ks_dtype, or None
    if too large."""
    tokens = jnp.asarray(tokens, jnp.int32)
    W, L = tokens.shape
    c = self.config
    d = c.d_head if self.vectors in ("value", "key") else c.n_embd
    per_layer = c.n_head * L * (2 * L + d) * self.ks_dtype.itemsize
    if W * c.n_layer * per_layer > self.cache_bytes:
      return None
    return [[(wts, x, sort_rows(wts, win), win)
             for wts, x, win in self._layers(tokens[w:w + 1], self.ks_dtype)]
            for w in range(W)]

  def _cached_stats(self, cache, ns, L: int):
    """HeadStats of the search's Ns summed over the windows: per layer
    :func:`limits.distance.search.search_stats` (each causal block only for the Ns its rows
    count; rows sorted here where ``srt`` is None); L the windows' length. Two layers at once,
    as in :meth:`head_stats` (:meth:`_loop`): a layer's host thresholds overlap another's
    kernel; the parts are taken in layer order."""
    def one(layer):
      wts, x, srt, win = layer
      return search_stats(wts, x, ns, inclusion=self.inclusion, sorted_rows=srt, window=win)

    loop, total = self._loop(int(L)), None
    for layers in cache:
      parts = []
      loop(layers, one, lambda hs: parts.append(jax.tree.map(lambda v: v[0], hs)))
      st = concat_heads(parts)
      total = st if total is None else combine(total, st)
    return jax.tree.map(np.asarray, total)

  def critical_n(self, tokens, n_max: int, *, alpha: float = 0.01, form: str = "sum",
                 method: str = "bisect", batch: int = 8):
    """Algorithm 3 for one L: smallest N in [1, n_max] where the KS test does not reject."""
    from limits import stats

    cache = self._build_cache(tokens)  # freed when this call returns
    return stats.critical_n(
        lambda ns: self.ks_pvalues(tokens, ns, form=form, pad_to=batch, cache=cache),
        1, n_max, alpha=alpha, method=method, batch=batch)


FIELDS = SUMMED  # the token-averaged per-head columns of per_head.csv


def tabulate(st: HeadStats, L: int, ns: Sequence[int], n_layer: int, n_head: int,
             form: str = "sum"):
  """Per-head CSV rows, per-N summary rows (mean, q25, q75 over heads) and KS results."""
  from limits import stats

  st = jax.tree.map(np.asarray, st)
  means = {k: np.asarray(v) for k, v in token_means(st).items()}
  rows, summary, ks = [], [], []
  for k, n in enumerate(ns):
    for h in range(st.count.shape[0]):
      r = {"L": L, "N": n, "layer": h // n_head, "head": h % n_head,
           "queries": int(st.count[h, k])}
      r.update({f: float(means[f][h, k]) for f in FIELDS})
      r.update({"violations_sum": int(st.viol_sum[h, k]),
                "violations_norm": int(st.viol_norm[h, k]),
                "max_ratio_sum": float(st.max_ratio_sum[h, k]),
                "max_ratio_norm": float(st.max_ratio_norm[h, k])})
      rows.append(r)
    s = {"L": L, "N": n, "heads": int(st.count.shape[0]),
         "rows_checked": int(st.count[:, k].sum())}
    for f in FIELDS:
      v = means[f][:, k]
      s[f"{f}_mean"] = float(np.nanmean(v))
      s[f"{f}_q25"], s[f"{f}_q75"] = (float(q) for q in np.nanpercentile(v, [25, 75]))
    s["violations_sum"] = int(st.viol_sum[:, k].sum())
    s["violations_norm"] = int(st.viol_norm[:, k].sum())
    s["max_ratio_sum"] = float(st.max_ratio_sum[:, k].max())
    s["max_ratio_norm"] = float(st.max_ratio_norm[:, k].max())
    d = means["d_sum" if form == "sum" else "d_norm"][:, k]
    r = stats.ks_2samp(d, means["expected"][:, k])
    s["ks_statistic"], s["ks_pvalue"] = r.statistic, r.pvalue
    ks.append({"L": L, "N": n, "form": form, "statistic": r.statistic, "pvalue": r.pvalue})
    summary.append(s)
  return rows, summary, ks


def add_head_means(rows, summary, extra: dict, ns: Sequence[int]) -> None:
  """Adds per-head values ``extra[name] (heads, K)`` to the per-head rows (as ``name``) and
  their mean over heads to the summary rows (as ``name_mean``), in place (rows ordered as
  :func:`tabulate` writes them: N-major, then heads)."""
  for name, v in extra.items():
    v = np.asarray(v, dtype=np.float64)
    heads = v.shape[0]
    for k, _ in enumerate(ns):
      for h in range(heads):
        rows[k * heads + h][name] = float(v[h, k])
      summary[k][f"{name}_mean"] = float(np.nanmean(v[:, k]))
