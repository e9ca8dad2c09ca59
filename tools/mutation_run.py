"""Mutation run over the verdict-critical modules (issue 30, item 6); not part of the test suite.

    python tools/mutation_run.py                      # every group below, 2 workers
    python tools/mutation_run.py --groups stats,bounds --work /tmp/limits-mutation --children 1

Copies the committed tree (``git archive HEAD``) into ``--work`` (default
``/tmp/limits-mutation``), adds a ``[tool.mutmut]`` section there (the checkout's
pyproject.toml is never touched, and mutmut's ``mutants/`` folder stays out of it), and runs
``mutmut run`` (mutmut 3, requirements-dev.txt) on the chosen groups' modules with only the
groups' test files (``-m "not slow"``; mutmut then runs, per mutant, the tests that reach the
mutated function). At the end it prints, and writes to ``WORK/mutation_summary.txt``, the
counts per status, the kill rate (killed + timeout over all mutants that ran) and every
surviving mutant's name; ``mutmut show NAME`` (run in WORK) prints its diff. Progress while
it runs: ``WORK/mutmut.log``. Several hours on 2 busy cores for every group; one group (e.g.
stats) takes minutes to an hour.
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import pathlib
import subprocess
import sys
import tarfile

REPO = pathlib.Path(__file__).resolve().parent.parent
# group -> (modules mutated, test files that cover them)
GROUPS = {
    "stats": (["limits/stats.py"], ["tests/test_stats.py", "tests/test_mutation_kills.py"]),
    "bounds": (["limits/bounds.py"], ["tests/test_bounds.py", "tests/test_mutation_kills.py"]),
    "selection": (["limits/selection.py"], ["tests/test_selection.py"]),
    "claims": (["limits/claims/judges_*.py", "limits/claims/assessment.py",
                "limits/claims/criteria.py"],
               ["tests/test_claims.py", "tests/test_claims_registry.py",
                "tests/test_vector_readings.py", "tests/test_mutation_kills.py"]),
    "rows": (["limits/separability/rows.py", "limits/distance/rows.py",
              "limits/gradient/rows.py"],
             ["tests/test_separability.py", "tests/test_distance.py",
              "tests/test_distance_fast.py", "tests/test_mutation_kills.py"]),
}


def _toml_list(items) -> str:
  return "[" + ", ".join(f'"{x}"' for x in items) + "]"


def prepare(work: pathlib.Path, groups: list[str]) -> None:
  """WORK = the committed tree + a [tool.mutmut] section for ``groups``."""
  work.mkdir(parents=True, exist_ok=True)
  tar = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True)
  with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
    t.extractall(work, filter="data")
  modules = sorted({m for g in groups for m in GROUPS[g][0]})
  tests = sorted({f for g in groups for f in GROUPS[g][1]})
  with open(work / "pyproject.toml", "a") as f:
    f.write("\n[tool.mutmut]\n"
            'source_paths = ["limits"]\n'
            f"only_mutate = {_toml_list(modules)}\n"
            'also_copy = ["tests", "experiments", "benchmarks", "docs", "requirements.txt"]\n'
            f"pytest_add_cli_args_test_selection = {_toml_list(tests)}\n"
            'pytest_add_cli_args = ["-n", "0", "-p", "no:cacheprovider", "-m", "not slow", '
            '"-x", "-q"]\n')


def summarise(work: pathlib.Path) -> str:
  """Counts per status, kill rate and the survivors, from ``mutmut results --all true``."""
  out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work,
                       capture_output=True, text=True).stdout
  status = {}
  for line in out.splitlines():
    if ":" in line and not line.startswith(" " * 8):
      name, _, state = line.strip().rpartition(": ")
      if name:
        status[name] = state.strip()
  counts = collections.Counter(status.values())
  ran = sum(n for s, n in counts.items() if s not in ("not checked", "skipped"))
  killed = counts.get("killed", 0) + counts.get("timeout", 0)
  lines = [f"mutants: {len(status)}; " + ", ".join(f"{s} {n}" for s, n in sorted(counts.items())),
           f"kill rate: {killed}/{ran} = {killed / ran:.1%}" if ran else "kill rate: nothing ran"]
  lines += [f"survived: {name}" for name, s in sorted(status.items()) if s == "survived"]
  return "\n".join(lines)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--groups", default=",".join(GROUPS), help=f"comma list of {', '.join(GROUPS)}")
  p.add_argument("--work", default="/tmp/limits-mutation", type=pathlib.Path)
  p.add_argument("--children", default=2, type=int, help="parallel mutant workers")
  p.add_argument("--summary-only", action="store_true", help="summarise an earlier run in WORK")
  args = p.parse_args(argv)
  groups = [g for g in args.groups.split(",") if g]
  unknown = [g for g in groups if g not in GROUPS]
  if unknown:
    print(f"--groups: unknown {', '.join(unknown)}; allowed: {', '.join(GROUPS)}",
          file=sys.stderr)
    return 2
  if not args.summary_only:
    prepare(args.work, groups)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ""}
    with open(args.work / "mutmut.log", "w") as log:
      subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                      str(args.children)], cwd=args.work, env=env, stdout=log,
                     stderr=subprocess.STDOUT)
  text = summarise(args.work)
  (args.work / "mutation_summary.txt").write_text(text + "\n")
  print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
