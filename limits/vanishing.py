"""The ``vanishing`` experiment: Lemma 1 / Corollary 1 on a model's attention (weights ×L).

For every L in ``lengths``, window, layer, head and query t (t visible keys, causal prefix),
the softmax weights at the model's own temperature T = √d_head on the raw q·k scale
(AMBIG-12 of docs/ambiguities.md) are checked against Corollary 1's band
e^{−2Δ/T} ≤ α_i·t ≤ e^{2Δ/T}, Δ = ‖q_t‖ · max_{i≤t} ‖k_i‖ (AMBIG-2), in log space
(:func:`causal_check`: ``limits.bounds.corollary1_causal_check`` on the causal triangle only,
in row blocks). Per head the last query (which sees all L keys)
gives max α·L and min α·L. Lemma 1 itself is checked on synthetic bounded logits
(``limits.bounds.lemma1_check``). Attention sinks are measured on the same weights
(:func:`sink_scores`, :func:`sink_summary`: the Sink_ε metric of Gu et al. 2025, ε = 0.3).
:func:`run` writes ``per_head.csv``, ``summary.csv``,
``vanishing.png`` and ``results.json`` with the measurements the claims read (no verdicts:
``limits.claims`` judges them, docs/claims.md), rewritten after every L; an interrupted run
continues from its last finished L (:mod:`limits.runs.resume`).
"""

from __future__ import annotations

import dataclasses
import time

from limits.runs import options

EXPERIMENT = "vanishing"
# Sink_ε (Gu et al., "When Attention Sink Emerges in Language Models", ICLR 2025; code
# sail-sg/Attention-Sink, eval_sink_open_source.py): a head is a sink head when its mean
# attention to token 0 exceeds ε = 0.3 (strictly, as their ``importance_scores > epsilon``).
SINK_EPS = 0.3
# The settings recorded in results.json "config" (out_dir and plot change no result).

@dataclasses.dataclass(frozen=True)
class VanishingConfig:
  """One run's settings; each field declares its CLI flag (``limits.runs.options``)."""

  model: str = options.model()
  text: str | None = options.text()
  data_dir: str | None = options.data_dir()
  windows: int = options.windows()
  lengths: str = options.option("", "Comma-separated L values; default 32,64,...,min(1024, "
                                "context).")
  seed: int = options.seed()
  x64: bool = options.x64("Compute the check in float64 (default; --nox64 for float32).")
  out_dir: str | None = options.out_dir("vanishing")
  plot: bool = options.plot("Write vanishing.png.")
  lemma1_a: float = options.option(4.0, "Logit bound a of the synthetic Lemma 1 check (logits "
                                   "uniform on [-a, a], F = exp and softplus, the run's "
                                   "lengths).", check=(lambda v: v is not None and 0 <= v <= 300,
                                                       "be in [0, 300] (e^{2a} must stay finite)"))


def lemma1_synthetic(a: float, lengths, seed: int) -> dict:
  """Lemma 1 on synthetic logits uniform on [-a, a], F = exp and softplus, every L
  (limits.bounds.lemma1_check: 256 rows plus the two extreme rows per L, float64; the extreme
  rows approach C2): per F, C2, violations, rows checked and max α·L at the largest L."""
  import numpy as np

  from limits import bounds

  fs = {"exp": np.exp, "softplus": lambda x: np.logaddexp(0.0, x)}
  l1 = {name: bounds.lemma1_check(F, a, lengths, seed=seed) for name, F in fs.items()}
  return {name: {"C2": r["C2"], "violations": r["violations"], "checked": r["checked"],
                 "max_aL_at_largest_L": r["by_L"][max(lengths)]["max_aL"]}
          for name, r in l1.items()}


SLOPE_KEYS = (("loglog_slope_median_max_aL", "log10_max_median"),
              ("loglog_slope_median_min_aL", "log10_min_median"),
              ("loglog_slope_median_band", "log10_band_upper_median"))
PER_HEAD_KEYS = {"log10_max_median": "log10_max_aL_last", "log10_min_median": "log10_min_aL_last",
                 "log10_band_upper_median": "log10_band_upper_last"}


