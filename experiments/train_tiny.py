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
D = training.TrainConfig()  # the defaults

def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  flags.DEFINE_integer("steps", D.steps, "Optimiser steps in total.")
  flags.DEFINE_integer("batch_size", D.batch_size, "Sequences per step.")
  flags.DEFINE_integer("seq_len", D.seq_len, "Full training sequence length (<= n_positions).")
  flags.DEFINE_integer("short_len", D.short_len, "Length of the cheaper short sequences: steps "
                       "that are not full-length split each seq_len window into seq_len/short_len "
                       "pieces (same tokens, less attention cost); 0 = always full length.")
  flags.DEFINE_integer("full_every", D.full_every, "Every this many steps is a full-length "
                       "(seq_len) step.")
  flags.DEFINE_float("lr", D.lr, "Peak learning rate.")
  flags.DEFINE_float("min_lr_ratio", D.min_lr_ratio, "Final learning rate as a fraction of --lr.")
  flags.DEFINE_integer("warmup_steps", D.warmup_steps, "Linear warm-up steps.")
  flags.DEFINE_float("weight_decay", D.weight_decay, "AdamW weight decay (weight matrices only).")
  flags.DEFINE_float("clip_norm", D.clip_norm, "Global gradient-norm clipping threshold.")
  cli_flags.define_run_flags(
      D, "train_tiny", seed="Seed for the initialisation and the data order.",
      out_dir="Model directory to write (default results/train_tiny/model).",
      x64="Use float64 (slow; float32 is the default for training).")
  flags.DEFINE_string("ckpt_dir", D.ckpt_dir, "Checkpoint directory (default <out_dir>/../ckpt); "
                      "a checkpoint there with the same settings is resumed.")
  flags.DEFINE_integer("ckpt_every", D.ckpt_every, "Checkpoint every this many steps.")
  cli_flags.define_corpus_flags(
      D, model=None, windows=None, text="Train on this UTF-8 text file instead of War and Peace.")
  flags.DEFINE_float("heldout_fraction", D.heldout_fraction, "Fraction of the text (at its end) "
                     "held out.")
  flags.DEFINE_integer("n_layer", D.n_layer, "Transformer blocks.")
  flags.DEFINE_integer("n_head", D.n_head, "Attention heads per block.")
  flags.DEFINE_integer("n_embd", D.n_embd, "Model width.")
  flags.DEFINE_integer("n_positions", D.n_positions, "Context length.")
  flags.DEFINE_integer("vocab_size", D.vocab_size, "BPE vocabulary size.")
  flags.DEFINE_integer("eval_batch", D.eval_batch, "Windows per held-out evaluation batch.")
  flags.DEFINE_integer("probe_windows", D.probe_windows, "Held-out windows in the fixed probe "
                       "slice whose loss tests re-check (the first windows of the held-out split).")
  flags.DEFINE_integer("sample_tokens", D.sample_tokens, "Tokens generated per sample.")
  flags.DEFINE_float("max_train_seconds", D.max_train_seconds, "Stop training (checkpoint, "
                     "evaluate, export) after this many seconds of this run; 0 = no limit.")
  flags.DEFINE_integer("stop_after", D.stop_after, "Stop this run after this many total steps "
                       "without exporting (checkpoint only; for testing resume); 0 = off.")
  flags.DEFINE_bool("export_on_stop", D.export_on_stop, "With --stop_after: evaluate and export "
                    "the model at that step (reproduces a run that --max_train_seconds stopped "
                    "early).")
  flags.DEFINE_integer("log_every", D.log_every, "Log the training loss every this many steps.")

  cli.require_positive_ints("steps", "batch_size", "seq_len", "full_every", "ckpt_every",
                            "n_layer", "n_head", "n_embd", "n_positions", "eval_batch",
                            "probe_windows", "log_every")
  cli.require_positive_numbers("lr", "clip_norm")
  for _name, _ok, _must in (
      ("min_lr_ratio", lambda v: 0 <= v <= 1, "be in [0, 1]"),
      ("warmup_steps", lambda v: v >= 0, "be >= 0"),
      ("weight_decay", lambda v: v >= 0, "be >= 0"),
      ("heldout_fraction", lambda v: 0 < v < 0.5, "be in (0, 0.5)"),
      ("vocab_size", lambda v: v >= 257, "be >= 257 (256 bytes + <|endoftext|>)"),
      ("sample_tokens", lambda v: v >= 0, "be >= 0"),
      ("max_train_seconds", lambda v: v >= 0, "be >= 0"),
      ("stop_after", lambda v: v >= 0, "be >= 0")):
    cli.require(_name, _ok, _must)
  flags.register_multi_flags_validator(
      ["seq_len", "n_positions"], lambda d: d["seq_len"] <= d["n_positions"],
      message="--seq_len must be <= --n_positions")
  flags.register_multi_flags_validator(
      ["seq_len", "short_len"],
      lambda d: d["short_len"] == 0 or (d["short_len"] >= 1 and d["seq_len"] % d["short_len"] == 0),
      message="--short_len must be 0 or a positive divisor of --seq_len")
  flags.register_multi_flags_validator(
      ["n_embd", "n_head"], lambda d: d["n_embd"] % d["n_head"] == 0,
      message="--n_embd must be divisible by --n_head")


def main(argv):
  del argv
  cli.setup_precision(FLAGS.x64)
  config = cli_flags.config_from_flags(training.TrainConfig)
  training.run(config, command=cli_flags.command_line("experiments.train_tiny"))
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
