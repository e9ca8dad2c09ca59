r"""The whole reproduction (``experiments.reproduce``), step by step, ours against a reference
revision of this repository, alternating in one driver process, with the verdicts compared.

  python -m benchmarks.reproduce [--model=tiny|smollm2|DIR] [--quick] [--only=gradient,...]
      [--reference_rev=GIT_REV] [--pairs=1] [--out=report.json]

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

flags.DEFINE_string("model", "tiny", "Model spec passed to experiments.reproduce.")
flags.DEFINE_bool("quick", False, "Pass --quick (small grids).")
flags.DEFINE_string("only", "", "Comma-separated step names (default every step).")
flags.DEFINE_string("reference_rev", "", "Git revision to time as the reference (e.g. the "
                    "commit before the speed work); empty = ours only.")
flags.DEFINE_integer("pairs", 1, "Alternating (reference, ours) runs.")
flags.DEFINE_string("out", None, "Write the JSON report here too.")
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
  if FLAGS.only:
    args.append(f"--only={FLAGS.only}")
  env = dict(os.environ, PYTHONPATH=str(tree))
  t0 = time.perf_counter()
  r = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t0
  res = {"wall_s": wall, "exit": r.returncode, "steps": {}, "verdicts": {}}
  try:
    data = json.loads((out / "results.json").read_text())["results"]
  except (OSError, ValueError, KeyError) as e:
    res["error"] = f"{e}; stderr: {r.stderr[-500:]}"
    return res
  res["steps"] = {n: st.get("seconds") for n, st in data.get("steps", {}).items()}
  for row in data.get("claims", []):
    res["verdicts"][row.get("id") or row.get("ref", "?")] = row.get("verdict")
  return res


def main(argv):
  del argv
  runs = {"ours": [], "reference": []}
  with tempfile.TemporaryDirectory(prefix="bench_reproduce_") as tmp:
    tmp = Path(tmp)
    ref_tree = _export(FLAGS.reference_rev, tmp / "ref") if FLAGS.reference_rev else None
    for i in range(FLAGS.pairs):
      if ref_tree is not None:
        runs["reference"].append(_run(ref_tree, tmp / f"ref_out{i}"))
      runs["ours"].append(_run(REPO, tmp / f"ours_out{i}"))
  report = {"model": FLAGS.model, "quick": FLAGS.quick, "reference_rev": FLAGS.reference_rev,
            "pairs": FLAGS.pairs, "runs": runs, "steps": {}}
  names = list(runs["ours"][0]["steps"]) if runs["ours"] else []
  for name in names:
    o = [r["steps"].get(name) for r in runs["ours"] if r["steps"].get(name) is not None]
    f = [r["steps"].get(name) for r in runs["reference"] if r["steps"].get(name) is not None]
    row = {"ours_s": statistics.median(o) if o else None,
           "reference_s": statistics.median(f) if f else None,
           "paper_min": PAPER_MIN.get(name)}
    if row["ours_s"] and row["reference_s"]:
      row["ratio"] = row["reference_s"] / row["ours_s"]
    report["steps"][name] = row
    ratio = f", ratio {row['ratio']:.1f}x" if "ratio" in row else ""
    ref = f"reference {row['reference_s']:.1f} s, " if row["reference_s"] else ""
    paper = f" (paper: {row['paper_min']} min)" if row["paper_min"] else ""
    print(f"{name}: {ref}ours {row['ours_s'] or float('nan'):.1f} s{ratio}{paper}")
  wo = statistics.median(r["wall_s"] for r in runs["ours"])
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
  app.run(main)