def loglog_slopes(summary) -> dict:
  """Log-log slopes against L of the head medians in ``summary`` rows (``L`` and the
  :data:`SLOPE_KEYS` columns); two lengths needed."""
  import numpy as np

  from limits import stats

  ls = np.log10([s["L"] for s in summary])
  return {name: stats.linear_fit(ls, [s[col] for s in summary])["slope"]
          for name, col in SLOPE_KEYS}


CHECK_ROWS = 128  # query rows per causal block of :func:`causal_check`


def causal_check(scores, q, k, temperature, window: int = 0, dtype=None, rows: int = CHECK_ROWS):
  """``limits.bounds.corollary1_causal_check`` (Corollary 1 in log space, every query of a
  causal layer) with the work cut to the causal triangle: a dict of (B, H) arrays.

  ``scores (B, H, L, L)`` raw q·k as recorded (float32), ``q, k (B, H, L, d)``; ``dtype``: the
  precision of the check (float64 by default under x64), the records are cast inside. Query
  rows go in blocks of ``rows`` (static): block [r0, r1) reads only keys [0, r1) — the
  rectangle [0, r0) unmasked, the diagonal block under its triangle — so about half of the
  L × L entries are touched, and the float64 cast, exp and sum run only on those. Per row:

  - the largest and smallest visible score in the records' own float32, then cast and divided
    by T: equal bit for bit to the maximum and minimum of ``scores.astype(dtype) / T`` (the cast
    is exact and division by T > 0 is monotone under rounding), so ``log_max = (max l − lse) +
    log n_t`` equals the reference's ``max(l − lse) + log n_t`` for the same lse;
  - lse = log Σ e^{l − max l} + max l as ``jax.nn.logsumexp``, its sum split in the two parts:
    a different summation order, so lse (and every output through it) may differ from the
    reference by a few float64 ulps (tests: relative 1e-14, and identical decisions).

  ``window`` W > 0 (a sliding-window layer): the reference itself (the visible keys are not a
  prefix). Assumption relied on: scores are the raw q·k of a causal layer (``k`` in key order).
  """
  import jax
  import jax.numpy as jnp

  from limits import bounds

  dtype = jnp.result_type(float) if dtype is None else dtype
  temperature = jnp.asarray(temperature, dtype)
  if window:
    return bounds.corollary1_causal_check(scores.astype(dtype), q.astype(dtype),
                                          k.astype(dtype), temperature, window=window)
  L = scores.shape[-1]
  lse, mx, mn = [], [], []
  for r0 in range(0, L, rows):
    r1 = min(L, r0 + rows)
    tri = jnp.tril(jnp.ones((r1 - r0, r1 - r0), bool))  # diagonal block: key <= query
    diag = scores[..., r0:r1, r0:r1]  # (B, H, R, R)
    hi = jnp.max(jnp.where(tri, diag, -jnp.inf), axis=-1)  # (B, H, R), records' dtype
    lo = jnp.min(jnp.where(tri, diag, jnp.inf), axis=-1)
    rect = scores[..., r0:r1, :r0]  # (B, H, R, r0) every key visible
    if r0:
      hi = jnp.maximum(hi, jnp.max(rect, axis=-1))
      lo = jnp.minimum(lo, jnp.min(rect, axis=-1))
    hi = hi.astype(dtype) / temperature  # = max of the visible logits l = scores / T
    shift = jnp.where(jnp.isfinite(hi), hi, 0)[..., None]  # as jax.nn.logsumexp
    total = jnp.sum(jnp.where(tri, jnp.exp(diag.astype(dtype) / temperature - shift), 0),
                    axis=-1)
    if r0:
      total = total + jnp.sum(jnp.exp(rect.astype(dtype) / temperature - shift), axis=-1)
    lse.append(jnp.log(total) + shift[..., 0])
    mx.append(hi)
    mn.append(lo.astype(dtype) / temperature)
  lse, mx, mn = (jnp.concatenate(a, axis=-1) for a in (lse, mx, mn))  # (B, H, L)
  log_n = jnp.log(jnp.arange(1, L + 1).astype(dtype))  # n_t = t visible keys
  log_max, log_min = (mx - lse) + log_n, (mn - lse) + log_n
  kmax = jax.lax.cummax(jnp.linalg.norm(k.astype(dtype), axis=-1), axis=k.ndim - 2)
  band = 2.0 * jnp.linalg.norm(q.astype(dtype), axis=-1) * kmax / temperature  # 2Δ/T
  viol = (log_max > band) | (log_min < -band)
  return {"violations": jnp.sum(viol, axis=-1), "queries": jnp.full(viol.shape[:-1], L),
          "min_margin": jnp.min(jnp.minimum(band - log_max, log_min + band), axis=-1),
          "log_max_last": log_max[..., -1], "log_min_last": log_min[..., -1],
          "band_last": band[..., -1]}


