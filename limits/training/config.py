"""The embedded model's training settings (:class:`TrainConfig`): each declares its CLI flag
(:mod:`limits.runs.options`), and the ones that change the trained weights are marked
``resume`` (:data:`RESUME_KEYS`: a checkpoint is resumed only when they all agree)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from limits.runs import options


def _resumed(default, help: str, check: options.Check | None = None):
  """A setting that changes the trained weights: a checkpoint must share it to be resumed."""
  return options.option(default, help, check=check, resume=True)


def _in(lo, hi, text):
  return (lambda v: v is not None and lo <= v <= hi, text)


_POS, _POSNUM, _NONNEG = options.POSITIVE_INT, options.POSITIVE_NUMBER, options.NONNEGATIVE


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Every setting of a training run; each field declares its CLI flag (``limits.runs.options``).

  The settings declared ``_resumed(...)`` change the trained weights (:data:`RESUME_KEYS`): a
  checkpoint is resumed only when they all agree; the others only say where and how long.
  """

  steps: int = _resumed(600, "Optimiser steps in total.", _POS)
  batch_size: int = _resumed(4, "Sequences per step.", _POS)
  seq_len: int = _resumed(1024, "Full training sequence length (<= n_positions).", _POS)
  short_len: int = _resumed(256, "Length of the cheaper short sequences: steps that are not "
                            "full-length split each seq_len window into seq_len/short_len pieces "
                            "(same tokens, less attention cost); 0 = always full length.")
  full_every: int = _resumed(4, "Every this many steps is a full-length (seq_len) step.", _POS)
  lr: float = _resumed(3e-3, "Peak learning rate.", _POSNUM)
  min_lr_ratio: float = _resumed(0.1, "Final learning rate as a fraction of --lr.",
                                 _in(0, 1, "be in [0, 1]"))
  warmup_steps: int = _resumed(40, "Linear warm-up steps.", _NONNEG)
  weight_decay: float = _resumed(0.1, "AdamW weight decay (weight matrices only).", _NONNEG)
  clip_norm: float = _resumed(1.0, "Global gradient-norm clipping threshold.", _POSNUM)
  seed: int = _resumed(0, "Seed for the initialisation and the data order.")
  out_dir: str | None = options.out_dir("train_tiny", "Model directory to write (default "
                                        "results/train_tiny/model).")
  ckpt_dir: str | None = options.option(None, "Checkpoint directory (default <out_dir>/../ckpt); "
                                        "a checkpoint there with the same settings is resumed.")
  ckpt_every: int = options.option(50, "Checkpoint every this many steps.", check=_POS)
  data_dir: str | None = options.data_dir()
  text: str | None = options.text("Train on this UTF-8 text file instead of War and Peace.")
  heldout_fraction: float = _resumed(0.05, "Fraction of the text (at its end) held out.",
                                     (lambda v: v is not None and 0 < v < 0.5,
                                      "be in (0, 0.5)"))
  n_layer: int = _resumed(4, "Transformer blocks.", _POS)
  n_head: int = _resumed(4, "Attention heads per block.", _POS)
  n_embd: int = _resumed(128, "Model width.", _POS)
  n_positions: int = _resumed(1024, "Context length.", _POS)
  vocab_size: int = _resumed(4096, "BPE vocabulary size.",
                             (lambda v: v is not None and v >= 257,
                              "be >= 257 (256 bytes + <|endoftext|>)"))
  eval_batch: int = options.option(4, "Windows per held-out evaluation batch.", check=_POS)
  probe_windows: int = options.option(2, "Held-out windows in the fixed probe slice whose loss "
                                      "tests re-check (the first windows of the held-out split).",
                                      check=_POS)
  sample_tokens: int = options.option(80, "Tokens generated per sample.", check=_NONNEG)
  max_train_seconds: float = options.option(0.0, "Stop training (checkpoint, evaluate, export) "
                                            "after this many seconds of this run; 0 = no limit.",
                                            check=_NONNEG)
  stop_after: int = options.option(0, "Stop this run after this many total steps without "
                                   "exporting (checkpoint only; for testing resume); 0 = off.",
                                   check=_NONNEG)
  export_on_stop: bool = options.option(False, "With --stop_after: evaluate and export the model "
                                        "at that step (reproduces a run that "
                                        "--max_train_seconds stopped early).")
  x64: bool = _resumed(False, "Use float64 (slow; float32 is the default for training).")
  log_every: int = options.option(10, "Log the training loss every this many steps.", check=_POS)

  # Rules over several settings (checked on the command line before anything runs).
  CROSS_CHECKS = (
      (("seq_len", "n_positions"), lambda d: d["seq_len"] <= d["n_positions"],
       "--seq_len must be <= --n_positions"),
      (("seq_len", "short_len"),
       lambda d: d["short_len"] == 0 or (d["short_len"] >= 1 and d["seq_len"] % d["short_len"] == 0),
       "--short_len must be 0 or a positive divisor of --seq_len"),
      (("n_embd", "n_head"), lambda d: d["n_embd"] % d["n_head"] == 0,
       "--n_embd must be divisible by --n_head"),
  )

  @property
  def out_path(self) -> Path:
    """The model directory (default ``results/train_tiny/model``)."""
    return Path(self.out_dir or "results/train_tiny/model")

  @property
  def ckpt_path(self) -> Path:
    """The checkpoint directory (default ``<out_dir>/../ckpt``)."""
    return Path(self.ckpt_dir) if self.ckpt_dir else self.out_path.parent / "ckpt"

  def settings(self) -> dict[str, Any]:
    """The settings a checkpoint must share to be resumed (:data:`RESUME_KEYS`)."""
    return {k: getattr(self, k) for k in RESUME_KEYS}

  def model_config(self):
    """The ``limits.models.gpt2.Config`` of the model to train."""
    from limits.models import gpt2

    return gpt2.Config(n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
                       n_positions=self.n_positions, vocab_size=self.vocab_size)


# Settings that must agree for a checkpoint to be resumed, in declaration order.
RESUME_KEYS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("resume"))
