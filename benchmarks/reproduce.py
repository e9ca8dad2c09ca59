r"""The whole reproduction (``experiments.reproduce``), step by step, against its floor, and
ours against a reference revision of this repository, alternating in one driver process, with
the verdicts compared.

  python -m benchmarks.reproduce [--model=tiny|smollm2|DIR] [--quick] [--windows=N]
      [--only=gradient,...] [--reference_rev=GIT_REV] [--pairs=1] [--out=report.json]

Paper settings are the default; ``--quick`` the small grids; ``--windows=1`` is the paper's
grids on 1 of its 4 windows (a quarter of the paper settings' work). At the start the driver
measures float32 GEMM, elementwise and sort rates (``benchmarks.work.measure_rates``) and
the machine's load (and the rates again at the end: the ratios from both bracket the machine's
drift within the run); per step it prints wall seconds, the work the step has to do (forward and
statistics GFLOP, elements, sorted entries: ``benchmarks.work.step_work``), the floor those
rates give, the ratio wall / floor, the step's CPU seconds (user + system: the better guide on
a shared machine) and its peak resident memory (the runner's ``wait4`` record); then a bound of
the run's peak (the largest step's plus the driver's: the steps run one at a time).

Each side runs ``python -m experiments.reproduce`` in a subprocess with the same flags into its
own folder; the reference runs from a ``git archive`` of ``--reference_rev`` unpacked in a
temporary folder (the checkout is not touched). Printed per step: seconds of each side (median
over ``--pairs``), the ratio, and the paper's reported time for the algorithm where it gave one
(GPT-2 124M, Apple M1 Pro 10-core CPU). The claim verdicts of the two sides are compared row by
row (they must agree wherever both ran). Without ``--reference_rev`` only ours is timed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

from benchmarks import work


def define_flags() -> None:
  """The absl flags, defined only when this module runs as a program (so tests can import it
  beside other benchmarks that define flags of the same names)."""
  flags.DEFINE_string("model", "tiny", "Model spec passed to experiments.reproduce.")
  flags.DEFINE_bool("quick", False, "Pass --quick (small grids).")
  flags.DEFINE_integer("windows", None, "Pass --windows (default: the reproduction's, 1 quick, "
                       "4 paper).")
  flags.DEFINE_string("only", "", "Comma-separated step names (default every step).")
  flags.DEFINE_string("reference_rev", "", "Git revision to time as the reference (e.g. the "
                      "commit before the speed work); empty = ours only.")
  flags.DEFINE_integer("pairs", 1, "Alternating (reference, ours) runs.")
  flags.DEFINE_string("out", None, "Write the JSON report here too.")
  flags.DEFINE_bool("reuse", False, "Run nothing: tabulate the finished runs already in "
                    "--runs_dir (ours0, ref0, ...), with rates measured now.")
  flags.DEFINE_string("runs_dir", None, "Keep each run's output folder here (ours0, ref0, ...; "
                      "e.g. for experiments.compare); default a temporary folder.")


FLAGS = flags.FLAGS

REPO = Path(__file__).resolve().parent.parent
PAPER_MIN = {"gradient": 1, "distance_vary_length": 24, "distance_vary_n": 37,
             "distance_critical_n": 17 * 60 + 4, "separability_model": 7}


def _export(rev: str, dest: Path) -> Path:
  """Unpacks ``git archive rev`` into dest (read-only use of the repository)."""
  dest.mkdir(parents=True)
  arch = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
  subprocess.run(["tar", "-x", "-C", str(dest)], input=arch.stdout, check=True)
  return dest


def _run(tree: Path, out: Path) -> dict:
  args = [sys.executable, "-m", "experiments.reproduce", f"--model={FLAGS.model}",
          f"--out_dir={out}", "--noresume"]
  if FLAGS.quick:
    args.append("--quick")
  if FLAGS.windows:
    args.append(f"--windows={FLAGS.windows}")
  if FLAGS.only:
    args.append(f"--only={FLAGS.only}")
  env = dict(os.environ, PYTHONPATH=str(tree))
  t0 = time.perf_counter()
  r = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t0
  return _read_run(out, wall, r.returncode, r.stderr)


def _read_run(out: Path, wall, code, stderr="") -> dict:
  """Step seconds and claim verdicts of a finished reproduction in ``out``."""
  res = {"wall_s": wall, "exit": code, "steps": {}, "verdicts": {}}
  try:
    data = json.loads((out / "results.json").read_text())["results"]
  except (OSError, ValueError, KeyError) as e:
    res["error"] = f"{e}; stderr: {stderr[-500:]}"
    return res
  if res["wall_s"] is None:
    res["wall_s"] = data.get("seconds")
  steps = data.get("steps", {})
  res["steps"] = {n: st.get("seconds") for n, st in steps.items()}
  res["cpu_s"] = {n: st.get("cpu_s") for n, st in steps.items()}
  res["peak_rss_mb"] = {n: st.get("peak_rss_mb") for n, st in steps.items()}
  res["driver_peak_rss_mb"] = data.get("driver_peak_rss_mb")
  res["step_server"] = data.get("step_server")  # None: each step a fresh interpreter
  for row in data.get("claims", []):
    res["verdicts"][row.get("id") or row.get("ref", "?")] = row.get("verdict")
  return res


def _work_rows(rates) -> dict[str, dict]:
  """Per step (in run order): the work of ``benchmarks.work.step_work`` and its floor."""
  from limits import reproduction as rp
  from limits.records import sources

  config = sources.model_config(FLAGS.model)
  settings = rp.Settings(model=FLAGS.model, quick=FLAGS.quick, seed=0, windows=FLAGS.windows,
                         data_dir=None, text=None)
  only = [x for x in FLAGS.only.split(",") if x]
  seen: set = set()
  rows = {}
  for step in rp.STEPS:
    if only and step.name not in only:
      continue
    w = work.step_work(step.name, rp.step_overrides(step, settings, config.n_positions),
                       config, seen)
    rows[step.name] = None if w is None else {**w, "floor_s": work.floor_seconds(w, rates)}
  return rows


def end_ratios(steps: dict, works_end: dict) -> dict[str, dict]:
  """Per step with a floor: the floor from the rates measured at the end of the run and the
  ratio wall / that floor, beside the start's (``steps``: the report's rows, ``works_end``:
  :func:`_work_rows` at the end rates). This machine's speed drifts within a run (tens of per
  cent over an hour): the two ratios bracket what the start's rates alone would claim."""
  out = {}
  for name, row in steps.items():
    wk = works_end.get(name)
    if not wk or wk["floor_s"] <= 0 or not row.get("ours_s"):
      continue
    out[name] = {"floor_end_s": wk["floor_s"], "ours_over_floor_end": row["ours_s"] / wk["floor_s"]}
  return out


