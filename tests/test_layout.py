"""The layout of ``limits/`` as issue 26 states it, measured from the source with ``ast``.

- no import cycle between library modules (every import counts, module-level or inside a
  function);
- no import from a lower layer to a higher one: core ← maths ← models ← theorems ←
  claims/reproduction ← CLI (:data:`LAYERS`);
- at most 25 entries at the top of ``limits/``;
- ``__all__`` names only what the module defines or, in a package's ``__init__``, what its own
  package defines (no module re-exports another package's names), except ``limits.gpt2``,
  DESIGN.md's stable GPT-2 entry point;
- no function named ``*verdict*`` outside ``limits/claims/``;
- no absl flag declared by hand in ``experiments/`` (``DEFINE_*``): every CLI's flags are
  generated from its config dataclass (``define_config_flags``);
- importing every library module changes no absl flag and not ``absl.app.run``.

Each measure is also checked against a small hand-made tree that breaks it, so a measure that
always passes turns this file red.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Layer of each module, by the longest matching dotted prefix (0 = lowest). A module may import
# modules of its own layer or below.
LAYERS = {
    "limits": 0, "limits.errors": 0, "limits.numerics": 0, "limits.runs": 0,
    "limits.normalizers": 1, "limits.jacobians": 1, "limits.bounds": 1, "limits.stats": 1,
    "limits.selection": 1, "limits.data": 1,
    "limits.models": 2, "limits.gpt2": 2, "limits.records": 2,
    "limits.distance": 3, "limits.separability": 3, "limits.gradient": 3,
    "limits.vanishing": 3, "limits.training": 3, "limits.plotting": 3,
    "limits.claims": 4, "limits.reproduction": 4, "limits.sweep": 4, "limits.scorecard": 4,
    "limits.cli": 5,
}
MAX_TOP_LEVEL = 25
REEXPORT_ALLOWED = {"limits.gpt2"}  # DESIGN.md "Public API": limits.gpt2.load/forward/Output


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
  """Dotted name -> file for every module under root/limits."""
  out = {}
  for p in sorted((root / "limits").rglob("*.py")):
    parts = p.relative_to(root).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    out[name] = p
  return out


def imports(root: pathlib.Path) -> dict[str, set[str]]:
  """Module -> the library modules it imports (``from pkg import sub`` counts as ``pkg.sub``
  when ``sub`` is a module, else as ``pkg``)."""
  mods = modules(root)
  graph = {}
  for name, path in mods.items():
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    deps = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        deps |= {a.name for a in node.names if a.name.split(".")[0] == "limits"}
      elif isinstance(node, ast.ImportFrom):
        if node.level:
          base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
          target = ".".join(base + ([node.module] if node.module else []))
        else:
          target = node.module or ""
        if target.split(".")[0] != "limits":
          continue
        for a in node.names:
          sub = f"{target}.{a.name}"
          deps.add(sub if sub in mods else target)
    graph[name] = {d for d in deps if d in mods and d != name}
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one module (Tarjan, iterative)."""
  index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
  for start in graph:
    if start in index:
      continue
    work = [(start, iter(sorted(graph[start])))]
    index[start] = low[start] = counter[0]
    counter[0] += 1
    stack.append(start)
    on.add(start)
    while work:
      v, it = work[-1]
      w = next(it, None)
      if w is not None:
        if w not in index:
          index[w] = low[w] = counter[0]
          counter[0] += 1
          stack.append(w)
          on.add(w)
          work.append((w, iter(sorted(graph[w]))))
        elif w in on:
          low[v] = min(low[v], index[w])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[v])
      if low[v] == index[v]:
        comp = []
        while True:
          w = stack.pop()
          on.discard(w)
          comp.append(w)
          if w == v:
            break
        if len(comp) > 1:
          out.append(sorted(comp))
  return out


def layer(name: str) -> int:
  best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
  return LAYERS[best]


def upward_imports(graph) -> list[str]:
  return [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
          for a, deps in sorted(graph.items()) for b in sorted(deps) if layer(b) > layer(a)]


def reexports(root: pathlib.Path) -> list[str]:
  """``__all__`` entries a module neither defines nor (for a package __init__) imports from its
  own package."""
  bad = []
  for name, path in modules(root).items():
    if name in REEXPORT_ALLOWED:
      continue
    tree = ast.parse(path.read_text())
    exported = []
    for node in tree.body:
      if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                              for t in node.targets):
        exported = [e.value for e in node.value.elts]
    if not exported:
      continue
    defined, source = set(), {}
    for node in tree.body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        defined.add(node.name)
      elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        defined |= {t.id for t in targets if isinstance(t, ast.Name)}
      elif isinstance(node, ast.ImportFrom) and node.module:
        for a in node.names:
          source[a.asname or a.name] = node.module
    own = name if path.name == "__init__.py" else None
    for n in exported:
      if n in defined:
        continue
      mod = source.get(n, "")
      if own is None or not (mod == own or mod.startswith(own + ".")):
        bad.append(f"{name}.__all__ names {n!r} from {mod or '?'}")
  return bad


