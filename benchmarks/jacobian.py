"""Time per row of the softmax Jacobian tools, side by side, as ratios to jacfwd.

  python -m benchmarks.jacobian                  # L in {128, 1024, 4096}, float32
  python -m benchmarks.jacobian --lengths=128,512 --x64

Methods (one softmax row of length L at T = 1, logits ~ N(0, 2²)):
  jacfwd            the exact L×L Jacobian by forward mode (L jvps)
  jacrev            the exact L×L Jacobian by reverse mode (L vjps)
  closed J          (diag α − ααᵀ)/T built directly
  dense ‖J‖ (SVD)   spectral norm of a given L×L matrix by SVD (the matrix is precomputed)
  matfree ‖J‖       power iteration on JᵀJ through jvp/vjp (``--iters`` steps), no L×L matrix
  closed ‖J‖ O(L)   top eigenvalue by the secular equation (bisection), no matrix, no autodiff

Then the gradient step's all-rows norm, reference and ours alternating (benchmarks.common):
``jacobians.softmax_closed_form_norm`` (bisection, one T per call) for the 26 temperatures of
the paper grid against ``sensitivity.softmax_norms`` (Newton, all temperatures of a row in one
pass, causal rows cut to their span), on ``--norm_rows`` causal rows at the largest L, float64;
printed with their largest difference in T‖J‖ (absolute; both are ~1e-16 accurate in those
units, while relative digits of nearly one-hot rows are lost by the bisection, see
tests/test_sensitivity.py).

Every function is jitted and warmed up first (compile time excluded); the time is the best of
``--repeats`` runs over a batch of rows, divided by the batch size. A method whose L×L output
would exceed ``--max_matrix_mb`` per batch uses one row.
"""

from __future__ import annotations

import time

from absl import app, flags

from limits import cli
from limits.runs import parsing
from limits.errors import LimitsError

flags.DEFINE_string("lengths", "128,1024,4096", "Row lengths L.")
flags.DEFINE_integer("iters", 100, "Power-iteration steps for the matrix-free norm.")
flags.DEFINE_integer("repeats", 3, "Timed repeats (best is kept).")
flags.DEFINE_integer("max_matrix_mb", 256, "Largest batch of L×L matrices to materialise.")
flags.DEFINE_boolean("x64", False, "Time in float64.")
flags.DEFINE_integer("seed", 0, "Random seed for the logits.")
flags.DEFINE_integer("norm_rows", 512, "Causal rows for the all-rows norm comparison.")
flags.DEFINE_integer("pairs", 3, "Alternating (reference, ours) pairs for the norm comparison.")
flags.register_validator("iters", lambda v: v >= 1, message="--iters must be >= 1")
flags.register_validator("repeats", lambda v: v >= 1, message="--repeats must be >= 1")
FLAGS = flags.FLAGS


def _time(fn, *args, repeats: int) -> float:
  import jax

  jax.block_until_ready(fn(*args))  # compile + warm-up
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t0)
  return best


