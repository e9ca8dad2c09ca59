r"""Algorithm 4 / Figure 3: geometric separability N_s/N and Theorem 2's bounds.

Two sources of (weights, vectors):

- ``--source=sphere``: ``--heads`` synthetic weight rows (``--alpha_kind``) over L tokens, with
  fresh points uniform on S^{dim-1}(M) for each of ``--samples`` Monte Carlo samples (the same
  points for every N and every row: common random numbers).
- ``--source=model``: a GPT-2-architecture model (``--model``; default the embedded "tiny"),
  ``--windows`` windows of L corpus tokens; per head, the vectors ``--vectors`` (AMBIG-7: value
  vectors by default, key vectors, or the layer's normalised residual stream shared by the
  heads) projected onto the sphere, and the attention rows of every query with its causal prefix; queries with t <= N
  visible keys are skipped (AMBIG-8); averaged per head (and over windows).

Writes ``per_head.csv`` (one row per N and head), ``summary.csv`` (per N), ``figure3.png`` and
``results.json`` with the Figure 3 verdicts. Per-N (sphere) or per-layer (model) results are
written as they finish, so an interrupted run keeps them.

  python -m experiments.separability --source=sphere --out_dir=results/separability/sphere
  LIMITS_DATA_DIR=/work/shared/data python -m experiments.separability --source=model \
      --out_dir=results/separability/tiny
"""

from __future__ import annotations

import time

from absl import app, flags

from limits import cli

FLAGS = flags.FLAGS

flags.DEFINE_enum("source", "sphere", ["sphere", "model"], "Where weights and vectors come from.")
flags.DEFINE_string("n_values", "1,2,4,8,16,32,64,128", "Comma-separated top-N grid.")
flags.DEFINE_integer("length", 1024, "Sequence length L.")
flags.DEFINE_float("radius", 1.0, "Sphere radius M (AMBIG-10).")
flags.DEFINE_integer("dim", 64, "Sphere source: dimension d (64 = GPT-2 d_head).")
flags.DEFINE_integer("samples", 1000, "Sphere source: Monte Carlo samples per N.")
flags.DEFINE_enum("alpha_kind", "softmax", ["uniform", "zipf", "softmax"],
                  "Sphere source: synthetic weights (softmax of Gaussian logits / "
                  "--alpha_temperature, Zipf i^-zipf_s, or uniform 1/L).")
flags.DEFINE_float("alpha_temperature", 1.0, "Sphere source: temperature of the softmax kind.")
flags.DEFINE_float("zipf_s", 1.0, "Sphere source: exponent of the Zipf kind.")
flags.DEFINE_integer("heads", 12, "Sphere source: independent synthetic weight rows ('heads').")
flags.DEFINE_integer("chunk", None, "Sphere source: Monte Carlo samples per jitted batch.")
flags.DEFINE_string("model", "tiny", "Model source: 'tiny', a GPT-2 name, or a directory.")
flags.DEFINE_integer("windows", 1, "Model source: number of L-token corpus windows.")
flags.DEFINE_string("text", None, "Model source: a text file to use instead of the corpus.")
flags.DEFINE_string("data_dir", None, "Model source: folder with war_and_peace.txt "
                    "(else $LIMITS_DATA_DIR).")
flags.DEFINE_enum("vectors", "value", ["value", "key", "hidden"], "Model source: vectors x_i "
                  "(AMBIG-7), projected onto the sphere.")
flags.DEFINE_enum("rule", "strict", ["strict", "literal"], "Counting rule (AMBIG-10).")
flags.DEFINE_integer("seed", 0, "Random seed.")
flags.DEFINE_bool("x64", True, "Use float64 (default: float32 rounding biases N_s/N down, "
                  "e.g. 0.413 vs 0.471 for one head at L = 512, N = 128).")
flags.DEFINE_string("out_dir", None, "Run directory (default results/separability/<time>).")
flags.DEFINE_integer("devices", None, "Shard the Monte Carlo sample axis over this many devices.")
flags.DEFINE_bool("plot", True, "Write figure3.png.")

for _name in ("length", "dim", "samples", "heads", "windows", "chunk", "devices"):
  flags.register_validator(_name, cli.positive, message=f"--{_name} must be a positive integer")
