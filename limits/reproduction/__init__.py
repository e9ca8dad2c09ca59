"""The reproduction plan: which experiment runs, how its outputs are read, and the report.

``experiments/reproduce.py`` is the CLI over this module. Each :class:`Step` is one experiment
CLI with config overrides (paper settings, and a ``quick`` variant for 2 CPU cores). The claims
live in ``limits.claims`` and name the step whose outputs decide them; this module refers to
them by id only. :func:`assess_all` reads each step's ``results.json`` and CSV tables (by key,
never by the text of a claim), :func:`limits.claims.assess` judges every claim under each
reading of its ambiguities, and :func:`render_report` writes ``report.md``. A step's outputs
are never trusted blindly: :func:`step_done` and :func:`load_results` reject a missing,
truncated or unfinished results.json (and :func:`step_done` one recorded with other settings).
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from limits import claims
from limits.claims import report_cells as rc
from limits.errors import LimitsError
from limits.runs import options

EXPERIMENT = "reproduce"
FULL_LENGTHS = "32,64,128,256,512,1024"


Overrides = Mapping[str, Any]  # config field (= flag name) -> value


@dataclasses.dataclass(frozen=True)
class Step:
  """One experiment run: its CLI ``module`` with config overrides, into ``OUT/<name>``; the
  module's config dataclass is :attr:`config` (:data:`CONFIGS`), whose fields the overrides
  must be (:func:`check_plan`: one line at plan time for a misspelled one).

  ``full`` (the paper's settings) and ``quick`` (a few minutes on 2 CPU cores) map fields of
  the experiment's config dataclass (the CLI's flags of the same names) to values; the rest
  keep their defaults. ``uses_model`` steps also get ``model``, ``windows`` and the corpus
  settings, and have their lengths fitted to the model's context (:func:`fit_to_context`). A
  ``reading`` step reruns the step it names under another option of an ambiguity, ``(base
  step, AMBIG-n, option)``: the claims decided by the base step are judged on its outputs under
  that option.
  """

  name: str
  module: str
  full: Overrides
  quick: Overrides
  uses_model: bool = True
  reading: Optional[tuple[str, str, str]] = None

  @property
  def config(self) -> type:
    """The experiment's config dataclass (:data:`CONFIGS`, imported on first use: the task
    modules import JAX, ``reproduce --help`` does not)."""
    module, _, name = CONFIGS[self.module].partition(":")
    return getattr(importlib.import_module(module), name)


# The config dataclass of each experiment CLI a step runs ("module:Class"): its fields are the
# CLI's flags, so a step's overrides are checked against them (check_overrides).
CONFIGS = {"experiments.gradient": "limits.gradient.task:GradientConfig",
           "experiments.vanishing": "limits.vanishing:VanishingConfig",
           "experiments.distance": "limits.distance.task:DistanceConfig",
           "experiments.separability": "limits.separability.task:SeparabilityConfig"}


STEPS = (
    Step("gradient", "experiments.gradient",
         dict(source="model", length=1024, rows=64),
         dict(source="model", length=128, rows=32, check_rows=4,
              temperatures="1e-3,3e-3,1e-2,3e-2,0.1,0.3,1,3,10,30,100")),
    Step("gradient_synthetic", "experiments.gradient",
         dict(source="synthetic", length=64, rows=256),
         dict(source="synthetic", length=32, rows=64, check_rows=4,
              temperatures="1e-3,1e-2,0.1,1,10,100"), uses_model=False),
    Step("vanishing", "experiments.vanishing", dict(lengths=FULL_LENGTHS),
         dict(lengths="32,64,128,256")),
    Step("distance_vary_length", "experiments.distance",
         dict(mode="vary_length", lengths=FULL_LENGTHS, ns="5"),
         dict(mode="vary_length", lengths="32,64,128,256,512", ns="5")),
    Step("distance_vary_n", "experiments.distance",
         dict(mode="vary_n", lengths="1024", ns="1,5,10,20,100"),
         dict(mode="vary_n", lengths="512", ns="1,5,10,20,100")),
    Step("distance_critical_n", "experiments.distance",
         dict(mode="critical_n", lengths=FULL_LENGTHS, ks_alpha=0.01),
         dict(mode="critical_n", lengths="64,128,256", ks_alpha=0.01)),
    Step("separability_sphere", "experiments.separability",
         dict(source="sphere", length=1024, samples=2000),
         dict(source="sphere", length=256, samples=200, heads=4), uses_model=False),
    Step("separability_model", "experiments.separability",
         dict(source="model", length=1024, n_values="1,2,4,8,16,32,64,128"),
         dict(source="model", length=256, n_values="1,2,4,8,16,32,64,128")),
)
# AMBIG-7: the vectors x_i of Theorems 1 and 2 are the per-head value vectors by default; the
# other two readings (per-head keys, the layer's normalised residual stream) rerun every step
# whose claims depend on x_i, appended so the default-reading steps come first.
VECTOR_READINGS = ("key", "hidden")


def _reading_steps(base: Step, ambig: str, field: str, options) -> tuple[Step, ...]:
  return tuple(dataclasses.replace(base, name=f"{base.name}_{key}",
                                   full={**base.full, field: key},
                                   quick={**base.quick, field: key},
                                   reading=(base.name, ambig, key))
               for key in options)


STEPS += tuple(alt for base in STEPS
               if base.name.startswith("distance") or base.name == "separability_model"
               for alt in _reading_steps(base, "AMBIG-7", "vectors", VECTOR_READINGS))
STEP_NAMES = tuple(s.name for s in STEPS)


def _ints(text: str) -> list[int]:
  return [int(x) for x in str(text).split(",")]


def fit_to_context(overrides: Overrides, ctx: int) -> dict[str, Any]:
  """Overrides with every length clipped to the model's context ``ctx`` (n_positions).

  ``length`` becomes min(L, ctx); ``lengths`` keeps the values <= ctx (or [ctx] if none is);
  ``ns`` and ``n_values`` keep the N below the smallest length used (or that length minus
  one), since queries t <= N are skipped (AMBIG-8).
  """
  out, lengths = dict(overrides), []
  if "length" in out:
    out["length"] = min(int(out["length"]), ctx)
    lengths.append(out["length"])
  if "lengths" in out:
    vs = [v for v in _ints(out["lengths"]) if v <= ctx] or [ctx]
    lengths += vs
    out["lengths"] = ",".join(map(str, vs))
  if lengths:
    top = min(lengths)
    for name in ("ns", "n_values"):
      if name in out:
        out[name] = ",".join(map(str, [n for n in _ints(out[name]) if n < top] or [top - 1]))
  return out


def _step_names(text: str, name: str) -> tuple[str, ...]:
  """``--only``: comma-separated names of :data:`STEPS` (one line naming the unknown ones)."""
  names = options.comma_items(text, name)
  unknown = [s for s in names if s not in STEP_NAMES]
  if unknown:
    raise LimitsError(f"--{name} has unknown step(s) {unknown}; allowed: "
                      f"{', '.join(STEP_NAMES)}")
  return names


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the user asked for: the model, quick or paper settings, the corpus, and (for the
  command, not the steps) which steps, into which folder, resumed or not. Each field declares
  the ``reproduce`` command's flag of its name (:mod:`limits.runs.options`)."""

  model: str = options.model()
  quick: bool = options.option(False, "Small grids (about 2-3 min for the embedded model's 16 "
                               "steps on 2 idle CPU cores).")
  seed: int = options.seed("Seed passed to every step.")
  windows: Optional[int] = options.windows(  # default 1 quick, 4 full
      None, "Corpus windows per length (default 1 quick, 4 full).")
  data_dir: Optional[str] = options.data_dir()
  text: Optional[str] = options.text()
  only: tuple[str, ...] = options.option((), "Comma-separated step names to run (default all).",
                                         parse=_step_names)
  out_dir: Optional[str] = options.out_dir(EXPERIMENT)
  resume: bool = options.option(True, "Skip steps whose results.json is a finished run with the "
                                "same settings.")


