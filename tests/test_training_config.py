"""TrainConfig's resume settings: declared at the fields (``_resumed``), not in a second list."""

import dataclasses

from limits import training

# The settings that change the trained weights, written out by hand from the training loop
# (limits/training/__init__.py: data split, optimiser, schedule, model, precision, seed).
WEIGHT_SETTINGS = {"steps", "batch_size", "seq_len", "short_len", "full_every", "lr",
                   "min_lr_ratio", "warmup_steps", "weight_decay", "clip_norm", "seed",
                   "heldout_fraction", "n_layer", "n_head", "n_embd", "n_positions",
                   "vocab_size", "x64"}


def test_resume_keys_are_the_settings_that_change_the_weights():
  assert set(training.RESUME_KEYS) == WEIGHT_SETTINGS
  names = [f.name for f in dataclasses.fields(training.TrainConfig)]
  assert list(training.RESUME_KEYS) == [n for n in names if n in WEIGHT_SETTINGS]


def test_settings_change_only_with_a_resume_key():
  base = training.TrainConfig()
  assert training.TrainConfig(out_dir="elsewhere", ckpt_every=7, log_every=3,
                              max_train_seconds=5.0).settings() == base.settings()
  changed = training.TrainConfig(lr=1e-3, n_layer=2)
  diff = {k for k in base.settings() if base.settings()[k] != changed.settings()[k]}
  assert diff == {"lr", "n_layer"}
  assert training.TrainConfig().steps == 600 and training.TrainConfig.steps == 600  # defaults