for _name in ("radius", "alpha_temperature", "zipf_s"):
  flags.register_validator(_name, lambda v: v is not None and v > 0 and v < float("inf"),
                           message=f"--{_name} must be a positive number")

EXPERIMENT = "separability"
CONFIG_FLAGS = ("source", "n_values", "length", "radius", "dim", "samples", "alpha_kind",
                "alpha_temperature", "zipf_s", "heads", "chunk", "model", "windows", "text",
                "data_dir", "rule", "seed", "x64", "devices", "vectors")


def _grid(length: int, source: str) -> list[int]:
  from limits.errors import check

  ns = sorted(set(cli.parse_ints(FLAGS.n_values, "n_values")))
  for n in ns:
    check(n >= 1, f"--n_values contains N={n}; every N must be >= 1")
    check(n <= length, f"--n_values contains N={n} > L={length} (--length); need N <= L")
    if source == "model":
      check(n < length, f"--n_values contains N={n} = L; with t <= N skipped (AMBIG-8) no "
            "query would remain; need N < L")
  return ns


def _write(out_dir, rows, ns_done, frac, lower, upper, stderr, heads, meta, final, title):
  import numpy as np

  from limits import results as res
  from limits import separability as sp

  res.write_csv(out_dir / "per_head.csv", rows)
  results = dict(meta)
  results["complete"] = final
  if ns_done:
    verdicts, summary = sp.figure3_verdicts(
        ns_done, np.asarray(frac), np.asarray(lower), np.asarray(upper),
        stderr=None if stderr is None else np.asarray(stderr), heads=heads)
    srows = [{k: (v[i] if hasattr(v, "__len__") else v) for k, v in summary.items()}
             for i in range(len(ns_done))]
    res.write_csv(out_dir / "summary.csv", srows)
    results["summary"] = summary
    results["verdicts"] = verdicts
    if final and FLAGS.plot:
      from limits.plotting import separability as splot

      splot.figure3(out_dir / "figure3.png", ns_done, frac, lower, upper, title=title)
  res.write_results(out_dir, EXPERIMENT, res.flags_config(FLAGS, CONFIG_FLAGS), results,
                    seed=FLAGS.seed)


def _run_sphere(out_dir, ns):
  import jax
  import jax.numpy as jnp

  from limits import separability as sp
  from limits.progress import Progress

  L = FLAGS.length
  key = jax.random.key(FLAGS.seed)
  alpha_key, mc_key = jax.random.split(key)
  dtype = jnp.float64 if FLAGS.x64 else jnp.float32
  alphas = jnp.stack([
      sp.synthetic_alpha(FLAGS.alpha_kind, L, jax.random.fold_in(alpha_key, h),
                         temperature=FLAGS.alpha_temperature, zipf_s=FLAGS.zipf_s, dtype=dtype)
      for h in range(FLAGS.heads)])                                           # (H, L)
  meta = {"source": "sphere", "L": L, "dim": FLAGS.dim, "M": FLAGS.radius,
          "heads": FLAGS.heads, "samples": FLAGS.samples,
          "alpha_max_mean": float(jnp.mean(jnp.max(alphas, axis=-1))),
          "rule": FLAGS.rule, "per_N_seconds": {}}
  rows, fr, lo, up, se, done = [], [], [], [], [], []
  title = (f"sphere S^{FLAGS.dim - 1}(M={FLAGS.radius:g}), L={L}, alpha={FLAGS.alpha_kind}, "
           f"{FLAGS.heads} rows x {FLAGS.samples} samples")
  with Progress(len(ns) * FLAGS.samples, "separability/sphere", unit="samples") as prog:
    for n in ns:
      t0 = time.perf_counter()
      mc = sp.monte_carlo_detail(mc_key, alphas, n, FLAGS.dim, FLAGS.radius, FLAGS.samples,
                                 FLAGS.chunk, devices=FLAGS.devices, rule=FLAGS.rule,
                                 progress=prog.update)
      meta["per_N_seconds"][n] = round(time.perf_counter() - t0, 3)
      for h in range(FLAGS.heads):
        rows.append({"n": n, "head": h, "frac": mc.mean[h], "stderr": mc.stderr[h],
                     "lower": mc.mean_lower[h], "lower_raw": mc.mean_lower_raw[h],
                     "upper": mc.mean_upper[h], "r": mc.mean_r[h], "delta": mc.mean_delta[h],
                     "samples": FLAGS.samples})
      fr.append(mc.mean); lo.append(mc.mean_lower); up.append(mc.mean_upper)
      se.append(mc.stderr); done.append(n)
      _write(out_dir, rows, done, fr, lo, up, se, FLAGS.heads, meta, n == ns[-1], title)


