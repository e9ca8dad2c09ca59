r"""XLA's library fusions (YNNPACK) against XLA's own loops, step kernel by step kernel.

  python -m benchmarks.library_fusions --model=smollm2 --layer=15 --pairs=5
  python -m benchmarks.library_fusions --model=tiny --length=64 --pairs=2   # a quick look

On CPU, jaxlib 0.10's XLA hands reductions and products to YNNPACK ("__ynn_fusion" in the
compiled HLO) unless told otherwise. A library reduction does not take the exp that feeds it,
so a kernel whose reductions read an exp materialises the exps first; XLA's own loop fusions
fuse the exp into the reduction. Which is faster depends on the kernel. Here each kernel is
compiled twice from the same traced function, with XLA's defaults (``library``) and with
``compiler_options={"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}``
(``own``: library fusions for products only, reductions and elementwise ops in XLA's loops),
and timed alternating in one process (``benchmarks.common.alternate``, compiles excluded).
Printed per kernel: the median of each side, the median ratio own/library with its spread
(> 1: the library is faster), whether each compiled program holds a library fusion, and the
difference of the two outputs (another summation order): the largest relative difference, for
g the largest |Δg|·ε (‖Δα‖ units: g at low T and small ε is at float64's rounding level).

Kernels, on one layer of the first corpus window (:func:`layer_inputs`: its records without a
store; H·L raw q·k rows, float32, with the layer's mask, as ``benchmarks.screen_kernel``), the
paper's 26 temperatures, float64 where the step runs float64:

- ``exp_sum_f32``, ``exp_sum_f64``: a fused exp + sum over (256, 16,384) elements (the
  elementwise rate of ``benchmarks.work.measure_rates``, and its float64 twin);
- ``screen``: the gradient screen's kernel on the layer's widest span group
  (``limits.gradient.screen._screen_group_fn``, float32 exps, float64 thresholds);
- ``g``: g(T, ε) on ``--fd_rows`` rows of the widest span group of ``sensitivity.fd_rows``'
  groups (``limits.gradient.sensitivity._fd_group_fn``, float64, ε = 1e-3, 0.1, 10);
- ``check``: Corollary 1's causal check of the layer (``limits.vanishing.causal_check``,
  float64).

The steps run XLA's defaults. WORKSPACE (thirtieth session) has the numbers on SmolLM2.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np

# XLA's own loops for reductions: library fusions for products only (the option's values are
# XLA's LibraryFusionType enum; an unknown option or value fails the compile with one line)
OWN_LOOPS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
LIBRARY_MARK = "__ynn_fusion"  # the compiled HLO's name for a library fusion
EPSILONS = (1e-3, 1e-1, 10.0)


def _temperatures():
  from limits.gradient import task as gradient_task

  return np.asarray(gradient_task.default_temperatures(), np.float64)


def exp_sum(dtype):
  """(fn, args): exp + sum over the last axis of (256, 16,384) values in [−5, 0]."""
  import jax
  import jax.numpy as jnp

  x = -np.abs(np.random.default_rng(0).standard_normal((256, 1 << 14))) * 5
  return (lambda x: jnp.sum(jnp.exp(x), axis=-1)), (jax.device_put(x.astype(dtype)),)


def _widest(groups):
  idx, w = max(groups, key=lambda g: (g[1], g[0].size))
  return idx, w


def screen_kernel(rows, mask):
  """(fn, args): the screen's group kernel on the widest span group of the layer's rows."""
  import jax

  from limits.gradient import screen, sensitivity

  T = _temperatures()
  idx, w = _widest(sensitivity.span_groups(mask, step=sensitivity.SPAN_STEP))
  chunk = screen.screen_chunk(T.size, w)
  pad = (-idx.size) % chunk
  ix = np.concatenate([idx, np.full(pad, idx[0], idx.dtype)])
  fn = screen._screen_group_fn(w, chunk, idx.size, "float64").__wrapped__
  return fn, jax.device_put((rows, mask, ix, T))


def g_kernel(rows, mask, n_rows: int):
  """(fn, args): g(T, ε) of the first ``n_rows`` rows of ``fd_rows``' widest span group."""
  import jax

  from limits import normalizers
  from limits.gradient import sensitivity

  T, eps = _temperatures(), np.asarray(EPSILONS)
  idx, w = _widest(sensitivity.span_groups(mask, step=sensitivity.FD_SPAN_STEP))
  idx = idx[:n_rows]
  chunk = max(1, (1 << 18) // (w * T.size * (eps.size + 1)))
  per = chunk * -(-idx.size // chunk)
  p = np.concatenate([idx, np.full(per - idx.size, idx[0], idx.dtype)])
  keys = jax.random.split(jax.random.key(0), per)
  fn = sensitivity._fd_group_fn(normalizers.get("softmax"), w, chunk, "float64").__wrapped__
  return fn, (*jax.device_put((rows, mask, p, np.arange(per))), keys, *jax.device_put((T, eps)))


def check_kernel(scores, q, k, temperature, window: int = 0):
  """(fn, args): Corollary 1's causal check of one layer (``window`` W > 0: a sliding-window
  layer), float64."""
  import jax
  import jax.numpy as jnp

  from limits import vanishing

  def fn(s, q, k, t):
    return vanishing.causal_check(s, q, k, t, window=window, dtype=jnp.float64)

  return fn, (*jax.device_put((scores, q, k)), np.float64(temperature))


def layer_inputs(model_name: str, length: int, layer: int):
  """(rows (H·L, L) f32, mask (H·L, L), scores (1, H, L, L), q, k (1, H, L, d), T, window)
  of one layer of the first corpus window (window 0: not a sliding-window layer)."""
  from limits import records
  from limits.gradient.blocks import _head_mask
  from limits.records import sources
  from limits import numerics

  model = sources.load_model(model_name)
  if not 0 <= layer < model.config.n_layer:
    raise SystemExit(f"--layer={layer}: the model has layers 0 to {model.config.n_layer - 1}")
  tokens = sources.corpus_windows(model, length, 1)
  for _, rec, window in records.iter_arrays(model, tokens, fields=("q", "k", "scores"),
                                            layers=[layer], store=None):
    scores = np.asarray(rec["scores"], np.float32)
    H, L = scores.shape[1], scores.shape[-1]
    vis = np.asarray(numerics.attention_mask(L, int(window or 0)))
    return (scores[0].reshape(H * L, L), _head_mask(vis, H * L), scores, rec["q"], rec["k"],
            model.native_temperature, int(window or 0))
  raise SystemExit("no layer")


def _max_rel_diff(out_lib, out_own) -> float:
  """The largest relative difference over the finite entries of two output pytrees (inf where
  their finite entries differ in place)."""
  diff = 0.0
  for a, b in zip(out_lib, out_own):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
      return math.inf
    both = np.isfinite(a)
    rel = np.abs(a[both] - b[both]) / np.maximum(np.abs(a[both]), np.finfo(np.float64).tiny)
    diff = max(diff, float(rel.max()) if rel.size else 0.0)
  return diff


def _g_diff(out_lib, out_own) -> float:
  """g(T, ε)'s difference in ‖Δα‖ units, max |Δg|·ε (as ``benchmarks.gradient``): at low T
  and small ε g is at float64's rounding level, where relative differences mean nothing."""
  a, b = (np.asarray(o[0], np.float64) for o in (out_lib, out_own))  # (S, K, E)
  return float(np.nanmax(np.abs(a - b) * np.asarray(EPSILONS)))


def compare(fn, args, pairs: int, diff=_max_rel_diff) -> dict:
  """Times ``fn`` compiled with XLA's defaults and with :data:`OWN_LOOPS`, alternating; the
  outputs' difference by ``diff(library leaves, own leaves)``."""
  import jax

  from benchmarks.common import alternate

  lib = jax.jit(fn)
  own = jax.jit(fn, compiler_options=OWN_LOOPS)
  marks = [LIBRARY_MARK in f.lower(*args).compile().as_text() for f in (lib, own)]
  out_lib = jax.tree.leaves(jax.device_get(lib(*args)))
  out_own = jax.tree.leaves(jax.device_get(own(*args)))
  d = diff(out_lib, out_own)
  res = alternate(lambda: jax.block_until_ready(lib(*args)),
                  lambda: jax.block_until_ready(own(*args)), pairs)
  # alternate's ratio is ref/ours = library/own; report own/library (> 1: library faster)
  ratios = [o / max(r, 1e-12) for r, o in zip(res["ref_s"], res["ours_s"])]
  return {"library_ms": res["ref_median_s"] * 1e3, "own_ms": res["ours_median_s"] * 1e3,
          "ratio": float(np.median(ratios)), "ratio_min": min(ratios),
          "ratio_max": max(ratios), "library_fusion": marks, "diff": d}


def run(model: str, length: int, layer: int, pairs: int, fd_rows: int,
        kernels=("exp_sum_f32", "exp_sum_f64", "screen", "g", "check")) -> dict:
  """{kernel: compare(...)} for the named kernels (float64 kernels need x64 on: :func:`main`
  turns it on for the process, a caller may use ``jax.enable_x64(True)``)."""
  need_layer = any(k in kernels for k in ("screen", "g", "check"))
  if need_layer:
    rows, mask, scores, q, k, t, window = layer_inputs(model, length, layer)
  build = {"exp_sum_f32": lambda: exp_sum(np.float32),
           "exp_sum_f64": lambda: exp_sum(np.float64),
           "screen": lambda: screen_kernel(rows, mask),
           "g": lambda: g_kernel(rows, mask, fd_rows),
           "check": lambda: check_kernel(scores, q, k, t, window)}
  return {name: compare(*build[name](), pairs, _g_diff if name == "g" else _max_rel_diff)
          for name in kernels}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model", default="smollm2")
  p.add_argument("--length", type=int, default=1024)
  p.add_argument("--layer", type=int, default=15)
  p.add_argument("--pairs", type=int, default=5)
  p.add_argument("--fd_rows", type=int, default=768, help="rows of the g(T, eps) kernel")
  p.add_argument("--kernels", default="exp_sum_f32,exp_sum_f64,screen,g,check")
  a = p.parse_args(argv)
  kernels = [k for k in a.kernels.split(",") if k]
  known = ("exp_sum_f32", "exp_sum_f64", "screen", "g", "check")
  bad = [k for k in kernels if k not in known]
  if bad or a.pairs < 1 or a.fd_rows < 1:
    raise SystemExit(f"--kernels={a.kernels!r} --pairs={a.pairs} --fd_rows={a.fd_rows}: "
                     f"kernels from {','.join(known)}, pairs and fd_rows >= 1")
  import jax

  from limits.records import compilation

  jax.config.update("jax_enable_x64", True)
  compilation.enable()
  out = run(a.model, a.length, a.layer, a.pairs, a.fd_rows, tuple(kernels))
  print(f"{a.model} L={a.length} layer {a.layer}, {a.pairs} alternated pairs; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
  print(f"{'kernel':<12} {'library ms':>10} {'own ms':>9} {'own/library':>12} {'spread':>13} "
        f"{'library fusion (lib, own)':>26} {'difference':>11}")
  for name, r in out.items():
    print(f"{name:<12} {r['library_ms']:10.2f} {r['own_ms']:9.2f} {r['ratio']:12.2f} "
          f"{r['ratio_min']:6.2f}-{r['ratio_max']:<6.2f} {str(tuple(r['library_fusion'])):>26} "
          f"{r['diff']:11.1e}")
  print("difference: the largest relative difference of the two outputs; for g, max |Δg|·ε "
        "(‖Δα‖ units)")


if __name__ == "__main__":
  main()