def bench_length(L: int, iters: int, repeats: int, max_mb: int, seed: int) -> dict[str, float]:
  import jax
  import jax.numpy as jnp

  from limits import jacobians, normalizers

  dtype = jnp.result_type(float)
  itemsize = jnp.dtype(dtype).itemsize
  batch = max(1, min(256, (max_mb << 20) // (L * L * itemsize)))
  small = max(1, min(256, (1 << 26) // (L * itemsize)))  # O(L)-memory methods
  key = jax.random.key(seed)
  x_b = 2.0 * jax.random.normal(key, (batch, L), dtype)
  x_s = 2.0 * jax.random.normal(key, (small, L), dtype)
  T = jnp.asarray(1.0, dtype)
  f = lambda l: normalizers.softmax(l, T)
  fwd = jax.jit(lambda x: jacobians.exact(f, x, "fwd"))
  rev = jax.jit(lambda x: jacobians.exact(f, x, "rev"))
  closed = jax.jit(lambda x: jacobians.softmax_closed_form(x, T))
  svd = jax.jit(jacobians.spectral_norm)
  free = jax.jit(lambda x: jacobians.spectral_norm_matfree(f, x, iters))
  fast = jax.jit(lambda x: jacobians.softmax_closed_form_norm(x, T))
  Jm = closed(x_b)
  n_svd = max(1, min(batch, (1 << 24) // (L * L)))  # an SVD is O(L³): 16 rows at L = 1024
  r = repeats if L <= 1024 else 1
  out = {
      "jacfwd": _time(fwd, x_b, repeats=r) / batch,
      "jacrev": _time(rev, x_b, repeats=r) / batch,
      "closed J": _time(closed, x_b, repeats=r) / batch,
      "dense ‖J‖ (SVD)": _time(svd, Jm[:n_svd], repeats=1 if L > 256 else r) / n_svd,
      "matfree ‖J‖": _time(free, x_s, repeats=r) / small,
      "closed ‖J‖ O(L)": _time(fast, x_s, repeats=r) / small,
  }
  # Agreement, so the table compares equals: the three norms on the first row.
  n_svd = float(svd(Jm[:1])[0])
  n_free = float(free(x_b[:1])[0])
  n_fast = float(fast(x_b[:1])[0])
  out["_agreement"] = max(abs(n_free - n_svd), abs(n_fast - n_svd)) / n_svd
  out["_batch"] = batch
  return out


def main(argv):
  del argv
  cli.setup_precision(FLAGS.x64)
  import jax

  lengths = parsing.parse_ints(FLAGS.lengths, "lengths")
  for L in lengths:
    if L < 2:
      raise LimitsError(f"length {L} is not allowed; every L must be >= 2")
  print(f"softmax Jacobian tools, time per row; device={jax.devices()[0]}, "
        f"dtype={'float64' if FLAGS.x64 else 'float32'}, matfree iters={FLAGS.iters}", flush=True)
  results = {}
  for L in lengths:
    results[L] = bench_length(L, FLAGS.iters, FLAGS.repeats, FLAGS.max_matrix_mb, FLAGS.seed)
    print(f"  L={L} done (batch {results[L]['_batch']} rows for the L×L methods)", flush=True)
  methods = [m for m in results[lengths[0]] if not m.startswith("_")]
  head = ["method"] + [f"L={L} time/row" for L in lengths] + [f"L={L} ×jacfwd" for L in lengths]
  rows = []
  for m in methods:
    rows.append([m] + [_fmt(results[L][m]) for L in lengths]
                + [f"{results[L][m] / results[L]['jacfwd']:.3g}" for L in lengths])
  rows.append(["norm agreement (rel)"] + [f"{results[L]['_agreement']:.1e}" for L in lengths]
              + [""] * len(lengths))
  widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
  print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head,
                                                                                      widths))))
  for r in rows:
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r,
                                                                                         widths))))
  all_rows_norms(max(lengths))


def all_rows_norms(L: int) -> dict:
  """Gradient step's exact norm of every (row, T): bisection per T vs Newton over all T."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from benchmarks import common
  from limits import jacobians
  from limits.gradient import sensitivity

  with jax.enable_x64(True):
    rng = np.random.default_rng(FLAGS.seed)
    R = FLAGS.norm_rows
    l = rng.normal(size=(R, L)) * 3.0                      # raw q·k-like scale
    mask = np.arange(L)[None, :] <= rng.integers(0, L, size=R)[:, None]   # causal rows
    Ts = np.logspace(-3, 2, 26)
    bis = jax.jit(jacobians.softmax_closed_form_norm)
    ref = lambda: np.stack([np.asarray(bis(jnp.asarray(l), T, jnp.asarray(mask))) for T in Ts],
                           axis=-1)
    ours = lambda: sensitivity.softmax_norms(l, Ts, mask)
    res = common.alternate(ref, ours, FLAGS.pairs)
    a, b = ours(), ref()
    res["max_abs_diff_T_norm"] = float(np.max(np.abs(a - b) * Ts))
  print(common.line(f"all-rows norm, {R} causal rows x 26 T at L={L} (float64)", res)
        + f"; max |diff| of T||J|| {res['max_abs_diff_T_norm']:.1e}")
  return res


def _fmt(seconds: float) -> str:
  if seconds >= 1:
    return f"{seconds:.2f} s"
  if seconds >= 1e-3:
    return f"{seconds * 1e3:.2f} ms"
  return f"{seconds * 1e6:.1f} µs"


if __name__ == "__main__":
  app.run(cli.guard(main))