def step_overrides(step: Step, settings: Settings, ctx: Optional[int] = None) -> dict[str, Any]:
  """The config overrides one step runs with, common settings included; lengths fit ``ctx``."""
  out = dict(step.quick if settings.quick else step.full)
  if step.uses_model and ctx is not None:
    out = fit_to_context(out, ctx)
  out["seed"] = settings.seed
  if step.uses_model:
    out["model"] = settings.model
    out["windows"] = settings.windows or (1 if settings.quick else 4)
    if settings.data_dir:
      out["data_dir"] = settings.data_dir
    if settings.text:
      out["text"] = settings.text
  return out


def check_overrides(step: Step, overrides: Overrides) -> None:
  """One LimitsError line unless every override is a field of the step's config
  (:attr:`Step.config`) with an allowed value (the field's ``choices`` and ``check``, as its
  flag would say)."""
  fields = {f.name: f for f in dataclasses.fields(step.config)}
  for name, value in overrides.items():
    if name not in fields:
      raise LimitsError(f"step {step.name}: {name!r} is not a setting of {step.module} "
                        f"({step.config.__name__}); allowed: {', '.join(sorted(fields))}")
    why = options.violation(fields[name], value)
    if why:
      raise LimitsError(f"step {step.name}: {why}")


def check_plan(steps: Sequence[Step], settings: Settings) -> None:
  """:func:`check_overrides` of every step's overrides (before any step runs)."""
  for step in steps:
    check_overrides(step, step_overrides(step, settings))


