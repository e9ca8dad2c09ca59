"""Figure 3: box plots over heads of N_s/N per N with Theorem 2's bounds."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from limits import plotting


def figure3(path: str | os.PathLike, ns: Sequence[int], frac, lower, upper, *, title: str = "",
            saturation=(0.70, 0.85)):
  """Writes the Figure 3 PNG.

  Args:
    path: output PNG.
    ns: the N grid (K,).
    frac, lower, upper: (K, heads) per-head N_s/N and the per-head (token-averaged) bounds.
    title: figure title.
    saturation: the paper's claimed band, drawn as a shaded strip.
  """
  plt = plotting.pyplot()
  frac = np.asarray(frac, float)
  lower = np.asarray(lower, float)
  upper = np.asarray(upper, float)
  pos = np.arange(1, len(ns) + 1)
  fig, ax = plt.subplots(figsize=(7.5, 4.5))
  if saturation:
    ax.axhspan(saturation[0], saturation[1], color="0.9", zorder=0,
               label=f"paper: saturates in [{saturation[0]:.2f}, {saturation[1]:.2f}]")
  ax.boxplot([f[np.isfinite(f)] for f in frac], positions=pos, widths=0.5, patch_artist=True,
             boxprops=dict(facecolor="#8fd19e", edgecolor="#2e7d32"),
             medianprops=dict(color="#1b5e20"), flierprops=dict(markersize=3))
  ax.plot(pos, np.nanmax(upper, axis=1), "r-", marker="v", ms=4,
          label="upper bound (max over heads)")
  ax.fill_between(pos, np.nanmin(upper, axis=1), np.nanmax(upper, axis=1), color="r", alpha=0.12,
                  label="upper bound (range over heads)")
  ax.plot(pos, np.nanmedian(lower, axis=1), "b--", marker="^", ms=4,
          label="lower bound (median over heads, clipped at 0)")
  ax.plot(pos, np.nanmax(frac, axis=1), "k:", marker=".", label="empirical max over heads")
  ax.set_xticks(pos)
  ax.set_xticklabels([str(n) for n in ns])
  ax.set_xlabel("top-N")
  ax.set_ylabel("N_s / N")
  ax.set_ylim(-0.03, 1.05)
  ax.set_title(title or "Theorem 2: geometric separability")
  ax.legend(fontsize=7, loc="lower left")
  ax.grid(alpha=0.3)
  return plotting.save(fig, path)