def sink_scores(weights, window=None):
  """Mean attention to token 0 per head, Gu et al.'s importance score of key 0: ``(B, H)``.

  ``weights (B, H, L, L)``: rows are queries, columns keys, exactly 0 where masked (the
  records' contract). sail-sg/Attention-Sink (eval_sink_open_source.py,
  ``compute_attention_sink``) divides column j by ``L − j``, the number of query rows a causal
  mask lets see key j, and sums over the rows: for token 0 the plain mean of α_{t,0} over all
  L rows t = 0 … L−1 (row 0, where α_{0,0} = 1, included), every row weighted equally.
  ``window`` W > 0 (a Gemma 3 sliding-window layer, the record's ``window``): query t sees key
  0 only for t < W, so the mean is over the min(L, W) rows that can see it, the same rule
  (rows that see the key) as their ``L − j``; the rows t ≥ W, which cannot attend to token 0,
  are not counted as zero attention. 0 or None: a global causal layer (all L rows).
  """
  return sink_scores_key0(weights[..., 0], window)


def sink_scores_key0(weights_key0, window=None):
  """:func:`sink_scores` from key 0's column alone, ``weights_key0 (B, H, L)`` = ``weights[...,
  0]`` (the records' ``weights_key0``): the same numbers, bit for bit."""
  import numpy as np

  n_rows = weights_key0.shape[-1]
  if window is not None and int(window) > 0:
    n_rows = min(n_rows, int(window))
  # Only key 0's column goes to float64 (not the whole (B, H, L, L) record): (B, H, n_rows).
  w0 = np.asarray(weights_key0[..., :n_rows], dtype=np.float64)
  return w0.sum(axis=-1) / n_rows  # (B, H)


def sink_summary(per_head, eps: float = SINK_EPS) -> dict:
  """Sink_ε by L and layer from the per-head rows (``sink_above``: windows whose score exceeded
  ε; ``windows``; ``sink_score``: the mean score over windows): per L the share of (window,
  head) pairs above ε in each layer (``share_by_layer``, Gu et al.'s metric restricted to one
  layer) and over all layers (``share``), and each layer's mean score."""
  by_l: dict = {}
  for r in per_head:
    by_l.setdefault(r["L"], {}).setdefault(r["layer"], []).append(r)
  out = []
  for L, layers in sorted(by_l.items()):
    share, score = [], []
    above = pairs = 0
    for layer in sorted(layers):
      rows = layers[layer]
      a, n = sum(r["sink_above"] for r in rows), sum(r["windows"] for r in rows)
      share.append(a / n)
      score.append(sum(r["sink_score"] for r in rows) / len(rows))
      above, pairs = above + a, pairs + n
    out.append({"L": L, "share": above / pairs, "share_by_layer": share,
                "mean_score_by_layer": score, "pairs": pairs})
  return {"eps": eps, "token": 0, "by_L": out,
          "rows": "mean of α_{t,0} over the query rows that can see token 0 (all L causal; "
                  "t < W in a sliding-window layer), as sail-sg/Attention-Sink"}


