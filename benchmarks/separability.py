r"""Monte Carlo throughput for Theorem 2: jit + vmap (limits.separability) vs a NumPy loop.

Both estimate N_s/N for one weight row over fresh points on S^{d-1}(1): the NumPy reference
loops over samples in Python and is vectorised over tokens inside a sample (argsort once,
direct differences, strict count), i.e. what a careful NumPy user would write. JAX times
exclude compilation (one warm-up call per shape; its extra time is reported, ~0 when N changes
only, because N is a traced argument). Columns: samples per second of each, and the ratio
JAX / NumPy. Also scans dimension and N.

Finding on a 2-core CPU: the JAX path is 0.4-0.8x of NumPy because it is bound by the
counter-based threefry generator (raw threefry bits alone: ~360 samples/s of 1024x64 vs NumPy's
PCG normals ~600/s); the count itself is cheap. The JAX path buys per-sample keys
(fold_in(key, i)), so results do not depend on chunking or device count, and sharding.

  python -m benchmarks.separability            # default grid
  python -m benchmarks.separability --quick    # a smaller one
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from limits import separability as sp


def numpy_count(alpha, order, x, n):
  """Strict N_s/N for one sample (the same definition as count_distinguishable)."""
  sel = order[:n]
  non = order[n:]
  ax = alpha[:, None] * x
  s = ax[sel].sum(axis=0)
  dist = np.linalg.norm(ax - s, axis=1)
  r = dist[non].min() if len(non) else np.inf
  return np.count_nonzero(dist[sel] < r) / len(sel)


def numpy_mc(alpha, n, dim, samples, seed=0):
  rng = np.random.default_rng(seed)
  order = np.argsort(-alpha, kind="stable")
  out = np.empty(samples)
  for i in range(samples):
    g = rng.standard_normal((len(alpha), dim)).astype(np.float32)
    x = g / np.linalg.norm(g, axis=1, keepdims=True)
    out[i] = numpy_count(alpha, order, x, n)
  return out.mean(), out.std(ddof=1) / np.sqrt(samples)


def bench(L, dim, n, jax_samples, np_samples):
  alpha = sp.synthetic_alpha("softmax", L, jax.random.key(0))
  key = jax.random.key(1)
  t = time.perf_counter()
  sp.monte_carlo(key, alpha, n, dim, 1.0, jax_samples)        # compile + first run
  compile_s = time.perf_counter() - t
  t = time.perf_counter()
  m_j, se_j = sp.monte_carlo(key, alpha, n, dim, 1.0, jax_samples)
  jax_s = time.perf_counter() - t
  a = np.asarray(alpha, np.float32)
  t = time.perf_counter()
  m_n, se_n = numpy_mc(a, n, dim, np_samples)
  np_s = time.perf_counter() - t
  return {"L": L, "dim": dim, "N": n, "jax_sps": jax_samples / jax_s,
          "numpy_sps": np_samples / np_s, "ratio": (jax_samples / jax_s) / (np_samples / np_s),
          "compile_s": max(compile_s - jax_s, 0.0), "jax_mean": float(m_j),
          "numpy_mean": float(m_n),
          # <= so that N = 1 (N_s/N = 1 exactly, stderr 0 in both) counts as agreeing.
          "agree": abs(float(m_j) - m_n) <= 4 * np.hypot(float(se_j), se_n) + 1e-12}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--quick", action="store_true")
  args = p.parse_args()
  if args.quick:
    grid = [(256, 64, 8), (256, 64, 64)]
    js, ns = 256, 64
  else:
    grid = [(1024, 16, 16), (1024, 64, 16), (1024, 256, 16),
            (1024, 64, 1), (1024, 64, 128), (256, 64, 16)]
    js, ns = 1024, 200
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}, "
        f"{jax.device_count()} device(s); one weight row (softmax kind), M = 1, strict rule")
  head = (f"{'L':>5} {'dim':>4} {'N':>4} {'jax samples/s':>14} {'numpy samples/s':>16} "
          f"{'ratio':>7} {'compile s':>9} {'means agree (4 se)':>19}")
  print(head)
  print("-" * len(head))
  for L, dim, n in grid:
    r = bench(L, dim, n, js, ns)
    print(f"{r['L']:>5} {r['dim']:>4} {r['N']:>4} {r['jax_sps']:>14.0f} {r['numpy_sps']:>16.0f} "
          f"{r['ratio']:>6.1f}x {r['compile_s']:>9.2f} {str(r['agree']):>19}", flush=True)


if __name__ == "__main__":
  main()
