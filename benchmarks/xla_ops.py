r"""Where a jitted call's device time goes, op by op: XLA's own thunks, timed by the profiler.

  python -m benchmarks.xla_ops --kernel=separability [--length=1024] [--model=synthetic]
  python -m benchmarks.xla_ops --kernel=distance --length=512 --ns=1,5,10,20,100

Runs one layer's kernel (``separability``: Algorithm 4's ``limits.separability.model.layer_sums``
with the step's eight n; ``distance``: Algorithms 1-2's ``limits.distance.kernels.
layer_stats_printed``, float32 averages, as the vary steps call it) twice to compile and warm,
then once under ``jax.profiler.trace``, and prints each compiled op's summed duration and
call count (``lax.map`` bodies run once per head and row chunk), the source operation XLA
recorded for it (``op_name`` from the compiled HLO: ``rnc,cd->rnd/dot_general`` is an einsum),
and the sums by kind (``ynn_fusion``: XNNPACK/YNNPACK products and reductions; loop fusions by
their root). Durations are thunk wall times on the executing threads: two ops running at once
on 2 cores both count, so the sum can exceed the call's wall time; the executor's overhead
between thunks is the difference to ``ThunkExecutor::Execute``. float64 (x64) throughout, as the
steps verify. Inputs: ``--model=synthetic`` (softmax rows of Gaussian logits, SmolLM2-135M's
H = 9, d = 64) or a model's layer (``benchmarks.separability_model.inputs``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import shutil
import tempfile


def profile(fn, compiled_text: str, top: int = 30) -> str:
  """Runs ``fn()`` (already warm) under the profiler; the table of its ops as text."""
  import jax

  d = tempfile.mkdtemp(prefix="xla_ops_")
  try:
    with jax.profiler.trace(d):
      fn()
    path = glob.glob(d + "/**/*.trace.json.gz", recursive=True)[0]
    events = json.load(gzip.open(path))["traceEvents"]
  finally:
    shutil.rmtree(d, ignore_errors=True)
  dur, calls = collections.Counter(), collections.Counter()
  for e in events:
    if e.get("ph") == "X" and "dur" in e:
      dur[e["name"]] += e["dur"]
      calls[e["name"]] += 1
  ops = {n: t for n, t in dur.items()
         if not (n.startswith("$") or "Thunk" in n or "Await" in n or "Dispatch" in n
                 or n.startswith("PjitFunction") or n.startswith("end:"))}
  total = sum(ops.values())
  lines = [f"executor (ThunkExecutor::Execute, all threads): "
           f"{dur.get('ThunkExecutor::Execute', 0) / 1e3:.1f} ms; ops: {total / 1e3:.1f} ms",
           f"{'ms':>9} {'%':>5} {'calls':>6}  op  [shape]  source"]
  for name, t in sorted(ops.items(), key=lambda p: -p[1])[:top]:
    m = re.search(r"%" + re.escape(name) + r" = (\S+) [^\n]*?op_name=\"([^\"]*)\"",
                  compiled_text)
    shape, src = (m.group(1), m.group(2).split("closed_call/")[-1][-50:]) if m else ("", "")
    lines.append(f"{t / 1e3:9.1f} {100 * t / total:5.1f} {calls[name]:6d}  {name}  "
                 f"[{shape}]  {src}")
  kinds = collections.Counter()
  for name, t in ops.items():
    kinds[re.sub(r"[.\d]+$", "", name)] += t
  lines.append("by kind: " + ", ".join(f"{k} {t / 1e3:.1f} ms ({100 * t / total:.0f} %)"
                                       for k, t in kinds.most_common(8)))
  return "\n".join(lines)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--kernel", choices=("separability", "distance"), default="separability")
  p.add_argument("--model", default="synthetic")
  p.add_argument("--length", type=int, default=1024)
  p.add_argument("--layer", type=int, default=15)
  p.add_argument("--ns", default=None, help="N values (default: the step's: 1,2,...,128 for "
                 "separability, 5 for distance)")
  p.add_argument("--top", type=int, default=30)
  a = p.parse_args(argv)

  import jax

  jax.config.update("jax_enable_x64", True)
  import jax.numpy as jnp

  from benchmarks.separability_model import inputs

  w, v = inputs(a.model, a.length, a.layer)  # (H, L, L), (H, L, d) float32
  if a.kernel == "separability":
    from limits.separability import model as sp

    ns = tuple(int(n) for n in (a.ns or "1,2,4,8,16,32,64,128").split(","))
    blocks = -(-a.length // sp.ROW_BLOCK)
    tops = sp._block_host_tops(w, ns, blocks, 0)
    wd, vd = jnp.asarray(w), jnp.asarray(v)
    kw = dict(ns=ns, rule="strict", blocks=blocks, window=0, dtype=jnp.dtype("float64"))
    text = sp._layer_kernel.lower(wd, vd, 1.0, tops, **kw).compile().as_text()
    fn = lambda: jax.block_until_ready(sp._layer_kernel(wd, vd, 1.0, tops, **kw))
  else:
    from limits.distance import kernels as df

    ns = [int(n) for n in (a.ns or "5").split(",")]
    blocks = df.default_blocks(a.length)
    wd, xd = jnp.asarray(w[None]), jnp.asarray(v[None], jnp.float64)
    kmax = max(ns)
    kw = dict(kmax=kmax, bound=True, blocks=blocks, printed=True,
              dtype=jnp.dtype("float64"), avg_dtype=jnp.dtype("float32"))
    H, L = w.shape[:2]
    args = (wd.reshape(H, L, L), xd.reshape(H, L, -1), jnp.asarray(ns, jnp.int32))
    text = df.layer_kernel.lower(*args, **kw).compile().as_text()
    fn = lambda: jax.block_until_ready(df.layer_kernel(*args, **kw))
  fn()
  fn()
  print(f"{a.kernel} kernel, {a.model}, L = {a.length}, N = {list(ns)}, float64; "
        f"one call under jax.profiler.trace")
  print(profile(fn, text, a.top))


if __name__ == "__main__":
  main()
