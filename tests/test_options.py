"""Config fields that declare their own flags (limits.runs.options) and the flags generated from
them (limits.cli.shared_flags.define_config_flags): one declaration per setting."""

from __future__ import annotations

import dataclasses

import pytest
from absl import flags

from limits.cli import shared_flags
from limits.distance.task import DistanceConfig
from limits.gradient.task import GradientConfig
from limits.runs import options
from limits.separability.task import SeparabilityConfig
from limits.training import RESUME_KEYS, TrainConfig
from limits.vanishing import VanishingConfig

CONFIGS = (DistanceConfig, GradientConfig, SeparabilityConfig, VanishingConfig, TrainConfig)


@dataclasses.dataclass(frozen=True)
class Toy:
  n: int = options.option(3, "A count.", check=options.POSITIVE_INT)
  x: float | None = options.option(None, "A scale.", check=(options.positive, "be > 0"))
  kind: str = options.option("a", "Which.", choices=("a", "b"))
  on: bool = options.option(True, "Switch.")
  name: str | None = options.option(None, "A name.")
  hidden: int = options.option(7, "Library only.", cli=False)
  plain: int = 1  # no metadata: not a flag


def _flag_values(config_cls) -> flags.FlagValues:
  """The flags of config_cls defined into a fresh FlagValues (absl's global is left alone)."""
  fv = flags.FlagValues()
  shared_flags.define_config_flags(config_cls, flag_values=fv)
  return fv


def test_generated_flags_follow_the_fields():
  fv = _flag_values(Toy)
  assert sorted(fv) == ["kind", "n", "name", "on", "x"]  # hidden (cli=False) and plain: none
  assert isinstance(fv["n"], flags.Flag) and fv["n"].default == 3 and fv["n"].help == "A count."
  assert type(fv["n"].parser).__name__ == "IntegerParser"
  assert type(fv["x"].parser).__name__ == "FloatParser"
  assert type(fv["on"].parser).__name__ == "BooleanParser"
  assert type(fv["kind"].parser).__name__ == "EnumParser"
  assert fv["kind"].parser.enum_values == ["a", "b"]
  assert type(fv["name"].parser).__name__ == "ArgumentParser"  # a plain string


@pytest.mark.parametrize("arg,ok", [("--n=1", True), ("--n=0", False), ("--n=-3", False),
                                    ("--x=0.5", True), ("--x=0", False), ("--kind=b", True),
                                    ("--kind=c", False)])
def test_generated_checks_on_both_sides(arg, ok):
  fv = _flag_values(Toy)
  if ok:
    fv(["prog", arg])
  else:
    with pytest.raises(flags.Error) as e:
      fv(["prog", arg])
    name = arg[2:].split("=")[0]
    assert f"--{name}" in str(e.value) or name in str(e.value)


@pytest.mark.parametrize("config_cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_of_an_experiment_config_is_its_flag(config_cls):
  """Each experiment config: every field is a flag with the field's default and a help text,
  and the flags are exactly the fields (no second declaration that could drift)."""
  fv = _flag_values(config_cls)
  fields = {f.name: f for f in dataclasses.fields(config_cls)}
  assert set(fv) == set(fields)
  for name, f in fields.items():
    assert fv[name].default == f.default, name
    md = options.metadata(f)
    prefix = f"<{'|'.join(md['choices'])}>: " if md["choices"] else ""  # absl's enum help
    assert md["help"] and fv[name].help == prefix + md["help"], name


def test_shared_settings_keep_one_wording():
  helps = {c.__name__: {f.name: options.metadata(f)["help"] for f in dataclasses.fields(c)}
           for c in CONFIGS}
  assert helps["DistanceConfig"]["model"] == options.MODEL_HELP
  assert helps["VanishingConfig"]["data_dir"] == options.DATA_DIR_HELP
  assert helps["GradientConfig"]["model"] == "For --source=model: " + options.MODEL_HELP
  assert helps["DistanceConfig"]["out_dir"] == "Run directory (default results/distance/<time>)."


@pytest.mark.parametrize("args,ok", [
    (["--seq_len=64", "--n_positions=64", "--short_len=0"], True),
    (["--seq_len=65", "--n_positions=64", "--short_len=0"], False),
    (["--seq_len=64", "--short_len=16"], True), (["--seq_len=64", "--short_len=24"], False),
    (["--n_embd=64", "--n_head=4"], True), (["--n_embd=64", "--n_head=5"], False)])
def test_cross_checks_of_a_config_on_both_sides(args, ok):
  fv = _flag_values(TrainConfig)
  if ok:
    fv(["prog", *args])
  else:
    with pytest.raises(flags.IllegalFlagValueError):
      fv(["prog", *args])


def test_extra_metadata_is_kept():
  """TrainConfig's resume keys come from the same declaration as its flags."""
  assert "lr" in RESUME_KEYS and "seed" in RESUME_KEYS and "n_embd" in RESUME_KEYS
  assert "out_dir" not in RESUME_KEYS and "ckpt_every" not in RESUME_KEYS
