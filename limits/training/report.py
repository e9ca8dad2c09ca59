"""What a training run reports: samples from the model, ``training.json`` and ``MODEL_CARD.md``.

Used by :func:`limits.training.run`; :func:`write_model_card` renders the card of the shipped
model (``limits/assets/tiny/MODEL_CARD.md``) from its ``training.json``. Ambiguity labels such
as AMBIG-12 are described in ``docs/ambiguities.md``.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

SAMPLE_PROMPTS = ("“Well, Prince,", "Pierre", "Natásha", "The French army")
# Run settings recorded in training.json besides the resume settings.
REPORT_KEYS = ("out_dir", "ckpt_dir", "ckpt_every", "data_dir", "text", "eval_batch",
               "probe_windows", "sample_tokens", "max_train_seconds")


_NEXT_LOGITS = {}


def _next_logits_fn(config):
  import jax

  from limits import models

  if config not in _NEXT_LOGITS:
    def next_logits(params, tokens, pos):
      out = models.forward(params, tokens, config, layers=())
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


def samples(config, tokenizer, trained) -> list[dict[str, str]]:
  """A greedy and a top-k sampled continuation of each of :data:`SAMPLE_PROMPTS`."""
  import jax

  out = []
  if not config.sample_tokens:
    return out
  key = jax.random.key(config.seed + 1)
  for prompt in SAMPLE_PROMPTS:
    ids = tokenizer.encode(prompt)
    greedy = generate(trained.params, trained.model, ids, config.sample_tokens)
    key, sub = jax.random.split(key)
    sampled = generate(trained.params, trained.model, ids, config.sample_tokens, key=sub)
    out.append({"prompt": prompt, "greedy": prompt + tokenizer.decode(greedy),
                "sampled": prompt + tokenizer.decode(sampled)})
  return out


def report(config, data, trained, evaluation: dict,
           samples_: list, *, command: str, wall: float) -> dict[str, Any]:
  """The content of training.json."""
  import numpy as np

  from limits.runs.results import env_info

  recent = [l for _, l in trained.meta["losses"][-20:]]
  return {
      "command": command,
      "settings": config.settings(),
      "flags": {k: getattr(config, k) for k in REPORT_KEYS},
      "corpus": data.corpus.info(),
      "split": {"train_chars": len(data.train_text), "heldout_chars": len(data.heldout_text),
                "train_tokens": int(data.train_tokens.size),
                "heldout_tokens": int(data.heldout_tokens.size),
                "heldout_starts_with": data.heldout_text[:60]},
      "tokenizer": {"kind": "byte-level BPE (tokenizers), trained on the training split",
                    "vocab_size": data.tokenizer.vocab_size},
      "model": {"n_params": trained.n_params, **trained.model.to_hf()},
      "training": {"steps_done": trained.step, "stopped_early": trained.step < config.steps,
                   "tokens_seen": trained.position * config.seq_len,
                   "epochs": trained.position / trained.per_epoch,
                   "train_seconds": float(trained.meta["train_seconds"]),
                   "run_wall_seconds": wall,
                   "final_train_loss_mean_last20": float(np.mean(recent)) if recent else None,
                   "losses": trained.meta["losses"]},
      **evaluation,
      "samples": samples_,
      "env": {**env_info(config.seed), "cpu_count": os.cpu_count(),
              "processor": platform.processor() or platform.machine()},
  }


def write_model_card(out_dir: Path, report: dict) -> Path:
  """Renders MODEL_CARD.md from the training report (training.json)."""
  from limits.runs.results import atomic_write_text

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
      f"| native temperature on raw q.k (sqrt(d_head); AMBIG-12 in docs/ambiguities.md) "
      f"| {d_head ** 0.5:.4f} | 8 |",
      f"| context | {m['n_positions']} | 1024 |",
      f"| vocabulary | {m['vocab_size']} (byte-level BPE trained on the training split) "
      f"| 50257 (GPT-2 BPE) |",
      f"| parameters | {m['n_params']:,} | 124M |",
      "",
      "Pre-LN GPT-2 blocks (`limits.models.gpt2`), GELU (tanh), tied input/output embeddings, GPT-2 "
      "initialisation. Files: `config.json`, `model.safetensors` (HF GPT-2 tensor names, "
      "loadable by `transformers.GPT2LMHeadModel.from_pretrained` and `limits.models.gpt2.load`), "
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
