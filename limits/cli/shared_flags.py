"""Every ``experiments/*`` CLI's flags, generated from its config dataclass in one place.

Each CLI calls :func:`define_config_flags` from its ``define_flags`` (run only under
``__main__``); the settings several CLIs share keep one wording in :mod:`limits.runs.options`.
The flags count as the calling CLI's own (``--help`` lists them and
:func:`limits.runs.results.run_identity` reads them), because this module disclaims key flags.

- :func:`define_config_flags`: every flag of a config dataclass, generated from its fields
  (:mod:`limits.runs.options`: default, help, choices, check in one declaration).
- :func:`config_from_flags`: a config dataclass from the flags of the same names (in ``main``).
- :func:`task_main`: the ``main`` of a CLI that is flags -> config -> ``run(config)`` -> folder.
- :func:`command_line`: the command as a user would retype it (recorded in outputs).
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from limits import cli
from limits.runs import options

# Flags defined by the functions below belong to the module that calls them.
flags.disclaim_key_flags()


def define_config_flags(config_cls: type, flag_values: flags.FlagValues | None = None) -> None:
  """The absl flags of a config dataclass whose fields are :func:`limits.runs.options.option` s:
  one flag per field with ``cli`` set, named like the field, with its default, help, choices
  and check (one line ``--NAME must ...`` on a bad value, or the field's ``message``). The
  flag's type follows the field's annotation: bool, int, float, a str with choices (an enum
  flag), a tuple (a repeated flag with ``multi``, else a comma-separated string), else a
  string.
  ``flag_values``: where to define them (default absl's global ``flags.FLAGS``)."""
  fv = flags.FLAGS if flag_values is None else flag_values
  for field in dataclasses.fields(config_cls):
    md = options.metadata(field)
    if not md["cli"]:
      continue
    name, default, help_text = field.name, options.flag_default(field), md["help"]
    kind = str(field.type)
    if md["choices"]:
      flags.DEFINE_enum(name, default, list(md["choices"]), help_text, flag_values=fv)
    elif md.get("multi"):
      flags.DEFINE_multi_string(name, default, help_text, flag_values=fv)
    elif isinstance(field.default, tuple):  # a comma-separated list
      flags.DEFINE_string(name, default, help_text, flag_values=fv)
    elif "bool" in kind:
      flags.DEFINE_bool(name, default, help_text, flag_values=fv)
    elif "int" in kind:
      flags.DEFINE_integer(name, default, help_text, flag_values=fv)
    elif "float" in kind:
      flags.DEFINE_float(name, default, help_text, flag_values=fv)
    else:
      flags.DEFINE_string(name, default, help_text, flag_values=fv)
    if md["check"] is not None:
      ok, must = md["check"]
      if md.get("message"):
        flags.register_validator(name, ok, message=md["message"], flag_values=fv)
      else:
        cli.require(name, ok, must, flag_values=fv)
  for names, ok, message in getattr(config_cls, "CROSS_CHECKS", ()):
    flags.register_multi_flags_validator(list(names), ok, message=message, flag_values=fv)


def config_from_flags(config_cls: type) -> Any:
  """``config_cls`` built from the flags named like its fields (call in ``main``); a field
  without a flag (``cli=False``) keeps its default, a list field is parsed from its flag
  (:func:`limits.runs.options.from_flag`: a bad item is one line naming the flag)."""
  fv = flags.FLAGS
  return config_cls(**{f.name: options.from_flag(f, fv[f.name].value)
                       for f in dataclasses.fields(config_cls) if options.metadata(f)["cli"]})


def task_main(config_cls: type, run: Callable[[Any], object],
              step: Callable[[Any], str] | None = None) -> Callable[[Sequence[str]], None]:
  """``main`` for a CLI over one task: the config from the flags, float64 per its ``x64``, then
  ``run(config)``, printing ``wrote <the folder run returns>`` and, with ``step`` (config ->
  the reproduction step name), the registry's verdicts on the claims that run measured."""

  def main(argv: Sequence[str]) -> None:
    del argv
    config = config_from_flags(config_cls)
    cli.setup_precision(config.x64)
    out = run(config)
    print(f"wrote {out}")
    if step is not None:
      from limits.claims import step_report

      step_report.print_run(step(config), out)

  return main


def command_line(module: str) -> str:
  """``python -m <module> <this process's arguments>``, shell-quoted."""
  return f"python -m {module} " + " ".join(shlex.quote(a) for a in sys.argv[1:])
