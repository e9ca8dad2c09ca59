"""Packaging: pyproject.toml declares what requirements*.txt pin, the wheel carries the data,
and the ``limits`` command (limits/cli/command.py) is ``python -m experiments.NAME``.

The dispatcher is compared with ``python -m experiments.NAME`` itself (the independent
reference): same exit code and output for a bad flag and for ``--help``. The ``slow`` test
builds the wheel offline (``pip wheel --no-build-isolation``), installs it with ``--no-deps``
into a fresh venv that reuses this environment's packages (a ``.pth`` file), and runs
``limits gradient`` from an empty folder outside the checkout, comparing its recorded
settings with the same run of ``python -m experiments.gradient`` from the checkout.
"""

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from limits import data
from limits.cli import command

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _requirements(lines) -> dict:
  """{canonical name: (sorted specifiers, marker)} of requirement lines; comments, blank lines
  and ``-r`` includes are skipped."""
  out = {}
  for line in lines:
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
      continue
    req = Requirement(line)
    name = canonicalize_name(req.name)
    assert name not in out, f"{req.name} is listed twice"
    out[name] = (tuple(sorted(str(s) for s in req.specifier)), str(req.marker or ""),
                 tuple(sorted(req.extras)))
  return out


def _file_requirements(name: str) -> dict:
  return _requirements((REPO / name).read_text(encoding="utf-8").splitlines())


def _diff(a: dict, b: dict) -> list:
  return sorted(f"{k}: {a.get(k)} vs {b.get(k)}" for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def test_requirement_comparison_sees_a_changed_pin_and_ignores_spelling():
  base = _requirements(["absl-py==2.5.1", "numpy>=2.0,<3  # comment"])
  assert base == _requirements(["absl_py == 2.5.1", "-r other.txt", "", "NumPy<3,>=2.0"])
  assert _diff(base, _requirements(["absl-py==2.5.2", "numpy>=2.0,<3"])) != []
  assert _diff(base, _requirements(["absl-py==2.5.1"])) != []  # one left out
  assert _diff(base, _requirements(["absl-py==2.5.1", "numpy>=2.0,<3", "tqdm"])) != []


def test_pyproject_dependencies_are_requirements_txt():
  # Compares the two files (not fixed versions): a pin changed in one must change in the other.
  ours, pinned = _requirements(PYPROJECT["project"]["dependencies"]), _file_requirements(
      "requirements.txt")
  assert ours == pinned, f"pyproject.toml [project] dependencies != requirements.txt: {_diff(ours, pinned)}"


def test_pyproject_test_extra_is_requirements_dev_txt():
  dev = (REPO / "requirements-dev.txt").read_text(encoding="utf-8")
  assert "-r requirements.txt" in dev  # the rest of what it installs is the runtime set above
  ours = _requirements(PYPROJECT["project"]["optional-dependencies"]["test"])
  pinned = _requirements(dev.splitlines())
  assert ours == pinned, f"pyproject.toml test extra != requirements-dev.txt: {_diff(ours, pinned)}"


def test_package_data_covers_every_data_file_of_the_package():
  # Every non-Python file under limits/ must match a package-data pattern, or the wheel lacks it.
  patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["limits"]
  files = [p.relative_to(REPO / "limits").as_posix() for p in (REPO / "limits").rglob("*")
           if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
  assert "assets/war_and_peace.txt.xz" in files and "claims/claims.toml" in files
  missed = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
  assert missed == [], f"not in [tool.setuptools.package-data]: {missed}"
  assert not any(f.endswith(".txt") and "war_and_peace" in f for f in files)  # never plain text
  include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
  assert "experiments*" in include and "limits*" in include
  assert PYPROJECT["project"]["scripts"]["limits"] == "limits.cli.command:main"


def test_every_experiment_is_a_command():
  modules = sorted(p.stem for p in (REPO / "experiments").glob("*.py") if p.stem != "__init__")
  assert sorted(command.COMMANDS) == modules


# ---------------------------------------------------------------------------------------------
# The dispatcher against `python -m experiments.NAME`.

def _run(args, cwd=REPO, exe=(sys.executable, "-m", "limits.cli.command"), env=None, timeout=300):
  env = dict(os.environ if env is None else env, JAX_PLATFORMS="cpu")
  return subprocess.run([*exe, *args], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=timeout)


def test_top_level_help_usage_and_unknown_command():
  p = _run(["--help"])
  assert p.returncode == 0 and p.stderr == "", p.stderr
  for name in command.COMMANDS:
    assert f"\n  {name} " in p.stdout, name
  assert "One command that re-checks every quantitative claim" in p.stdout  # reproduce's line
  p = _run([])
  assert p.returncode == 2 and p.stderr.splitlines()[-1].startswith("error: give a command")
  p = _run(["reproduse", "--quick"])
  assert p.returncode == 2 and p.stdout == ""
  assert p.stderr.splitlines() == [
      f"error: unknown command 'reproduse'; allowed: {', '.join(command.COMMANDS)} "
      "(limits --help lists them)"]
  p = _run(["--version"])
  assert p.returncode == 0 and p.stdout.startswith("limits ")


@pytest.mark.parametrize("args", [["--temperature=-1"], ["--no_such_flag=1"], ["--help"],
                                  ["stray"]])
def test_subcommand_is_python_m_experiment(args):
  # Flag parsing through the dispatcher (argv[0] and the subcommand stripped): the same exit
  # code and the same output as the module run directly.
  ours = _run(["gradient", *args])
  ref = _run(["-m", "experiments.gradient", *args], exe=(sys.executable,))
  assert (ours.returncode, ours.stdout, ours.stderr) == (ref.returncode, ref.stdout, ref.stderr)
  assert ref.returncode != 0 or args == ["--help"]
  if args == ["--help"]:
    assert "--temperature" in ours.stdout and "--source" in ours.stdout
  else:
    assert "Traceback" not in ours.stderr and "error:" in ours.stderr


# ---------------------------------------------------------------------------------------------
# The wheel, installed into a fresh venv, run from an empty folder.

GRADIENT_ARGS = ["--temperature=0.25", "--rows=12", "--length=10", "--check_rows=4", "--seed=3"]


def _build_wheel(tmp_path: Path) -> Path:
  """The wheel of a copy of the source (the build writes build/ and *.egg-info beside it)."""
  src = tmp_path / "src"
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
  for name in ("limits", "experiments"):
    shutil.copytree(REPO / name, src / name, ignore=ignore)
  for name in ("pyproject.toml", "README.md"):
    shutil.copy2(REPO / name, src / name)
  out = tmp_path / "dist"
  p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                      "--no-index", "--quiet", "-w", str(out), str(src)],
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr
  (wheel,) = out.glob("limits-*.whl")
  return wheel


def _venv_reusing_this_environment(path: Path) -> Path:
  """A fresh venv whose site-packages also sees this environment's (jax, numpy, ...) through
  a .pth file, so installing the wheel with --no-deps needs no network. Returns its python."""
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                 timeout=120)
  python = path / "bin" / "python"
  site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                         "['purelib'])"], capture_output=True, text=True, check=True).stdout
  ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
  Path(site.strip(), "_reuse_test_env.pth").write_text("\n".join(sorted(ours)) + "\n")
  return python


