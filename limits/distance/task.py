"""The ``distance`` experiment (Algorithms 1-3, Figure 2): Theorem 1 on a model's attention.

:class:`DistanceConfig` holds one run's settings (the CLI's flags, same names and defaults);
:func:`run` loads the model and the corpus windows, evaluates every head
(:class:`limits.distance.model.ModelEvaluator`) and writes ``per_head.csv``, ``summary.csv``,
``critical_n.csv``, ``fig2_<mode>.png`` and ``results.json`` (rewritten after every L, so an
interrupted run keeps what finished, and the same command continues from there:
:mod:`limits.runs.resume`, units per L, for critical_n per L of the search and of the scan). The modes, vector readings (AMBIG-7) and query handling
(AMBIG-8) are those of docs/ambiguities.md; the claims judged are in docs/claims.md.

- ``vary_length`` (Alg. 1, Fig. 2a): N = 5, L over ``lengths``.
- ``vary_n`` (Alg. 2, Fig. 2b): L = min(1024, context), N ∈ {1, 5, 10, 20, 100}.
- ``critical_n`` (Alg. 3, Fig. 2c): per L, the smallest N whose KS test of the per-head d̃ vs E
  does not reject at ``ks_alpha`` (AMBIG-9).
"""

from __future__ import annotations

import dataclasses
import time

from limits.runs import interrupts, options, parsing
from limits.errors import check

EXPERIMENT = "distance"
MODES = ("vary_length", "vary_n", "critical_n")
# The settings recorded in results.json "config" (out_dir and plot change no result).

@dataclasses.dataclass(frozen=True)
class DistanceConfig:
  """One run's settings; each field declares its CLI flag (``limits.runs.options``)."""

  mode: str = options.option("vary_length", "Which Algorithm / panel of Figure 2.",
                             choices=MODES)
  model: str = options.model()
  text: str | None = options.text()
  data_dir: str | None = options.data_dir()
  windows: int = options.windows()
  lengths: str = options.option("", "Comma-separated L values; default 32,64,...,min(1024, "
                                "context) for vary_length/critical_n and min(1024, context) for "
                                "vary_n.")
  ns: str = options.option("", "Comma-separated top-N values; default 5 (vary_length) or "
                           "1,5,10,20,100 (vary_n). Ignored by critical_n (it searches N).")
  form: str = options.option("sum", "d̃ reading for the plots and KS (AMBIG-1); both are always "
                             "computed and written.", choices=("sum", "norm"))
  vectors: str = options.option("value", "Vectors x_i (AMBIG-7).",
                                choices=("value", "key", "hidden", "embedding"))
  inclusion: str = options.option("n_over_l_minus_1", "Inclusion probability in E (AMBIG-3).",
                                  choices=("n_over_l_minus_1", "n_over_l"))
  ks_alpha: float = options.option(0.01, "KS significance level (AMBIG-9).",
                                   check=(lambda v: v is not None and 0 < v < 1, "be in (0, 1)"))
  search: str = options.option("bisect", "critical_n: search over N.", choices=("bisect", "scan"))
  batch: int = options.option(8, "critical_n: Ns evaluated per forward pass.",
                              check=options.POSITIVE_INT)
  max_n: int | None = options.option(None, "critical_n: largest N of the bisection search "
                                     "(reconstructed E; default L-1); the scan's is "
                                     "--scan_max_n.",
                                     check=options.POSITIVE_INT)
  scan_max_n: int | None = options.option(
      None, "critical_n: largest N of Algorithm 3's ascending scan (printed E); default "
      "ceil(L/4), twice the upper edge 0.12 of the claim's band N_crit/L in [0.03, 0.12] "
      "(docs/claims.md fig2c-critical-n). No pass up to it is reported as 'no pass for "
      "N <= N_max', above the band at that L.", check=options.POSITIVE_INT)
  seed: int = options.seed()
  x64: bool = options.x64("Compute the distance statistics in float64 where the bound is "
                          "verified (vary_length, vary_n); --nox64 for float32 everywhere.")
  ks_x64: bool = options.option(False, "critical_n: float64 for the KS-only search too (default "
                                "float32: only a KS decision depends on it; "
                                "tests/test_distance_fast.py shows both precisions give the same "
                                "decisions on the embedded model).")
  avg_x64: bool = options.option(False, "vary_length/vary_n: float64 for the passes that only "
                                 "feed reported token averages too (E and the printed E; "
                                 "default float32, relative error < 1e-6 of the "
                                 "averages, tests/test_distance_avg32.py); the bound's "
                                 "verification is float64 either way.")
  out_dir: str | None = options.out_dir("distance")
  plot: bool = options.plot("Write the figure.")


