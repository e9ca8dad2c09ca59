r"""Algorithm 3's ascending scan, per batch of N: the fast path against the hook path it replaced.

  python -m benchmarks.distance_scan [--model=smollm2] [--lengths=256,1024] [--layers=0,15,29]
      [--pairs=3] [--batches=9,57]

One window (random tokens: only the time matters), the records of ``--layers`` computed once
and served from memory to both paths (so neither pays a forward; the real run reads them from
the records store). Per L and per batch of 8 Ns starting at each of ``--batches``:

- reference: what ``limits.distance.task.scan_pvalues`` ran per batch before issue 27 item 5,
  ``ModelEvaluator.head_stats(..., layer_hook=PrintedExpectations(ns))`` (device ``top_k`` per
  layer and batch for N <= 128, the host sort and thresholds above; every layer fetched);
- ours: :class:`limits.distance.scan.ScanSamples` with its per-L preparation (records on the
  device, selection order by ``layer_top``) done once before the timing, which is reported
  apart ("setup per L").

Both give the same per-head means (checked, 1e-4 relative: float32). Reference and ours
alternate in this process (``benchmarks.common.alternate``, compiles excluded by a warm-up);
printed: medians per batch and per N, the ratio with its spread, and the floor per N from
rates measured at the start of the same run (``benchmarks.work.measure_rates``): the matrix
products 4·d per causal entry and head (s_N = A_N X, s_N Xᵀ; the causal half L²/2) at the GEMM
rate plus 3 elementwise passes per causal entry (d̃, E, printed E) at the elementwise rate.
"""

from __future__ import annotations

import os

from absl import app, flags

from benchmarks import common

flags.DEFINE_string("model", "smollm2", "tiny, gpt2_124m (random weights), smollm2, or a dir.")
flags.DEFINE_string("lengths", "256,1024", "Window lengths L.")
flags.DEFINE_string("layers", "0,15,29", "Layers whose records are used (others skipped).")
flags.DEFINE_string("batches", "9,57", "First N of each timed batch of 8 (clipped to N_max).")
flags.DEFINE_integer("pairs", 3, "Alternating (reference, ours) pairs per batch.")
flags.DEFINE_bool("full", True, "Also one whole scan N = 1 … N_max per path (fresh objects, "
                  "compiles included: the old path compiles per top-k size), before the pairs.")
FLAGS = flags.FLAGS

BATCH = 8


def main(argv):
  del argv
  import jax
  import jax.numpy as jnp
  import numpy as np

  from benchmarks import work
  from limits import models
  from limits.distance import model as distance_model
  from limits.distance.scan import ScanSamples, scan_n_max

  config, params = common.load_model(FLAGS.model)
  keep = [int(v) for v in FLAGS.layers.split(",")]
  keep = [i for i in keep if i < config.n_layer]
  load = os.getloadavg()
  rates = work.measure_rates()
  print(f"{FLAGS.model}: layers {keep} of {config.n_layer}, heads {config.n_head}, d_head "
        f"{config.d_head}; load average {load[0]:.1f} {load[1]:.1f}; rates: GEMM "
        f"{rates['gemm_flop_s'] / 1e9:.0f} GFLOP/s, elementwise "
        f"{rates['elementwise_s'] / 1e9:.2f} G/s", flush=True)
  for L in [int(v) for v in FLAGS.lengths.split(",")]:
    L = min(L, config.n_positions)
    tok = np.random.default_rng(0).integers(0, config.vocab_size, (1, L)).astype(np.int32)
    recs = [(i, r) for i, r in models.iter_layers(params, jnp.asarray(tok), config, layers=keep)]
    ev = distance_model.ModelEvaluator(params, config, ks_dtype=np.float32,
                                       layer_source=lambda t, recs=recs: iter(recs))
    n_max = scan_n_max(L)

    def hook_means(ns):
      hook = distance_model.PrintedExpectations(ns)
      st = ev.head_stats(tok, ns, bound=False, dtype=np.float32, layer_hook=hook)
      return distance_model.token_means(st), hook.means()

    if FLAGS.full:
      batches = [list(range(a, min(a + BATCH, n_max + 1))) for a in range(1, n_max + 1, BATCH)]
      t_ref = common.timed(lambda: [hook_means(ns) for ns in batches])
      t_ours = common.timed(lambda s=ScanSamples(ev, tok, n_max): [s(ns) for ns in batches])
      print(f"L = {L}: whole scan N = 1…{n_max} ({len(batches)} batches, one run each, "
            f"compiles included): reference {t_ref:.1f} s, ours {t_ours:.1f} s "
            f"({t_ref / t_ours:.1f}x); load average {os.getloadavg()[0]:.1f}", flush=True)
    t = common.timed(lambda: ScanSamples(ev, tok, n_max)([1]))  # compiles too
    fast = ScanSamples(ev, tok, n_max)
    setup = common.timed(lambda: [jax.block_until_ready(layer[2])
                                  for layers in fast._windows() for layer in layers])
    assert fast._cache is not None  # kept from here on
    print(f"L = {L}: N_max = {n_max}; ours' setup per L (records to the device, selection "
          f"order): {setup:.2f} s (first call with compiles {t:.1f} s)", flush=True)
    entries = len(keep) * config.n_head * L * L / 2
    floor = 4 * config.d_head * entries / rates["gemm_flop_s"] + 3 * entries / rates[
        "elementwise_s"]
    for first in [int(v) for v in FLAGS.batches.split(",")]:
      first = max(1, min(first, n_max - BATCH + 1))
      ns = list(range(first, first + BATCH))

      ref = lambda ns=ns: hook_means(ns)
      a, b = ref(), fast(ns)
      for key in ("d_sum", "expected"):
        np.testing.assert_allclose(b[key], np.asarray(a[0][key]), rtol=1e-4, err_msg=key)
      np.testing.assert_allclose(b["expected_printed_output"],
                                 a[1]["expected_printed_output"], rtol=1e-4)
      res = common.alternate(ref, lambda ns=ns: fast(ns), pairs=FLAGS.pairs, warmup=False)
      print(f"  N = {ns[0]}–{ns[-1]}: " + common.line("per batch of 8 N", res), flush=True)
      print(f"    per N: reference {res['ref_median_s'] / BATCH * 1e3:.1f} ms, ours "
            f"{res['ours_median_s'] / BATCH * 1e3:.1f} ms, floor {floor * 1e3:.2f} ms "
            f"(ours {res['ours_median_s'] / BATCH / floor:.1f}x the floor); load average "
            f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
  app.run(main)
