r"""Training of the embedded default model: a small GPT-2 on *War and Peace* (limits/assets/tiny/).

The paper studies pretrained GPT-2. So that every experiment runs out of the box without a
GPT-2 checkpoint, the project ships a small GPT-2-architecture model that it trains itself
(``python -m experiments.train_tiny``, a thin CLI over :func:`run`):

- data: the corpus body (``limits.data``), split into train (first 95% of the characters) and
  held out (the last 5%, from a paragraph break);
- tokenizer: byte-level BPE trained on the training split only (``limits.models.gpt2.train_bpe``);
- model: ``limits.models.gpt2`` (our own forward pass, GPT-2 initialisation), trained on full
  ``seq_len`` sequences (1024 by default, so every position embedding is trained);
- optimiser: AdamW (optax; weight decay on weight matrices only), linear warm-up then cosine
  decay, global-norm gradient clipping;
- checkpoints every ``ckpt_every`` steps (params + optimiser state + step + data position +
  loss log, flax msgpack, written atomically), so an interrupted run resumes exactly;
- output: ``config.json``, ``model.safetensors``, ``tokenizer.json`` (the files of a real
  GPT-2 directory), ``training.json`` (held-out loss in nats/token and bits/byte, loss curve,
  samples) and ``MODEL_CARD.md`` (:mod:`limits.training.report`).

Every setting is a field of the frozen :class:`TrainConfig` (the CLI's flags, same names and
defaults). The pure pieces (loss, step, data order, evaluation, sampling, checkpoints) are
functions of their arguments; :func:`run` wires them into the whole job.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

from limits.runs import interrupts
from limits.errors import LimitsError, check
from limits.training.checkpoint import (  # noqa: F401
  CKPT_FILE,
  CKPT_META,
  check_output_dirs,
  load_checkpoint,
  read_meta,
  save_checkpoint,
)
from limits.training.config import RESUME_KEYS, TrainConfig  # noqa: F401
from limits.training.report import SAMPLE_PROMPTS, generate, report, samples, write_model_card  # noqa: F401




# --------------------------------------------------------------------------------------------
# Pure pieces.

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

  from limits import models

  out = models.forward(params, tokens[:, :-1], config, layers=())
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

  from limits import models

  @jax.jit
  def sum_nll(params, tokens):
    out = models.forward(params, tokens[:, :-1], config, layers=())
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


# --------------------------------------------------------------------------------------------
# The run.

def log_line(msg: str) -> None:
  """The default log: one timestamped line on stdout."""
  print(f"[train_tiny {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclasses.dataclass
class Data:
  """The corpus, its train / held-out split, the tokenizer and both token arrays."""

  corpus: Any
  train_text: str
  heldout_text: str
  tokenizer: Any
  train_tokens: Any   # int32 (n_train,)
  heldout_tokens: Any  # int32 (n_heldout,)


def prepare_data(config: TrainConfig, log: Callable[[str], None] = log_line) -> Data:
  """Resolves the corpus, checks both output folders (before any training), splits the text
  and tokenizes it. The tokenizer is trained once on the training split and kept with the
  checkpoint for an exact resume; a checkpoint made with other settings or another corpus is a
  one-line LimitsError."""
  import numpy as np

  from limits import data as data_lib
  from limits.models import gpt2

  out_dir, ckpt_dir = config.out_path, config.ckpt_path
  corpus = data_lib.resolve_corpus(text=config.text, data_dir=config.data_dir)
  check_output_dirs(out_dir, ckpt_dir)  # unwritable or not a folder: one line, before training
  train_text, heldout_text = data_lib.split_heldout(corpus.text, config.heldout_fraction)
  log(f"corpus {corpus.path} ({len(corpus.text)} chars, sha256 {corpus.sha256[:12]}...); "
      f"train {len(train_text)} chars, held out {len(heldout_text)}")

  meta_prev = None
  if (ckpt_dir / CKPT_META).is_file():
    meta_prev = read_meta(ckpt_dir)
    if (meta_prev.get("settings") != config.settings()
        or meta_prev.get("corpus_sha256") != corpus.sha256):
      raise LimitsError(f"checkpoint in {ckpt_dir} was made with other settings or another "
                        f"corpus; delete it or pass another --ckpt_dir")
  if meta_prev is not None and (ckpt_dir / "tokenizer.json").is_file():
    tokenizer = gpt2.load_tokenizer(ckpt_dir)
  else:
    t0 = time.time()
    paragraphs = [p for p in train_text.split("\n\n") if p]
    tokenizer = gpt2.train_bpe(paragraphs, config.vocab_size)
    tokenizer.save(ckpt_dir)
    log(f"BPE tokenizer: {tokenizer.vocab_size} tokens in {time.time() - t0:.1f}s")
  train_tokens = np.asarray(tokenizer.encode(train_text), dtype=np.int32)
  heldout_tokens = np.asarray(tokenizer.encode(heldout_text), dtype=np.int32)
  log(f"tokens: train {train_tokens.size}, held out {heldout_tokens.size} "
      f"({len(train_text.encode()) / train_tokens.size:.2f} bytes/token)")
  return Data(corpus, train_text, heldout_text, tokenizer, train_tokens, heldout_tokens)


@dataclasses.dataclass
class Trained:
  """Where the training loop stopped: the parameters and the loop's bookkeeping."""

  params: Any
  model: Any           # limits.models.gpt2.Config
  step: int            # optimiser steps done (over resumed runs)
  position: int        # sequences consumed from the data stream
  per_epoch: int       # sequences per epoch
  n_params: int
  meta: dict           # checkpoint metadata: settings, corpus hash, loss log, train seconds
  stopped_early: bool  # max_train_seconds reached