def lengths_for(config: DistanceConfig, model) -> list[int]:
  """The L grid: ``lengths``, else min(1024, context) for vary_n, else the paper's grid."""
  ctx = model.config.n_positions
  if config.mode == "vary_n" and not config.lengths.strip():
    return [min(1024, ctx)]
  return parsing.parse_lengths(config.lengths, ctx, model.name, minimum=2)


def ns_for(config: DistanceConfig, lengths) -> list[int]:
  """The top-N grid (none for critical_n, which searches N); every N in [1, min(lengths))."""
  if config.mode == "critical_n":
    return []
  default = "5" if config.mode == "vary_length" else "1,5,10,20,100"
  ns = sorted(set(parsing.parse_ints(config.ns or default, "ns")))
  for n in ns:
    check(n >= 1, f"--ns contains N={n}; every N must be >= 1")
    check(n < min(lengths), f"--ns contains N={n} >= L={min(lengths)}; need N < L (queries "
          "with t <= N have no non-selected key, AMBIG-8)")
  return ns


def ks_order_safe(stats, evaluator, form: str = "sum") -> bool:
  """True unless E was averaged in float32 (``evaluator.avg_dtype``) and some head's d̃ (the
  ``form`` the KS test reads, AMBIG-1) lies within 2·AVG32_RTOL (relative) of some head's E at
  one N: then the order of the pooled per-head means, hence the KS statistic and p-value of
  :func:`limits.distance.model.tabulate`, could differ from float64's, and the caller recomputes
  that L in float64. SmolLM2 (value vectors, one window): the smallest such gap over the
  270 × 270 head pairs is 1.2e-5 (sum form, L = 32 and 64), 3.7e-6 (norm, vary_n N = 1)."""
  import numpy as np

  from limits.distance.heads import token_means
  from limits.distance.kernels import AVG32_RTOL

  if evaluator.avg_dtype is None or evaluator.avg_dtype.itemsize >= evaluator.dtype.itemsize:
    return True
  means = {k: np.asarray(v, np.float64) for k, v in token_means(stats).items()}
  e = means["expected"]  # (heads, K)
  d = means["d_sum" if form == "sum" else "d_norm"]
  gap = np.abs(d[:, None, :] - e[None, :, :])  # (heads, heads, K)
  return not np.any(gap <= 2 * AVG32_RTOL * np.abs(e)[None, :, :])


