"""The help of the CLIs whose flags are generated from their config dataclasses (issue 26, "one
experiment protocol"): byte-identical to the hand-declared flags they replaced.

The fixtures in tests/data/cli_help/ are ``python -m experiments.X --helpshort`` and
``--helpfull`` as printed by the ORIGINAL code (commit cb9858c, flags declared by hand with
``flags.DEFINE_*``), with the checkout's path replaced by ``<REPO>``; they were not produced by
the code under test. ``--helpshort`` is compared whole; of ``--helpfull`` the section of the
module's own flags (absl's sections follow absl's version, not ours). One edit since: the time
that ``reproduce --quick`` quotes for the embedded model (13 min -> 2-3 min, measured in the
sixteenth session, WORKSPACE), changed by hand in both reproduce fixtures; and (seventeenth
session) reproduce's docstring, which --helpshort prints, says its steps are forked from the step
server (``limits.reproduction.stepserver``): reproduce.helpshort rewritten from the help, the
diff reviewed (those three lines only). Nothing else differs from cb9858c's help.
"""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import REPO, run_experiment

FIXTURES = REPO / "tests" / "data" / "cli_help"
MODULES = ("scorecard", "sweep", "reproduce", "compare")


def _normalised(text: str) -> str:
  return text.replace(str(REPO), "<REPO>")


def module_section(helpfull: str, module: str) -> str:
  """The lines of ``helpfull`` from the module's ``<REPO>/experiments/<module>.py:`` header up to
  the next section header (an unindented ``name:`` line)."""
  lines = helpfull.splitlines()
  start = lines.index(f"<REPO>/experiments/{module}.py:")
  end = next((i for i in range(start + 1, len(lines))
              if re.fullmatch(r"\S+:", lines[i])), len(lines))
  return "\n".join(lines[start:end])


def test_module_section_stops_at_the_next_header():
  text = "doc\n\n<REPO>/experiments/x.py:\n  --a: A\n    (default: '1')\n\nabsl.app:\n  --b: B\n"
  assert module_section(text, "x") == "<REPO>/experiments/x.py:\n  --a: A\n    (default: '1')\n"
  with pytest.raises(ValueError):
    module_section(text, "y")


@pytest.mark.parametrize("module", MODULES)
def test_helpshort_unchanged(module):
  r = run_experiment(module, ["--helpshort"], timeout=120)
  assert r.returncode == 0, r.stderr
  expected = (FIXTURES / f"{module}.helpshort").read_text(encoding="utf-8")
  assert _normalised(r.stdout) == expected


@pytest.mark.parametrize("module", MODULES)
def test_helpfull_section_unchanged(module):
  r = run_experiment(module, ["--helpfull"], timeout=120)
  assert r.returncode == 0, r.stderr
  expected = (FIXTURES / f"{module}.helpfull").read_text(encoding="utf-8")
  got = module_section(_normalised(r.stdout), module)
  assert got == module_section(expected, module)
  assert "--" in got and got.count("\n") > 5  # the section holds the flags, not an empty cut


# ------------------------------------------------------------------- bad values, both sides
# Each check moved from a hand-declared flag to a config field, just outside and just inside
# its bound. The expected lines are those cb9858c printed (after "error: "), run by hand
# there: python -m experiments.X --NAME=VALUE.

def _configs():
  from limits import reproduction, sweep
  from limits.claims.compare import CompareConfig
  from limits.scorecard.config import Config

  return {"scorecard": Config, "sweep": sweep.SweepConfig, "reproduce": reproduction.Settings,
          "compare": CompareConfig}


def _parse(module, args):
  from absl import flags

  from limits.cli import shared_flags

  fv = flags.FlagValues()
  shared_flags.define_config_flags(_configs()[module], flag_values=fv)
  fv(["prog", *args])
  return fv


