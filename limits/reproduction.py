"""The reproduction plan: which experiment checks which claim of the paper, and the report.

``experiments/reproduce.py`` is the CLI over this module. Each :class:`Step` is one experiment
command (paper settings, and a ``quick`` variant for 2 CPU cores); each :class:`Claim` is one
quantitative statement of PAPER.md §4 (and Corollary 3), tied to the verdict its step writes in
``results.json`` (``limits.results.verdict`` records, matched by a substring of the claim).
:func:`claim_rows` builds the table from those files and :func:`render_report` writes
``report.md``; no number in the report is computed here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional, Sequence

FULL_LENGTHS = "32,64,128,256,512,1024"


@dataclasses.dataclass(frozen=True)
class Step:
  """One experiment command: ``python -m <module> <full or quick flags>`` into ``OUT/<name>``.

  ``uses_model`` steps also get ``--model``, ``--windows`` and the corpus flags, and have their
  lengths fitted to the model's context (:func:`fit_to_context`).
  """

  name: str
  module: str
  full: tuple[str, ...]   # the paper's settings (PAPER.md §3)
  quick: tuple[str, ...]  # a few minutes on 2 CPU cores
  uses_model: bool = True


STEPS = (
    Step("gradient", "experiments.gradient",
         ("--source=model", "--length=1024", "--rows=64"),
         ("--source=model", "--length=128", "--rows=32", "--check_rows=4",
          "--temperatures=1e-3,3e-3,1e-2,3e-2,0.1,0.3,1,3,10,30,100")),
    Step("gradient_synthetic", "experiments.gradient",
         ("--source=synthetic", "--length=64", "--rows=256"),
         ("--source=synthetic", "--length=32", "--rows=64", "--check_rows=4",
          "--temperatures=1e-3,1e-2,0.1,1,10,100"), uses_model=False),
    Step("vanishing", "experiments.vanishing", (f"--lengths={FULL_LENGTHS}",),
         ("--lengths=32,64,128,256",)),
    Step("distance_vary_length", "experiments.distance",
         ("--mode=vary_length", f"--lengths={FULL_LENGTHS}", "--ns=5"),
         ("--mode=vary_length", "--lengths=32,64,128,256,512", "--ns=5")),
    Step("distance_vary_n", "experiments.distance",
         ("--mode=vary_n", "--lengths=1024", "--ns=1,5,10,20,100"),
         ("--mode=vary_n", "--lengths=512", "--ns=1,5,10,20,100")),
    Step("distance_critical_n", "experiments.distance",
         ("--mode=critical_n", f"--lengths={FULL_LENGTHS}", "--ks_alpha=0.01"),
         ("--mode=critical_n", "--lengths=64,128,256", "--ks_alpha=0.01")),
    Step("separability_sphere", "experiments.separability",
         ("--source=sphere", "--length=1024", "--samples=2000"),
         ("--source=sphere", "--length=256", "--samples=200", "--heads=4"), uses_model=False),
    Step("separability_model", "experiments.separability",
         ("--source=model", "--length=1024", "--n_values=1,2,4,8,16,32,64,128"),
         ("--source=model", "--length=256", "--n_values=1,2,4,8,16,32,64,128")),
)
STEP_NAMES = tuple(s.name for s in STEPS)


@dataclasses.dataclass(frozen=True)
class Claim:
  """One row of the report: a claim of the paper and where its verdict comes from."""

  ref: str  # where in the paper
  statement: str  # the paper's statement
  step: str
  match: str  # substring of the verdict's "claim" in the step's results.json
  figure: str = ""  # file name in the step's directory


CLAIMS = (
    Claim("Lemma 1 / Cor. 1", "Every weight lies in (1/L)·[e^{−2Δ/T}, e^{2Δ/T}], Δ = ‖q‖·max‖k‖",
          "vanishing", "Corollary 1 band", "vanishing.png"),
    Claim("Lemma 1", "C1/L ≤ α_i ≤ C2/L for logits in [−a, a], any positive continuous F",
          "vanishing", "Lemma 1 on bounded logits", ""),
    Claim("Lemma 1 (model)", "Weights vanish as Θ(1/L) on the model's own attention",
          "vanishing", "Lemma 1:", "vanishing.png"),
    Claim("Thm 1 (Eq. 9)", "d̃ ≤ d_max for every head and query (fixed top-N set)",
          "distance_vary_length", "bound held", "fig2_vary_length.png"),
    Claim("Fig. 2a", "At N = 5 the true distance grows roughly linearly in L",
          "distance_vary_length", "grows linearly", "fig2_vary_length.png"),
    Claim("Fig. 2b", "Beyond N ≈ 20 the distance plateaus (L = 1024)",
          "distance_vary_n", "plateau", "fig2_vary_n.png"),
    Claim("Fig. 2b / Cor. 2(ii)", "True and expected distances converge as N → 100",
          "distance_vary_n", "converge", "fig2_vary_n.png"),
    Claim("Fig. 2c", "Critical N ≈ 0.06 L (KS, α = 0.01): fewer than 6% of tokens",
          "distance_critical_n", "critical N", "fig2_critical_n.png"),
    Claim("Fig. 3", "N_s/N declines up to N ≈ 16, then flattens", "separability_model",
          "declines", "figure3.png"),
    Claim("Fig. 3", "N_s/N saturates between 0.70 and 0.85 (≈ 80%) on GPT-2 value vectors",
          "separability_model", "saturates", "figure3.png"),
    Claim("Thm 2 (Eq. 11)", "Lower bound on E[N_s]/N holds", "separability_model",
          "lower bound", "figure3.png"),
    Claim("Fig. 3", "Exponential upper bound tracks the empirical maxima", "separability_model",
          "upper bound", "figure3.png"),
    Claim("Thm 2, sphere", "Lower bound holds under Assumptions 1–2 (uniform sphere)",
          "separability_sphere", "lower bound", "figure3.png"),
    Claim("Thm 2, sphere", "N_s/N saturates at 0.70–0.85 on the sphere", "separability_sphere",
          "saturates", "figure3.png"),
    Claim("§4 multi-head", "With p ≈ 0.8, H ≈ 3 heads cover ≈ 99% of the top-N",
          "separability_model", "multi-head coverage", "figure3.png"),
    Claim("Cor. 3", "‖∇α‖₂ ≤ min{1/(4T), √2} for softmax", "gradient", "Corollary 3 as printed",
          "gradient.png"),
    Claim("Cor. 3 (tight)", "‖∇α‖₂ ≤ 1/(2T) (our tight form; not in the paper)", "gradient",
          "tight spectral bound", "gradient.png"),
    Claim("Lemma 2", "Jacobian norm bound for a general normalizer (softmax rows)", "gradient",
          "Lemma 2", "gradient.png"),
    Claim("Fig. 4", "For T < 0.1 the max-over-heads g(T, ε) follows the 1/T trend", "gradient",
          "1/T", "gradient.png"),
    Claim("Fig. 4", "For T ≥ 1 the curves for all ε collapse and drop by ≈ 2 orders",
          "gradient", "collapse", "gradient.png"),
    Claim("§3.4 / Cor. 3 cav. 2", "g(T, ε) ≤ √2/ε (simplex diameter) on synthetic rows",
          "gradient_synthetic", "sqrt(2)/eps", "gradient.png"),
)


def fit_to_context(args: Sequence[str], ctx: int) -> list[str]:
  """Step flags with every length clipped to the model's context ``ctx`` (n_positions).

  ``--length=L`` becomes min(L, ctx); ``--lengths=`` keeps the values <= ctx (or [ctx] if none
  is); ``--ns=`` and ``--n_values=`` keep the N below the smallest length used (or that length
  minus one), since queries t <= N are skipped (AMBIG-8).
  """
  out, lengths = [], []
  for a in args:
    name, _, value = a.partition("=")
    if name == "--length":
      v = min(int(value), ctx)
      lengths.append(v)
      a = f"--length={v}"
    elif name == "--lengths":
      vs = [int(x) for x in value.split(",") if int(x) <= ctx] or [ctx]
      lengths += vs
      a = "--lengths=" + ",".join(map(str, vs))
    out.append(a)
  if lengths:
    top = min(lengths)
    for i, a in enumerate(out):
      name, _, value = a.partition("=")
      if name in ("--ns", "--n_values"):
        ns = [int(x) for x in value.split(",") if int(x) < top] or [top - 1]
        out[i] = f"{name}=" + ",".join(map(str, ns))
  return out


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the user asked for: the model, quick or paper settings, and the corpus."""

  model: str = "tiny"
  quick: bool = False
  seed: int = 0
  windows: Optional[int] = None   # corpus windows per length (default 1 quick, 4 full)
  data_dir: Optional[str] = None
  text: Optional[str] = None