def train(config: TrainConfig, data: Data, log: Callable[[str], None] = log_line) -> Trained:
  """The training loop from initialisation or the checkpoint in ``config.ckpt_path``, up to
  ``steps`` (or ``stop_after``, or ``max_train_seconds``); checkpoints every ``ckpt_every``
  steps and at the end. A non-finite loss is a one-line LimitsError."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from limits.models import gpt2

  c = config
  ckpt_dir = c.ckpt_path
  model = c.model_config()
  stream = Stream(data.train_tokens, c.seq_len, c.seed)
  params = gpt2.init_params(jax.random.key(c.seed), model,
                            dtype=jnp.float64 if c.x64 else jnp.float32)
  optimizer, schedule = make_optimizer(c.steps, c.lr, c.warmup_steps, c.min_lr_ratio,
                                       c.weight_decay, c.clip_norm, params)
  opt_state = optimizer.init(params)
  state = {"params": params, "opt_state": opt_state, "step": 0, "position": 0}
  restored, meta = load_checkpoint(ckpt_dir, state)
  if restored is not None:
    state = restored
    log(f"resumed from {ckpt_dir} at step {state['step']} (data position {state['position']})")
  else:
    meta = {"settings": c.settings(), "corpus_sha256": data.corpus.sha256, "losses": [],
            "train_seconds": 0.0}
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(state["params"]))
  log(f"model {model} with {n_params} parameters; {stream.per_epoch} sequences per epoch")

  train_step = make_train_step(model, optimizer)
  params, opt_state = state["params"], state["opt_state"]
  step, position = int(state["step"]), int(state["position"])
  run_t0 = time.time()
  last_log = time.time()
  stop_at = c.steps if not c.stop_after else min(c.steps, c.stop_after)
  since = [run_t0]  # start of the time not yet added to meta["train_seconds"]

  def checkpoint():
    meta["train_seconds"] = float(meta["train_seconds"]) + (time.time() - since[0])
    since[0] = time.time()
    save_checkpoint(ckpt_dir, {"params": params, "opt_state": opt_state, "step": step,
                               "position": position}, meta)

  stopped_early = False
  while step < stop_at:
    batch = stream.batch(position, c.batch_size)
    if not is_full_step(step + 1, c.short_len, c.seq_len, c.full_every):
      batch = split_short(batch, c.short_len)
    batch = jnp.asarray(batch)
    params, opt_state, loss, gnorm = train_step(params, opt_state, batch)
    step += 1
    position += c.batch_size
    loss = float(loss)
    if not math.isfinite(loss):
      raise LimitsError(f"training diverged at step {step} (loss {loss}); lower --lr")
    meta["losses"].append([step, round(loss, 5)])
    if step % c.log_every == 0 or step == 1:
      dt = time.time() - last_log
      last_log = time.time()
      log(f"step {step}/{c.steps} loss {loss:.4f} grad_norm {float(gnorm):.3f} "
          f"lr {float(schedule(step - 1)):.2e} ({dt:.1f}s)")
    if step % c.ckpt_every == 0 or interrupts.requested():
      checkpoint()
      interrupts.check()  # Ctrl-C: the step just taken is checkpointed, the same command resumes
    if c.max_train_seconds and time.time() - run_t0 > c.max_train_seconds:
      log(f"--max_train_seconds reached at step {step}; evaluating and exporting")
      stopped_early = True
      break
  checkpoint()
  return Trained(params, model, step, position, stream.per_epoch, n_params, meta,
                 stopped_early)


def evaluate(config: TrainConfig, data: Data, trained: Trained,
             log: Callable[[str], None] = log_line) -> dict[str, dict]:
  """Held-out loss (nats/token, bits/byte) over every held-out window, and over the probe (the
  first ``probe_windows`` windows): ``{"heldout": {...}, "probe": {...}}`` for training.json."""
  params, model = trained.params, trained.model
  sum_nll = make_sum_nll(model)
  windows = eval_windows(data.heldout_tokens, config.seq_len)
  t0 = time.time()
  nats = heldout_loss(params, model, windows, config.eval_batch, sum_nll)
  n_targets = windows.shape[0] * config.seq_len
  n_bytes = target_bytes(data.tokenizer, windows)
  bits_per_byte = nats * n_targets / math.log(2) / n_bytes
  probe = windows[:config.probe_windows]
  probe_nats = heldout_loss(params, model, probe, config.eval_batch, sum_nll)
  log(f"held-out: {nats:.4f} nats/token, {bits_per_byte:.4f} bits/byte over {n_targets} "
      f"tokens ({time.time() - t0:.1f}s); probe {probe_nats:.4f}")
  return {
      "heldout": {"nats_per_token": nats, "bits_per_byte": bits_per_byte,
                  "target_tokens": int(n_targets), "target_bytes": int(n_bytes),
                  "windows": int(windows.shape[0]), "seq_len": config.seq_len},
      "probe": {"description": "first probe_windows held-out windows of seq_len+1 tokens "
                               "(overlapping by one), mean nats/token over their targets",
                "windows": int(probe.shape[0]), "seq_len": config.seq_len,
                "nats_per_token": probe_nats},
  }


def run(config: TrainConfig, *, command: str, log: Callable[[str], None] = log_line
        ) -> Path | None:
  """The whole job: data, training (resumed from a matching checkpoint), evaluation, samples,
  then the model directory (weights, tokenizer, training.json, MODEL_CARD.md). Returns the
  model directory, or None when ``stop_after`` stopped the run before ``steps`` without
  ``export_on_stop`` (checkpoint only; the same command resumes it)."""
  from limits.models import gpt2
  from limits.runs.results import write_json

  t_start = time.time()
  data = prepare_data(config, log)
  trained = train(config, data, log)
  if (config.stop_after and trained.step < config.steps and not trained.stopped_early
      and not config.export_on_stop):
    log(f"stopped after step {trained.step} (--stop_after); resume by running the same command")
    return None
  evaluation = evaluate(config, data, trained, log)
  samples_ = samples(config, data.tokenizer, trained)
  out_dir = config.out_path
  out_dir.mkdir(parents=True, exist_ok=True)
  gpt2.save(out_dir, trained.model, trained.params)
  data.tokenizer.save(out_dir)
  wall = time.time() - t_start
  write_json(out_dir / "training.json", report(config, data, trained, evaluation, samples_,
                                               command=command, wall=wall))
  write_model_card(out_dir, json.loads((out_dir / "training.json").read_text()))
  log(f"wrote {out_dir} (wall {wall:.0f}s)")
  return out_dir