def verdict_functions(root: pathlib.Path) -> list[str]:
  out = []
  for name, path in modules(root).items():
    if name == "limits.claims" or name.startswith("limits.claims."):
      continue
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "verdict" in node.name:
        out.append(f"{name}.{node.name}")
  return out


def hand_declared_flags(root: pathlib.Path) -> list[str]:
  """Calls in ``experiments/*.py`` that declare an absl flag by hand (``flags.DEFINE_*`` or a
  bare ``DEFINE_*``): every CLI's flags come from its config dataclass through
  ``limits.cli.shared_flags.define_config_flags``."""
  out = []
  for path in sorted((root / "experiments").glob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name.startswith("DEFINE_"):
          out.append(f"experiments/{path.name}:{node.lineno} {name}")
  return out


def top_level(root: pathlib.Path) -> list[str]:
  return sorted(p.name for p in (root / "limits").iterdir() if p.name != "__pycache__")


# ------------------------------------------------------------------------ the tree itself


def test_no_import_cycle():
  assert cycles(imports(ROOT)) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
  graph = imports(ROOT)
  assert set(graph) == set(modules(ROOT))
  assert all(layer(m) in range(6) for m in graph)  # every module has a layer
  assert upward_imports(graph) == []


def test_top_level_entries():
  entries = top_level(ROOT)
  assert len(entries) <= MAX_TOP_LEVEL, entries


def test_no_module_reexports_another_packages_names():
  assert reexports(ROOT) == []


def test_verdicts_only_in_claims():
  assert verdict_functions(ROOT) == []


def test_cli_flags_only_from_config_dataclasses():
  assert hand_declared_flags(ROOT) == []
  assert len(list((ROOT / "experiments").glob("*.py"))) > 5  # the measure looked at the CLIs


def test_importing_the_library_changes_no_global_state():
  names = sorted(m for m in modules(ROOT))
  code = textwrap.dedent(f"""
      import importlib
      from absl import app, flags
      before = (sorted(flags.FLAGS), app.run.__defaults__)
      for name in {names!r}:
        importlib.import_module(name)
      after = (sorted(flags.FLAGS), app.run.__defaults__)
      assert before == after, (set(after[0]) ^ set(before[0]), before[1], after[1])
      print("ok", len({names!r}))
  """)
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.split() == ["ok", str(len(names))]


# ---------------------------------------------------- each measure fails on a broken tree


def _tree(tmp_path, files: dict[str, str]) -> pathlib.Path:
  for rel, text in files.items():
    p = tmp_path / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
  return tmp_path


def test_measures_catch_a_broken_tree(tmp_path):
  root = _tree(tmp_path, {
      "limits/__init__.py": "",
      "limits/errors.py": "def f():\n  from limits import stats\n",  # 0 -> 1: upward
      "limits/stats.py": "from limits.errors import f\n",
      "limits/distance/__init__.py": ("from limits.distance.rows import g\n"
                                      "from limits.stats import h\n"
                                      "__all__ = ['g', 'h']\n"),  # h: another package's name
      "limits/distance/rows.py": "def g():\n  from limits.distance import task\n",
      "limits/distance/task.py": ("from limits.distance import rows\n"
                                  "def print_verdict():\n  pass\n"),
  })
  graph = imports(root)
  assert cycles(graph) == [["limits.distance.rows", "limits.distance.task"],
                           ["limits.errors", "limits.stats"]]
  assert upward_imports(graph) == ["limits.errors (layer 0) imports limits.stats (layer 1)"]
  assert reexports(root) == ["limits.distance.__all__ names 'h' from limits.stats"]
  assert verdict_functions(root) == ["limits.distance.task.print_verdict"]
  _tree(root, {"experiments/ok.py": ("from limits.cli import shared_flags\n"
                                     "def define_flags():\n"
                                     "  shared_flags.define_config_flags(Config)\n"),
               "experiments/bad.py": ("from absl import flags\nfrom absl.flags import DEFINE_bool\n"
                                      "def define_flags():\n"
                                      "  flags.DEFINE_integer('n', 1, 'N.')\n"
                                      "  DEFINE_bool('x', False, 'X.')\n")})
  assert hand_declared_flags(root) == ["experiments/bad.py:4 DEFINE_integer",
                                       "experiments/bad.py:5 DEFINE_bool"]
  for i in range(MAX_TOP_LEVEL - 4):  # 4 entries so far
    (root / "limits" / f"m{i}.py").write_text("")
  assert len(top_level(root)) == MAX_TOP_LEVEL
  (root / "limits" / "one_more.py").write_text("")
  assert len(top_level(root)) == MAX_TOP_LEVEL + 1


@pytest.mark.parametrize("name,expected", [("limits.cli.shared_flags", 5), ("limits.runs.results", 0),
                                           ("limits.distance.kernels", 3), ("limits", 0),
                                           ("limits.models.gpt2.model", 2)])
def test_layer_of_a_module(name, expected):
  assert layer(name) == expected