def _run_model(out_dir, ns):
  import jax.numpy as jnp
  import numpy as np

  from limits import distance, models
  from limits import separability as sp
  from limits import sources
  from limits.progress import Progress

  model = sources.load_model(FLAGS.model)
  tokens = sources.corpus_windows(model, FLAGS.length, FLAGS.windows, text=FLAGS.text,
                                  data_dir=FLAGS.data_dir)
  cfg = model.config
  H, NL, K = cfg.n_head, cfg.n_layer, len(ns)
  fields = sp.LAYER_FIELDS
  sums = np.zeros((NL, H, K, len(fields)))
  dtype = jnp.float64 if FLAGS.x64 else jnp.float32
  ns_arr = jnp.asarray(ns, jnp.int32)
  meta = {"source": "model", "model": model.info(), "L": FLAGS.length, "M": FLAGS.radius,
          "windows": FLAGS.windows, "vectors": f"{FLAGS.vectors} vectors on the sphere (AMBIG-7)",
          "queries": "all queries, causal prefix, t <= N skipped (AMBIG-8)",
          "rule": FLAGS.rule}
  title = f"model {model.name}, L={FLAGS.length}, {FLAGS.windows} window(s), {NL * H} heads"

  def emit(final):
    rows = []
    done = sums[..., fields.index("count")] > 0                     # (NL, H, K)
    for layer in range(NL):
      for h in range(H):
        for k, n in enumerate(ns):
          if not done[layer, h, k]:
            continue
          c = sums[layer, h, k]
          cnt = c[fields.index("count")]
          row = {"n": n, "layer": layer, "head": h, "head_index": layer * H + h}
          row.update({f: c[i] / cnt for i, f in enumerate(fields) if f != "count"})
          row["queries"] = int(cnt)
          rows.append(row)
    full = done.all(axis=(0, 1))
    ks = [k for k in range(K) if full[k]]
    per = lambda f: np.stack([(sums[:, :, k, fields.index(f)] / np.maximum(
        sums[:, :, k, fields.index("count")], 1)).reshape(-1) for k in ks]) if ks else None
    _write(out_dir, rows, [ns[k] for k in ks], per("frac"), per("lower"), per("upper"), None,
           H, meta, final, title)

  t0 = time.perf_counter()
  with Progress(FLAGS.windows * NL, "separability/model", unit="layers") as prog:
    for w in range(FLAGS.windows):
      last = FLAGS.windows - 1
      for layer, rec in models.iter_layers(model.params, tokens[w:w + 1], cfg):
        weights = np.asarray(rec.weights[0], dtype)                    # (H, L, L)
        x = distance.record_vectors(rec, FLAGS.vectors)[0].astype(dtype)
        if x.ndim == 2:                                                # hidden: (L, D) shared
          x = jnp.broadcast_to(x[None], (H,) + x.shape)
        v = x                                                          # (H, L, d)
        del rec
        srt = sp.sort_rows_host(weights)                               # one sort per row
        sums[layer] += np.asarray(sp.layer_sums(weights, v, ns_arr, FLAGS.radius,
                                                rule=FLAGS.rule, sorted_rows=srt),
                                  np.float64)                          # (H, K, F)
        prog.update(1)
        if w == 0 or layer == NL - 1:
          meta["seconds"] = round(time.perf_counter() - t0, 3)
          emit(final=(w == last and layer == NL - 1))


def main(argv):
  del argv
  ns = _grid(FLAGS.length, FLAGS.source)          # validate before JAX starts (fast errors)
  cli.setup_precision(FLAGS.x64)
  from limits import results as res

  out_dir = res.prepare_out_dir(FLAGS.out_dir, EXPERIMENT)
  t0 = time.perf_counter()
  if FLAGS.source == "sphere":
    _run_sphere(out_dir, ns)
  else:
    _run_model(out_dir, ns)
  print(f"separability ({FLAGS.source}): wrote {out_dir} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
  app.run(cli.guard(main))
