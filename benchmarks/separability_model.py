r"""Algorithm 4's per-layer kernel (``limits.separability.model.layer_sums``) before and after a
change, alternating in one process: median time ratio with its spread, CPU seconds of each.

"Before" is ``limits/separability/model.py`` as committed at ``--before`` (default 13a01df,
the fourteenth session's base), loaded from git into its own module; it imports the rest of
``limits`` from this checkout. Inputs: one layer's records of ``--model`` (``--layer``, one
window at ``--length``, read from ``$LIMITS_RECORDS_DIR`` or computed), or with
``--model=synthetic`` softmax rows of Gaussian logits (H = 9, d = 64: SmolLM2-135M's shapes).
Both run in float64 on the float32 records, as the reproduction's step does (``--x64``).

  python -m benchmarks.separability_model --model=smollm2 --layer=15 --pairs=5
  python -m benchmarks.separability_model --model=synthetic --length=512
  python -m benchmarks.separability_model --model=smollm2 --layer=18 --pairs=0 --check_decisions
  python -m benchmarks.separability_model --model=smollm2 --vectors=hidden --before=HEAD

``--check_decisions``: for every (head, N) whose N_s/N sums differ between before and after,
the sum recomputed in long double (NumPy's 80-bit float on x86) by the plain loop, with
‖α_i x_i − s‖ < r decided on d² − ‖s‖² = α²‖x‖² − 2α⟨x, s⟩ (no ‖s‖² term to round), and which
side matches it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time


def _cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


def load_before(rev: str):
  """``limits/separability/model.py`` at git revision ``rev`` as a module."""
  src = subprocess.run(["git", "show", f"{rev}:limits/separability/model.py"], check=True,
                       capture_output=True, text=True).stdout
  path = os.path.join(tempfile.mkdtemp(prefix="sep_before_"), "model_before.py")
  with open(path, "w") as f:
    f.write(src)
  spec = importlib.util.spec_from_file_location("model_before", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def inputs(model_name: str, length: int, layer: int, vectors: str = "value"):
  """(weights (H, L, L), v (H, L, d) or (L, D)) float32 NumPy arrays of one layer;
  ``vectors`` the AMBIG-7 reading: value, key, or hidden (the residual stream (L, D), shared
  by every head, as the step passes it; L >= D here, so no row-space reduction)."""
  import numpy as np

  if model_name == "synthetic":
    rng = np.random.default_rng(0)
    H, d = 9, 64
    z = rng.standard_normal((H, length, length)) * 3
    z = np.where(np.tril(np.ones((length, length), bool)), z, -np.inf)
    w = np.exp(z - z.max(-1, keepdims=True))
    return ((w / w.sum(-1, keepdims=True)).astype(np.float32),
            rng.standard_normal((H, length, d)).astype(np.float32))
  from limits import records
  from limits.records import sources

  from limits.distance.model import record_fields, record_vectors

  model = sources.load_model(model_name)
  tokens = sources.corpus_windows(model, length, 1)
  for i, rec in records.iter_layers(model, tokens[0:1], fields=record_fields(vectors)):
    if i == layer:
      w, x = np.array(rec.weights[0]), np.array(record_vectors(rec, vectors)[0])
      if x.ndim == 2 and x.shape[0] < x.shape[1]:
        raise SystemExit(f"--vectors=hidden needs --length >= {x.shape[1]} (no row space here)")
      return w, x
  raise SystemExit(f"--layer={layer}: the model has fewer layers")


def long_double_fraction_sum(w, v, h: int, n: int, M: float = 1.0) -> float:
  """Σ over queries t > N of N_s/N for head h (strict rule), in long double (see the module
  docstring); w (H, L, L), v (H, L, d) float32 records."""
  import numpy as np

  x = (v[h] if v.ndim == 3 else v).astype(np.longdouble)  # (L, D): shared by the heads
  x = M * x / np.sqrt((x * x).sum(1, keepdims=True))
  tot = 0.0
  for q in range(n, w.shape[1]):
    a = w[h, q, :q + 1].astype(np.longdouble)
    order = np.lexsort((np.arange(q + 1), -w[h, q, :q + 1].astype(np.float64)))
    sel, non = order[:n], order[n:]
    s = (a[sel, None] * x[sel]).sum(0)
    t = a * a * (x[:q + 1] ** 2).sum(1) - 2 * a * (x[:q + 1] @ s)
    tot += np.sum(t[sel] < t[non].min()) / n
  return float(tot)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model", default="synthetic")
  p.add_argument("--length", type=int, default=1024)
  p.add_argument("--layer", type=int, default=15)
  p.add_argument("--pairs", type=int, default=5)
  p.add_argument("--before", default="13a01df")
  p.add_argument("--blocks", type=int, default=None, help="after: causal query blocks")
  p.add_argument("--n_values", default="1,2,4,8,16,32,64,128")
  p.add_argument("--vectors", default="value", choices=("value", "key", "hidden"),
                 help="AMBIG-7 reading of x_i (a model's records only)")
  p.add_argument("--check_decisions", action="store_true",
                 help="long-double N_s/N sums where before and after differ")
  a = p.parse_args(argv)

  import jax

  jax.config.update("jax_enable_x64", True)
  import jax.numpy as jnp
  import numpy as np

  from limits.separability import model as after

  before = load_before(a.before)
  ns = [int(n) for n in a.n_values.split(",")]
  w, v = inputs(a.model, a.length, a.layer, a.vectors)
  wj, vj = jnp.asarray(w), jnp.asarray(v)
  # before: (H, L, d) for every revision (a shared (L, D) is repeated per head, as the step
  # passed it before layer_sums took it once)
  vb = vj if vj.ndim == 3 else jnp.broadcast_to(vj[None], (w.shape[0],) + vj.shape)

  def run_before():  # the base step: float32 records cast inside the kernel (13a01df on),
    try:             # or (older revisions) a host cast to float64, then the kernel
      return np.asarray(before.layer_sums(wj, vb, ns, 1.0, dtype=jnp.float64))
    except TypeError:
      return np.asarray(before.layer_sums(jnp.asarray(w, jnp.float64),
                                          jnp.asarray(vb, jnp.float64), ns, 1.0))

  def run_after():
    return np.asarray(after.layer_sums(wj, vj, ns, 1.0, dtype=jnp.float64, blocks=a.blocks))

  for name, fn in (("before", run_before), ("after", run_after)):
    t0 = time.perf_counter()
    fn()
    print(f"{name}: first call (compile + run) {time.perf_counter() - t0:.2f} s", flush=True)
  rb, ra = run_before(), run_after()
  rel = np.max(np.abs(ra - rb) / np.maximum(np.abs(rb), 1e-300))
  print(f"max relative difference of the (H, K, F) sums: {rel:.2e}; N_s/N sums differ in "
        f"{int(np.sum(ra[..., 0] != rb[..., 0]))} of {ra[..., 0].size} (head, N)")
  if a.check_decisions:
    hits = {"before": 0, "after": 0}
    cells = np.argwhere(ra[..., 0] != rb[..., 0])
    for h, k in cells:
      ref = long_double_fraction_sum(w, v, int(h), ns[k])
      hits["before"] += abs(rb[h, k, 0] - ref) < 1e-9
      hits["after"] += abs(ra[h, k, 0] - ref) < 1e-9
      print(f"head {h} N {ns[k]}: N_s/N sum before {rb[h, k, 0]:.6f} after {ra[h, k, 0]:.6f} "
            f"long double {ref:.6f}")
    print(f"(head, N) cells whose N_s/N sums differ: {len(cells)}; matching long double: "
          f"before {hits['before']}, after {hits['after']}", flush=True)
  tb, ta, cb, ca = [], [], [], []
  for _ in range(a.pairs):
    for fn, tt, cc in ((run_before, tb, cb), (run_after, ta, ca)):
      t0, c0 = time.perf_counter(), _cpu()
      fn()
      tt.append(time.perf_counter() - t0)
      cc.append(_cpu() - c0)
  if not a.pairs:
    return
  ratios = np.asarray(tb) / np.asarray(ta)
  print(f"{a.model} L={a.length} layer {a.layer}, {a.pairs} alternating pairs: "
        f"before median {np.median(tb):.3f} s wall / {np.median(cb):.3f} s CPU, "
        f"after {np.median(ta):.3f} s wall / {np.median(ca):.3f} s CPU; "
        f"speed-up before/after median {np.median(ratios):.2f}x "
        f"(min {ratios.min():.2f}, max {ratios.max():.2f}); "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)


if __name__ == "__main__":
  sys.exit(main())