POS = "must be a positive integer"
BAD = [  # (module, args, the line cb9858c printed after "error: ")
    *[("scorecard", [f"--{n}=0"], f"flag --{n}=0: --{n} {POS}")
      for n in ("length", "eval_windows", "calib_windows", "calib_grid", "jac_rows",
                "layer_stride", "timing_rounds")],
    ("scorecard", ["--calib_iters=-1"], "flag --calib_iters=-1: --calib_iters must be >= 0"),
    *[("scorecard", [f"--{n}={v}"], f"flag --{n}={v}: --{n} must be a positive number")
      for n in ("calib_lo", "calib_hi", "epsilon") for v in ("0.0", "-1.0", "inf")],
    ("sweep", ["--experiment=nope"], "flag --experiment=nope: unknown experiment; choose from "
     "distance_model, gradient, separability_sphere, toy"),
    ("sweep", ["--batch_size=0"], f"flag --batch_size=0: --batch_size {POS}"),
    ("sweep", ["--devices=-1"], "flag --devices=-1: --devices must be >= 0 (0 = all devices)"),
    ("sweep", ["--grid=a=1", "--config=x.json"],
     "flags grid=a=1, config=x.json: give either --grid or --config, not both"),
    ("reproduce", ["--windows=0"], f"flag --windows=0: --windows {POS}"),
    ("reproduce", ["--windows=-2"], f"flag --windows=-2: --windows {POS}"),
    ("compare", ["--width=19"], "flag --width=19: --width must be an integer >= 20"),
]
GOOD = [  # the same checks just inside their bounds
    *[("scorecard", [f"--{n}=1"]) for n in ("length", "eval_windows", "calib_windows",
                                            "calib_grid", "jac_rows", "layer_stride",
                                            "timing_rounds")],
    ("scorecard", ["--calib_iters=0"]),
    *[("scorecard", [f"--{n}=1e-300"]) for n in ("calib_lo", "calib_hi", "epsilon")],
    ("sweep", ["--experiment=toy"]), ("sweep", ["--batch_size=1"]), ("sweep", ["--devices=0"]),
    ("sweep", ["--grid=a=1"]), ("sweep", ["--config=x.json"]),
    ("reproduce", ["--windows=1"]), ("compare", ["--width=20"]),
]


@pytest.mark.parametrize("module,args,line", BAD)
def test_bad_value_message_unchanged(module, args, line):
  from absl import flags

  with pytest.raises(flags.IllegalFlagValueError) as e:
    _parse(module, args)
  assert str(e.value) == line


@pytest.mark.parametrize("module,args", GOOD)
def test_value_inside_the_bound_passes(module, args):
  fv = _parse(module, args)
  name, value = args[0][2:].split("=", 1)
  assert str(fv[name].value) == value or fv[name].value == float(value)


def test_repeated_run_flag_and_list_defaults():
  """compare's --run is repeated (a tuple field), the scorecard's lists are comma strings."""
  from limits.runs import options

  fv = _parse("compare", ["--run=a=x", "--run=b=y"])
  assert fv["run"].value == ["a=x", "b=y"] and fv["run"].default == []
  assert options.from_flag(_field("compare", "run"), ["a=x", "b=y"]) == ("a=x", "b=y")
  fv = _parse("scorecard", [])
  assert fv["distance_ns"].default == "5,100" and fv["lemma1_lengths"].default == ""
  assert "ks_alpha" not in fv and "radius" not in fv  # library-only settings


def _field(module, name):
  import dataclasses

  return next(f for f in dataclasses.fields(_configs()[module]) if f.name == name)


@pytest.mark.parametrize("module,name,text,value", [
    ("scorecard", "distance_ns", "5, 7", (5, 7)), ("scorecard", "lemma1_lengths", "", ()),
    ("scorecard", "candidates", "sparsemax,softmax,softmax", ("sparsemax", "softmax")),
    ("reproduce", "only", "gradient, vanishing,", ("gradient", "vanishing")),
    ("reproduce", "only", "", ())])
def test_list_flags_parse(module, name, text, value):
  from limits.runs import options

  assert options.from_flag(_field(module, name), text) == value


@pytest.mark.parametrize("module,name,text,line", [
    ("scorecard", "distance_ns", "a", "--distance_ns='a' is not a comma-separated list of "
     "integers"),
    ("scorecard", "candidates", "sparsemax", "--candidates must include 'softmax' (the "
     "reference row)"),
    ("reproduce", "only", "gradient,nope", "--only has unknown step(s) ['nope']; allowed: "
     "gradient, gradient_synthetic, vanishing, distance_vary_length, distance_vary_n, "
     "distance_critical_n, separability_sphere, separability_model, distance_vary_length_key, "
     "distance_vary_length_hidden, distance_vary_n_key, distance_vary_n_hidden, "
     "distance_critical_n_key, distance_critical_n_hidden, separability_model_key, "
     "separability_model_hidden")])
def test_list_flag_errors_unchanged(module, name, text, line):
  from limits.errors import LimitsError
  from limits.runs import options

  with pytest.raises(LimitsError) as e:
    options.from_flag(_field(module, name), text)
  assert str(e.value) == line


@pytest.mark.parametrize("module,args,line", [
    ("scorecard", ["--calib_iters=-1"], "flag --calib_iters=-1: --calib_iters must be >= 0"),
    ("sweep", ["--experiment=nope"], "flag --experiment=nope: unknown experiment; choose from "
     "distance_model, gradient, separability_sphere, toy"),
    ("reproduce", ["--only=nope"], "--only has unknown step(s) ['nope']; allowed: gradient, "),
    ("compare", ["--width=19"], "flag --width=19: --width must be an integer >= 20")])
def test_cli_bad_value_is_one_line_exit_2(module, args, line):
  """End to end: one line ``error: ...`` on stderr (the message starts as cb9858c's), exit 2."""
  r = run_experiment(module, args, timeout=120)
  assert r.returncode == 2
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: " + line), lines
