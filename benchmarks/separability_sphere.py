r"""The sphere Monte Carlo's chunk kernel: the float64 reference (direct differences, a float64
Gram for delta) against the fast form (a certified float32 Gram for delta, Gram-identity counts
with a rounding margin; ``limits.separability.sphere``), alternating in one process on the
same samples: median time ratio with its spread, and whether any sample fell back (one chunk at
a time: the Monte Carlo also keeps up to ``sphere.CHUNKS_IN_FLIGHT`` chunks in flight).

Defaults are the reproduction's ``separability_sphere`` step (L = 1,024, d = 64, 12 softmax
rows, n = 1 … 128, float64); ``--chunk`` samples per call (the step's default chunk for the
fast form, 2 for the reference at these settings).

  python -m benchmarks.separability_sphere --pairs=5
"""

from __future__ import annotations

import argparse

from benchmarks.common import alternate, line


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--length", type=int, default=1024)
  p.add_argument("--dim", type=int, default=64)
  p.add_argument("--heads", type=int, default=12)
  p.add_argument("--n_values", default="1,2,4,8,16,32,64,128")
  p.add_argument("--chunk", type=int, default=5)
  p.add_argument("--calls", type=int, default=20, help="chunks per timed run")
  p.add_argument("--pairs", type=int, default=5)
  a = p.parse_args(argv)
  import jax
  import jax.numpy as jnp
  import numpy as np

  jax.config.update("jax_enable_x64", True)
  from limits.selection import sort_desc
  from limits.separability import sphere

  key = jax.random.key(0)
  alphas = jax.vmap(lambda k: sphere.synthetic_alpha("softmax", a.length, k))(
      jax.random.split(key, a.heads))
  rank = sort_desc(alphas)
  ns = jnp.asarray([int(v) for v in a.n_values.split(",")], jnp.int32)
  M = jnp.float64(1.0)
  k = int(max(int(v) for v in a.n_values.split(",")))
  top = sphere._top_rows_jit(alphas, rank, ns, k)    # once per run, as the Monte Carlo does
  flags = []

  def run(checked):
    def go():
      for c in range(a.calls):
        idx = jnp.arange(c * a.chunk, (c + 1) * a.chunk, dtype=jnp.int32)
        out, flag = sphere._chunk_stats_jit(key, idx, alphas, rank, ns, M, None, dim=a.dim,
                                            with_bounds=True, rule="strict", checked=checked,
                                            k=k if checked else None,
                                            top=top if checked else None)
        jax.block_until_ready(out)
        if checked:
          flags.append(int(np.asarray(flag).sum()))
    return go

  res = alternate(run(False), run(True), a.pairs)
  per = a.calls * a.chunk
  print(line(f"sphere chunk kernel, {per} samples per run", res))
  print(f"per sample: reference {res['ref_median_s'] / per * 1e3:.2f} ms, "
        f"fast {res['ours_median_s'] / per * 1e3:.2f} ms; samples the fast form sent back to "
        f"the reference: {sum(flags)} of {len(flags) * a.chunk}")


if __name__ == "__main__":
  main()
