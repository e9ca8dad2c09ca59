r"""Trains the embedded default model: a small GPT-2 on *War and Peace* (limits/assets/tiny/).

The paper studies pretrained GPT-2. So that every experiment runs out of the box without a
GPT-2 checkpoint, the project ships a small GPT-2-architecture model that it trains itself:

- data: the corpus body (``limits.data``), split into train (first 95% of the characters) and
  held out (the last 5%, from a paragraph break);
- tokenizer: byte-level BPE trained on the training split only (``limits.gpt2.train_bpe``);
- model: ``limits.gpt2`` (our own forward pass, GPT-2 initialisation), trained on full
  ``--seq_len`` sequences (1024 by default, so every position embedding is trained);
- optimiser: AdamW (optax; weight decay on weight matrices only), linear warm-up then cosine
  decay, global-norm gradient clipping;
- checkpoints every ``--ckpt_every`` steps (params + optimiser state + step + data position +
  loss log, flax msgpack, written atomically), so an interrupted run resumes exactly;
- output: ``config.json``, ``model.safetensors``, ``tokenizer.json`` (the files of a real
  GPT-2 directory), ``training.json`` (held-out loss in nats/token and bits/byte, loss curve,
  samples) and ``MODEL_CARD.md``.

Usage (the shipped model; see limits/assets/tiny/MODEL_CARD.md for the exact command):

  python -m experiments.train_tiny --out_dir=limits/assets/tiny --ckpt_dir=results/train_tiny/ckpt

The corpus is the one embedded in the package unless ``--text``, ``--data_dir`` or
``LIMITS_DATA_DIR`` names another (``limits.data.resolve_corpus``; ``LIMITS_ALLOW_DOWNLOAD=1``
fetches the current Gutenberg text instead).
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from absl import app, flags

FLAGS = flags.FLAGS

flags.DEFINE_integer("steps", 600, "Optimiser steps in total.")
flags.DEFINE_integer("batch_size", 4, "Sequences per step.")
flags.DEFINE_integer("seq_len", 1024, "Full training sequence length (<= n_positions).")
flags.DEFINE_integer("short_len", 256, "Length of the cheaper short sequences: steps that are "
                     "not full-length split each seq_len window into seq_len/short_len pieces "
                     "(same tokens, less attention cost); 0 = always full length.")
flags.DEFINE_integer("full_every", 4, "Every this many steps is a full-length (seq_len) step.")
flags.DEFINE_float("lr", 3e-3, "Peak learning rate.")
flags.DEFINE_float("min_lr_ratio", 0.1, "Final learning rate as a fraction of --lr.")
flags.DEFINE_integer("warmup_steps", 40, "Linear warm-up steps.")
flags.DEFINE_float("weight_decay", 0.1, "AdamW weight decay (weight matrices only).")
flags.DEFINE_float("clip_norm", 1.0, "Global gradient-norm clipping threshold.")
flags.DEFINE_integer("seed", 0, "Seed for the initialisation and the data order.")
flags.DEFINE_string("out_dir", None, "Model directory to write (default results/train_tiny/"
                    "model).")
flags.DEFINE_string("ckpt_dir", None, "Checkpoint directory (default <out_dir>/../ckpt); a "
                    "checkpoint there with the same settings is resumed.")
flags.DEFINE_integer("ckpt_every", 50, "Checkpoint every this many steps.")
flags.DEFINE_string("data_dir", None, "Folder holding war_and_peace.txt (else $LIMITS_DATA_DIR, "
                    "else the corpus embedded in the package; LIMITS_ALLOW_DOWNLOAD=1 fetches it "
                    "from Project Gutenberg instead).")
flags.DEFINE_string("text", None, "Train on this UTF-8 text file instead of War and Peace.")
flags.DEFINE_float("heldout_fraction", 0.05, "Fraction of the text (at its end) held out.")
flags.DEFINE_integer("n_layer", 4, "Transformer blocks.")
flags.DEFINE_integer("n_head", 4, "Attention heads per block.")
flags.DEFINE_integer("n_embd", 128, "Model width.")
flags.DEFINE_integer("n_positions", 1024, "Context length.")
flags.DEFINE_integer("vocab_size", 4096, "BPE vocabulary size.")
flags.DEFINE_integer("eval_batch", 4, "Windows per held-out evaluation batch.")
flags.DEFINE_integer("probe_windows", 2, "Held-out windows in the fixed probe slice whose loss "
                     "tests re-check (the first windows of the held-out split).")
flags.DEFINE_integer("sample_tokens", 80, "Tokens generated per sample.")
flags.DEFINE_float("max_train_seconds", 0.0, "Stop training (checkpoint, evaluate, export) "
                   "after this many seconds of this run; 0 = no limit.")
flags.DEFINE_integer("stop_after", 0, "Stop this run after this many total steps without "
                     "exporting (checkpoint only; for testing resume); 0 = off.")
flags.DEFINE_bool("export_on_stop", False, "With --stop_after: evaluate and export the model at "
                  "that step (reproduces a run that --max_train_seconds stopped early).")
flags.DEFINE_bool("x64", False, "Use float64 (slow; float32 is the default for training).")
flags.DEFINE_integer("log_every", 10, "Log the training loss every this many steps.")

for _name in ("steps", "batch_size", "seq_len", "full_every", "ckpt_every", "n_layer", "n_head",
              "n_embd", "n_positions", "eval_batch", "probe_windows", "log_every"):
  flags.register_validator(_name, lambda v: v is not None and v >= 1,
                           message=f"--{_name} must be a positive integer")
for _name in ("lr", "clip_norm"):
  flags.register_validator(_name, lambda v: v is not None and v > 0 and math.isfinite(v),
                           message=f"--{_name} must be a positive number")
flags.register_validator("min_lr_ratio", lambda v: 0 <= v <= 1,
                         message="--min_lr_ratio must be in [0, 1]")
flags.register_validator("warmup_steps", lambda v: v >= 0,
                         message="--warmup_steps must be >= 0")
flags.register_validator("weight_decay", lambda v: v >= 0,
                         message="--weight_decay must be >= 0")
flags.register_validator("heldout_fraction", lambda v: 0 < v < 0.5,
                         message="--heldout_fraction must be in (0, 0.5)")
flags.register_validator("vocab_size", lambda v: v >= 257,
                         message="--vocab_size must be >= 257 (256 bytes + <|endoftext|>)")
flags.register_validator("sample_tokens", lambda v: v >= 0, message="--sample_tokens must be >= 0")
flags.register_validator("max_train_seconds", lambda v: v >= 0,
                         message="--max_train_seconds must be >= 0")
flags.register_validator("stop_after", lambda v: v >= 0, message="--stop_after must be >= 0")
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

SAMPLE_PROMPTS = ("“Well, Prince,", "Pierre", "Natásha", "The French army")
CKPT_FILE = "ckpt.msgpack"
CKPT_META = "ckpt.json"
# Settings that must agree for a checkpoint to be resumed.
RESUME_KEYS = ("steps", "batch_size", "seq_len", "short_len", "full_every", "lr", "min_lr_ratio",
               "warmup_steps",
               "weight_decay", "clip_norm", "seed", "heldout_fraction", "n_layer", "n_head",
               "n_embd", "n_positions", "vocab_size", "x64")


# --------------------------------------------------------------------------------------------
# Pure pieces (imported by the tests).

def make_optimizer(steps: int, lr: float, warmup_steps: int, min_lr_ratio: float,
                   weight_decay: float, clip_norm: float, params):
  """Clip by global norm, then AdamW with warm-up + cosine decay; decay on weights only."""
  import jax
  import optax

  warmup = min(warmup_steps, max(steps - 1, 0))
  schedule = optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=lr, warmup_steps=warmup, decay_steps=max(steps, warmup + 1),
      end_value=lr * min_lr_ratio)

  def decayed(path, _):
    names = [str(getattr(k, "key", k)) for k in path]
    return names[-1] == "weight" and not any(n.startswith("ln_") for n in names)

  mask = jax.tree_util.tree_map_with_path(decayed, params)
  opt = optax.chain(
      optax.clip_by_global_norm(clip_norm),
      optax.adamw(schedule, b1=0.9, b2=0.95, eps=1e-8, weight_decay=weight_decay, mask=mask))
  return opt, schedule


def lm_loss(params, tokens, config):
  """Mean next-token cross-entropy (nats) of ``tokens (B, L+1)`` under the model."""
  import optax
  from limits import gpt2

  out = gpt2.forward(params, tokens[:, :-1], config, layers=())
  return optax.softmax_cross_entropy_with_integer_labels(
      out.logits.astype("float32"), tokens[:, 1:]).mean()


def make_train_step(config, optimizer):
  """A jitted ``step(params, opt_state, batch) -> (params, opt_state, loss, grad_norm)``;
  params and optimiser state are arguments, never closed over."""
  import jax
  import optax

  @jax.jit
  def step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(lm_loss)(params, batch, config)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, optax.tree.norm(grads)

  return step


def make_sum_nll(config):
  """A jitted ``sum_nll(params, tokens (B, L+1)) -> total nats`` over all targets."""
  import jax
  import optax
  from limits import gpt2

  @jax.jit
  def sum_nll(params, tokens):
    out = gpt2.forward(params, tokens[:, :-1], config, layers=())
    return optax.softmax_cross_entropy_with_integer_labels(
        out.logits.astype("float32"), tokens[:, 1:]).sum()

  return sum_nll


class Stream:
  """The training data order: a pure function of (seed, sequence position).

  Epoch e uses the non-overlapping (seq_len+1)-token windows starting at ``o_e + i·seq_len``
  (a random offset o_e < seq_len), in a random order; both come from ``seed`` and ``e``, so the
  batch at any position is reproducible and a resumed run sees exactly the same data.
  """

  def __init__(self, tokens, seq_len: int, seed: int):
    import numpy as np

    from limits.errors import check

    self.tokens = np.asarray(tokens, dtype=np.int32)
    self.seq_len = int(seq_len)
    self.seed = int(seed)
    self.per_epoch = (self.tokens.size - 1 - self.seq_len) // self.seq_len
    check(self.per_epoch >= 1, f"training text has {self.tokens.size} tokens, too few for "
          f"sequences of {seq_len}; use a shorter --seq_len or a longer text")
    self._epoch = None
    self._starts = None

  def _epoch_starts(self, epoch: int):
    import numpy as np

    if self._epoch != epoch:
      rng = np.random.default_rng([self.seed, epoch])
      offset = int(rng.integers(self.seq_len))
      starts = offset + self.seq_len * np.arange(self.per_epoch)
      self._starts = starts[rng.permutation(self.per_epoch)]
      self._epoch = epoch
    return self._starts

  def batch(self, position: int, batch_size: int):
    """Sequences ``position .. position+batch_size-1`` of the stream: int32 (B, seq_len+1)."""
    import numpy as np

    rows = []
    for p in range(position, position + batch_size):
      epoch, i = divmod(p, self.per_epoch)
      s = int(self._epoch_starts(epoch)[i])
      rows.append(self.tokens[s:s + self.seq_len + 1])
    return np.stack(rows)


def split_short(batch, short_len: int):
  """(B, L+1) windows -> (B·L/S, S+1) pieces covering the same targets exactly once."""
  import numpy as np

  b, l1 = batch.shape
  l = l1 - 1
  pieces = [batch[:, j * short_len:j * short_len + short_len + 1] for j in range(l // short_len)]
  return np.stack(pieces, axis=1).reshape(b * (l // short_len), short_len + 1)


def is_full_step(step: int, short_len: int, seq_len: int, full_every: int) -> bool:
  """Whether (1-based) step trains on full seq_len windows (else on short pieces)."""
  return not short_len or short_len == seq_len or step % full_every == 0


def eval_windows(tokens, seq_len: int, max_windows: int | None = None):
  """Held-out windows of seq_len+1 tokens overlapping by one: every token after the first is
  a target exactly once. int32 (W, seq_len+1)."""
  import numpy as np

  tokens = np.asarray(tokens, dtype=np.int32)
  n = (tokens.size - 1) // seq_len
  if max_windows is not None:
    n = min(n, max_windows)
  return np.stack([tokens[i * seq_len:i * seq_len + seq_len + 1] for i in range(n)])


def heldout_loss(params, config, windows, batch: int, sum_nll=None) -> float:
  """Mean nats/token over the targets of ``windows (W, L+1)``."""
  sum_nll = sum_nll or make_sum_nll(config)
  total = 0.0
  for i in range(0, windows.shape[0], batch):
    total += float(sum_nll(params, windows[i:i + batch]))
  return total / (windows.shape[0] * (windows.shape[1] - 1))


def target_bytes(tokenizer, windows) -> int:
  """UTF-8 bytes of the text the targets of ``windows`` spell (for bits/byte)."""
  ids = [int(t) for w in windows for t in w[1:]]
  return len(tokenizer.decode(ids).encode("utf-8"))


_NEXT_LOGITS = {}


def _next_logits_fn(config):
  import jax

  from limits import gpt2

  if config not in _NEXT_LOGITS:
    def next_logits(params, tokens, pos):
      out = gpt2.forward(params, tokens, config, layers=())
      return jax.lax.dynamic_index_in_dim(out.logits[0], pos, keepdims=False)  # (V,)
    _NEXT_LOGITS[config] = jax.jit(next_logits)
  return _NEXT_LOGITS[config]


def generate(params, config, prompt_ids, n_new: int, key=None, temperature: float = 0.8,
             top_k: int = 40, buffer: int = 256):
  """Greedy (key=None) or top-k sampled continuation of prompt_ids; returns the new ids.

  Runs the causal model on a fixed zero-padded buffer (one compiled shape for every prompt);
  position t's logits only see tokens 0..t, so the padding never leaks in.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  total = min(config.n_positions, max(buffer, len(prompt_ids) + n_new))
  end = min(total, len(prompt_ids) + n_new)
  buf = np.zeros((1, total), dtype=np.int32)
  buf[0, :len(prompt_ids)] = prompt_ids
  next_logits = _next_logits_fn(config)
  for pos in range(len(prompt_ids) - 1, end - 1):
    logits = next_logits(params, jnp.asarray(buf), pos)
    if key is None:
      nxt = int(jnp.argmax(logits))
    else:
      key, sub = jax.random.split(key)
      vals, idx = jax.lax.top_k(logits / temperature, min(top_k, logits.shape[-1]))
      nxt = int(idx[jax.random.categorical(sub, vals)])
    buf[0, pos + 1] = nxt
  return buf[0, len(prompt_ids):end].tolist()


