"""The paper's figures with every compared run's curves, and the verdict map (issue 28 Build 8).

``python -m experiments.compare --run=A=DIR --run=B=DIR --figures=OUTDIR`` draws, from each
reproduction run's own files (the steps' ``results.json``; nothing is recomputed or re-judged):

- ``fig2a.png``: step ``distance_vary_length`` at N = 5 (else its smallest N): the true
  distance d̃ (AMBIG-1 primary: sum of norms), the printed E (the paper's, AMBIG-17 primary
  x̄) and the bound d_max against L; head means (AMBIG-15), log₂ L, log y.
- ``fig2b.png``: step ``distance_vary_n`` at its largest L: the same three against N.
- ``fig2c.png``: step ``distance_critical_n``: Algorithm 3's ascending scan, first passing N
  against L with the printed E (AMBIG-18 primary, solid) and the reconstructed E (dashed), and
  the paper's 0.06·L.
- ``fig3.png``: step ``separability_model``: N_s/N over heads per N (median line, IQR band),
  the empirical max and the upper bound's max over heads, the paper's 0.70–0.85 band.
- ``fig4.png``: step ``gradient``: g(T, ε) (the paper's statistic, max over heads) for each
  ε, log–log, with the paper's min{1/(4T), √2}.
- ``sinks.png`` (the suite's finding, not a paper figure): step ``vanishing``, the share of
  heads × windows with mean weight on token 0 above ε = 0.3 (Sink_ε) per layer at each run's
  largest L, against relative depth layer/(n_layer − 1).
- ``verdict_map.png``: claims × runs, each cell coloured by the primary verdict of the run's
  ``results.claims`` record, hatched and starred where the verdict is not robust (it flips
  under an admissible reading).

Within a figure the colour is the run and the line style the quantity. A run whose step is
missing or unfinished is named in the figure's footnote instead of drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from limits.claims.core import DEPENDS, FAILS, FINDING, HOLDS, NOT_RUN, NOT_TESTABLE
from limits.plotting import pyplot, save

RUN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
              "tab:olive", "tab:cyan", "tab:red", "tab:gray")
VERDICT_COLORS = {HOLDS: "#66bb6a", FAILS: "#ef5350", NOT_TESTABLE: "#bdbdbd",
                  DEPENDS: "#ffb74d", NOT_RUN: "#ffffff"}
NOT_ROBUST_HATCH = "///"
FIGURES = ("fig2a", "fig2b", "fig2c", "fig3", "fig4")
STEPS = {"fig2a": "distance_vary_length", "fig2b": "distance_vary_n",
         "fig2c": "distance_critical_n", "fig3": "separability_model", "fig4": "gradient",
         "sinks": "vanishing"}
EXTRA = ("sinks",)  # the suite's own figures, drawn after the paper's

Run = tuple[str, Path]  # (label, reproduction --out_dir)


def step_results(run_dir: str | Path, step: str) -> Optional[dict[str, Any]]:
  """The "results" block of ``run_dir/step/results.json``; None when missing or unfinished."""
  from limits.reproduction import Unreadable, load_results

  try:
    return load_results(Path(run_dir) / step)
  except Unreadable:
    return None


def _color(i: int) -> str:
  return RUN_COLORS[i % len(RUN_COLORS)]


def _footnote(fig, missing: Sequence[str], step: str) -> None:
  if missing:
    # Below the axes' labels (the saved PNG's tight box grows to include it).
    fig.text(0.01, -0.01, f"not drawn (step {step} missing or unfinished): "
             + ", ".join(missing), fontsize=7, color="0.3", va="top")


def _axes():
  """A new figure and its axes, the size every comparison figure has."""
  return pyplot().subplots(figsize=(6.4, 4.6))


def _finish(fig, ax, name: str, missing: Sequence[str], xlabel: str, ylabel: str, title: str,
            legend: int = 7, grid: str = "major"):
  """Labels, grid, legend (when something was drawn) and the footnote naming the runs whose
  step was missing; returns ``fig``."""
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3, which=grid)
  if ax.lines:
    ax.legend(fontsize=legend, loc="lower left" if name == "fig3" else "best")
  _footnote(fig, missing, STEPS[name])
  return fig


def _distance_figure(runs: Sequence[Run], which: str):
  """Fig. 2a (``which`` = "fig2a", x = L at N = 5) or Fig. 2b ("fig2b", x = N at the largest L)."""
  fig, ax = _axes()
  xkey, other = ("L", "N") if which == "fig2a" else ("N", "L")
  missing, tags = [], []
  for i, (label, path) in enumerate(runs):
    res = step_results(path, STEPS[which])
    rows = (res or {}).get("summary") or []
    if not rows:
      missing.append(label)
      continue
    values = {r[other] for r in rows}
    pick = (5 if 5 in values else min(values)) if which == "fig2a" else max(values)
    tags.append(f"{label}: {other} = {pick}")
    rows = sorted((r for r in rows if r[other] == pick), key=lambda r: r[xkey])
    xs = [r[xkey] for r in rows]
    c = _color(i)
    ax.plot(xs, [r["d_sum_mean"] for r in rows], "o-", color=c, label=f"{label}: true d̃")
    if all("expected_printed_output_mean" in r for r in rows):
      ax.plot(xs, [r["expected_printed_output_mean"] for r in rows], "s--", color=c, ms=4,
              label=f"{label}: E (printed)")
    ax.plot(xs, [r["dmax_sum_mean"] for r in rows], "v:", color=c, ms=4,
            label=f"{label}: bound d_max")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  return _finish(fig, ax, which, missing, "sequence length L" if which == "fig2a" else "top-N",
                 "token-averaged distance (mean over heads)",
                 ("Fig. 2a: distance vs L" if which == "fig2a" else "Fig. 2b: distance vs N")
                 + (f" ({'; '.join(tags)})" if tags else ""), grid="both")


def _fig2c(runs: Sequence[Run]):
  fig, ax = _axes()
  missing, all_l = [], []
  for i, (label, path) in enumerate(runs):
    res = step_results(path, STEPS["fig2c"]) or {}
    scan = res.get("critical_scan") or {}
    if not scan:
      missing.append(label)
      continue
    c = _color(i)
    bisection = res.get("critical_n") if isinstance(res.get("critical_n"), Mapping) else None
    for form, style in (("printed", "o-"), ("reconstructed", "^--")):
      # the reconstructed E's critical N is the bisection's (the scan stops at N_max)
      entries = dict(bisection) if form == "reconstructed" and bisection else {
          L: v.get(form) for L, v in scan.items()}
      entries = {L: e for L, e in entries.items() if isinstance(e, Mapping)}
      pts = sorted((int(L), e["critical_n"]) for L, e in entries.items() if e.get("critical_n"))
      if pts:
        ls, ns = zip(*pts)
        all_l += ls
        ax.plot(ls, ns, style, color=c, label=f"{label}: first passing N, E {form}")
      capped = sorted((int(L), e["n_max"]) for L, e in entries.items()
                      if not e.get("critical_n") and e.get("n_max"))
      if capped:  # no pass up to N_max: drawn at N_max, open, as a lower bound
        ls, ns = zip(*capped)
        all_l += ls
        ax.plot(ls, ns, style[0], mfc="none", color=c,
                label=f"{label}: no pass for N ≤ N_max, E {form}")
  if all_l:
    grid = [min(all_l), max(all_l)]
    ax.plot(grid, [0.06 * g for g in grid], "k:", label="paper: 0.06·L")
  ax.set_xscale("log", base=2)
  return _finish(fig, ax, "fig2c", missing, "sequence length L",
                 "critical top-N (KS, ascending scan)", "Fig. 2c: critical N vs L (Algorithm 3)")


def _fig3(runs: Sequence[Run]):
  fig, ax = _axes()
  ax.axhspan(0.70, 0.85, color="0.9", zorder=0, label="paper: saturates in [0.70, 0.85]")
  missing = []
  for i, (label, path) in enumerate(runs):
    s = (step_results(path, STEPS["fig3"]) or {}).get("summary")
    if not isinstance(s, Mapping) or not s.get("n"):
      missing.append(label)
      continue
    c, ns = _color(i), s["n"]
    ax.plot(ns, s["median"], "o-", color=c, label=f"{label}: N_s/N median over heads")
    if "q25" in s and "q75" in s:
      ax.fill_between(ns, s["q25"], s["q75"], color=c, alpha=0.2)
    ax.plot(ns, s["max"], ".:", color=c, label=f"{label}: empirical max")
    if "upper_max" in s:
      ax.plot(ns, s["upper_max"], "v--", color=c, ms=4, label=f"{label}: upper bound (max)")
  ax.set_xscale("log", base=2)
  ax.set_ylim(-0.03, 1.05)
  return _finish(fig, ax, "fig3", missing, "top-N", "N_s / N",
                 "Fig. 3: geometric separability (IQR band over heads)")


def _fig4(runs: Sequence[Run]):
  import math

  import numpy as np

  fig, ax = _axes()
  missing, temps = [], []
  styles = ("o-", "s--", "^:", "d-.")
  for i, (label, path) in enumerate(runs):
    per_t = (step_results(path, STEPS["fig4"]) or {}).get("per_temperature") or []
    if not per_t:
      missing.append(label)
      continue
    per_t = sorted(per_t, key=lambda p: p["T"])
    ts = [p["T"] for p in per_t]
    temps += ts
    eps = list(per_t[0].get("g") or {})
    for j, e in enumerate(eps):
      g = [((p.get("g") or {}).get(e) or {}).get("paper_stat") for p in per_t]
      g = [v if v is not None and v > 0 else np.nan for v in g]
      ax.plot(ts, g, styles[j % len(styles)], color=_color(i), ms=4,
              label=f"{label}: g(T, ε = {e})")
  if temps:
    tl = np.logspace(math.log10(min(temps)), math.log10(max(temps)), 200)
    ax.plot(tl, np.minimum(1 / (4 * tl), math.sqrt(2)), "k--", label="paper: min{1/(4T), √2}")
  ax.set_xscale("log")
  ax.set_yscale("log")
  return _finish(fig, ax, "fig4", missing, "temperature T (raw q·k scale)",
                 "g(T, ε), max over heads", "Fig. 4: gradient sensitivity", legend=6, grid="both")


def _sinks(runs: Sequence[Run]):
  fig, ax = _axes()
  missing, eps = [], None
  for i, (label, path) in enumerate(runs):
    sinks = (step_results(path, STEPS["sinks"]) or {}).get("sinks") or {}
    by_l = sinks.get("by_L") or []
    if not by_l:
      missing.append(label)
      continue
    eps = sinks.get("eps", eps)
    last = by_l[-1]
    share = last["share_by_layer"]
    depth = [k / max(len(share) - 1, 1) for k in range(len(share))]
    ax.plot(depth, share, "o-", color=_color(i), ms=4,
            label=f"{label}: L = {last['L']}, {len(share)} layers")
  ax.set_ylim(-0.03, 1.05)
  return _finish(fig, ax, "sinks", missing, "relative depth: layer / (n_layer − 1)",
                 "Sink_ε: share of heads × windows above ε",
                 f"Attention sinks on token 0 (ε = {eps if eps is not None else 0.3:g}; the "
                 "suite's finding)")


def figure(name: str, runs: Sequence[Run]):
  """The open matplotlib figure ``name`` (one of :data:`FIGURES` or :data:`EXTRA`)."""
  if name in ("fig2a", "fig2b"):
    return _distance_figure(runs, name)
  return {"fig2c": _fig2c, "fig3": _fig3, "fig4": _fig4, "sinks": _sinks}[name](runs)


def verdict_map_figure(records: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]):
  """The verdict map: one row per claim (the paper's, then the suite's findings, in the first
  run's order), one column per run; each cell a rectangle (``gid`` = "claim id|run label")
  coloured by the primary verdict (:data:`VERDICT_COLORS`), hatched and starred where the
  record says the verdict is not robust (``robust`` false); a claim's row label names it a
  finding and its evidence class when not empirical (mathematical, by construction,
  model-free). ``records``: (label, claim
  records) per run, as :func:`limits.claims.compare.load_run` returns them."""
  from matplotlib.patches import Patch, Rectangle

  plt = pyplot()
  ids: list[str] = []
  kind: dict[str, str] = {}
  evidence: dict[str, str] = {}
  for want_finding in (False, True):
    for _, recs in records:
      for r in recs:
        if (r.get("kind") == FINDING) == want_finding and r["id"] not in kind:
          ids.append(r["id"])
          kind[r["id"]] = r.get("kind", "")
          evidence[r["id"]] = r.get("evidence") or "empirical"
  ncol = len(records)
  fig, ax = plt.subplots(figsize=(2.2 + 1.5 * ncol, 0.9 + 0.28 * len(ids)))
  for j, (label, recs) in enumerate(records):
    by_id = {r["id"]: r for r in recs}
    for i, cid in enumerate(ids):
      r = by_id.get(cid)
      verdict = r.get("verdict", NOT_RUN) if r else NOT_RUN
      flips = bool(r) and r.get("robust") is False
      ax.add_patch(Rectangle((j, i), 1, 1, facecolor=VERDICT_COLORS.get(verdict, "#ffffff"),
                             edgecolor="0.4", lw=0.5, hatch=NOT_ROBUST_HATCH if flips else None,
                             gid=f"{cid}|{label}"))
      word = {DEPENDS: "depends", NOT_TESTABLE: "n/t"}.get(verdict, verdict)
      ax.text(j + 0.5, i + 0.5, word + (" *" if flips else ""), ha="center", va="center",
              fontsize=6)
  ax.set_xlim(0, ncol)
  ax.set_ylim(len(ids), 0)
  ax.set_xticks([j + 0.5 for j in range(ncol)])
  ax.set_xticklabels([lab for lab, _ in records], fontsize=7)
  ax.xaxis.tick_top()
  ax.set_yticks([i + 0.5 for i in range(len(ids))])
  ax.set_yticklabels([cid + (" (finding)" if kind[cid] == FINDING else "")
                      + (f" [{evidence[cid]}]" if evidence[cid] != "empirical" else "")
                      for cid in ids], fontsize=6)
  ax.tick_params(length=0)
  handles = [Patch(facecolor=c, edgecolor="0.4", label=v) for v, c in VERDICT_COLORS.items()]
  handles.append(Patch(facecolor="white", edgecolor="0.4", hatch=NOT_ROBUST_HATCH,
                       label="* flips under an admissible reading"))
  ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  ax.set_title("Primary verdict per claim and run", fontsize=9, pad=18)
  return fig


def draw(runs: Sequence[Run], out_dir: str | Path) -> list[Path]:
  """Writes :data:`FIGURES`, :data:`EXTRA` and ``verdict_map.png`` into ``out_dir`` (created); returns the
  paths. ``runs``: (label, reproduction run directory); verdicts read as
  :func:`limits.claims.compare.load_run` reads them (one-line LimitsError when a run has none)."""
  from limits.claims.compare import load_run

  records = [load_run(label, path) for label, path in runs]
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  runs = [(label, Path(path)) for label, path in runs]
  paths = [save(figure(name, runs), out / f"{name}.png") for name in FIGURES + EXTRA]
  paths.append(save(verdict_map_figure(records), out / "verdict_map.png"))
  return paths