def as_flags(overrides: Overrides) -> list[str]:
  """Overrides as the CLI's flags: ``--name=value``, ``--name`` / ``--noname`` for booleans."""
  return [(f"--{k}" if v else f"--no{k}") if isinstance(v, bool) else f"--{k}={v}"
          for k, v in overrides.items()]


def step_args(step: Step, settings: Settings, ctx: Optional[int] = None) -> list[str]:
  """The flags one step runs with (:func:`step_overrides` as flags)."""
  return as_flags(step_overrides(step, settings, ctx))


def step_command(step: Step, settings: Settings, ctx: Optional[int] = None) -> str:
  """The step as a user would type it: ``python -m <module> <flags>`` (no ``--out_dir``)."""
  return "python -m " + " ".join([step.module, *step_args(step, settings, ctx)])


def claims_of(step: str) -> tuple[str, ...]:
  """The ids of the claims a step's results decide (a reading step: those of its base step)."""
  base = next((s.reading[0] for s in STEPS if s.name == step and s.reading), step)
  return tuple(c.id for c in claims.CLAIMS if c.step == base)


# ---------------------------------------------------------------------------------------------
# Reading a step's outputs (never trusted blindly).

class Unreadable(Exception):
  """A step's results.json is missing, truncated or not the expected shape (message: why)."""


def load_results(step_dir: Path) -> dict[str, Any]:
  """The "results" block of ``step_dir/results.json``; :class:`Unreadable` with the reason if the
  file is missing, not JSON (e.g. truncated), lacks the block or says it is incomplete."""
  return _load_run(step_dir)[1]