def _rates_text(rates) -> str:
  return (f"GEMM {rates['gemm_flop_s'] / 1e9:.1f} GFLOP/s, elementwise "
          f"{rates['elementwise_s'] / 1e9:.2f} Gelem/s, sort {rates['sort_s'] / 1e6:.0f} Melem/s")


def _load() -> str:
  return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) + f" ({os.cpu_count()} CPUs)"


def main(argv):
  del argv
  load_start = _load()
  rates = work.measure_rates()
  print(f"{load_start}; rates: {_rates_text(rates)} (float32, measured now)", flush=True)
  works = _work_rows(rates)
  runs = {"ours": [], "reference": []}
  with tempfile.TemporaryDirectory(prefix="bench_reproduce_") as tmp:
    tmp = Path(tmp)
    keep = Path(FLAGS.runs_dir) if FLAGS.runs_dir else tmp
    ref_tree = (_export(FLAGS.reference_rev, tmp / "ref")
                if FLAGS.reference_rev and not FLAGS.reuse else None)
    for i in range(FLAGS.pairs if FLAGS.reuse else 0):
      for side, prefix in (("reference", "ref"), ("ours", "ours")):
        if (keep / f"{prefix}{i}" / "results.json").exists():
          runs[side].append(_read_run(keep / f"{prefix}{i}", None, 0))
    for i in range(0 if FLAGS.reuse else FLAGS.pairs):
      if ref_tree is not None:
        runs["reference"].append(_run(ref_tree, keep / f"ref{i}"))
        print(f"reference run {i}: {runs['reference'][-1]['wall_s']:.0f} s", flush=True)
      runs["ours"].append(_run(REPO, keep / f"ours{i}"))
      print(f"our run {i}: {runs['ours'][-1]['wall_s']:.0f} s", flush=True)
  report = {"model": FLAGS.model, "quick": FLAGS.quick, "windows": FLAGS.windows,
            "reference_rev": FLAGS.reference_rev, "pairs": FLAGS.pairs, "runs": runs,
            "rates": rates, "load_start": load_start, "load_end": _load(), "steps": {}}
  names = list(runs["ours"][0]["steps"]) if runs["ours"] else []
  print(f"{'step':34s} {'ours s':>8s} {'ref s':>8s} {'ref/ours':>8s} {'fwd GF':>8s} "
        f"{'stat GF':>8s} {'Gelem':>7s} {'Msort':>7s} {'floor s':>8s} {'ours/fl':>7s} "
        f"{'ref/fl':>7s} {'CPU s':>8s} {'peak MB':>8s}")
  for name in names:
    o = [r["steps"].get(name) for r in runs["ours"] if r["steps"].get(name) is not None]
    f = [r["steps"].get(name) for r in runs["reference"] if r["steps"].get(name) is not None]
    cpu = [r.get("cpu_s", {}).get(name) for r in runs["ours"]]
    peak = [r.get("peak_rss_mb", {}).get(name) for r in runs["ours"]]
    row = {"ours_s": statistics.median(o) if o else None,
           "ours_cpu_s": statistics.median(c for c in cpu if c is not None)
           if any(c is not None for c in cpu) else None,
           "ours_peak_rss_mb": max((m for m in peak if m is not None), default=None),
           "reference_s": statistics.median(f) if f else None,
           "paper_min": PAPER_MIN.get(name), "work": works.get(name)}
    if row["ours_s"] and row["reference_s"]:
      row["ratio"] = row["reference_s"] / row["ours_s"]
    wk = row["work"]
    if wk and wk["floor_s"] > 0:
      row["ours_over_floor"] = row["ours_s"] / wk["floor_s"] if row["ours_s"] else None
      row["reference_over_floor"] = (row["reference_s"] / wk["floor_s"]
                                     if row["reference_s"] else None)
    report["steps"][name] = row
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    cols = [fmt(row["ours_s"], "8.1f"), fmt(row["reference_s"], "8.1f"),
            fmt(row.get("ratio"), "8.2f")]
    if wk:
      cols += [fmt(wk["forward_flop"] / 1e9, "8.1f"), fmt(wk["flop"] / 1e9, "8.1f"),
               fmt(wk["elements"] / 1e9, "7.3f"), fmt(wk["sort_elements"] / 1e6, "7.1f"),
               fmt(wk["floor_s"], "8.2f"), fmt(row.get("ours_over_floor"), "7.1f"),
               fmt(row.get("reference_over_floor"), "7.1f")]
    else:
      cols += ["-"] * 7
    cols += [fmt(row["ours_cpu_s"], "8.1f"), fmt(row["ours_peak_rss_mb"], "8.0f")]
    paper = f"  (paper: {row['paper_min']} min)" if row["paper_min"] else ""
    print(f"{name:34s} " + " ".join(f"{c:>8s}" if i < 6 or i > 8 else f"{c:>7s}"
                                     for i, c in enumerate(cols)) + paper)
  print(f"load at start: {load_start}; at end: {report['load_end']}")
  if names and not FLAGS.reuse:  # the rates again, after the runs: the drift within the run
    rates_end = work.measure_rates()
    report["rates_end"] = rates_end
    ends = end_ratios(report["steps"], _work_rows(rates_end))
    for name, e in ends.items():
      report["steps"][name].update(e)
    print(f"rates at the end: {_rates_text(rates_end)}; ours / floor from the start's and the "
          "end's rates: " + ", ".join(
              f"{n} {report['steps'][n]['ours_over_floor']:.1f}/{e['ours_over_floor_end']:.1f}"
              for n, e in ends.items()))
  if not runs["ours"]:
    print("no finished run of ours to report")
    return
  wo = statistics.median(r["wall_s"] for r in runs["ours"])
  peaks = [r["ours_peak_rss_mb"] for r in report["steps"].values()
           if r.get("ours_peak_rss_mb") is not None]
  if peaks:  # the steps run one at a time: the run's peak is at most its largest step's +
    # the driver's (each step's record is an upper bound of its own: runner._wait_with_usage)
    drv = max((r.get("driver_peak_rss_mb") or 0 for r in runs["ours"]), default=0)
    srv = max(((r.get("step_server") or {}).get("peak_rss_mb") or 0 for r in runs["ours"]),
              default=0)  # the step server (limits.reproduction.stepserver): ≤ its own + steps'
    report["peak_rss_mb"] = max(peaks) + drv + srv
    print(f"peak resident memory ≤ {max(peaks) + drv + srv:.0f} MB (largest step "
          f"{max(peaks):.0f} MB + the driver's {drv:.0f} MB"
          + (f" + the step server's {srv:.0f} MB" if srv else "")
          + "; the steps run one at a time)")
  for side, rs in runs.items():
    cpu = [(r.get("step_server") or {}).get("cpu_s") for r in rs]
    if any(c is not None for c in cpu):
      print(f"step server ({side}): {statistics.median(c for c in cpu if c is not None):.1f} "
            "CPU s of imports, paid once for all steps (not in any step's CPU s)")
  print(f"total wall: ours {wo:.0f} s" + (
      f", reference {statistics.median(r['wall_s'] for r in runs['reference']):.0f} s"
      if runs["reference"] else ""))
  if runs["reference"]:
    a, b = runs["ours"][0]["verdicts"], runs["reference"][0]["verdicts"]
    diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    report["verdicts_differ"] = diff
    print(f"verdicts: {len(a)} rows, {len(diff)} differ" + (f": {diff}" if diff else ""))
  if FLAGS.out:
    Path(FLAGS.out).write_text(json.dumps(report, indent=2, default=float) + "\n")


if __name__ == "__main__":
  define_flags()
  app.run(main)
