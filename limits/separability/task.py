"""The ``separability`` experiment (Algorithm 4, Figure 3): N_s/N and Theorem 2's bounds.

:class:`SeparabilityConfig` holds one run's settings (the CLI's flags, same names and
defaults); :func:`grid` validates the N grid (before JAX starts) and :func:`run` computes and
writes ``per_head.csv`` (one row per N and head), ``summary.csv`` (per N), ``figure3.png`` and
``results.json`` with the measurements the claims read (``limits.claims`` judges them). Blocks
of Monte Carlo samples (sphere: every N from the same samples) or per-layer (model) results are
written as they finish, so an interrupted run keeps them; the same command continues from the
last finished block of samples (sphere) or window (model) (:mod:`limits.runs.resume`).

- ``source="sphere"``: ``heads`` synthetic weight rows over L tokens with fresh points uniform
  on S^{dim-1}(M) for each of ``samples`` Monte Carlo samples
  (:func:`limits.separability.sphere.monte_carlo_blocks`).
- ``source="model"``: per head, the vectors ``vectors`` (AMBIG-7) projected onto the sphere and
  the attention rows of every query with its causal prefix, t <= N skipped (AMBIG-8)
  (:func:`limits.separability.model.layer_sums`), averaged per head and over windows.
"""

from __future__ import annotations

import dataclasses
import time

from limits.runs import interrupts, options, parsing, seeding
from limits.errors import check

EXPERIMENT = "separability"
# Model source: the first window's partial results are written after its first layer, then at
# most every EMIT_SECONDS and when interrupted (each write of per_head.csv and results.json
# cost ≈ 0.1-0.3 s per layer on SmolLM2, 2,160 rows), and after every window.
EMIT_SECONDS = 10.0
# The settings recorded in results.json "config" (out_dir and plot change no result).

@dataclasses.dataclass(frozen=True)
class SeparabilityConfig:
  """One run's settings; each field declares its CLI flag (``limits.runs.options``)."""

  source: str = options.option("sphere", "Where weights and vectors come from.",
                               choices=("sphere", "model"))
  n_values: str = options.option("1,2,4,8,16,32,64,128", "Comma-separated top-N grid.")
  length: int = options.option(1024, "Sequence length L.", check=options.POSITIVE_INT)
  radius: float = options.option(1.0, "Sphere radius M (AMBIG-10).",
                                 check=options.POSITIVE_NUMBER)
  dim: int = options.option(64, "Sphere source: dimension d (64 = GPT-2 d_head).",
                            check=options.POSITIVE_INT)
  samples: int = options.option(1000, "Sphere source: Monte Carlo samples per N.",
                                check=options.POSITIVE_INT)
  alpha_kind: str = options.option("softmax", "Sphere source: synthetic weights (softmax of "
                                   "Gaussian logits / --alpha_temperature, Zipf i^-zipf_s, or "
                                   "uniform 1/L).", choices=("uniform", "zipf", "softmax"))
  alpha_temperature: float = options.option(1.0, "Sphere source: temperature of the softmax "
                                            "kind.", check=options.POSITIVE_NUMBER)
  zipf_s: float = options.option(1.0, "Sphere source: exponent of the Zipf kind.",
                                 check=options.POSITIVE_NUMBER)
  heads: int = options.option(12, "Sphere source: independent synthetic weight rows ('heads').",
                              check=options.POSITIVE_INT)
  chunk: int | None = options.option(None, "Sphere source: Monte Carlo samples per jitted batch.",
                                     check=options.POSITIVE_INT)
  model: str = options.model(help="For --source=model: " + options.MODEL_HELP)
  windows: int = options.windows(help="Model source: number of L-token corpus windows.")
  text: str | None = options.text("Model source: a text file to use instead of the corpus.")
  data_dir: str | None = options.data_dir("Model source: folder with war_and_peace.txt (else "
                                          "$LIMITS_DATA_DIR).")
  vectors: str = options.option("value", "Model source: vectors x_i (AMBIG-7), projected onto "
                                "the sphere.", choices=("value", "key", "hidden"))
  rule: str = options.option("strict", "Counting rule (AMBIG-10).", choices=("strict", "literal"))
  seed: int = options.seed("Random seed.")
  x64: bool = options.x64("Use float64 (default: float32 rounding biases N_s/N down, e.g. 0.413 "
                          "vs 0.471 for one head at L = 512, N = 128).")
  out_dir: str | None = options.out_dir(EXPERIMENT)
  devices: int | None = options.option(None, "Shard the Monte Carlo sample axis over this many "
                                       "devices.", check=options.POSITIVE_INT)
  plot: bool = options.plot("Write figure3.png.")


def grid(config: SeparabilityConfig) -> list[int]:
  """The sorted N grid of ``n_values``; every N in [1, L] (model: [1, L))."""
  length, source = config.length, config.source
  ns = sorted(set(parsing.parse_ints(config.n_values, "n_values")))
  for n in ns:
    check(n >= 1, f"--n_values contains N={n}; every N must be >= 1")
    check(n <= length, f"--n_values contains N={n} > L={length} (--length); need N <= L")
    if source == "model":
      check(n < length, f"--n_values contains N={n} = L; with t <= N skipped (AMBIG-8) no "
            "query would remain; need N < L")
  return ns