def _load_run(step_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
  """(config, results) blocks of a finished run's results.json, else :class:`Unreadable`."""
  path = Path(step_dir) / "results.json"
  try:
    data = json.loads(path.read_text(encoding="utf-8"))
  except FileNotFoundError:
    raise Unreadable(f"{path} is missing") from None
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise Unreadable(f"{path} is unreadable ({type(e).__name__}: {e})") from None
  results = data.get("results") if isinstance(data, dict) else None
  if not isinstance(results, dict):
    raise Unreadable(f"{path} has no 'results' block")
  if results.get("complete") is False:
    raise Unreadable(f"{path} is from an unfinished run (complete = false)")
  config = data.get("config")
  return (config if isinstance(config, dict) else {}), results


def load_tables(step_dir: Path) -> dict[str, list[dict[str, str]]]:
  """The step's CSV tables the claims read (per_head.csv), as lists of rows; unreadable or
  absent files are left out (the claims that need them say so)."""
  out = {}
  for name in ("per_head.csv",):
    try:
      with open(Path(step_dir) / name, newline="", encoding="utf-8") as f:
        out[name] = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
      pass
  return out


def step_done(step_dir: Path, overrides: Overrides) -> tuple[bool, str]:
  """(True, "") when ``step_dir/results.json`` is a finished run (it loads and is not marked
  incomplete) whose recorded ``config`` has every value of ``overrides``; else (False, why), so
  the step is rerun. The run's own results.json is its only record: no separate marker."""
  try:
    config, _ = _load_run(step_dir)
  except Unreadable as e:
    return False, str(e)
  diff = [k for k, v in overrides.items() if k not in config or config[k] != v]
  if diff:
    k = diff[0]
    return False, (f"its results.json is for other settings ({k}: "
                   f"{config.get(k, '<unset>')!r} there, {overrides[k]!r} now)")
  return True, ""


# ---------------------------------------------------------------------------------------------
# Claims from the step outputs.

def assess_all(out: Path, step_status: Mapping[str, Mapping[str, Any]],
               context: Optional[Mapping[str, Any]] = None) -> list[claims.Assessment]:
  """One assessment per registered claim, from each step's own files (read here, by key).

  A claim whose step was not asked for is "not run (step X not run: --only)"; one whose step
  failed, was interrupted or never started (an interrupted reproduction) is "not run (step X
  failed / interrupted / not reached)"; one whose step's results.json cannot be read says so.
  The reading steps of a claim's step (``Step.reading``) give its verdicts under those options;
  a reading step that did not run leaves that reading "not testable" with the reason.
  """
  cache: dict[str, Any] = {}

  def summary_of(name: str) -> Any:
    """The step's summary, or a string saying why there is none."""
    if name in cache:
      return cache[name]
    st = step_status.get(name)
    if st is None:
      cache[name] = f"not run (step {name} not run: --only)"
    elif st.get("status") != "ok":
      cache[name] = f"not run (step {name} {st.get('status', 'failed')})"
    else:
      step_dir = Path(out) / name
      try:
        results = load_results(step_dir)
      except Unreadable as e:
        cache[name] = f"not run (step {name}: {e})"
      else:
        ctx = dict(context or {})
        if not next((s.uses_model for s in STEPS if s.name == name), True):
          ctx.pop("windows", None)
        base = next((s.reading[0] for s in STEPS if s.name == name and s.reading), name)
        cache[name] = claims.summarize(base, results, load_tables(step_dir), ctx)
    return cache[name]

  out_list = []
  for c in claims.CLAIMS:
    summary = summary_of(c.step)
    if isinstance(summary, str):
      out_list.append(claims.not_run(c, summary))
      continue
    alternates = {(s.reading[1], s.reading[2]): summary_of(s.name)
                  for s in STEPS if s.reading and s.reading[0] == c.step}
    out_list.append(claims.assess(c, summary, alternates))
  return out_list


def row(a: claims.Assessment, out: Optional[Path] = None) -> dict[str, Any]:
  """A JSON-able record of one assessment (the results.json "claims" list)."""
  c = a.claim
  fig = ""
  if c.figure and out is not None and (Path(out) / c.step / c.figure).exists():
    fig = f"{c.step}/{c.figure}"
  measured, sample = a.default.measured, a.default.sample
  return {
      "id": c.id, "kind": c.kind, "where": c.where, "words": c.words, "setting": c.setting,
      "criterion": c.criterion, "step": c.step, "derived_from": list(c.derived_from),
      "verdict": a.verdict, "label": a.label, "robust": a.robust, "measured": measured,
      "reason": a.default.reason, "sample": sample, "figure": fig,
      "vacuous": a.default.vacuous, "evidence": c.evidence, "evidence_why": c.evidence_why,
      "readings": [{"reading": lab, "verdict": v.status, "measured": v.measured,
                    "reason": v.reason, "vacuous": v.vacuous,
                    "excluded": dict(a.excluded).get(lab, "")} for lab, v in a.readings],
  }


# ---------------------------------------------------------------------------------------------
# report.md

MODEL_NAMES = {"smollm2": "SmolLM2-135M-Instruct (GGUF, Q4_1 weights)",
               "gemma3-270m": "Gemma 3 270M, base (GGUF, Q4_K_M weights)",
               "tiny": "the embedded 4-layer model"}


def model_name(spec: str) -> str:
  """The checkpoint as it is: SmolLM2-135M-Instruct with its Q4_1 GGUF weights for ``smollm2``,
  Gemma 3 270M (base) with its Q4_K_M GGUF weights for ``gemma3-270m``, the embedded 4-layer
  model for ``tiny``; any other spec as given."""
  return MODEL_NAMES.get(spec, f"`{spec}`")


def tally_lines(rows: Sequence[Mapping[str, Any]], tally: Mapping[str, int]) -> list[str]:
  """The tally of the paper's empirical claims (primary verdicts), the count robust to every
  admissible reading, and the claims of the other evidence classes by class (never hidden)."""
  counted = ", ".join(f"{n} {k}" for k, n in tally.items() if n)
  own = [r for r in rows if r["kind"] == claims.PAPER and not r["derived_from"]]
  emp = [r for r in own if r.get("evidence", claims.EMPIRICAL) == claims.EMPIRICAL
         and r["verdict"] in (claims.HOLDS, claims.FAILS)]
  robust = sum(r.get("robust") is True for r in emp)
  out = [f"Paper's claims: {counted or 'none assessed'} (empirical on this model, primary "
         "reading; a claim derived from another's measurement is not counted twice; the suite's "
         "own findings are in their own table).",
         f"Of the {len(emp)} judged, {robust} keep their verdict under every admissible reading "
         "(the robustness column names the reading that flips the others)."]
  for ev, words in claims.EVIDENCE.items():
    if ev == claims.EMPIRICAL:
      continue
    xs = [r for r in own if r.get("evidence") == ev]
    if xs:
      out.append(f"Not counted, {words}: " + ", ".join(f"`{r['id']}` {r['verdict']}"
                                                       for r in xs) + ".")
  return out


def render_report(rows: Sequence[Mapping[str, Any]], step_status: Mapping[str, Mapping[str, Any]],
                  settings: Settings, seconds: float, ctx: Optional[int],
                  tally: Mapping[str, int]) -> str:
  """report.md: the paper's claims (tally), the suite's findings, every reading of the claims
  that have readings, the ambiguity options, failed steps and the step commands."""
  lines = [
      "# Reproduction of arXiv 2508.17821: verdict per claim", "",
      f"Model: {model_name(settings.model)}; settings: {'quick' if settings.quick else 'paper'}; "
      f"seed {settings.seed}; wall time {seconds:.0f} s."
      + (f" Lengths are clipped to the model's context (n_positions = {ctx})." if ctx else ""),
      *tally_lines(rows, tally), "",
      "Criteria, thresholds and the reason for each are in docs/claims.md. The verdict is the "
      "primary reading's (the documented default of each ambiguity); *Robustness* says whether "
      "every admissible reading gives the same verdict or names the one that flips it. Readings "
      "excluded for a claim (with the reason, docs/claims.md) change neither. *Evidence*: "
      "empirical on this model, mathematical (any input passes), by construction, or "
      "model-free (the sphere steps and synthetic rows do not use the model).", "",
      "## The paper's claims", "",
      "| # | id | Where | Paper's claim | Criterion | "
      "Measured (primary reading) [sample] | Verdict | Robustness | Evidence | Figure |",
      "|---|---|---|---|---|---|---|---|---|---|",
  ]

  def table(kind):
    out = []
    for i, r in enumerate((r for r in rows if r["kind"] == kind), 1):
      fig = f"[{Path(r['figure']).name}]({r['figure']})" if r["figure"] else "—"
      out.append(f"| {i} | `{r['id']}` | {rc.cell(r['where'])} | {rc.cell(r['words'])} | "
                 f"{rc.cell(r['criterion'])} | {rc.measured_cell(r)} | "
                 f"{rc.verdict_cell(r)} | "
                 f"{rc.robust_cell(r)} | {r.get('evidence', claims.EMPIRICAL)} | {fig} |")
    return out

  lines += table(claims.PAPER)
  lines += ["", "## The suite's own findings (not claims of the paper)", "",
            "| # | id | Where | Statement | Criterion | "
            "Measured (primary reading) [sample] | Verdict | Robustness | Evidence | Figure |",
            "|---|---|---|---|---|---|---|---|---|---|"]
  lines += table(claims.FINDING)
  sink = next((r for r in rows if r["id"] == "attention-sinks"), None)
  if sink is not None:
    lines += ["", f"Attention sinks (`attention-sinks`: {sink['verdict']}). "
              + claims.SINK_READING]
  multi = [r for r in rows if len(r["readings"]) > 1]
  if multi:
    lines += ["", "## Every reading (the first is the primary one)", ""]
    for r in multi:
      lines.append(f"- `{r['id']}`:")
      for x in r["readings"]:
        lines.append(f"  - {x['reading']}: **{x['verdict']}**"
                     + (f", {rc.cell(x['measured'], 200)}" if x["measured"] else "")
                     + (f" ({rc.cell(x['reason'], 200)})" if x["reason"] else "")
                     + (f"; not counted: {rc.cell(x['vacuous'], 300)}"
                        if x.get("vacuous") else "")
                     + (f" — excluded for this claim: {rc.cell(x['excluded'], 300)}"
                        if x.get("excluded") else ""))
  lines += ["", "## Ambiguity options (the first named is the default)", ""]
  lines += [f"- {k}: {v}" for k, v in claims.AMBIGUITIES.items()]
  failed = {n: st for n, st in step_status.items() if st.get("status") != "ok"}
  if failed:
    lines += ["", "## Steps that did not finish", ""]
    lines += [f"- {n}: {st.get('error', st.get('status'))}"
              + (f" (log: `{st['log']}`)" if st.get("log") else "") for n, st in failed.items()]
  lines += ["", "## Steps", "",
            "Seconds are wall time; CPU seconds are user + system; the peak is the step's resident"
            " memory high-water mark (the steps run one at a time).", "",
            "| step | status | seconds | CPU s | peak RSS MB | command |",
            "|---|---|---|---|---|---|"]
  for name, st in step_status.items():
    secs = ("skipped (done)" if st.get("skipped") else
            f"{st['seconds']:.1f}" if st.get("seconds") is not None else "—")
    cpu = f"{st['cpu_s']:.1f}" if st.get("cpu_s") is not None else "—"
    rss = f"{st['peak_rss_mb']:.0f}" if st.get("peak_rss_mb") is not None else "—"
    lines.append(f"| {name} | {st['status']} | {secs} | {cpu} | {rss} | `{st['command']}` |")
  lines += ["", "Each step's `results.json` and CSV files hold the numbers behind its rows."]
  return "\n".join(lines) + "\n"
