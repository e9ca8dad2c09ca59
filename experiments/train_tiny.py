r"""Trains the embedded default model: a small GPT-2 on *War and Peace* (limits/assets/tiny/).

A thin CLI over :func:`limits.training.run` (flags -> :class:`limits.training.TrainConfig` ->
training -> model directory); the module docstring of :mod:`limits.training` describes the
data split, tokenizer, model, optimiser, checkpoints and outputs (``config.json``,
``model.safetensors``, ``tokenizer.json``, ``training.json``, ``MODEL_CARD.md``).

Usage (the shipped model; see limits/assets/tiny/MODEL_CARD.md for the exact command):

  python -m experiments.train_tiny --out_dir=limits/assets/tiny --ckpt_dir=results/train_tiny/ckpt

The corpus is War and Peace from ``--text``, ``--data_dir`` or ``LIMITS_DATA_DIR``, else the
copy embedded in the package (``limits.data.resolve_corpus``). A checkpoint in
``--ckpt_dir`` made with the same settings is resumed exactly.
"""

from __future__ import annotations

from absl import app, flags

from limits import cli, training
from limits.cli import shared_flags as cli_flags

FLAGS = flags.FLAGS

def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(training.TrainConfig)


def main(argv):
  del argv
  cli.setup_precision(FLAGS.x64)
  config = cli_flags.config_from_flags(training.TrainConfig)
  training.run(config, command=cli_flags.command_line("experiments.train_tiny"))
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