def measurements(per_head, summary, layer_windows=None) -> dict:
  """What the claims read besides the tables (no verdicts: limits/claims judges them):
  ``band`` (queries outside the Corollary 1 band, queries checked, the smallest log-space
  margin to a band edge, natural log, >= 0 inside) and ``lemma1_slopes`` (log-log slopes
  against L of the head medians of max α·L, min α·L and the band's upper edge; two lengths
  needed) and ``sinks`` (:func:`sink_summary`). With sliding-window layers (``layer_windows``,
  Gemma 3) also ``by_layer_kind``: per kind (local, global) the head medians per L, the slopes
  over every L and between consecutive L (a local layer's last query sees min(L, W) keys: its
  trend past W is not the global layers')."""

  from limits import stats

  out = {"band": {"violating_queries": sum(r["violations"] for r in per_head),
                  "queries_checked": sum(r["queries"] for r in per_head),
                  "min_log_margin": min((r["min_log_margin"] for r in per_head), default=None)}}
  if per_head and all("sink_score" in r for r in per_head):
    out["sinks"] = sink_summary(per_head)
  if len(summary) >= 2:
    out["lemma1_slopes"] = loglog_slopes(summary)
  split = stats.by_layer_kind(per_head, layer_windows, tuple(PER_HEAD_KEYS.values()),
                              stat="median")
  if split is not None:
    for part in split.values():
      rows = [{"L": r["L"], "heads": r["heads"],
               **{col: r[f"{key}_median"] for col, key in PER_HEAD_KEYS.items()}}
              for r in part["rows"]]
      part["rows"] = rows
      if len(rows) >= 2:
        part["lemma1_slopes"] = loglog_slopes(rows)
        part["slopes_between"] = [{"L": [a["L"], b["L"]], **loglog_slopes([a, b])}
                                  for a, b in zip(rows, rows[1:])]
    out["by_layer_kind"] = split
  return out


def length_rows(L: int, acc: dict):
  """Per-head rows and the summary row of one L from ``acc[(layer, head)]`` = per-window checks."""
  import numpy as np

  ln10 = np.log(10.0)
  per_head, lmax, lmin, band = [], [], [], []
  for (layer, h), rows in sorted(acc.items()):
    r = {"L": L, "layer": layer, "head": h, "windows": len(rows),
         "violations": int(sum(x["violations"] for x in rows)),
         "queries": int(sum(x["queries"] for x in rows)),
         "min_log_margin": min(x["min_margin"] for x in rows),
         "log10_max_aL_last": float(np.mean([x["log_max_last"] for x in rows]) / ln10),
         "log10_min_aL_last": float(np.mean([x["log_min_last"] for x in rows]) / ln10),
         "log10_band_upper_last": float(np.mean([x["band_last"] for x in rows]) / ln10),
         "sink_score": float(np.mean([x["sink_score"] for x in rows])),
         "sink_above": int(sum(x["sink_score"] > SINK_EPS for x in rows))}
    per_head.append(r)
    lmax.append(r["log10_max_aL_last"])
    lmin.append(r["log10_min_aL_last"])
    band.append(r["log10_band_upper_last"])
  summary = {
      "L": L, "heads": len(lmax),
      "log10_max_median": float(np.median(lmax)), "log10_max_lo": float(np.min(lmax)),
      "log10_max_hi": float(np.max(lmax)),
      "log10_min_median": float(np.median(lmin)), "log10_min_lo": float(np.min(lmin)),
      "log10_min_hi": float(np.max(lmin)),
      "log10_band_upper_median": float(np.median(band)),
      "log10_band_upper_min": float(np.min(band)),
      "violations": int(sum(r["violations"] for r in per_head))}
  return per_head, summary


