"""Two runs' recorded values compared file by file: what changed besides the clock.

Every experiment writes ``results.json`` (``experiment``, ``config``, ``env``, ``results``);
a reproduction run holds one per step (``DIR/<step>/results.json``) and its own at the top.
:func:`diff_runs` compares the ``config`` and ``results`` trees of each such file in two runs
key by key, leaving out what differs between any two runs of the same computation:

- the ``env`` block (commit, time, platform, library versions);
- timings: keys in :data:`TIMING_KEYS` or ending in ``_seconds``;
- where the model was read from: keys named ``path`` (two checkouts differ there);
- how a run was executed: the ``resume`` block (units resumed after an interrupt vs computed);
- the run directory itself: a string that starts with it (a step's log file) is compared with
  that prefix replaced by ``<run>``.

Numbers (int or float, not bool) are compared by relative difference
``|a - b| / max(|a|, |b|)`` (NaN equals NaN, an infinity equals the same infinity); every other
value (strings, bools, null, list lengths, key sets) must be equal and is listed where it is
not. Used to check that a refactor, another commit or another machine gives the same numbers::

  python -m experiments.compare --run=before=runs/a --run=after=runs/b --values
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Iterator, Sequence

from limits.errors import LimitsError
from limits.runs.results import read_json_object

# Keys whose values are wall-clock measurements (names used by limits' writers).
TIMING_KEYS = frozenset({"seconds", "wall_s", "timings_s", "timing_s", "time_utc"})
# "path": where the model was read from; "resume": how many units a run resumed from an
# interrupted attempt or computed (limits.runs.resume), not what it computed.
IGNORED_KEYS = frozenset({"path", "resume"})


@dataclasses.dataclass(frozen=True)
class FileDiff:
  """One results.json of two runs compared (``name`` relative to the run directory)."""
  name: str
  numbers: int = 0  # numbers compared
  differing: int = 0  # numbers not equal
  max_rel: float = 0.0  # largest relative difference
  max_key: str = ""  # where it is
  others: tuple[str, ...] = ()  # non-numeric differences, 'key: a != b'
  only_in: str = ""  # label of the one run holding this file, if only one does


def _ignored(key: str) -> bool:
  return key in TIMING_KEYS or key in IGNORED_KEYS or key.endswith("_seconds")


def _is_number(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool)


def rel_diff(a: float, b: float) -> float:
  """|a - b| / max(|a|, |b|); 0 for equal values (NaN = NaN, inf = inf), inf for NaN vs not."""
  a, b = float(a), float(b)
  if a == b or (math.isnan(a) and math.isnan(b)):
    return 0.0
  if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
    return math.inf
  return abs(a - b) / max(abs(a), abs(b))


def _short(x: Any) -> str:
  text = json.dumps(x) if not isinstance(x, str) else repr(x)
  return text if len(text) <= 40 else text[:39] + "…"


def _walk(a: Any, b: Any, key: str) -> Iterator[tuple[str, Any, Any]]:
  """(key path, a, b) for every leaf pair of two JSON trees; mismatched shapes as one leaf."""
  if isinstance(a, dict) and isinstance(b, dict):
    for k in sorted(set(a) | set(b), key=str):
      if _ignored(str(k)):
        continue
      sub = f"{key}/{k}" if key else str(k)
      if k not in a or k not in b:
        yield sub, a.get(k, "<absent>"), b.get(k, "<absent>")
      else:
        yield from _walk(a[k], b[k], sub)
  elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
    for i, (x, y) in enumerate(zip(a, b)):
      yield from _walk(x, y, f"{key}[{i}]")
  else:
    yield key, a, b


def diff_trees(name: str, a: Any, b: Any) -> FileDiff:
  """Compares two JSON trees (see the module docstring for what is left out)."""
  numbers = differing = 0
  max_rel, max_key, others = 0.0, "", []
  for key, x, y in _walk(a, b, ""):
    if _is_number(x) and _is_number(y):
      numbers += 1
      r = rel_diff(x, y)
      if r > 0:
        differing += 1
        if r > max_rel:
          max_rel, max_key = r, key
    elif x != y or type(x) is not type(y):
      others.append(f"{key}: {_short(x)} != {_short(y)}")
  return FileDiff(name, numbers, differing, max_rel, max_key, tuple(others))


def _relative_to_run(x: Any, prefixes: tuple[str, ...]) -> Any:
  if isinstance(x, dict):
    return {k: _relative_to_run(v, prefixes) for k, v in x.items()}
  if isinstance(x, list):
    return [_relative_to_run(v, prefixes) for v in x]
  if isinstance(x, str):
    for p in prefixes:
      if x == p or x.startswith(p + "/"):
        return "<run>" + x[len(p):]
  return x


def _run_prefixes(run_dir: Path) -> tuple[str, ...]:
  """The run directory as given and resolved, longest first (for :func:`_relative_to_run`)."""
  return tuple(sorted({str(run_dir).rstrip("/"), str(run_dir.resolve())}, key=len, reverse=True))


def _load(path: Path, prefixes: tuple[str, ...]) -> dict:
  """The config and results blocks of a results.json, run-directory paths made relative."""
  data = read_json_object(path)
  return _relative_to_run({k: data.get(k) for k in ("config", "results")}, prefixes)


def _files(run_dir: Path) -> set[str]:
  if not run_dir.is_dir():
    raise LimitsError(f"{run_dir}: not a directory (give the --out_dir of a run)")
  names = {p.relative_to(run_dir).as_posix() for p in run_dir.glob("*/results.json")}
  if (run_dir / "results.json").is_file():
    names.add("results.json")
  if not names:
    raise LimitsError(f"{run_dir}: no results.json in it or in its subfolders")
  return names


def diff_runs(a: tuple[str, str | Path], b: tuple[str, str | Path]) -> list[FileDiff]:
  """Every results.json of two runs ((label, dir) each) compared; top-level file first."""
  (la, da), (lb, db) = (a[0], Path(a[1])), (b[0], Path(b[1]))
  fa, fb = _files(da), _files(db)
  pa, pb = _run_prefixes(da), _run_prefixes(db)
  out = []
  for name in sorted(fa | fb, key=lambda n: (n != "results.json", n)):
    if name not in fb:
      out.append(FileDiff(name, only_in=la))
    elif name not in fa:
      out.append(FileDiff(name, only_in=lb))
    else:
      out.append(diff_trees(name, _load(da / name, pa), _load(db / name, pb)))
  return out


def render(diffs: Sequence[FileDiff], labels: tuple[str, str], max_others: int = 3) -> str:
  """Markdown table, one row per file, and a one-line total."""
  lines = [f"Values of {labels[0]} against {labels[1]} (config and results; env, timings and "
           "model paths left out).", "",
           "| file | numbers | differing | largest relative difference | other differences |",
           "|---|---|---|---|---|"]
  for d in diffs:
    if d.only_in:
      lines.append(f"| {d.name} | — | — | — | only in {d.only_in} |")
      continue
    largest = f"{d.max_rel:.1e} ({d.max_key})" if d.differing else "0"
    others = "; ".join(d.others[:max_others]).replace("|", "/")
    if len(d.others) > max_others:
      others += f"; +{len(d.others) - max_others} more"
    lines.append(f"| {d.name} | {d.numbers} | {d.differing} | {largest} | {others or '—'} |")
  n = sum(d.numbers for d in diffs)
  k = sum(d.differing for d in diffs)
  worst = max((d.max_rel for d in diffs), default=0.0)
  odd = sum(len(d.others) + bool(d.only_in) for d in diffs)
  lines += ["", f"{len(diffs)} files, {n} numbers, {k} differing (largest relative difference "
            f"{worst:.1e}), {odd} other differences."]
  return "\n".join(lines) + "\n"
