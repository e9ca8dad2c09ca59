"""The ``vanishing`` experiment: Lemma 1 / Corollary 1 on a model's attention (weights ×L).

For every L in ``lengths``, window, layer, head and query t (t visible keys, causal prefix),
the softmax weights at the model's own temperature T = √d_head on the raw q·k scale
(AMBIG-12 of docs/ambiguities.md) are checked against Corollary 1's band
e^{−2Δ/T} ≤ α_i·t ≤ e^{2Δ/T}, Δ = ‖q_t‖ · max_{i≤t} ‖k_i‖ (AMBIG-2), in log space
(``limits.bounds.corollary1_causal_check``). Per head the last query (which sees all L keys)
gives max α·L and min α·L. Lemma 1 itself is checked on synthetic bounded logits
(``limits.bounds.lemma1_check``). :func:`run` writes ``per_head.csv``, ``summary.csv``,
``vanishing.png`` and ``results.json`` with the measurements the claims read (no verdicts:
``limits.claims`` judges them, docs/claims.md), rewritten after every L; an interrupted run
continues from its last finished L (:mod:`limits.runs.resume`).
"""

from __future__ import annotations

import dataclasses
import time

from limits.runs import options

EXPERIMENT = "vanishing"
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


def measurements(per_head, summary) -> dict:
  """What the claims read besides the tables (no verdicts: limits/claims judges them):
  ``band`` (queries outside the Corollary 1 band, queries checked, the smallest log-space
  margin to a band edge, natural log, >= 0 inside) and ``lemma1_slopes`` (log-log slopes
  against L of the head medians of max α·L, min α·L and the band's upper edge; two lengths
  needed)."""
  import numpy as np

  from limits import stats

  out = {"band": {"violating_queries": sum(r["violations"] for r in per_head),
                  "queries_checked": sum(r["queries"] for r in per_head),
                  "min_log_margin": min((r["min_log_margin"] for r in per_head), default=None)}}
  if len(summary) >= 2:
    ls = np.log10([s["L"] for s in summary])
    out["lemma1_slopes"] = {
        "loglog_slope_median_max_aL": stats.linear_fit(
            ls, [s["log10_max_median"] for s in summary])["slope"],
        "loglog_slope_median_min_aL": stats.linear_fit(
            ls, [s["log10_min_median"] for s in summary])["slope"],
        "loglog_slope_median_band": stats.linear_fit(
            ls, [s["log10_band_upper_median"] for s in summary])["slope"]}
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
         "log10_band_upper_last": float(np.mean([x["band_last"] for x in rows]) / ln10)}
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
    for layer, rec in records.iter_layers(model, tokens[w:w + 1], fields=("q", "k", "scores")):
      # A local (sliding-window) layer: n_t = min(t, W) visible keys (records' window).
      window = 0 if rec.window is None else int(rec.window)
      out = check_fn(rec.scores.astype(dtype), rec.q.astype(dtype), rec.k.astype(dtype),
                     np.asarray(T, dtype), window=window)
      out = {k: np.asarray(v)[0] for k, v in out.items()}  # (H,)
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

  from limits import bounds
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
  check_fn = jax.jit(bounds.corollary1_causal_check, static_argnames=("window",))
  lemma1 = lemma1_synthetic(config.lemma1_a, lengths, config.seed)
  c = model.config
  per_head, summary, timings = [], [], {}
  units = resume.Units.open(out_dir, EXPERIMENT, record, unit="L")  # limits.runs.resume
  t_start = time.perf_counter()

  def flush(final):
    res.write_csv(out_dir / "per_head.csv", per_head) if per_head else None
    res.write_csv(out_dir / "summary.csv", summary) if summary else None
    results = {**measurements(per_head, summary), "lemma1_synthetic": lemma1,
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