def save_checkpoint(ckpt_dir: Path, state: dict, meta: dict) -> None:
  """Writes params + optimiser state + step + position (msgpack) and meta (JSON) atomically."""
  from flax import serialization

  from limits.results import write_json

  from limits.errors import LimitsError
  from limits.results import oserror_line

  tmp = ckpt_dir / (CKPT_FILE + ".tmp")
  try:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
      f.write(serialization.to_bytes(state))
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, ckpt_dir / CKPT_FILE)
  except OSError as e:
    tmp.unlink(missing_ok=True)
    raise LimitsError(oserror_line(e, "write", ckpt_dir / CKPT_FILE)) from None
  write_json(ckpt_dir / CKPT_META, meta)


def read_meta(ckpt_dir: Path) -> dict:
  """The checkpoint's ckpt.json; a one-line LimitsError when it is unreadable or not JSON."""
  from limits.errors import LimitsError

  path = ckpt_dir / CKPT_META
  try:
    meta = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise LimitsError(f"checkpoint metadata {str(path)!r} is unreadable ({type(e).__name__}); "
                      f"delete {str(ckpt_dir)!r} to start over") from None
  if not isinstance(meta, dict):
    raise LimitsError(f"checkpoint metadata {str(path)!r} is not a JSON object; delete "
                      f"{str(ckpt_dir)!r} to start over")
  return meta