def _write(config, out_dir, rows, ns_done, frac, lower, upper, stderr, heads, meta, final,
           title, units):
  """Writes per_head.csv, summary.csv, results.json (and figure3.png when final); ``units``:
  the run's :class:`limits.runs.resume.Units` (its block goes into results.json)."""
  import numpy as np

  from limits.runs import resume
  from limits.runs import results as res
  from limits.separability import summary as separability_summary

  res.write_csv(out_dir / "per_head.csv", rows)
  results = dict(meta)
  results["complete"] = final
  if ns_done:
    summary = separability_summary.figure3_summary(
        ns_done, np.asarray(frac), np.asarray(lower), np.asarray(upper))
    srows = [{k: (v[i] if hasattr(v, "__len__") else v) for k, v in summary.items()}
             for i in range(len(ns_done))]
    res.write_csv(out_dir / "summary.csv", srows)
    results["summary"] = summary
    if final and config.plot:
      from limits.plotting import separability as splot

      splot.figure3(out_dir / "figure3.png", ns_done, frac, lower, upper, title=title)
  results[resume.BLOCK] = units.block(final)
  res.write_results(out_dir, EXPERIMENT, res.config_record(config), results, seed=config.seed)


def _units(config, out_dir, unit):
  """The units an interrupted run of this command finished (limits.runs.resume)."""
  from limits.runs import resume
  from limits.runs import results as res

  return resume.Units.open(out_dir, EXPERIMENT, res.config_record(config), unit=unit)


def run_sphere(config: SeparabilityConfig, out_dir, ns) -> None:
  """Algorithm 4 on synthetic weights and points on the sphere: every N from the same samples
  (one draw of points and one Gram per sample), in blocks of samples that an interrupted run
  keeps (limits.runs.resume)."""
  import jax
  import jax.numpy as jnp

  from limits.separability import sphere as sph
  from limits.runs.progress import Progress

  c = config
  L = c.length
  alpha_key, mc_key = seeding.streams(c.seed, 2)  # limits.runs.seeding: the one rule
  dtype = jnp.float64 if c.x64 else jnp.float32
  alphas = jnp.stack([
      sph.synthetic_alpha(c.alpha_kind, L, jax.random.fold_in(alpha_key, h),
                          temperature=c.alpha_temperature, zipf_s=c.zipf_s, dtype=dtype)
      for h in range(c.heads)])                                               # (H, L)
  meta = {"source": "sphere", "L": L, "dim": c.dim, "M": c.radius,
          "heads": c.heads, "samples": c.samples,
          "alpha_max_mean": float(jnp.mean(jnp.max(alphas, axis=-1))),
          "rule": c.rule}
  title = (f"sphere S^{c.dim - 1}(M={c.radius:g}), L={L}, alpha={c.alpha_kind}, "
           f"{c.heads} rows x {c.samples} samples")
  units = _units(c, out_dir, "samples")

  def done(start, stop):  # a block finished by an interrupted run of this command
    unit = units.get(f"samples={start}-{stop - 1}")
    return None if unit is None else sph.Moments(unit["count"], unit["total"], unit["m2"])

  def finished(start, stop, mom, seconds):
    units.add(f"samples={start}-{stop - 1}", {"count": int(mom.count), "total": mom.total,
                                              "m2": mom.m2, "seconds": round(seconds, 3)})
    _write(c, out_dir, [], [], [], [], [], [], c.heads, meta, False, title, units)
    interrupts.check()  # a safe point: this block of samples is written

  t0 = time.perf_counter()
  with Progress(c.samples, "separability/sphere", unit="samples") as prog:
    mc = sph.monte_carlo_blocks(mc_key, alphas, ns, c.dim, c.radius, c.samples, c.chunk,
                                devices=c.devices, rule=c.rule, done=done, finished=finished,
                                progress=lambda k: (prog.update(k), interrupts.check()))
  meta["seconds"] = round(time.perf_counter() - t0, 3)
  rows = [{"n": n, "head": h, "frac": mc.mean[h, k], "stderr": mc.stderr[h, k],
           "lower": mc.mean_lower[h, k], "lower_raw": mc.mean_lower_raw[h, k],
           "upper": mc.mean_upper[h, k], "r": mc.mean_r[h, k], "delta": mc.mean_delta[h, k],
           "samples": c.samples} for k, n in enumerate(ns) for h in range(c.heads)]
  T = lambda a: [a[:, k] for k in range(len(ns))]                  # (H, K) -> K of (H,)
  _write(c, out_dir, rows, list(ns), T(mc.mean), T(mc.mean_lower), T(mc.mean_upper),
         T(mc.stderr), c.heads, meta, True, title, units)
  interrupts.check()


def _model_rows(sums, ns, NL, H, fields):
  """Per-head rows (token averages) of the (layer, head, N) cells with a counted query."""
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
  return rows, done