def _bound_lengths(config, evaluator, tokens_by_l, ns, n_head, n_layer, tables, state, flush):
  """vary_length / vary_n: per L, the per-head statistics with the bound and the printed E."""
  from limits.distance import model as distance_model
  from limits.runs.progress import Progress

  per_head_rows, summary_rows, _ = tables
  units = state["units"]
  state["ks"] = []
  total = len(tokens_by_l) * config.windows * n_layer
  with Progress(total, f"distance {config.mode}", unit="layer") as bar:
    for L, tokens in tokens_by_l.items():
      key = f"L={L}"
      unit = units.get(key)  # finished by an interrupted run of this command: not recomputed
      if unit is None:
        t0 = time.perf_counter()
        # The paper's printed E (both readings of x̄) and the reconstruction with N/L, from the
        # same forward, so every reading of the claims can be judged.
        extra = distance_model.PrintedExpectations(ns)
        stats = evaluator.head_stats(tokens, ns, n_cap=max(ns), bound=True,
                                     on_layer=lambda: (bar.update(1), interrupts.check()),
                                     layer_hook=extra)  # a safe point per layer
        if not ks_order_safe(stats, evaluator, config.form):  # the KS order within float32's error of E
          extra = distance_model.PrintedExpectations(ns)  # float64 throughout for this L
          stats = evaluator.head_stats(tokens, ns, n_cap=max(ns), bound=True,
                                       layer_hook=extra, avg_dtype=None)
        seconds = time.perf_counter() - t0
        rows, summ, ks = distance_model.tabulate(stats, L, ns, n_layer, n_head, form=config.form)
        distance_model.add_head_means(rows, summ, extra.means(), ns)
        unit = units.add(key, {"rows": rows, "summary": summ, "ks": ks, "seconds": seconds})
      else:
        bar.update(config.windows * n_layer)
      state["timings"][key] = unit["seconds"]
      per_head_rows += unit["rows"]
      summary_rows += unit["summary"]
      state["ks"] += unit["ks"]
      flush()
      interrupts.check()  # a safe point: this L is written


SCAN_HEADS, SCAN_DRAWS = 144, 5  # the paper's GPT-2 head count; seeded subsample draws


def scan_pvalues(evaluator, tokens, model_config, *, form: str = "sum", seed: int = 0,
                 n_max: int | None = None, batch: int = 8):
  """The KS samples of Algorithm 3's ascending scan, as a function of a list of Ns (each at
  most ``n_max``, default L − 1).

  Per N, the per-head token-averaged d̃ (AMBIG-1 ``form``) against E in two forms: ``printed``
  (the paper's E, x̄ = Σ_j α_j x_j; limits.distance.printed) and ``reconstructed`` (the Jensen main sum
  the bisection tests), each on every head, on :data:`SCAN_DRAWS` seeded subsets of
  :data:`SCAN_HEADS` heads (when the model has more) and on one seeded head per key/value group
  (``_per_group``). The samples come from :class:`limits.distance.scan.ScanSamples` (records
  and selection order kept per L, one device call per layer and batch). Returns (pvalues_fn,
  sample description)."""
  import numpy as np

  from limits import stats
  from limits.distance.scan import ScanSamples

  c = model_config
  heads = c.n_layer * c.n_head
  subsets = stats.head_subsets(heads, SCAN_HEADS, SCAN_DRAWS, seed)
  groups = stats.group_representatives(c.n_layer, c.n_head, getattr(c, "n_kv_head", c.n_head),
                                       seed)

  samples = ScanSamples(evaluator, tokens, n_max or (np.shape(tokens)[-1] - 1), pad_to=batch)

  def pvalues(ns):
    means = samples(ns)
    d = np.asarray(means["d_sum" if form == "sum" else "d_norm"], np.float64)
    forms = {"printed": np.asarray(means["expected_printed_output"], np.float64),
             "reconstructed": np.asarray(means["expected"], np.float64)}
    out: dict[str, list[float]] = {}
    for k in range(len(ns)):
      for name, e in forms.items():
        out.setdefault(name, []).append(stats.ks_2samp(d[:, k], e[:, k]).pvalue)
        for j, idx in enumerate(subsets):
          out.setdefault(f"{name}_sub{SCAN_HEADS}_{j}", []).append(
              stats.ks_2samp(d[idx, k], e[idx, k]).pvalue)
        out.setdefault(f"{name}_per_group", []).append(
            stats.ks_2samp(d[groups, k], e[groups, k]).pvalue)
    return out

  sample = {"heads": heads, "per_group_heads": len(groups), "seed": seed,
            "subsets": (f"{len(subsets)} seeded draws of {SCAN_HEADS} of {heads} heads"
                        if subsets else f"none: {heads} heads <= {SCAN_HEADS}, all used")}
  return pvalues, sample


