"""Scorecard metrics over recorded arrays (pure): Lemma 1 (max α·t, exact zeros), Theorem 1
(d̃, critical N), Theorem 2 (N_s/N plateau), and the seeded rows the Jacobians are taken on.

Sliding-window layers (Gemma 3's local layers, a layer's ``window`` W > 0): query t sees only
its last min(t + 1, W) keys, which is its effective length everywhere here, as in
``limits.distance`` and ``limits.separability``: keys before the window (weight exactly 0) are
not tokens of the row (not counted as exact zeros, not non-selected, not in the Jacobian's
row). ``window`` 0 is a global (causal) layer.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np


def effective_length(t: int, window: int = 0) -> int:
  """Keys seen by query t − 1 (a prefix of t tokens): t, or min(t, W) in a local layer."""
  return min(int(t), int(window)) if window else int(t)


def lemma1_rows(weights, lengths: Sequence[int], window: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """For causal weights (..., L, L) and prefixes t: max α·n (..., K) and the share of exactly
  zero weights (..., K) among the n visible keys of query t−1, n = :func:`effective_length`
  (t, or min(t, W) in a layer with sliding window ``window`` = W)."""
  w = np.asarray(weights)
  mx, zs = [], []
  for t in lengths:
    n = effective_length(t, window)
    row = w[..., t - 1, t - n:t]
    mx.append(row.max(axis=-1) * n)
    zs.append(np.mean(row == 0, axis=-1))
  return np.stack(mx, axis=-1), np.stack(zs, axis=-1)


def lemma1_summary(max_al, zero_share, lengths: Sequence[int]) -> dict:
  """Per-t median of max α·t, mean zero share, and the log-log slope of the median vs t."""
  from limits import stats

  m = np.asarray(max_al, np.float64).reshape(-1, len(lengths))
  z = np.asarray(zero_share, np.float64).reshape(-1, len(lengths))
  med = np.median(m, axis=0)
  fit = stats.linear_fit(np.log10(lengths), np.log10(np.maximum(med, 1e-300)))
  return {"lengths": list(lengths), "median_max_aL": med.tolist(),
          "zero_share": z.mean(axis=0).tolist(), "slope_loglog": fit["slope"],
          "n_per_length": int(m.shape[0])}


@functools.partial(jax.jit, static_argnames=("window",))
def _printed_token_means(weights, x, ns, window: int = 0):
  """(H, K) token averages of the printed E (x̄ = Σ_j α_j x_j) of every head of one layer and
  window: ``limits.distance.printed.head_expectations`` vmapped over heads, compiled once per shape
  (``printed.layer_expectation_means`` runs its ``lax.map`` outside jit, recompiled per call).
  ``window``: the layer's sliding window (0 = global)."""
  from limits.distance import printed

  fn = functools.partial(printed.head_expectations, window=window)
  out = jax.vmap(fn, in_axes=(0, 0, None))(weights, x, ns)[0]
  return jnp.nanmean(out, axis=1)  # (H, L, K) -> (H, K)


