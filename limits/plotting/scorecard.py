"""The normalizer scorecard at a glance: one small panel per metric, one line per row (candidate
or calibrated candidate), softmax at the model's own temperature as a dashed reference line."""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from limits import plotting


def panels(length_last: int, distance_ns: Sequence[int], epsilon: float):
  """(key, title, log-x) of every panel, in order."""
  out = [("loss", "LM loss (nats/token)", False),
         ("max_aL_last", f"median max α·L, L={length_last}", True),
         ("zeros_last", f"exact-zero share, L={length_last}", False),
         ("critical_n_over_L", "critical N / L (Thm 1)", False)]
  out += [(f"d_N{n}", f"d̃ at N={n} (Thm 1)", False) for n in distance_ns]
  out += [("plateau_median", "N_s/N plateau, IQR (Thm 2)", False),
          ("max_jac", "max ‖J‖₂ (Lemma 2)", True),
          ("g_mean", f"mean g(ε={epsilon:g})", True),
          ("cost", "forward time / softmax", False)]
  return out


def _value(r, key):
  v = r.get(key)
  return math.nan if v is None else float(v)


def scorecard_figure(path: str | os.PathLike, trows: Sequence[dict], *, length_last: int,
                     distance_ns: Sequence[int], epsilon: float, title: str = "",
                     reference: str = "softmax"):
  """Writes the PNG. ``trows``: ``limits.scorecard.table_rows`` output (table order)."""
  plt = plotting.pyplot()
  spec = panels(length_last, distance_ns, epsilon)
  ncol = 6
  nrow = math.ceil(len(spec) / ncol)
  n = len(trows)
  fig, axes = plt.subplots(nrow, ncol, figsize=(2.3 * ncol + 1.6, 0.28 * n * nrow + 1.4),
                           sharey=True, squeeze=False)
  y = np.arange(n)[::-1]
  labels = [r["label"] + (" · cal." if r["calibrated"] else "") for r in trows]
  colors = ["#d95f02" if r["calibrated"] else "#1b9e77" for r in trows]
  ref = next((r for r in trows if r["key"] == reference), None)
  for k, (key, name, logx) in enumerate(spec):
    ax = axes[k // ncol][k % ncol]
    vals = np.array([_value(r, key) for r in trows])
    ok = np.isfinite(vals)
    if key == "plateau_median":
      lo = np.array([_value(r, "plateau_q25") for r in trows])
      hi = np.array([_value(r, "plateau_q75") for r in trows])
      for yi, a, b, c in zip(y, lo, hi, colors):
        if np.isfinite(a) and np.isfinite(b):
          ax.plot([a, b], [yi, yi], color=c, lw=1.5, alpha=0.6)
    ax.scatter(vals[ok], y[ok], c=[c for c, o in zip(colors, ok) if o], s=22, zorder=3)
    for yi in y[~ok]:
      ax.text(0.5, yi, "n/a", transform=ax.get_yaxis_transform(), ha="center", va="center",
              fontsize=6, color="0.5")
    if ref is not None and np.isfinite(_value(ref, key)):
      ax.axvline(_value(ref, key), color="0.3", ls="--", lw=0.9, zorder=1)
    if logx and np.all(vals[ok] > 0) and ok.any():
      from matplotlib.ticker import LogLocator, NullFormatter

      ax.set_xscale("log")
      ax.xaxis.set_major_locator(LogLocator(base=10))
      ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_title(name, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, axis="x")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
  for k in range(len(spec), nrow * ncol):
    ax = axes[k // ncol][k % ncol]
    ax.axis("off")
  last = axes[-1][-1]
  last.scatter([], [], c="#1b9e77", s=22, label="uncalibrated")
  last.scatter([], [], c="#d95f02", s=22, label="calibrated (one scalar)")
  last.plot([], [], color="0.3", ls="--", lw=0.9, label="softmax at T0 (reference)")
  last.legend(loc="center", fontsize=7, frameon=False)
  fig.suptitle(title or "Normalizer scorecard", fontsize=10)
  fig.tight_layout()
  return plotting.save(fig, path)