def _critical_lengths(config, evaluator, tokens_by_l, crit_rows, state, flush, model_config):
  """critical_n: per L, the KS search for the smallest N that does not reject (``search``, the
  reconstructed E), then Algorithm 3's ascending scan with both E forms (:func:`scan_pvalues`)
  over N = 1 … N_max (``scan_max_n``, default ⌈L/4⌉: :func:`limits.distance.scan.scan_n_max`):
  first passing N, pass windows and p along the scan, in results ``critical_scan`` (each
  sample's entry records ``n_max``; no pass up to it is ``critical_n`` None)."""
  import numpy as np_

  from limits import stats
  from limits.distance.scan import scan_n_max
  from limits.runs.progress import Progress

  crit, scans = {}, {}
  units = state["units"]
  state["critical"] = crit
  state["critical_scan"] = scans
  with Progress(len(tokens_by_l), "distance critical_n", unit="L") as bar:
    for L, tokens in tokens_by_l.items():
      n_hi = min(config.max_n or (L - 1), L - 1)
      search = units.get(f"search L={L}")  # finished by an interrupted run: not recomputed
      if search is None:
        t0 = time.perf_counter()
        found = evaluator.critical_n(tokens, n_hi, alpha=config.ks_alpha, form=config.form,
                                     method=config.search, batch=config.batch)
        seconds = time.perf_counter() - t0
        search = units.add(f"search L={L}", {
            "found": found.as_dict(), "seconds": seconds,
            "row": {"L": L, "critical_n": found.n, "ratio": (found.n / L) if found.n else None,
                    "probes": len(found.evaluated),
                    "decisions_monotone": found.decisions_monotone,
                    "pvalues_monotone": found.pvalues_monotone, "seconds": seconds}})
      state["timings"][f"L={L}"] = search["seconds"]
      crit[str(L)] = search["found"]
      crit_rows.append(search["row"])
      flush()
      interrupts.check()  # a safe point: this L's search is written
      scan = units.get(f"scan L={L}")
      if scan is None:
        t1 = time.perf_counter()
        n_scan = scan_n_max(L, config.scan_max_n)
        fn, sample = scan_pvalues(evaluator, tokens, model_config, form=config.form,
                                  seed=config.seed, n_max=n_scan, batch=config.batch)
        # Stops once the printed E's first pass window settled (or at N_max); the reconstructed
        # E's critical N is the search's above (its first pass sits near 0.8·L, AMBIG-18), its
        # p-values are recorded along.
        res = stats.ascending_scan(fn, 1, n_scan, alpha=config.ks_alpha, batch=config.batch,
                                   until_closed=("printed",))
        found_scan = {"sample": sample, "n_max": n_scan,
                      **{k: {**v.as_dict(), "n_max": n_scan} for k, v in res.items()}}
        subs = [v.first_pass for k, v in res.items() if k.startswith("printed_sub")]
        found_scan["printed_sub_first_pass"] = {
            "median": float(np_.median([n for n in subs if n])) if any(subs) else None,
            "values": subs}
        scan = units.add(f"scan L={L}", {"scan": found_scan,
                                         "seconds": time.perf_counter() - t1})
      scans[str(L)] = scan["scan"]
      state["timings"][f"scan L={L}"] = scan["seconds"]
      bar.update(1)
      flush()
      interrupts.check()  # a safe point: this L is written


