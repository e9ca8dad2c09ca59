"""The gradient step (Corollary 3, Lemma 2, Algorithm 5) before and after the one-pass screen.

  python -m benchmarks.gradient --model=smollm2 --length=1024 --layers=0,15,29
  python -m benchmarks.gradient --model=tiny --length=256 --pairs=3      # a quick look

On the raw q·k rows of the given layers (every head and query of one corpus window; the
experiment's rows), float64 as the experiment runs, one batch of ``--t_batch`` temperatures spread
over the paper grid (the step does 26 / t_batch such batches), three parts, each reference and ours
alternating in one process (``benchmarks.common.alternate``; compiles excluded):

- all rows: reference = the exact norm of every (row, T) by Newton in blocks of 4M elements
  (``sensitivity.softmax_norms``) and Lemma 2's bound on the host (``lemma2_all_rows``); ours =
  ``gradient_screen.Screen.stats`` (float32 bracket and secular test, Newton on the open pairs
  only); its counts and max are asserted equal to the reference's decisions on every pair;
- g(T, ε) on ``--fd_rows`` sampled rows per (layer, head): reference = ``sensitivity.fd_rows``
  with the masked ``normalizers.softmax`` (rows cut to their causal span, L2-sized chunks; the
  step at c5f0aa7); ours = the same with the softmax on −inf-masked logits and one reciprocal
  per row (``gradient_rows._softmax_inf``) on one (S, K, E + 1, L) block per chunk, the row
  maxima taken before the division by T (``gradient_rows._g_plain``). Agreement: max |Δg|·ε
  (‖Δα‖ units);
- ``pass``: the screen over the whole grid of 26 temperatures: reference = one pass over the
  rows per batch of ``--t_batch`` temperatures (the step until the thirteenth session);
  ours = one pass for all 26 (``task.SCREEN_PAIR_BYTES``), the rows streamed from the records
  store one (window, layer) block at a time as the step reads them; same numbers required;
- the tied-top-two counterexample at one T: reference = jacfwd + the closed-form J and a dense
  SVD of each at length L (``gradient_rows._exact_block``); ours =
  ``gradient_rows.counterexample`` (closed form, numeric check at length 8).

The floor of each part is its elementwise work at rates measured at the start of the same run
(a fused exp + sum over a 256K-element block, float32 and float64): every visible (row, T, key)
once for the screen (float32), every visible (row, T, ε or base, key) for g (float64). Printed:
medians, the ratio reference/ours with its spread, ours/floor, and the whole step's estimate
(parts × the number of batches, counterexample × 26 temperatures).
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

from limits import cli

flags.DEFINE_string("model", "smollm2", "Model spec (limits.models.load).")
flags.DEFINE_integer("length", 1024, "Window length L.")
flags.DEFINE_string("layers", "0,15,29", "Comma-separated layers (clipped to the model's).")
flags.DEFINE_integer("t_batch", 8, "Temperatures per batch (the experiment's --t_batch).")
flags.DEFINE_integer("fd_rows", 256, "Sampled rows per (layer, head) for g(T, eps).")
flags.DEFINE_integer("pairs", 2, "Alternating (reference, ours) pairs per part.")
flags.DEFINE_integer("seed", 0, "Seed for the sample and directions.")
flags.DEFINE_list("parts", ["rows", "g", "cex"], "Parts to time: rows, g, cex, pass.")
FLAGS = flags.FLAGS


def _rates() -> dict:
  """Fused exp + sum, elements per second, float32 and float64 (best of 5 on 256K elements)."""
  import jax
  import jax.numpy as jnp

  out = {}
  for dt in (jnp.float32, jnp.float64):
    x = -jnp.abs(jax.random.normal(jax.random.key(0), (256, 1024), dt))
    f = jax.jit(lambda x: jnp.sum(jnp.exp(x / 0.7), axis=-1))
    f(x).block_until_ready()
    best = float("inf")
    for _ in range(5):
      t0 = time.perf_counter()
      for _ in range(20):
        f(x).block_until_ready()
      best = min(best, (time.perf_counter() - t0) / 20)
    out[jnp.dtype(dt).name] = x.size / best
  return out


def main(argv):
  del argv
  cli.setup_precision(True)
  import jax

  from limits.gradient import task as gradient
  from limits.records import sources

  if FLAGS.parts == ["cex"]:  # needs no model: one tied-top-two row of length L
    _part_cex(FLAGS.length, np.asarray(gradient.default_temperatures()), 100 * 2.0 ** -52)
    return
  model = sources.load_model(FLAGS.model)
  n_layer = model.config.n_layer
  layers = sorted({min(int(x), n_layer - 1) for x in FLAGS.layers.split(",")})
  if FLAGS.parts == ["pass"]:  # the streamed rows only: no (R, L) matrix
    _part_pass(model, layers)
    return
  rows, mask, meta = sources.model_logit_rows(model, FLAGS.length, 1, layers=layers)
  R, L = rows.shape
  rows64 = rows.astype(np.float64)
  grid = np.asarray(gradient.default_temperatures())  # (26,)
  Ts = grid[np.round(np.linspace(0, grid.size - 1, FLAGS.t_batch)).astype(int)]  # spans it
  eps = np.asarray([1e-3, 1e-1, 10.0])
  rtol = 100 * np.finfo(np.float64).eps
  rates = _rates()
  n_batches = -(-26 // FLAGS.t_batch)
  print(f"gradient step: {FLAGS.model} layers {layers} L={L}: {R} rows, {int(mask.sum())} "
        f"visible entries; {Ts.size} temperatures per batch ({n_batches} batches for the paper grid); rates "
        f"exp+sum {rates['float32'] / 1e9:.2f} Gelem/s f32, {rates['float64'] / 1e9:.2f} f64; "
        f"device {jax.devices()[0]}", flush=True)

  zero = {"ref_median_s": 0.0, "ours_median_s": 0.0}
  a = b = c = zero
  floor_a = floor_b = 0.0
  if "rows" in FLAGS.parts:
    a, floor_a = _part_rows(rows, rows64, mask, Ts, rtol, rates)
  if "g" in FLAGS.parts:
    b, floor_b = _part_g(model, rows, rows64, mask, meta, Ts, eps, rates)
  if "cex" in FLAGS.parts:
    c = _part_cex(L, Ts, rtol)
  ref_total = n_batches * (a["ref_median_s"] + b["ref_median_s"]) + 26 * c["ref_median_s"]
  ours_total = n_batches * (a["ours_median_s"] + b["ours_median_s"]) + 26 * c["ours_median_s"]
  floor = n_batches * (floor_a + floor_b)
  print(f"whole step estimate from parts {','.join(FLAGS.parts)} ({n_batches} batches, 26 T): "
        f"reference {ref_total:.1f} s, ours {ours_total:.1f} s, ratio "
        f"{ref_total / max(ours_total, 1e-12):.1f}x; floor {floor:.1f} s, ours/floor "
        f"{ours_total / max(floor, 1e-12):.1f}x")


def _part_rows(rows, rows64, mask, Ts, rtol, rates):
  from benchmarks import common
  from limits.gradient import rows as gradient_rows
  from limits.gradient import screen as gradient_screen
  from limits.gradient import sensitivity

  R = rows.shape[0]
  vis = int(mask.sum())
  screen = gradient_screen.Screen(rows, mask, np.float64, rtol)
  ref = lambda: (sensitivity.softmax_norms(rows64, Ts, mask),
                 gradient_rows.lemma2_all_rows(rows64, mask, Ts))
  ours = lambda: screen.stats(Ts)
  a = common.alternate(ref, ours, FLAGS.pairs)
  floor_a = vis * Ts.size / rates["float32"]
  st = screen.stats(Ts)
  norms, lem = ref()  # the decisions every Newton value gives: the screen must equal them
  fin = np.isfinite(lem)
  paper = np.minimum(1 / (4 * Ts), np.sqrt(2)) * (1 + rtol)
  want = {"n_exceed_paper": (norms > paper).sum(0),
          "n_exceed_tight": (norms > 1 / (2 * Ts) * (1 + rtol)).sum(0),
          "n_exceed_lemma2": (fin & (norms > lem * (1 + rtol))).sum(0), "lemma2_finite": fin.sum(0)}
  for k, v in want.items():
    np.testing.assert_array_equal(st[k], v, err_msg=k)
  np.testing.assert_allclose(st["max_norm"], norms.max(0), rtol=1e-14)
  print(common.line("all rows (decisions + max)", a)
        + f"; ours/floor {a['ours_median_s'] / floor_a:.1f}x (floor {floor_a:.2f} s); Newton on "
        f"{int(st['newton'].sum())}/{R * Ts.size} pairs; decisions and max equal to Newton's "
        "on every pair", flush=True)
  return a, floor_a


def _part_g(model, rows, rows64, mask, meta, Ts, eps, rates):
  """g(T, ε): reference = ``sensitivity.fd_rows`` with the masked ``normalizers.softmax`` (the
  step at c5f0aa7: rows cut to their span, L2-sized chunks); ours = the same with
  ``normalizers.get("softmax")``, which ``gradient_rows.g_rows`` runs on −inf-masked logits
  with one reciprocal per row (``gradient_rows._softmax_inf``)."""
  import jax

  from benchmarks import common
  from limits import normalizers
  from limits.gradient import sensitivity

  groups = np.asarray(meta["layer"]) * model.config.n_head + np.asarray(meta["head"])
  idx = sensitivity.sample_rows(groups, FLAGS.fd_rows, FLAGS.seed)
  key = jax.random.key(FLAGS.seed)
  norm_fn = normalizers.get("softmax")
  masked = _masked_softmax  # the generic path of g_rows (not recognised as plain softmax)
  rows_d, mask_d = jax.device_put(rows), jax.device_put(mask)
  ref_g = lambda: sensitivity.fd_rows(masked, rows_d, mask_d, mask, idx, Ts, eps, key,
                                      dtype=np.float64)
  ours_g = lambda: sensitivity.fd_rows(norm_fn, rows_d, mask_d, mask, idx, Ts, eps, key,
                                       dtype=np.float64)
  b = common.alternate(ref_g, ours_g, FLAGS.pairs)
  r, o = ref_g(), ours_g()
  rel = float(np.max(np.abs(r - o) / np.maximum(np.abs(r), 1e-300)))
  scaled = float(np.max(np.abs(r - o) * eps))  # |Δg|·ε: the difference in ‖Δα‖ units
  floor_b = int(mask[idx].sum()) * Ts.size * (eps.size + 1) / rates["float64"]
  print(common.line(f"g(T, eps) on {idx.size} rows", b)
        + f"; ours/floor {b['ours_median_s'] / floor_b:.1f}x, reference/floor "
        f"{b['ref_median_s'] / floor_b:.1f}x (floor {floor_b:.2f} s); max |Δg|·ε {scaled:.1e} "
        f"(max rel {rel:.1e}, from g at rounding level)", flush=True)
  return b, floor_b


def _masked_softmax(z, mask=None):
  from limits import normalizers

  return normalizers.softmax(z, mask=mask)


def _part_pass(model, layers):
  """The screen over the 26-T grid: a pass per ``--t_batch`` batch against one pass."""
  from benchmarks import common
  from limits.gradient import blocks as gradient_blocks
  from limits.gradient import screen as gradient_screen
  from limits.gradient import task as gradient
  from limits.records import sources

  tokens = sources.corpus_windows(model, FLAGS.length, 1)
  blk = gradient_blocks.RowBlocks.from_model(model, tokens, layers, memory_bytes=0)
  Ts = gradient.default_temperatures()
  rtol = 100 * np.finfo(np.float64).eps
  screen = gradient_screen.Screen(blk, None, np.float64, rtol)

  def per_batch():
    outs = [screen.stats(Ts[c:c + FLAGS.t_batch]) for c in range(0, len(Ts), FLAGS.t_batch)]
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}

  one = lambda: screen.stats(Ts)
  a, b = per_batch(), one()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  p = common.alternate(per_batch, one, FLAGS.pairs)
  print(common.line(f"screen, 26 T over {blk.n_rows} streamed rows (batches of {FLAGS.t_batch} "
                    "vs one pass)", p), flush=True)
  return p


def _part_cex(L, Ts, rtol):
  import jax
  import jax.numpy as jnp

  from benchmarks import common
  from limits.gradient import rows as gradient_rows

  T = float(Ts[0])
  cl, cm = jax.device_put(jnp.zeros((1, L))), jax.device_put(jnp.arange(L)[None] < 2)
  ref_c = lambda: jax.block_until_ready(gradient_rows._exact_block(
      cl, cm, jnp.asarray(T), name="softmax", params_items=(), dense=True))
  ours_c = lambda: gradient_rows.counterexample(T, 1.0, 1 / (2 * T), rtol, np.float64)
  c = common.alternate(ref_c, ours_c, FLAGS.pairs)
  print(common.line("tied-top-two counterexample, one T", c), flush=True)
  return c


if __name__ == "__main__":
  app.run(cli.guard(main))
