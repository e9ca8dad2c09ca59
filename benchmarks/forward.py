"""GPT-2 forward with every attention record: limits.gpt2 (JAX) vs HF transformers (PyTorch).

    python -m benchmarks.forward [--lengths=128,512,1024] [--repeats=3] [--out=forward.json]

Same model (the 124M GPT-2 config, random weights written once by HF ``save_pretrained`` and
loaded by both), same tokens, batch 1, logits included on both sides:

- ``ours``: ``limits.gpt2.forward`` returning q, k, v, raw scores, weights and x for all layers;
- ``hf``: ``GPT2LMHeadModel`` with ``attn_implementation="eager"``, ``output_attentions=True``;
- ``ours_stream``: ``limits.gpt2.iter_layers`` (no logits), each layer's record dropped before
  the next; reports the most bytes of L×L arrays alive at once.

Each (implementation, L) runs in its own subprocess; "extra" memory is the peak RSS over the
warm-up and timed runs (VmHWM, reset after loading the weights through /proc/self/clear_refs)
minus the RSS after loading, i.e. what forwards with their records (and, for ours, compiling)
add on top of the weights; "records" is the exact size of the records one call returns (HF:
the weights only; ours: q, k, v, scores, weights and x). Throughput is the best of
``--repeats`` timed runs after one warm-up (compilation excluded). Ratios > 1 favour ours.
The machine may be shared: numbers are noisy; compare ratios, not absolute values.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from limits import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("lengths", "128,512,1024", "Comma-separated sequence lengths L (≤ 1024).")
flags.DEFINE_integer("repeats", 3, "Timed runs per point (best is reported).")
flags.DEFINE_integer("seed", 0, "Seed for the random weights and tokens.")
flags.DEFINE_string("out", "", "Optional path of a JSON file for the results.")
flags.DEFINE_string("_child", "", "Internal: impl,L,model_dir for one measurement.")
flags.register_validator("repeats", cli.positive, "--repeats must be positive")


def _rss_mb() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
  """Resets the kernel's peak-RSS counter (VmHWM) so loading the weights does not count."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def _peak_rss_mb() -> float:
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024  # kB
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _records_mb(impl, result) -> float:
  """Bytes of the attention records one call returns (all layers; 0 when streamed)."""
  if impl == "hf":
    return sum(a.numel() * a.element_size() for a in result[1]) / 2**20
  if impl == "ours":
    import jax

    return sum(a.nbytes for a in jax.tree_util.tree_leaves(result.attn)) / 2**20
  return 0.0


def _tokens(length, seed):
  import numpy as np

  return np.random.default_rng(seed).integers(0, 50257, (1, length)).astype(np.int32)


def _child(impl: str, length: int, model_dir: str, repeats: int, seed: int) -> dict:
  tokens = _tokens(length, seed)
  if impl == "hf":
    import torch
    import transformers

    model = transformers.GPT2LMHeadModel.from_pretrained(model_dir,
                                                         attn_implementation="eager").eval()
    x = torch.tensor(tokens, dtype=torch.long)

    def run():
      with torch.no_grad():
        out = model(x, output_attentions=True)
      return out.logits, out.attentions
  else:
    import jax

    from limits import gpt2

    config, params = gpt2.load(model_dir)
    if impl == "ours":
      def run():
        out = gpt2.forward(params, tokens, config)
        jax.block_until_ready(out)
        return out
    else:
      peak_lxl = [0]

      def run():
        for _, rec in gpt2.iter_layers(params, tokens, config):
          jax.block_until_ready(rec)
          not_lxl = {id(rec.q), id(rec.k), id(rec.v)}  # (B, H, L, 64): same shape if L = 64
          lxl = sum(a.nbytes for a in jax.live_arrays() if a.ndim >= 2
                    and a.shape[-2:] == (length, length) and id(a) not in not_lxl)
          peak_lxl[0] = max(peak_lxl[0], lxl)
          del rec
  import gc

  gc.collect()
  base = _rss_mb()  # weights loaded, nothing run yet
  peak_reset = _reset_peak()
  first = run()  # warm-up (compilation for ours)
  records_mb = _records_mb(impl, first)
  del first
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    result = run()
    times.append(time.perf_counter() - t0)
    del result
  out = {"impl": impl, "L": length, "seconds": min(times), "tokens_per_s": length / min(times),
         "extra_mb": _peak_rss_mb() - base, "peak_rss_mb": _peak_rss_mb(),
         "peak_reset": peak_reset, "records_mb": records_mb}
  if impl == "ours_stream":
    out["peak_live_lxl_mb"] = peak_lxl[0] / 2**20
    out["one_layer_lxl_mb"] = 2 * 12 * length * length * 4 / 2**20  # scores + weights
  return out


def _make_model(directory: str, seed: int) -> None:
  import torch
  import transformers

  torch.manual_seed(seed)
  cfg = transformers.GPT2Config(attn_implementation="eager")  # defaults: GPT-2 124M
  transformers.GPT2LMHeadModel(cfg).save_pretrained(directory, safe_serialization=True)


def main(argv):
  del argv
  if FLAGS._child:
    impl, length, model_dir = FLAGS._child.split(",", 2)
    print(json.dumps(_child(impl, int(length), model_dir, FLAGS.repeats, FLAGS.seed)))
    return
  lengths = cli.parse_ints(FLAGS.lengths, "lengths")
  for length in lengths:
    if not 1 <= length <= 1024:
      raise cli.LimitsError(f"--lengths value {length} must be in [1, 1024] (GPT-2 context)")
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    _make_model(tmp, FLAGS.seed)
    for length in lengths:
      for impl in ("hf", "ours", "ours_stream"):
        cmd = [sys.executable, "-m", "benchmarks.forward", f"--_child={impl},{length},{tmp}",
               f"--repeats={FLAGS.repeats}", f"--seed={FLAGS.seed}"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
          raise cli.LimitsError(f"benchmark child {impl} L={length} failed: "
                                + (res.stderr.strip().splitlines() or ["?"])[-1])
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"  {impl:12s} L={length:5d}: {r['tokens_per_s']:9.1f} tok/s, "
              f"extra {r['extra_mb']:7.0f} MB", file=sys.stderr, flush=True)
  by = {(r["impl"], r["L"]): r for r in rows}
  print(f"{'L':>5} | {'HF tok/s':>9} | {'ours tok/s':>10} | {'speed':>6} | "
        f"{'HF extra/records MB':>19} | {'ours extra/records MB':>21} | {'stream tok/s':>12} | "
        f"{'stream extra MB':>15} | {'stream live LxL MB (1 layer)':>28}")
  for length in lengths:
    h, o, s = by[("hf", length)], by[("ours", length)], by[("ours_stream", length)]
    print(f"{length:5d} | {h['tokens_per_s']:9.1f} | {o['tokens_per_s']:10.1f} | "
          f"{o['tokens_per_s'] / h['tokens_per_s']:5.2f}x | "
          f"{h['extra_mb']:10.0f} / {h['records_mb']:6.0f} | "
          f"{o['extra_mb']:12.0f} / {o['records_mb']:6.0f} | {s['tokens_per_s']:12.1f} | "
          f"{s['extra_mb']:15.0f} | {s['peak_live_lxl_mb']:17.1f} ({s['one_layer_lxl_mb']:.1f})")
  if FLAGS.out:
    from limits.results import write_json

    write_json(FLAGS.out, {"rows": rows})


if __name__ == "__main__":
  app.run(cli.guard(main))