def distance_metrics(layers, ns_report: Sequence[int], length: int, *, alpha: float = 0.01,
                     batch: int = 4, windows: Sequence[int] | None = None) -> dict:
  """Theorem 1 on per-layer ``(weights (W, H, L, L), x (W, H, L, d))`` arrays (float32);
  ``windows``: each layer's sliding window (0 = global; None: every layer global), so a local
  layer's rows have length min(t + 1, W) (``limits.distance.layer_stats(window=…)``).

  Per-head token-averaged d̃ (sum form) and E at each N of ``ns_report`` < L (median over
  heads), and Algorithm 3's critical N as the claims read Fig. 2c (issue 28, primary reading):
  ``critical_n`` is the first N of the ascending scan N = 1, 2, … (``stats.ascending_scan``)
  whose KS test of the per-head d̄ against the printed E (AMBIG-18 primary: the paper's E,
  x̄ = Σ_j α_j x_j, ``limits.distance.printed``; window mean of the token averages) does not reject at
  level alpha, with its pass windows and p-values in ``critical_scan``. The bisection on the
  reconstructed E (the Jensen main sum; monotonicity checked, not proved) stays beside it as
  ``critical_n_reconstructed`` and ``ks``.
  """
  from limits import distance, selection, stats

  wins = [0] * len(layers) if windows is None else [int(v or 0) for v in windows]
  srt = [selection.sort_rows(w, win) for (w, _), win in zip(layers, wins)]

  def head_means(ns):
    padded = list(ns) + [ns[-1]] * (batch - len(ns))
    parts = [distance.reduce_windows(distance.layer_stats(w, x, padded, bound=False,
                                                          sorted_rows=s, window=win))
             for (w, x), s, win in zip(layers, srt, wins)]
    m = distance.token_means(distance.concat_heads(parts))
    return {k: np.asarray(v)[:, :len(ns)] for k, v in m.items()}

  def pvalues(ns):
    m = head_means(ns)
    return [stats.ks_2samp(m["d_sum"][:, k], m["expected"][:, k]).pvalue
            for k in range(len(ns))]

  def printed_means(ns):  # (heads, K): the printed E per head, mean over windows
    ns = jnp.asarray(ns)
    return np.concatenate([np.mean([np.asarray(_printed_token_means(
        jnp.asarray(w[i]), jnp.asarray(x[i], w.dtype), ns, window=win))
        for i in range(w.shape[0])], axis=0) for (w, x), win in zip(layers, wins)], axis=0)

  def scan_pvalues(ns):
    padded = list(ns) + [ns[-1]] * (batch - len(ns))  # one compiled shape for every batch
    d, e = head_means(padded)["d_sum"], printed_means(padded)
    return {"printed": [stats.ks_2samp(np.asarray(d[:, k], np.float64),
                                       np.asarray(e[:, k], np.float64)).pvalue
                        for k in range(len(ns))]}

  report = [int(n) for n in ns_report if n < length]
  out: dict[str, Any] = {"d_sum_median": {}, "expected_median": {}}
  if report:
    m = head_means(report)
    for k, n in enumerate(report):
      out["d_sum_median"][str(n)] = float(np.nanmedian(m["d_sum"][:, k]))
      out["expected_median"][str(n)] = float(np.nanmedian(m["expected"][:, k]))
  crit = stats.critical_n(pvalues, 1, length - 1, alpha=alpha, method="bisect", batch=batch)
  scan = stats.ascending_scan(scan_pvalues, 1, length - 1, alpha=alpha, batch=batch,
                              until_closed=("printed",))["printed"]
  out.update({"critical_n": scan.first_pass,
              "critical_n_over_L": None if scan.first_pass is None else scan.first_pass / length,
              "critical_scan": scan.as_dict(), "critical_n_reconstructed": crit.n,
              "critical_n_reconstructed_over_L": None if crit.n is None else crit.n / length,
              "ks": crit.as_dict(), "heads": int(sum(w.shape[1] for w, _ in layers)),
              "windows": int(layers[0][0].shape[0]) if layers else 0})
  return out


def separability_sums(weights, v, ns: Sequence[int], radius: float,
                      window: int = 0) -> np.ndarray:
  """``separability.layer_sums`` for one layer of one window: (H, K, F) sums (``window``: the
  layer's sliding window, 0 = global)."""
  from limits import separability

  return np.asarray(separability.layer_sums(jnp.asarray(weights), jnp.asarray(v),
                                            jnp.asarray(ns, jnp.int32), radius, window=window))


def jacobian_mask(length: int, query: int, window: int = 0) -> np.ndarray:
  """(L,) bool: the keys query ``query`` sees (its causal prefix, cut to the last W keys in a
  layer with sliding window ``window`` = W)."""
  pos = np.arange(length)
  vis = pos <= query
  return vis & (pos > query - window) if window else vis


def separability_summary(sums, ns: Sequence[int]) -> dict:
  """From (heads, K, F) sums over windows: per-head N_s/N per N, the plateau (mean over N) per
  head, its median and IQR over heads."""
  from limits import separability

  s = np.asarray(sums, np.float64)
  fi, ci = separability.LAYER_FIELDS.index("frac"), separability.LAYER_FIELDS.index("count")
  frac = s[..., fi] / np.maximum(s[..., ci], 1)  # (heads, K)
  plateau = frac.mean(axis=-1)
  q25, med, q75 = np.percentile(plateau, [25, 50, 75])
  return {"ns": list(ns), "plateau_median": float(med), "plateau_q25": float(q25),
          "plateau_q75": float(q75), "median_by_n": np.median(frac, axis=0).tolist(),
          "heads": int(frac.shape[0])}


def sample_rows(n_windows: int, n_layers: int, n_heads: int, length: int, rows: int,
                seed: int) -> np.ndarray:
  """(R, 4) int rows (window, layer index, head, query) uniform over queries with t ≥ 2
  (``default_rng(seed)``, without replacement, sorted)."""
  per = n_layers * n_heads * (length - 1)
  total = n_windows * per
  rng = np.random.default_rng(seed)
  flat = np.sort(rng.choice(total, size=min(rows, total), replace=False))
  w, rem = np.divmod(flat, per)
  li, rem = np.divmod(rem, n_heads * (length - 1))
  h, q = np.divmod(rem, length - 1)
  return np.stack([w, li, h, q + 1], axis=-1)