def check_output_dirs(out_dir: Path, ckpt_dir: Path) -> None:
  """Both folders can be created and written, before any training (one-line LimitsError)."""
  from limits.errors import LimitsError
  from limits.results import check_writable

  for path, flag in ((out_dir, "--out_dir"), (ckpt_dir, "--ckpt_dir")):
    if path.exists() and not path.is_dir():
      raise LimitsError(f"{flag}={str(path)!r} exists and is not a folder")
    try:
      path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
      raise LimitsError(f"cannot create {flag}={str(path)!r}: {e.strerror}") from None
    check_writable(path, flag)


def load_checkpoint(ckpt_dir: Path, template: dict):
  """(state, meta) or (None, None) when there is no checkpoint."""
  from flax import serialization

  from limits.errors import LimitsError

  if not (ckpt_dir / CKPT_FILE).is_file() or not (ckpt_dir / CKPT_META).is_file():
    return None, None
  meta = read_meta(ckpt_dir)
  try:
    state = serialization.from_bytes(template, (ckpt_dir / CKPT_FILE).read_bytes())
  except Exception as e:  # noqa: BLE001 - msgpack/flax raise several types.
    raise LimitsError(f"checkpoint {ckpt_dir / CKPT_FILE} is unreadable ({e}); delete "
                      f"{ckpt_dir} to start over") from None
  return state, meta