def _length_unit(L, tokens, model, check_fn, T, dtype, bar) -> dict:
  """One L: Corollary 1's causal check of every window, layer and head (a safe point per
  layer); its per-head rows, summary row and seconds."""
  import numpy as np

  from limits import records
  from limits.runs import interrupts

  t0 = time.perf_counter()
  acc = {}
  for w in range(tokens.shape[0]):
    # Key 0's column of the weights (attention sinks), not the L × L weights.
    for layer, rec, rec_window in records.iter_arrays(
        model, tokens[w:w + 1], fields=("q", "k", "scores", "weights_key0")):
      # A local (sliding-window) layer: n_t = min(t, W) visible keys (records' window).
      window = 0 if rec_window is None else int(rec_window)
      # float32 records go to the jitted check as they are; it casts them (exactly) itself.
      out = check_fn(rec["scores"], rec["q"], rec["k"], np.asarray(T, dtype), window=window)
      out = {k: np.asarray(v)[0] for k, v in out.items()}  # (H,)
      out["sink_score"] = sink_scores_key0(rec["weights_key0"], rec_window)[0]  # (H,)
      for h in range(model.config.n_head):
        rows = acc.setdefault((layer, h), [])
        rows.append({k: float(v[h]) for k, v in out.items()})
      bar.update(1)
      interrupts.check()  # a safe point per layer
  rows_l, summary_l = length_rows(L, acc)
  return {"rows": rows_l, "summary": summary_l, "seconds": time.perf_counter() - t0}


def run(config: VanishingConfig):
  """Runs the experiment and writes its outputs; returns the run directory.

  Call :func:`limits.cli.setup_precision` first. A bad length or a missing corpus is a
  one-line ``LimitsError`` raised before the run directory is created.
  """
  import jax
  import numpy as np

  from limits.runs import parsing
  from limits.runs import interrupts, resume
  from limits.records import sources
  from limits.runs import results as res
  from limits.runs.progress import Progress

  model = sources.load_model(config.model)
  lengths = parsing.parse_lengths(config.lengths, model.config.n_positions, model.name)
  # The corpus first: a missing corpus fails before the output folder is created.
  tokens_by_l = {L: sources.corpus_windows(model, L, config.windows, text=config.text,
                                           data_dir=config.data_dir) for L in lengths}
  out_dir = res.prepare_out_dir(config.out_dir, EXPERIMENT)
  record = res.config_record(config)
  record.update({"lengths_used": lengths, "model_info": model.info(),
                 "temperature": model.native_temperature})
  T = model.native_temperature
  dtype = np.float64 if config.x64 else np.float32

  def check(scores, q, k, temperature, window):
    # The casts inside the jit: no float64 host copy of the (B, H, L, L) scores per layer.
    return causal_check(scores, q, k, temperature, window=window, dtype=dtype)

  check_fn = jax.jit(check, static_argnames=("window",))
  lemma1 = lemma1_synthetic(config.lemma1_a, lengths, config.seed)
  c = model.config
  per_head, summary, timings = [], [], {}
  units = resume.Units.open(out_dir, EXPERIMENT, record, unit="L")  # limits.runs.resume
  t_start = time.perf_counter()

  def flush(final):
    res.write_csv(out_dir / "per_head.csv", per_head) if per_head else None
    res.write_csv(out_dir / "summary.csv", summary) if summary else None
    results = {**measurements(per_head, summary, model.info().get("layer_windows")),
               "lemma1_synthetic": lemma1,
               "lemma1_a": config.lemma1_a, "summary": summary, "complete": final, "timings_s": timings,
               "wall_s": time.perf_counter() - t_start, "model": model.info(),
               "band_source": "log-space, same Δ as limits.bounds.corollary1_band",
               resume.BLOCK: units.block(final)}
    res.write_results(out_dir, EXPERIMENT, record, results, seed=config.seed)

  with Progress(len(lengths) * config.windows * c.n_layer, "vanishing", unit="layer") as bar:
    for L in lengths:
      unit = units.get(f"L={L}")  # finished by an interrupted run of this command
      if unit is None:
        unit = units.add(f"L={L}", _length_unit(L, tokens_by_l[L], model, check_fn, T, dtype,
                                                bar))
      else:
        bar.update(config.windows * c.n_layer)
      per_head += unit["rows"]
      timings[f"L={L}"] = unit["seconds"]
      summary.append(unit["summary"])
      flush(False)
      interrupts.check()  # a safe point: this L is written
  if config.plot:
    from limits.plotting import distance as plot_lib

    plot_lib.vanishing_figure(summary, out_dir / "vanishing.png")
  flush(True)  # last: results.json says complete only once every file is written
  return out_dir
