"""Figure 2 (Theorem 1): true distance (green), expectation (blue), bound (red), and the
critical-N panel; plus the vanishing-attention (Lemma 1 / Corollary 1) figure.

Bands are the inter-quartile range over heads, lines the mean over heads (AMBIG-15).
"""

from __future__ import annotations

import math

from limits.plotting import pyplot, save

COLORS = {"d": "tab:green", "expected": "tab:blue", "dmax": "tab:red"}


def _series(ax, xs, rows, field, label, color):
  ys = [r[f"{field}_mean"] for r in rows]
  lo = [r[f"{field}_q25"] for r in rows]
  hi = [r[f"{field}_q75"] for r in rows]
  ax.plot(xs, ys, "o-", color=color, label=label)
  ax.fill_between(xs, lo, hi, color=color, alpha=0.2)


def figure2(mode: str, summary, crit_rows, path, form: str = "sum"):
  """One panel of Figure 2: (a) vary_length, (b) vary_n, (c) critical_n."""
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(5.5, 4))
  d = "d_sum" if form == "sum" else "d_norm"
  if mode in ("vary_length", "vary_n"):
    xkey = "L" if mode == "vary_length" else "N"
    other = "N" if mode == "vary_length" else "L"
    values = {r[other] for r in summary}
    # One panel: N = 5 (else the smallest N) for vary_length; the largest L for vary_n.
    pick = (5 if 5 in values else min(values)) if mode == "vary_length" else max(values)
    rows = sorted((r for r in summary if r[other] == pick), key=lambda r: r[xkey])
    xs = [r[xkey] for r in rows]
    _series(ax, xs, rows, d, f"true d̃ ({form})", COLORS["d"])
    _series(ax, xs, rows, "expected", "expectation E", COLORS["expected"])
    _series(ax, xs, rows, "dmax_" + form, "bound d_max", COLORS["dmax"])
    tag = f"N = {pick}" if mode == "vary_length" else f"L = {pick}"
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L" if mode == "vary_length" else "top-N")
    ax.set_ylabel("token-averaged distance (mean, IQR over heads)")
    ax.set_title(("(a) " if mode == "vary_length" else "(b) ") + tag)
    ax.legend(fontsize=8)
  else:
    found = [(r["L"], r["critical_n"]) for r in crit_rows if r["critical_n"]]
    if found:
      ls, ns = zip(*found)
      ax.plot(ls, ns, "o-", color="tab:purple", label="critical N (KS)")
      grid = [min(ls), max(ls)]
      ax.plot(grid, [0.06 * g for g in grid], "k--", label="0.06 L (paper)")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("critical top-N")
    ax.set_title("(c) critical N vs L")
    ax.legend(fontsize=8)
  fig.tight_layout()
  return save(fig, path)


def vanishing_figure(summary, path):
  """max·t and min·t of the weights (median and range over heads) against the Corollary 1
  band (log10 scale; the band is median log10 e^{±2Δ/T} over heads)."""
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(5.5, 4))
  ls = [r["L"] for r in summary]
  for key, color, label in (("max", "tab:red", "max α·L"), ("min", "tab:blue", "min α·L")):
    ax.plot(ls, [r[f"log10_{key}_median"] for r in summary], "o-", color=color, label=label)
    ax.fill_between(ls, [r[f"log10_{key}_lo"] for r in summary],
                    [r[f"log10_{key}_hi"] for r in summary], color=color, alpha=0.2)
  up = [r["log10_band_upper_median"] for r in summary]
  ax.plot(ls, up, "k--", label="Corollary 1 band (median over heads)")
  ax.plot(ls, [-u for u in up], "k--")
  ax.axhline(0.0, color="gray", lw=0.5)
  ax.set_xscale("log", base=2)
  ax.set_xlabel("sequence length L (last query sees L keys)")
  ax.set_ylabel("log10(α·L)")
  top = max([math.fabs(u) for u in up if math.isfinite(u)] + [1.0])
  ax.set_ylim(-min(top, 60) * 1.05, min(top, 60) * 1.05)
  ax.legend(fontsize=8)
  ax.set_title("Lemma 1 / Corollary 1: weights ×L vs band")
  fig.tight_layout()
  return save(fig, path)