def write_model_card(out_dir: Path, report: dict) -> Path:
  """Renders MODEL_CARD.md from the training report (training.json)."""
  from limits.results import atomic_write_text

  m, t, h = report["model"], report["training"], report["heldout"]
  st, env, corpus, split = report["settings"], report["env"], report["corpus"], report["split"]
  d_head = m["n_embd"] // m["n_head"]
  full_desc = (f"every {st['full_every']}th step on full {st['seq_len']}-token sequences, the "
               f"others on the same windows cut into {st['seq_len'] // st['short_len']} pieces of "
               f"{st['short_len']}" if st.get("short_len") and st["short_len"] != st["seq_len"]
               else f"all steps on full {st['seq_len']}-token sequences")
  lines = [
      "# `tiny`: the embedded default model of limits",
      "",
      "A small GPT-2-architecture language model trained by this project on *War and Peace*, so "
      "that every experiment runs out of the box (`--model=tiny`, the default) on a real "
      "trained model. **It is a small stand-in for GPT-2, not GPT-2**: use `--model=gpt2` (or a "
      "checkpoint directory) to run the paper's setting on the real 124M model.",
      "",
      "## Architecture",
      "",
      "| | tiny | GPT-2 124M |",
      "|---|---|---|",
      f"| layers x heads | {m['n_layer']} x {m['n_head']} = {m['n_layer'] * m['n_head']} heads "
      f"| 12 x 12 = 144 heads |",
      f"| width / d_head | {m['n_embd']} / {d_head} | 768 / 64 |",
      f"| native temperature on raw q.k (sqrt(d_head), AMBIG-12) | {d_head ** 0.5:.4f} | 8 |",
      f"| context | {m['n_positions']} | 1024 |",
      f"| vocabulary | {m['vocab_size']} (byte-level BPE trained on the training split) "
      f"| 50257 (GPT-2 BPE) |",
      f"| parameters | {m['n_params']:,} | 124M |",
      "",
      "Pre-LN GPT-2 blocks (`limits.gpt2`), GELU (tanh), tied input/output embeddings, GPT-2 "
      "initialisation. Files: `config.json`, `model.safetensors` (HF GPT-2 tensor names, "
      "loadable by `transformers.GPT2LMHeadModel.from_pretrained` and `limits.gpt2.load`), "
      "`tokenizer.json`, `training.json` (everything below, plus the loss curve).",
      "",
      "## Data",
      "",
      f"- Corpus: *War and Peace* (Project Gutenberg #2600, Maude translation), body from Book "
      f"One \"CHAPTER I\" to the end of the Second Epilogue; {corpus['bytes']:,} bytes, sha256 "
      f"`{corpus['sha256']}` (matches the project's reference body: "
      f"{'yes' if corpus['matches_reference'] else 'no'}).",
      f"- Split: training = the first {split['train_chars']:,} characters; held out = the last "
      f"{split['heldout_chars']:,} characters (the last {st['heldout_fraction']:.0%}, starting "
      f"at the next paragraph break: \"{split['heldout_starts_with'][:40]}...\"). The tokenizer "
      f"was trained on the training split only.",
      f"- Tokens: {split['train_tokens']:,} training, {split['heldout_tokens']:,} held out.",
      "",
      "## Training",
      "",
      "```",
      report["command"],
      "```",
      "",
  ] + ([
      f"The loop stopped (`--max_train_seconds` or `--stop_after`) after step "
      f"{t['steps_done']} of {st['steps']} (the time guard keeps the run within its wall-clock "
      f"budget on a shared CPU). These exact weights are step {t['steps_done']} of that schedule; to reproduce "
      f"them without the time guard, append `--max_train_seconds=0 "
      f"--stop_after={t['steps_done']} --export_on_stop` to the command. Without those flags "
      f"a faster machine runs all {st['steps']} steps and gets a different (better) model.",
      "",
  ] if t["stopped_early"] else []) + [
      f"- Seed {st['seed']}; {t['steps_done']} steps of {st['batch_size']} x {st['seq_len']} "
      f"tokens ({full_desc}); {t['tokens_seen']:,} tokens seen = {t['epochs']:.2f} epochs."
      + (f" Stopped early at step {t['steps_done']} of {st['steps']}." if t["stopped_early"]
         else ""),
      f"- AdamW (b1 0.9, b2 0.95, weight decay {st['weight_decay']} on weight matrices only), "
      f"peak learning rate {st['lr']}, linear warm-up {st['warmup_steps']} steps, cosine decay "
      f"to {st['min_lr_ratio']} x peak, gradient clipping at global norm {st['clip_norm']}; "
      f"float{'64' if st['x64'] else '32'}.",
      f"- Wall time: {t['run_wall_seconds'] / 60:.1f} min for the whole (last) command, "
      f"{t['train_seconds'] / 60:.1f} min in the training loop (summed over resumed runs), on "
      f"{env['cpu_count']} CPU "
      f"cores ({env['processor']}, {env['platform']}), shared with other jobs; JAX "
      f"{env['jax']}, backend {env['backend']}.",
      "",
      "## Results",
      "",
      f"- **Held-out loss: {h['nats_per_token']:.4f} nats/token, {h['bits_per_byte']:.4f} "
      f"bits/byte** over {h['target_tokens']:,} target tokens ({h['target_bytes']:,} bytes; "
      f"{h['windows']} windows of {h['seq_len']} + 1 tokens overlapping by one).",
      f"- Training loss (mean of the last 20 steps): "
      f"{t['final_train_loss_mean_last20']:.4f} nats/token.",
      f"- Probe (re-checked by `tests/test_sources.py`): the first "
      f"{report['probe']['windows']} held-out windows give {report['probe']['nats_per_token']:.4f}"
      " nats/token.",
      f"- For scale: a uniform guess is ln({m['vocab_size']}) = "
      f"{__import__('math').log(m['vocab_size']):.2f} nats/token.",
      "",
      "## Samples",
      "",
      "Greedy and top-k (k = 40, temperature 0.8) continuations, generated after training:",
      "",
  ]
  for s in report["samples"]:
    lines += [f"- prompt `{s['prompt']}`", "", "  greedy:", "", "  > " +
              s["greedy"].replace("\n", " "), "", "  sampled:", "", "  > " +
              s["sampled"].replace("\n", " "), ""]
  lines += [
      "## Limitations",
      "",
      "- Trained on one novel for minutes on a CPU: it has learnt word statistics, names, "
      "punctuation and dialogue layout, but its samples are barely grammatical and greedy "
      "decoding loops. It is meant as a real trained attention pattern for the experiments, "
      "not as a language model to use.",
      f"- {m['n_layer'] * m['n_head']} heads with d_head = {d_head}, not GPT-2's 144 heads with "
      "d_head = 64: head counts, temperatures and KS sample sizes in the experiments differ "
      "from the paper's. Conclusions about GPT-2 need `--model=gpt2`.",
      "- Its tokenizer is not GPT-2's, so L tokens cover a different amount of text.",
      "",
  ]
  path = Path(out_dir) / "MODEL_CARD.md"
  atomic_write_text(path, "\n".join(lines))
  return path