def step_args(step: Step, settings: Settings, ctx: Optional[int] = None) -> list[str]:
  """The flags one step runs with, common flags included; lengths fit the context ``ctx``."""
  args = list(step.quick if settings.quick else step.full)
  if step.uses_model and ctx is not None:
    args = fit_to_context(args, ctx)
  args.append(f"--seed={settings.seed}")
  if step.uses_model:
    windows = settings.windows or (1 if settings.quick else 4)
    args += [f"--model={settings.model}", f"--windows={windows}"]
    if settings.data_dir:
      args.append(f"--data_dir={settings.data_dir}")
    if settings.text:
      args.append(f"--text={settings.text}")
  return args


def load_verdicts(step_dir: Path) -> list[dict[str, Any]]:
  """The verdicts a step wrote in its results.json (empty if it wrote none)."""
  path = step_dir / "results.json"
  if not path.exists():
    return []
  return json.loads(path.read_text()).get("results", {}).get("verdicts", [])


def short(value: Any, limit: int = 160) -> str:
  """A compact one-line rendering of a measured value for the table."""
  def fmt(v):
    if isinstance(v, float):
      return f"{v:.4g}"
    if isinstance(v, dict):
      return "{" + ", ".join(f"{k}: {fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
      return "[" + ", ".join(fmt(x) for x in v) + "]"
    return str(v)

  text = fmt(value).replace("|", "\\|")
  return text if len(text) <= limit else text[:limit - 1] + "…"


def claim_rows(out: Path, step_status: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
  """One row per claim: the first verdict of its step whose claim contains ``Claim.match``."""
  rows = []
  for c in CLAIMS:
    st = step_status.get(c.step)
    row = {"ref": c.ref, "paper": c.statement, "step": c.step, "figure": "", "measured": "",
           "verdict": "not testable", "reason": ""}
    if st is None:
      row["reason"] = f"step {c.step} not run (--only)"
    elif st["status"] != "ok":
      row["reason"] = f"step {c.step} failed: {st.get('error', '')}"
    else:
      found = [v for v in load_verdicts(out / c.step) if c.match.lower() in v["claim"].lower()]
      if not found:
        row["reason"] = f"step {c.step} reported no verdict matching '{c.match}'"
      else:
        v = found[0]
        row.update(verdict=v["verdict"], measured=short(v.get("measured")),
                   reason=v.get("reason", "") or v.get("detail", ""), claim=v["claim"])
      fig = out / c.step / c.figure
      if c.figure and fig.exists():
        row["figure"] = f"{c.step}/{c.figure}"
    rows.append(row)
  return rows


def render_report(rows, step_status, settings: Settings, seconds: float,
                  ctx: Optional[int]) -> str:
  """report.md: the verdict table, the ambiguity defaults and the steps with their commands."""
  n = {k: sum(r["verdict"] == k for r in rows) for k in ("holds", "fails", "not testable")}
  lines = [
      "# Reproduction of arXiv 2508.17821: verdict per claim", "",
      f"Model: `{settings.model}`; settings: {'quick' if settings.quick else 'paper'}; "
      f"seed {settings.seed}; wall time {seconds:.0f} s."
      + (f" Lengths are clipped to the model's context (n_positions = {ctx})." if ctx else ""),
      f"Summary: {n['holds']} hold, {n['fails']} fail, {n['not testable']} not testable.", "",
      "| # | Where | Paper's claim | Measured | Verdict | Figure |",
      "|---|---|---|---|---|---|",
  ]
  for i, r in enumerate(rows, 1):
    verdict = f"**{r['verdict']}**" + (f" ({r['reason']})" if r["verdict"] == "not testable"
                                       and r["reason"] else "")
    fig = f"[{Path(r['figure']).name}]({r['figure']})" if r["figure"] else "—"
    lines.append(f"| {i} | {r['ref']} | {r['paper']} | {r['measured']} | {verdict} | {fig} |")
  lines += ["", "## Ambiguity defaults used (PAPER.md §6)", ""] + [f"- {a}" for a in AMBIGUITIES]
  lines += ["", "## Steps", "", "| step | status | seconds | command |", "|---|---|---|---|"]
  for name, st in step_status.items():
    secs = "skipped (done)" if st.get("skipped") else f"{st['seconds']:.1f}"
    lines.append(f"| {name} | {st['status']} | {secs} | `{st['command']}` |")
  lines += ["", "Each step's `results.json` holds the full numbers behind its rows; the verdict "
            "criteria are in each verdict's `detail`."]
  return "\n".join(lines) + "\n"


AMBIGUITIES = (
    "AMBIG-1 d̃ = Σ_{i∉I_N} ‖α_i x_i − s‖ (sum of norms); the norm-of-sum form is also computed",
    "AMBIG-2 Δ = ‖q‖·max_i‖k_i‖ in Corollary 1",
    "AMBIG-3 inclusion probability N/(L−1) in the random-set sum",
    "AMBIG-4 the plotted and KS-tested expectation is the Jensen main sum",
    "AMBIG-5 ξ_i as a square root; upper bound exp(−(ξ_i − r)_+²/(2M²)) (a heuristic envelope)",
    "AMBIG-6 War and Peace, PG #2600 body from Book One Chapter I; consecutive non-overlapping "
    "L-token windows",
    "AMBIG-7 x_i = per-head value vectors (normalised to the sphere for Theorem 2)",
    "AMBIG-8 every query t with its causal prefix; t ≤ N skipped; attention sink kept",
    "AMBIG-9 KS significance α = 0.01 on the per-head token-averaged samples",
    "AMBIG-10 M = 1; δ = min pairwise distance over the prefix; strict inequality",
    "AMBIG-11 T on a log grid 1e-3…1e2",
    "AMBIG-12 T on the raw q·k scale (native T = √d_head = 8 for GPT-2)",
    "AMBIG-13 v isotropic Gaussian, unit length, visible positions only, fresh per token",
    "AMBIG-14 L ∈ {32, …, 1024}; N searched by bisection with monotonicity checked",
    "AMBIG-15 Fig. 2 mean ± IQR over heads; Fig. 3 boxes over heads; Fig. 4 max over heads",
)


