"""Figure 4 style plot for the gradient experiment: g(T, ε) vs T on log–log axes.

One curve per ε (the paper's statistic), the paper's dashed curve min{1/(4T), √2}, the tight
spectral bound 1/(2T) (which the tied-top-two row attains exactly), and the exact max ‖J‖₂.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from limits.plotting import pyplot, save


def figure4(summaries: Sequence[Mapping], epsilons: Sequence[float], path, *, title: str = "",
            stat_label: str = "g", softmax: bool = True) -> Path:
  """Writes the plot to ``path``. ``summaries``: per-temperature dicts from the experiment
  (keys T, paper_bound, tight_bound, max_norm, g[f"{eps:g}"]["paper_stat"])."""
  plt = pyplot()
  T = np.array([s["T"] for s in summaries], float)
  order = np.argsort(T)
  T = T[order]
  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  marker = "o" if len(T) < 3 else None
  for e in epsilons:
    g = np.array([summaries[i]["g"][f"{e:g}"]["paper_stat"] for i in order], float)
    ax.plot(T, np.where(g > 0, g, np.nan), marker=marker or ".", label=f"g(T, ε={e:g}) [{stat_label}]")
  exact = np.array([summaries[i]["max_norm"] for i in order], float)
  ax.plot(T, np.where(exact > 0, exact, np.nan), color="tab:purple", lw=2, marker=marker,
          label="exact max ‖J‖₂ (rows)")
  Tl = np.logspace(math.log10(T.min()) - 0.05, math.log10(T.max()) + 0.05, 200) if len(T) > 1 \
      else np.array([T[0] / 1.5, T[0] * 1.5])
  ax.plot(Tl, np.minimum(1 / (4 * Tl), math.sqrt(2)), "k--", label="paper: min{1/(4T), √2}")
  ax.plot(Tl, 1 / (2 * Tl), "k:", label="tight: 1/(2T) (= tied top-two row)" if softmax
          else "softmax tight: 1/(2T)")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("temperature T (raw q·k scale)")
  ax.set_ylabel("Jacobian norm / finite-difference sensitivity")
  if title:
    ax.set_title(title)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)
  return save(fig, path)