# --------------------------------------------------------------------------------------------
# The run.

def _log(msg: str) -> None:
  print(f"[train_tiny {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main(argv):
  del argv
  from limits import cli

  cli.setup_precision(FLAGS.x64)
  import jax
  import jax.numpy as jnp
  import numpy as np

  from limits import data as data_lib
  from limits import gpt2
  from limits.errors import LimitsError
  from limits.results import env_info, flags_config, write_json

  t_start = time.time()
  out_dir = Path(FLAGS.out_dir or "results/train_tiny/model")
  ckpt_dir = Path(FLAGS.ckpt_dir) if FLAGS.ckpt_dir else out_dir.parent / "ckpt"
  settings = flags_config(FLAGS, RESUME_KEYS)

  corpus = data_lib.resolve_corpus(text=FLAGS.text, data_dir=FLAGS.data_dir)
  check_output_dirs(out_dir, ckpt_dir)  # unwritable or not a folder: one line, before training
  train_text, heldout_text = data_lib.split_heldout(corpus.text, FLAGS.heldout_fraction)
  _log(f"corpus {corpus.path} ({len(corpus.text)} chars, sha256 {corpus.sha256[:12]}...); "
       f"train {len(train_text)} chars, held out {len(heldout_text)}")

  # Tokenizer: trained once on the training split, kept with the checkpoint for exact resume.
  meta_prev = None
  if (ckpt_dir / CKPT_META).is_file():
    meta_prev = read_meta(ckpt_dir)
    if meta_prev.get("settings") != settings or meta_prev.get("corpus_sha256") != corpus.sha256:
      raise LimitsError(f"checkpoint in {ckpt_dir} was made with other settings or another "
                        f"corpus; delete it or pass another --ckpt_dir")
  if meta_prev is not None and (ckpt_dir / "tokenizer.json").is_file():
    tokenizer = gpt2.load_tokenizer(ckpt_dir)
  else:
    t0 = time.time()
    paragraphs = [p for p in train_text.split("\n\n") if p]
    tokenizer = gpt2.train_bpe(paragraphs, FLAGS.vocab_size)
    tokenizer.save(ckpt_dir)
    _log(f"BPE tokenizer: {tokenizer.vocab_size} tokens in {time.time() - t0:.1f}s")
  train_tokens = np.asarray(tokenizer.encode(train_text), dtype=np.int32)
  heldout_tokens = np.asarray(tokenizer.encode(heldout_text), dtype=np.int32)
  _log(f"tokens: train {train_tokens.size}, held out {heldout_tokens.size} "
       f"({len(train_text.encode()) / train_tokens.size:.2f} bytes/token)")

  config = gpt2.Config(n_layer=FLAGS.n_layer, n_head=FLAGS.n_head, n_embd=FLAGS.n_embd,
                       n_positions=FLAGS.n_positions, vocab_size=FLAGS.vocab_size)
  stream = Stream(train_tokens, FLAGS.seq_len, FLAGS.seed)
  params = gpt2.init_params(jax.random.key(FLAGS.seed), config,
                            dtype=jnp.float64 if FLAGS.x64 else jnp.float32)
  optimizer, schedule = make_optimizer(FLAGS.steps, FLAGS.lr, FLAGS.warmup_steps,
                                       FLAGS.min_lr_ratio, FLAGS.weight_decay, FLAGS.clip_norm,
                                       params)
  opt_state = optimizer.init(params)
  state = {"params": params, "opt_state": opt_state, "step": 0, "position": 0}
  restored, meta = load_checkpoint(ckpt_dir, state)
  if restored is not None:
    state = restored
    _log(f"resumed from {ckpt_dir} at step {state['step']} (data position {state['position']})")
  else:
    meta = {"settings": settings, "corpus_sha256": corpus.sha256, "losses": [],
            "train_seconds": 0.0}
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(state["params"]))
  _log(f"model {config} with {n_params} parameters; {stream.per_epoch} sequences per epoch")

  train_step = make_train_step(config, optimizer)
  params, opt_state = state["params"], state["opt_state"]
  step, position = int(state["step"]), int(state["position"])
  run_t0 = time.time()
  last_log = time.time()
  stop_at = FLAGS.steps if not FLAGS.stop_after else min(FLAGS.steps, FLAGS.stop_after)

  def checkpoint():
    meta["train_seconds"] = float(meta["train_seconds"]) + (time.time() - run_t0_box[0])
    run_t0_box[0] = time.time()
    save_checkpoint(ckpt_dir, {"params": params, "opt_state": opt_state, "step": step,
                               "position": position}, meta)

  run_t0_box = [run_t0]
  stopped_early = False
  while step < stop_at:
    batch = stream.batch(position, FLAGS.batch_size)
    if not is_full_step(step + 1, FLAGS.short_len, FLAGS.seq_len, FLAGS.full_every):
      batch = split_short(batch, FLAGS.short_len)
    batch = jnp.asarray(batch)
    params, opt_state, loss, gnorm = train_step(params, opt_state, batch)
    step += 1
    position += FLAGS.batch_size
    loss = float(loss)
    if not math.isfinite(loss):
      raise LimitsError(f"training diverged at step {step} (loss {loss}); lower --lr")
    meta["losses"].append([step, round(loss, 5)])
    if step % FLAGS.log_every == 0 or step == 1:
      dt = time.time() - last_log
      last_log = time.time()
      _log(f"step {step}/{FLAGS.steps} loss {loss:.4f} grad_norm {float(gnorm):.3f} "
           f"lr {float(schedule(step - 1)):.2e} ({dt:.1f}s)")
    if step % FLAGS.ckpt_every == 0:
      checkpoint()
    if FLAGS.max_train_seconds and time.time() - run_t0 > FLAGS.max_train_seconds:
      _log(f"--max_train_seconds reached at step {step}; evaluating and exporting")
      stopped_early = True
      break
  checkpoint()
  if (FLAGS.stop_after and step < FLAGS.steps and not stopped_early
      and not FLAGS.export_on_stop):
    _log(f"stopped after step {step} (--stop_after); resume by running the same command")
    return 0

  # Evaluation on the held-out split.
  sum_nll = make_sum_nll(config)
  windows = eval_windows(heldout_tokens, FLAGS.seq_len)
  t0 = time.time()
  nats = heldout_loss(params, config, windows, FLAGS.eval_batch, sum_nll)
  n_targets = windows.shape[0] * FLAGS.seq_len
  n_bytes = target_bytes(tokenizer, windows)
  bits_per_byte = nats * n_targets / math.log(2) / n_bytes
  probe = windows[:FLAGS.probe_windows]
  probe_nats = heldout_loss(params, config, probe, FLAGS.eval_batch, sum_nll)
  _log(f"held-out: {nats:.4f} nats/token, {bits_per_byte:.4f} bits/byte over {n_targets} "
       f"tokens ({time.time() - t0:.1f}s); probe {probe_nats:.4f}")
  recent = [l for _, l in meta["losses"][-20:]]

  samples = []
  if FLAGS.sample_tokens:
    key = jax.random.key(FLAGS.seed + 1)
    for prompt in SAMPLE_PROMPTS:
      ids = tokenizer.encode(prompt)
      greedy = generate(params, config, ids, FLAGS.sample_tokens)
      key, sub = jax.random.split(key)
      sampled = generate(params, config, ids, FLAGS.sample_tokens, key=sub)
      samples.append({"prompt": prompt, "greedy": prompt + tokenizer.decode(greedy),
                      "sampled": prompt + tokenizer.decode(sampled)})

  out_dir.mkdir(parents=True, exist_ok=True)
  gpt2.save(out_dir, config, params)
  tokenizer.save(out_dir)
  wall = time.time() - t_start
  command = "python -m experiments.train_tiny " + " ".join(shlex.quote(a) for a in sys.argv[1:])
  report = {
      "command": command,
      "settings": settings,
      "flags": flags_config(FLAGS, ["out_dir", "ckpt_dir", "ckpt_every", "data_dir", "text",
                                    "eval_batch", "probe_windows", "sample_tokens",
                                    "max_train_seconds"]),
      "corpus": corpus.info(),
      "split": {"train_chars": len(train_text), "heldout_chars": len(heldout_text),
                "train_tokens": int(train_tokens.size),
                "heldout_tokens": int(heldout_tokens.size),
                "heldout_starts_with": heldout_text[:60]},
      "tokenizer": {"kind": "byte-level BPE (tokenizers), trained on the training split",
                    "vocab_size": tokenizer.vocab_size},
      "model": {"n_params": n_params, **config.to_hf()},
      "training": {"steps_done": step, "stopped_early": step < FLAGS.steps,
                   "tokens_seen": position * FLAGS.seq_len,
                   "epochs": position / stream.per_epoch,
                   "train_seconds": float(meta["train_seconds"]),
                   "run_wall_seconds": wall,
                   "final_train_loss_mean_last20": float(np.mean(recent)) if recent else None,
                   "losses": meta["losses"]},
      "heldout": {"nats_per_token": nats, "bits_per_byte": bits_per_byte,
                  "target_tokens": int(n_targets), "target_bytes": int(n_bytes),
                  "windows": int(windows.shape[0]), "seq_len": FLAGS.seq_len},
      "probe": {"description": "first probe_windows held-out windows of seq_len+1 tokens "
                               "(overlapping by one), mean nats/token over their targets",
                "windows": int(probe.shape[0]), "seq_len": FLAGS.seq_len,
                "nats_per_token": probe_nats},
      "samples": samples,
      "env": {**env_info(FLAGS.seed), "cpu_count": os.cpu_count(),
              "processor": platform.processor() or platform.machine()},
  }
  write_json(out_dir / "training.json", report)
  write_model_card(out_dir, json.loads((out_dir / "training.json").read_text()))
  _log(f"wrote {out_dir} (wall {wall:.0f}s)")
  return 0


if __name__ == "__main__":
  from limits import cli  # also installs the common flag rules (one-line errors, seed range)

  app.run(cli.guard(main))