def run_model(config: SeparabilityConfig, out_dir, ns) -> None:
  """Algorithm 4 on a model's attention, streamed layer by layer over the windows."""
  import jax.numpy as jnp
  import numpy as np

  from limits import records
  from limits.separability import model as separability_model
  from limits.records import sources
  from limits.distance.model import record_fields, record_vectors
  from limits.distance.rowspace import row_space
  from limits.runs.progress import Progress
  from limits.records.streaming import in_threads

  c = config
  model = sources.load_model(c.model)
  tokens = sources.corpus_windows(model, c.length, c.windows, text=c.text,
                                  data_dir=c.data_dir)
  cfg = model.config
  H, NL, K = cfg.n_head, cfg.n_layer, len(ns)
  fields = separability_model.LAYER_FIELDS
  sums = np.zeros((NL, H, K, len(fields)))
  dtype = jnp.float64 if c.x64 else jnp.float32
  meta = {"source": "model", "model": model.info(), "L": c.length, "M": c.radius,
          "windows": c.windows, "vectors": f"{c.vectors} vectors on the sphere (AMBIG-7)",
          "queries": "all queries, causal prefix, t <= N skipped (AMBIG-8)",
          "rule": c.rule}
  title = f"model {model.name}, L={c.length}, {c.windows} window(s), {NL * H} heads"

  def emit(final):
    rows, done = _model_rows(sums, ns, NL, H, fields)
    full = done.all(axis=(0, 1))
    ks = [k for k in range(K) if full[k]]
    per = lambda f: np.stack([(sums[:, :, k, fields.index(f)] / np.maximum(
        sums[:, :, k, fields.index("count")], 1)).reshape(-1) for k in ks]) if ks else None
    _write(c, out_dir, rows, [ns[k] for k in ks], per("frac"), per("lower"), per("upper"),
           None, H, meta, final, title, units)

  # A unit is a window: its (NL, H, K, F) sums, added to the running sums in the same order
  # (layer by layer, window by window) whether restored or computed, so the bits agree.
  units = _units(c, out_dir, "window")
  t0 = written = time.perf_counter()
  with Progress(c.windows * NL, "separability/model", unit="layers") as prog:
    for w in range(c.windows):
      last = c.windows - 1
      unit = units.get(f"window={w}")  # finished by an interrupted run of this command
      if unit is not None:
        for layer in range(NL):
          sums[layer] += unit["sums"][layer]
        prog.update(NL)
        meta["seconds"] = round(time.perf_counter() - t0, 3)
        emit(final=w == last)
        interrupts.check()
        continue
      window_sums = np.zeros_like(sums)                                # (NL, H, K, F)

      def finish(layer, out):
        nonlocal written
        window_sums[layer] = np.asarray(out, np.float64)               # (H, K, F)
        sums[layer] += window_sums[layer]
        prog.update(1)
        if layer == NL - 1:
          units.add(f"window={w}", {"sums": window_sums})
        now = time.perf_counter()
        if layer == NL - 1 or (w == 0 and (layer == 0 or now - written >= EMIT_SECONDS)):
          meta["seconds"] = round(now - t0, 3)
          emit(final=(w == last and layer == NL - 1))
          written, pending_write = now, False
        else:
          pending_write = w == 0
        try:
          interrupts.check()  # a safe point per layer
        except BaseException:
          if pending_write:  # the first window's layers since the last write are kept
            meta["seconds"] = round(time.perf_counter() - t0, 3)
            emit(final=False)
          raise

      def dispatch(item):
        # (H, L, L) float32 on the host: layer_sums selects each block's top k keys there (the
        # indices of lax.top_k, ~2x less CPU) while the previous layer's kernel runs; cast on
        # the device.
        layer, rec = item
        weights = np.asarray(rec.weights[0])
        x = jnp.asarray(record_vectors(rec, c.vectors)[0])
        if x.ndim == 2:  # hidden: (L, D) shared by the heads, in its own span when L < D
          x = row_space(x)  # (layer_sums projects it and takes its deltas once)
        window = int(rec.window or 0)  # sliding window of a local layer (Gemma 3), else 0
        return layer, separability_model.layer_sums(                   # top k on the host
            weights, x, ns, c.radius, rule=c.rule, window=window, dtype=dtype)

      # Two layers computed at once, each dispatched and waited for in its own thread
      # (records.streaming.in_threads: from one thread XLA's CPU backend runs them one after
      # the other, and a layer's kernel alone uses ~1.3 cores); sums added in layer order.
      in_threads(records.iter_layers(model, tokens[w:w + 1], fields=record_fields(c.vectors)),
                 dispatch, lambda done: finish(*done))


def run(config: SeparabilityConfig, out_dir, ns) -> None:
  """Runs the source of ``config`` over the grid ``ns`` (from :func:`grid`) into ``out_dir``.

  Call :func:`limits.cli.setup_precision` first.
  """
  if config.source == "sphere":
    run_sphere(config, out_dir, ns)
  else:
    run_model(config, out_dir, ns)