def run(config: DistanceConfig):
  """Runs the experiment and writes its outputs; returns the run directory.

  Call :func:`limits.cli.setup_precision` first. Errors (bad lengths or Ns, a corpus too short
  for the windows) are one-line ``LimitsError``\\ s raised before any compute.
  """
  import numpy as np

  from limits import records, stats
  from limits.distance import model as distance_model
  from limits.distance.kernels import PRINTED
  from limits.records import sources
  from limits.runs import resume
  from limits.runs import results as res

  mode = config.mode
  model = sources.load_model(config.model)
  lengths = lengths_for(config, model)
  ns = ns_for(config, lengths)
  out_dir = res.prepare_out_dir(config.out_dir, EXPERIMENT)
  record = res.config_record(config)
  record.update({"lengths_used": lengths, "ns_used": ns, "model_info": model.info()})
  # Windows first (cheap), so a too-short corpus fails before any compute.
  tokens_by_l = {L: sources.corpus_windows(model, L, config.windows, text=config.text,
                                           data_dir=config.data_dir) for L in lengths}
  dtype = np.float64 if config.x64 else np.float32
  ks_dtype = np.float64 if (config.x64 and config.ks_x64) else np.float32
  fields = distance_model.record_fields(config.vectors)

  def evaluator_on(store):  # one forward per window for every N and probe (limits.records)
    return distance_model.ModelEvaluator(
        lambda: model.params, model.config, vectors=config.vectors, inclusion=config.inclusion,
        dtype=dtype, ks_dtype=ks_dtype, avg_dtype=None if config.avg_x64 else np.float32,
        layer_source=lambda tok: records.iter_layers(model, tok, fields=fields, store=store))

  record["dtype"] = np.dtype(dtype).name
  record["ks_dtype"] = np.dtype(ks_dtype).name
  record["avg_dtype"] = np.dtype(np.float64 if config.avg_x64 else np.float32).name
  per_head_rows, summary_rows, crit_rows = [], [], []
  # Units finished by an interrupted run of this command (limits.runs.resume): per L, and per
  # L of the critical-N search and of its scan.
  state = {"timings": {}, "per_l": {},
           "units": resume.Units.open(out_dir, EXPERIMENT, record, unit="L")}
  t_start = time.perf_counter()

  def flush(final=False):
    res.write_csv(out_dir / "per_head.csv", per_head_rows) if per_head_rows else None
    res.write_csv(out_dir / "summary.csv", summary_rows) if summary_rows else None
    res.write_csv(out_dir / "critical_n.csv", crit_rows) if crit_rows else None
    # Measurements only: limits.claims judges them (issue 26).
    results = {"summary": summary_rows}
    results.update({"complete": final, "timings_s": state["timings"],
                    "wall_s": time.perf_counter() - t_start, "model": model.info(),
                    "critical_n": state.get("critical"), "ks": state.get("ks")})
    if state.get("critical_scan") is not None:
      results["critical_scan"] = state["critical_scan"]
    # Sliding-window layers (Gemma 3): head means per (L, N) of local and global layers apart.
    keys = [k for k in distance_model.FIELDS + PRINTED if per_head_rows and k in per_head_rows[0]]
    split = stats.by_layer_kind(per_head_rows, model.info().get("layer_windows"), keys,
                                by=("L", "N"))
    if split is not None:
      results["by_layer_kind"] = split
    results[resume.BLOCK] = state["units"].block(final)
    res.write_results(out_dir, EXPERIMENT, record, results, seed=config.seed)

  if mode in ("vary_length", "vary_n"):
    _bound_lengths(config, evaluator_on(records.store_from_env()), tokens_by_l, ns,
                   model.config.n_head, model.config.n_layer,
                   (per_head_rows, summary_rows, crit_rows), state, flush)
  else:
    with records.session_store() as store:  # every probe of the search re-reads the records
      _critical_lengths(config, evaluator_on(store), tokens_by_l, crit_rows, state, flush,
                        model.config)
  if config.plot:
    from limits.plotting import distance as plot_lib

    plot_lib.figure2(mode, summary_rows, crit_rows, out_dir / f"fig2_{mode}.png",
                     form=config.form)
  flush(final=True)  # last: results.json says complete only once every file is written
  return out_dir