@pytest.mark.slow
def test_wheel_installs_the_limits_command_with_its_data(tmp_path):
  wheel = _build_wheel(tmp_path)
  python = _venv_reusing_this_environment(tmp_path / "venv")
  p = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                      str(wheel)], capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr
  limits_cmd = tmp_path / "venv" / "bin" / "limits"
  assert limits_cmd.is_file()
  empty = tmp_path / "empty"
  empty.mkdir()
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", data.ENV_DATA_DIR)}

  # The installed package, not the checkout, with its data: model, corpus, claims registry.
  probe = ("import json, limits, experiments; from limits import data, claims; "
           "from limits.models.loading import TINY_DIR; c = data.resolve_corpus(); "
           "print(json.dumps([limits.__file__, experiments.__file__, c.source, c.sha256, "
           "sorted(p.name for p in TINY_DIR.iterdir()), len(claims.CLAIMS)]))")
  p = _run(["-c", probe], cwd=empty, exe=(str(python),), env=env)
  assert p.returncode == 0, p.stderr
  lim, exp, source, sha, tiny, n_claims = json.loads(p.stdout)
  venv = str((tmp_path / "venv").resolve())
  assert lim.startswith(venv) and exp.startswith(venv), (lim, exp)
  assert (source, sha) == ("embedded", data.REFERENCE_SHA256)
  assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(tiny)
  assert n_claims > 0

  # One subcommand from the empty folder: writes its run; same settings as `python -m`.
  p = _run(["gradient", *GRADIENT_ARGS, "--out_dir=run"], cwd=empty, exe=(str(limits_cmd),),
           env=env)
  assert p.returncode == 0, p.stderr[-3000:]
  ref = _run(["-m", "experiments.gradient", *GRADIENT_ARGS, f"--out_dir={tmp_path / 'ref'}"],
             exe=(sys.executable,))
  assert ref.returncode == 0, ref.stderr[-3000:]
  ours = json.loads((empty / "run" / "results.json").read_text())
  theirs = json.loads((tmp_path / "ref" / "results.json").read_text())
  assert ours["config"] == theirs["config"] and ours["config"]["temperature"] == 0.25
  from limits import claims  # the same claims decided from both runs' measurements
  for cid in ("cor3-printed", "cor3-tight", "lemma2"):
    a, b = (claims.assess(claims.BY_ID[cid], claims.summarize("gradient", r["results"]))
            for r in (ours, theirs))
    assert (a.verdict, a.default.measured) == (b.verdict, b.default.measured), cid
  assert sorted(os.listdir(empty)) == ["run"]  # nothing else written into the folder
  assert (empty / "run" / "gradient.png").stat().st_size > 0
  p = _run(["--help"], cwd=empty, exe=(str(limits_cmd),), env=env)
  assert p.returncode == 0 and "reproduce" in p.stdout
