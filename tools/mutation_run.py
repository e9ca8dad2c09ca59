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

``--sample K`` runs a uniform random sample (``--seed``) of K of the group's mutants instead of
all of them (mutmut first generates every mutant and maps tests to functions, then runs only the
named ones); the summary then gives the sample's kill rate with a 95 % Wilson interval for the
whole group. Run again in the same WORK without ``--sample`` to finish the rest.

``--only NAMES`` (comma list of mutant names or mutmut patterns) runs just those mutants on a
fresh copy of the committed tree: the re-check of survivors after tests were added (names are
per function and stable while that function is unchanged). The summary still counts every
mutant's last status in WORK, so give the re-check its own WORK and read the named ones.
"""

from __future__ import annotations

import argparse
import collections
import io
import math
import os
import pathlib
import random
import subprocess
import sys
import tarfile

REPO = pathlib.Path(__file__).resolve().parent.parent
# group -> (modules mutated, test files that cover them)
GROUPS = {
    # test_layer_kinds_report: stats.by_layer_kind (issue 29), reached by no other group test
    "stats": (["limits/stats.py"], ["tests/test_stats.py", "tests/test_mutation_kills.py",
                                    "tests/test_layer_kinds_report.py"]),
    "bounds": (["limits/bounds.py"], ["tests/test_bounds.py", "tests/test_mutation_kills.py"]),
    "selection": (["limits/selection.py"], ["tests/test_selection.py"]),
    "claims": (["limits/claims/judges_*.py", "limits/claims/assessment.py",
                "limits/claims/criteria.py"],
               ["tests/test_claims.py", "tests/test_claims_registry.py",
                "tests/test_vector_readings.py", "tests/test_mutation_kills.py"]),
    # The rows group runs the in-process tests of the three modules. Left out, as they test
    # other modules and cost minutes per mutant on 2 busy cores: tests/test_distance_fast.py
    # (the fused layer kernels of limits/distance/kernels.py, whose references these modules
    # are), the device/sharding paths of limits/separability/, and the CLI subprocesses
    # (invisible to mutmut).
    "rows": (["limits/separability/rows.py", "limits/distance/rows.py",
              "limits/gradient/rows.py"],
             ["tests/test_separability.py", "tests/test_distance.py",
              "tests/test_gradient_screen.py", "tests/test_gradient_robustness.py",
              "tests/test_mutation_kills.py", "tests/test_mutation_kills_rows.py"]),
}
# group -> tests left out of its run (pytest node ids)
DESELECT = {
    "claims": ["tests/test_claims.py::test_docs_in_sync"],
    "rows": ["tests/test_separability.py::test_chunked_sharded_layout_does_not_change_the_estimate",
             "tests/test_separability.py::test_one_vs_eight_simulated_devices",
             "tests/test_separability.py::test_device_layer_sums_equal_the_reference_path",
             "tests/test_gradient_robustness.py::test_temperature_below_float32_range_is_an_error",
             "tests/test_gradient_robustness.py::test_ctrl_c_keeps_finished_temperatures"],
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
  deselect = [a for g in groups for node in DESELECT.get(g, []) for a in ("--deselect", node)]
  with open(work / "pyproject.toml", "a") as f:
    f.write("\n[tool.mutmut]\n"
            'source_paths = ["limits"]\n'
            f"only_mutate = {_toml_list(modules)}\n"
            'also_copy = ["tests", "experiments", "benchmarks", "docs", "requirements.txt"]\n'
            f"pytest_add_cli_args_test_selection = {_toml_list(tests)}\n"
            # Fork each mutant's worker from a server that never ran a test: forked from the
            # main process (mutmut's default), which ran the suite, a worker inherits JAX's
            # thread pools and can deadlock with no CPU used until the wall timeout, which
            # mutmut then counts as a kill.
            'process_isolation = "forkserver"\n'
            # test_docs_in_sync compares docs/claims.md with text rendered from the judges'
            # docstrings, which mutmut's trampolines change: it fails on the unmutated copy.
            "pytest_add_cli_args = "
            + _toml_list(["-n", "0", "-p", "no:cacheprovider", "-m", "not slow", "-x", "-q"]
                         + deselect) + "\n")


def summarise(work: pathlib.Path, sampled: bool = True) -> str:
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
  if ran and ran < len(status) and sampled:
    lo, hi = wilson(killed, ran)
    lines.append(f"{ran} of {len(status)} mutants ran; 95 % Wilson interval for the group's kill "
                 f"rate (if they are a uniform sample): [{lo:.1%}, {hi:.1%}]")
  lines += [f"survived: {name}" for name, s in sorted(status.items()) if s == "survived"]
  return "\n".join(lines)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
  """95 % Wilson score interval for a binomial proportion k/n."""
  p = k / n
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return max(0.0, centre - half), min(1.0, centre + half)


def all_mutants(work: pathlib.Path) -> list[str]:
  out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work,
                       capture_output=True, text=True).stdout
  return sorted(line.strip().rpartition(": ")[0] for line in out.splitlines()
                if ": " in line and not line.startswith(" " * 8))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--groups", default=",".join(GROUPS), help=f"comma list of {', '.join(GROUPS)}")
  p.add_argument("--work", default="/tmp/limits-mutation", type=pathlib.Path)
  p.add_argument("--children", default=2, type=int, help="parallel mutant workers")
  p.add_argument("--summary-only", action="store_true", help="summarise an earlier run in WORK")
  p.add_argument("--sample", type=int, default=0, help="run only K mutants drawn at random")
  p.add_argument("--seed", type=int, default=0, help="seed of --sample")
  p.add_argument("--only", default="",
                 help="comma list of mutant names or mutmut patterns (e.g. "
                      "'limits.bounds.x_lemma1_constants__mutmut_*') to run instead of all: "
                      "re-checking survivors after tests were added")
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
    run = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.children)]
    with open(args.work / "mutmut.log", "w") as log:
      if args.only:
        run += [n for n in args.only.split(",") if n]
      elif args.sample:
        # Generate every mutant (mutmut then stops: the pattern names no mutant), then draw.
        subprocess.run(run + ["limits.no_such_module.*"], cwd=args.work, env=env, stdout=log,
                       stderr=subprocess.STDOUT)
        names = all_mutants(args.work)
        names = sorted(random.Random(args.seed).sample(names, min(args.sample, len(names))))
        (args.work / "mutation_sample.txt").write_text("\n".join(names) + "\n")
        run += names
      subprocess.run(run, cwd=args.work, env=env, stdout=log, stderr=subprocess.STDOUT)
  text = summarise(args.work, sampled=not args.only)
  (args.work / "mutation_summary.txt").write_text(text + "\n")
  print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
