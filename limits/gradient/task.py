"""Gradient sensitivity task: Lemma 2, Corollary 3 and Algorithm 5 (Figure 4).

For each temperature T the normalizer is applied to l / T (raw-logit scale, AMBIG-12; AMBIG-n
labels name the options of docs/ambiguities.md) and :func:`run` measures:

- the exact Jacobian norm ‖∂α/∂l‖₂ of a subsample of ``rows`` rows: jacfwd + dense SVD for
  L ≤ ``dense_max_length``, matrix-free power iteration (jvp/vjp) above; compared with the
  closed form (dense matrix, or the O(L) secular-equation norm for softmax) and with central
  differences on ``check_rows`` rows, with the tolerances used;
- the paper's g(T, ε) = ‖α(l + εv) − α(l)‖₂/ε (Algorithm 5) with a fresh random unit v over the
  visible positions, on a seeded sample of rows (``fd_rows``) for every ε (mean and max; for the
  model source also the paper's statistic: max over (layer, head) of the token-averaged g);
- Corollary 3 in the paper's form min{1/(4T), √2} and the tight bound 1/(2T), counting every
  row whose exact norm exceeds either (softmax only: the bounds are about softmax), Lemma 2's
  bound on every row, and the largest T‖J‖ over every row: decided for every (row, T) by
  ``gradient_screen.Screen`` (a proved one-pass bracket of the norm and the secular test,
  Newton's exact norm only where neither decides; the same decisions as the exact norm of
  every pair), and the
  tied-top-two counterexample row (α = (½, ½, 0, …), ‖J‖₂ = 1/(2T) exactly: the closed form,
  with a numeric check on a short row).

Synthetic source: ``rows`` rows of length ``length``, i.i.d. N(0, σ²) with σ = ``logit_scale``
(:func:`synthetic_rows`, shared with the ``gradient`` sweep kind), all visible. Model source:
the rows of ``limits.records.sources.model_logit_rows`` (raw q·k of every layer, head and query
with the causal mask), read one (window, layer) block at a time (:mod:`limits.gradient.blocks`:
the mask is built per block from the layer's pattern, the rows are re-read from the records
store on each pass when they do not fit in memory, so the step's memory is one block plus a
few numbers per (row, T), not the (R, L) matrix: 4.5 GB at SmolLM2 paper settings). The
measurements at one temperature: :mod:`limits.gradient.rows`; the table and the output files:
:mod:`limits.gradient.report`. The run records measurements only; the claims
(docs/claims.md) are judged by ``limits.claims``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from limits.runs import interrupts, options, parsing, seeding
from limits.errors import LimitsError
from limits.gradient.rows import (run_temperature, synthetic_rows)

__all__ = ["EXPERIMENT", "GradientConfig", "Plan", "Result", "Rows", "check_temperature_range",
           "default_temperatures", "load_rows", "model_rows", "normalizer_params",
           "parse_epsilons", "parse_temperatures", "plan", "resume_units", "run"]

EXPERIMENT = "gradient"
UNIT = "t_batch"  # the resumable unit (limits.runs.resume): one batch of temperatures
DEFAULT_EPSILONS = "1e-3,1e-1,10"
SCREEN_PAIR_BYTES = 1 << 30  # the screen's per-(row, T) memory for one pass over the rows
SCREEN_BYTES_PER_PAIR = 28  # its widened bracket λ₀/T, λ¹/T in float64 and the secular test's
#   float32 α₁, α₂, q (screen.Screen)


@dataclasses.dataclass(frozen=True)
class GradientConfig:
  """One run's settings (results.json ``config``); each field declares its CLI flag
  (``limits.runs.options``)."""

  temperature: float | None = options.option(
      None, "One temperature T (> 0); overrides the default grid.",
      check=(options.positive, "be > 0"))
  temperatures: str | None = options.option(
      None, "Comma-separated temperatures; default: log grid 1e-3..1e2 with 5 points per decade "
      "(AMBIG-11).")
  epsilons: str = options.option(DEFAULT_EPSILONS, "Comma-separated finite-difference sizes ε.")
  normalizer: str = options.option("softmax", "Normalizer name (limits.normalizers.NAMES).")
  alpha: float = options.option(1.5, "α for --normalizer=entmax (> 1).",
                                check=(lambda v: v is not None and v > 1, "be > 1 (α-entmax)"))
  s: float = options.option(1.0, "s for --normalizer=ssmax (> 0).",
                            check=(options.positive, "be > 0"))
  length: int = options.option(64, "Row length L (keys per row / window length).",
                               check=options.POSITIVE_INT)
  rows: int = options.option(256, "Synthetic: number of rows. Model: rows subsampled for the "
                             "exact Jacobians (g uses every row).", check=options.POSITIVE_INT)
  check_rows: int = options.option(16, "Rows on which jacrev and central differences are "
                                   "compared with the exact Jacobian.",
                                   check=(options.nonnegative, "be >= 0"))
  # σ = inf would give inf logits: a finite number.
  logit_scale: float = options.option(8.0, "Synthetic: standard deviation σ of the logits.",
                                      check=(options.positive_number,
                                             "be a finite number > 0"))
  source: str = options.option("synthetic", "Where the logit rows come from.",
                               choices=("synthetic", "model"))
  model: str = options.model(help="For --source=model: " + options.MODEL_HELP)
  windows: int = options.windows(help="Model: number of L-token corpus windows.")
  text: str | None = options.text("Model: a text file overriding the corpus.")
  data_dir: str | None = options.data_dir("Model: overrides $LIMITS_DATA_DIR.")
  dense_max_length: int = options.option(256, "Largest L for dense jacfwd + SVD; longer rows use "
                                         "the matrix-free power iteration.",
                                         check=options.POSITIVE_INT)
  power_iters: int = options.option(100, "Power-iteration steps for the matrix-free norm.",
                                    check=options.POSITIVE_INT)
  fd_rows: int = options.option(256, "Rows on which g(T, eps) is measured: per (layer, head) for "
                                "--source=model, in all for synthetic; a seeded uniform sample "
                                "without replacement (the exact O(L) norm covers every row).",
                                check=options.POSITIVE_INT)
  t_batch: int = options.option(8, "Temperatures computed together per row; results.json is "
                                "rewritten after the first batch, then at most every 10 s and "
                                "when interrupted, so an interrupted run keeps finished ones.",
                                check=options.POSITIVE_INT)
  seed: int = options.seed("Random seed (synthetic rows, directions v, subsampling).")
  x64: bool = options.x64("Compute in float64 (a bound is verified here).")
  out_dir: str | None = options.out_dir(EXPERIMENT, "Run directory (default "
                                        "results/gradient/<timestamp>).")


@dataclasses.dataclass(frozen=True)
class Plan:
  """A config's parsed and validated inputs (no I/O, no arrays)."""

  config: GradientConfig
  temperatures: list[float]  # (K,)
  epsilons: list[float]  # (E,)
  normalizer: str
  params: dict
  dtype: type  # np.float64 or np.float32


@dataclasses.dataclass
class Result:
  """What :func:`run` measured: the results block and the per-row records."""

  results: dict  # results.json "results" (complete=True): measurements only
  summaries: list[dict]  # one per temperature
  per_row: list[dict]  # one per (T, exact row)
  seconds: float


# ----------------------------------------------------------------------------- inputs


def default_temperatures() -> list[float]:
  """AMBIG-11: 10^-3 … 10^2 with 5 points per decade (26 values)."""
  return [float(t) for t in np.logspace(-3, 2, 26)]


def parse_temperatures(temperature, temperatures) -> list[float]:
  """The temperature grid: one T, a comma-separated list, or the default grid; every T > 0."""
  if temperature is not None and temperatures is not None:
    raise LimitsError("give either --temperature or --temperatures, not both")
  if temperature is not None:
    ts = [float(temperature)]
  elif temperatures is not None:
    ts = parsing.parse_floats(temperatures, "temperatures")
  else:
    ts = default_temperatures()
  for t in ts:
    if not (math.isfinite(t) and t > 0):
      raise LimitsError(f"temperature {t!r} is not allowed; every temperature must be > 0")
  return ts


def check_temperature_range(temps, big, epsilons, dtype) -> None:
  """Every T must keep (l + εv)/T finite in ``dtype`` (else softmax is NaN and a verdict would
  be read off NaN norms): the largest |logit| ``big`` (over the visible entries,
  ``RowBlocks.gather``) plus the largest ε, divided by T, and 1/T, must stay below the dtype's
  largest finite value. One line naming the smallest allowed T."""
  fin = np.finfo(dtype)
  need = 2.0 * (big + max(epsilons)) + 1.0  # differences of two logits, plus margin
  t_min = max(need / float(fin.max), float(fin.tiny)) * 16
  for t in temps:
    if t < t_min:
      raise LimitsError(
          f"temperature {t:g} is below the {np.dtype(dtype).name} range for these logits: "
          f"(logits + eps)/T overflows (max |logit| = {big:.3g}); the smallest allowed T is "
          f"{t_min:.3g}" + ("" if np.dtype(dtype) == np.float64 else "; use --x64"))


def parse_epsilons(text) -> list[float]:
  """Comma-separated finite-difference sizes ε; every ε > 0."""
  eps = parsing.parse_floats(text, "epsilons")
  for e in eps:
    if not (math.isfinite(e) and e > 0):
      raise LimitsError(f"epsilon {e!r} is not allowed; every epsilon must be > 0")
  return eps


def normalizer_params(name: str, alpha: float, s: float) -> dict:
  return {"entmax": {"alpha": alpha}, "ssmax": {"s": s}}.get(name, {})


def plan(config: GradientConfig) -> Plan:
  """Parses and validates ``config`` (one-line LimitsError on bad input); computes nothing."""
  from limits import normalizers

  temps = parse_temperatures(config.temperature, config.temperatures)
  epsilons = parse_epsilons(config.epsilons)
  params = normalizer_params(config.normalizer, config.alpha, config.s)
  normalizers.get(config.normalizer, **params)  # validates the name and parameters
  return Plan(config, temps, epsilons, config.normalizer, params,
              np.float64 if config.x64 else np.float32)


def model_rows(model_spec, length, windows, text, data_dir):
  """(model, blocks): the raw q·k rows of every layer, head and query of the corpus windows,
  as a :class:`limits.gradient.blocks.RowBlocks` (one (window, layer) block at a time, with
  its row ``meta``: ``limits.records.sources.logit_row_meta``)."""
  try:
    from limits.records import sources
  except ImportError as e:  # pragma: no cover - sources.py ships with limits
    raise LimitsError(f"--source=model needs limits.records.sources, which failed to import: {e}") from None
  from limits.gradient.blocks import RowBlocks

  model = sources.load_model(model_spec)
  tokens = sources.corpus_windows(model, length, windows, text=text, data_dir=data_dir)
  return model, RowBlocks.from_model(model, tokens)


def resume_units(config: GradientConfig, out_dir):
  """The temperature batches an interrupted run of this command left in ``out_dir``
  (:class:`limits.runs.resume.Units`; none for a new run), to pass to :func:`run`."""
  from limits.runs import resume
  from limits.runs import results as res

  return resume.Units.open(out_dir, EXPERIMENT, res.config_record(config), unit=UNIT)


# ----------------------------------------------------------------------------- the task


@dataclasses.dataclass
class Rows:
  """The logit rows of a run and where they came from."""

  blocks: object  # limits.gradient.blocks.RowBlocks: the (R, L) rows (the run's dtype, or the
  #   model's float32, exact in float64) and their mask, one block at a time
  exact_idx: np.ndarray  # (X,) sorted rows that get exact Jacobians
  groups: np.ndarray | None  # (R,) layer * n_head + head (model source), else None
  n_groups: int | None
  source_info: dict  # results.json "source"


def load_rows(p: Plan, k_rows, k_sub) -> Rows:
  """The run's rows: :func:`synthetic_rows` (every row exact) or :func:`model_rows` (a seeded
  subsample of ``rows`` rows exact, from ``k_sub``)."""

  from limits.gradient.blocks import RowBlocks

  c = p.config
  groups = n_groups = None
  source_info = {"source": c.source}
  if c.source == "synthetic":
    rows = np.asarray(synthetic_rows(k_rows, c.rows, c.length, c.logit_scale, p.dtype))
    blocks = RowBlocks.from_arrays(rows, np.ones(rows.shape, bool))
    exact_idx = np.arange(rows.shape[0])
    source_info["distribution"] = f"iid N(0, {c.logit_scale:g}^2), all visible"
  else:
    model, blocks = model_rows(c.model, c.length, c.windows, c.text, c.data_dir)
    meta = blocks.meta  # the model's float32 rows stay float32: cast per block, exactly
    n_head = model.config.n_head
    groups = meta["layer"] * n_head + meta["head"]  # (R,)
    n_groups = int(groups.max()) + 1
    rng = np.random.default_rng(seeding.numpy_seed(k_sub))
    exact_idx = np.sort(rng.choice(blocks.n_rows, min(c.rows, blocks.n_rows), replace=False))
    source_info.update({"model": model.info(), "windows": c.windows,
                        "native_temperature": model.native_temperature})
  return Rows(blocks, exact_idx, groups, n_groups, source_info)


def _float32_rows_fit(temps, epsilons, dtype, blocks) -> bool:
  """True when rows of float32 logits pass :func:`check_temperature_range` whatever their
  values (the largest finite float32), so the check can wait until the screen's pass has read
  them (a non-finite logit still fails it there, one pass later)."""
  if blocks.dtype != np.float32:
    return False
  try:
    check_temperature_range(temps, float(np.finfo(np.float32).max), epsilons, dtype)
  except LimitsError:
    return False
  return True


def _log(msg: str) -> None:
  print(msg, flush=True)


def run(p: Plan, *, checkpoint: Callable[[dict], None] | None = None,
        log: Callable[[str], None] = _log, units=None) -> Result:
  """Runs the experiment of a :func:`plan`: every temperature, ``t_batch`` at a time.

  ``checkpoint(results)`` is called after each batch with the results so far
  (``complete=False``), so an interrupted run can keep its finished temperatures.
  ``units``: a :class:`limits.runs.resume.Units` (unit ``"t_batch"``) holding the batches an
  interrupted run of the same command finished (:func:`resume_units`); they are taken from
  there, not recomputed. A row's direction v for an ε is the same at every temperature (key
  :func:`direction_key`), so a batch's numbers do not depend on the others, nor on
  ``t_batch``, and the results equal an uninterrupted run's.
  """
  k_rows, k_sub, k_dir = seeding.streams(p.config.seed, 3)  # limits.runs.seeding: the one rule
  src = load_rows(p, k_rows, k_sub)
  with src.blocks:
    return _run(p, src, k_sub, k_dir, checkpoint, log, units)


def direction_key(k_dir):
  """The key of g(T, ε)'s directions (``sensitivity.fd_rows``): one direction v per (row, ε),
  shared by every temperature (AMBIG-13: fresh per row, fixed seed), so g does not depend on
  how the temperatures are batched. ``fold_in(k_dir, 0)`` is the key the first batch of
  temperatures had when each batch drew its own directions (until the twenty-seventh
  session), so that batch's g values are unchanged."""
  import jax

  return jax.random.fold_in(k_dir, 0)


# A run's results.json is rewritten after a batch of temperatures at most this often, and
# always when interrupted (the synthetic step's 5 checkpoints cost ~1 s of its ~10 s).
CHECKPOINT_SECONDS = 10.0  # named in the --t_batch help


def _run(p: Plan, src: Rows, k_sub, k_dir, checkpoint, log, units) -> Result:
  """:func:`run` on the loaded rows (every pass over them block by block: ``src.blocks``)."""
  import jax

  from limits.runs import resume

  from limits import jacobians, normalizers
  from limits.gradient import screen as gradient_screen
  from limits.gradient import sensitivity
  from limits.runs.progress import Progress

  c, name, params, dtype = p.config, p.normalizer, p.params, p.dtype
  temps, epsilons = p.temperatures, p.epsilons
  blocks, exact_idx, groups = src.blocks, src.exact_idx, src.groups
  R, L = blocks.n_rows, blocks.length
  dense = L <= c.dense_max_length
  eps_mach = float(np.finfo(dtype).eps)
  dtype_tol = {"exact": jacobians.EXACT_TOL[np.dtype(dtype)],
               # power iteration converges linearly at (σ2/σ1)² per step: 1e-3 relative
               "matfree": {"atol": 1e3 * eps_mach, "rtol": 1e-3},
               "violation_rtol": 100 * eps_mach}
  log(f"gradient: {name} {params or ''} source={c.source} rows={R} L={L} "
      f"exact rows={len(exact_idx)} ({'dense' if dense else 'matrix-free'}) "
      f"T values={len(temps)} eps={epsilons} dtype={np.dtype(dtype).name}")

  # g(T, eps) on a seeded sample: fd_rows per (layer, head) (model) or in all (synthetic).
  fd_seed = seeding.numpy_seed(jax.random.fold_in(k_sub, 1))
  fd_groups = groups if groups is not None else np.zeros(R, int)
  fd_idx = sensitivity.sample_rows(fd_groups, c.fd_rows, fd_seed)  # (S,)
  norm_fn = normalizers.get(name, **params)
  units = units if units is not None else resume.Units(UNIT)
  screen = (gradient_screen.Screen(blocks, None, dtype, dtype_tol["violation_rtol"])
            if name == "softmax" else None)
  # The screen reads every row once for as many temperatures as SCREEN_PAIR_BYTES allows (all
  # 26 at SmolLM2 paper settings): the rows are read, cut and cast once, not once per batch.
  # Its per-T numbers are kept until their batch is written (a batch restored from an
  # interrupted run is skipped; one computed ahead and then restored is only dropped).
  screened: dict = {}  # temperature index -> {name: value}
  per_pass = max(c.t_batch, SCREEN_PAIR_BYTES // max(1, R * SCREEN_BYTES_PER_PAIR))

  def screen_ahead(c0, tap=None):
    ahead = list(range(c0, min(len(temps), c0 + per_pass)))
    st = screen.stats([temps[i] for i in ahead], tap=tap)
    screened.update({i: {n: v[j] for n, v in st.items()} for j, i in enumerate(ahead)})

  # One pass: the largest logit, the exact rows (X, L) and the sampled rows (S, L), gathered
  # inside the screen's first pass (the step reads its rows, or runs the forward, once) when
  # no finite float32 row can fail check_temperature_range; else in a pass of their own first.
  # The largest |visible logit| comes from the screen's row facts on the device when the
  # screen reads the rows, else from the gatherer on the host (a NumPy pass over every row,
  # ~4 s at SmolLM2 paper settings on the step's main thread); both leave NaN entries out
  # one by one.
  todo = [c0 for c0 in range(0, len(temps), c.t_batch)
          if not units.restored(f"T[{c0}:{c0 + len(temps[c0:c0 + c.t_batch])}]")]
  tapped = bool(screen is not None and todo and _float32_rows_fit(temps, epsilons, dtype,
                                                                 blocks))
  gather = blocks.gatherer(exact_idx, fd_idx, big=not tapped)
  if tapped:
    screen_ahead(todo[0], tap=gather.add)
  else:
    for start, rows, mask in blocks.blocks():
      gather.add(start, rows, mask)
  big, ((exact_rows, exact_mask), (fd_l, fd_m)) = gather.result()
  if tapped:
    big = screen.big
  check_temperature_range(temps, big, epsilons, dtype)
  sampling = {"fd_rows": int(fd_idx.size), "of_rows": int(R),
              "how": (f"min({c.fd_rows}, rows of the group) rows per (layer, head)"
                      if groups is not None else f"min({c.fd_rows}, rows) rows")
              + f", uniform without replacement, numpy default_rng({fd_seed}) (from --seed); "
              "one direction v per (row, eps), shared by every temperature (key "
              "fold_in(direction key, 0))",
              "exact_rows": len(exact_idx),
              "exact_how": "every row" if len(exact_idx) == R else
              f"{len(exact_idx)} rows uniform without replacement (from --seed)",
              "closed_form_rows": int(R) if name == "softmax" else 0}
  log(f"gradient: g(T, eps) on {fd_idx.size} sampled rows; every row screened, exact where open"
      if name == "softmax" else f"gradient: g(T, eps) on {fd_idx.size} sampled rows")
  exact_pos = np.arange(len(exact_idx))  # the exact rows' positions in exact_rows
  check_pos = exact_pos[:c.check_rows]
  summaries, per_row = [], []
  t0 = time.perf_counter()

  def results(complete: bool, seconds: float) -> dict:
    res = {"source": src.source_info, "normalizer": name, "params": params,
           "sampling": sampling, "temperatures": temps, "epsilons": epsilons, "length": L,
           "n_rows": int(R), "per_temperature": summaries,
           "temperatures_done": len(summaries), "complete": complete, "seconds": seconds,
           resume.BLOCK: units.block(complete)}
    return res

  # Every statistic below runs on the device (jitted, L2-sized chunks) and returns
  # per-temperature numbers or the sampled rows' g, never a per-row matrix; the screen reads
  # the rows a block at a time, g(T, eps) only the sample (on the device once).
  fd_l_dev, fd_m_dev = jax.device_put((fd_l, fd_m))
  del fd_l
  # g(T, eps) of every temperature still to do, in one call: each row's directions are drawn
  # once, not once per batch (threefry and the float64 erfinv were half of g's time).
  todo_t = [i for c0 in todo for i in range(c0, min(len(temps), c0 + c.t_batch))]
  g_all = sensitivity.fd_rows(norm_fn, fd_l_dev, fd_m_dev, fd_m, np.arange(fd_idx.size),
                              [temps[i] for i in todo_t], epsilons, direction_key(k_dir),
                              dtype=dtype) if todo_t else None  # (S, K_todo, E)
  g_of = {i: j for j, i in enumerate(todo_t)}  # temperature index -> column of g_all
  del fd_l_dev, fd_m_dev

  def screen_stats(c0, k):
    if c0 not in screened:
      screen_ahead(c0)
    got = [screened.pop(i) for i in range(c0, c0 + k)]
    return {n: np.asarray([g[n] for g in got]) for n in got[0]}

  written = [-math.inf, False]  # last checkpoint, batches since it not yet written

  def emit():
    """Checkpoint after the first batch, then at most every CHECKPOINT_SECONDS (each write
    carries every finished temperature's per-row payload), and always before an interrupt is
    honoured."""
    now = time.perf_counter()
    if checkpoint is not None and now - written[0] >= CHECKPOINT_SECONDS:
      checkpoint(results(False, now - t0))
      written[:] = [now, False]
    else:
      written[1] = checkpoint is not None
    try:
      interrupts.check()
    except BaseException:
      if written[1]:
        checkpoint(results(False, time.perf_counter() - t0))
      raise

  with Progress(len(temps), "temperatures", unit="T", enabled=len(temps) > 1) as prog:
    for c0 in range(0, len(temps), c.t_batch):
      chunk = temps[c0:c0 + c.t_batch]  # (K,)
      key = f"T[{c0}:{c0 + len(chunk)}]"
      unit = units.get(key)  # finished by an interrupted run of this command
      if unit is not None:
        summaries += unit["summaries"]
        per_row += unit["per_row"]
        prog.update(len(chunk))
        emit()
        continue
      stats = screen_stats(c0, len(chunk)) if screen is not None else None  # {name: (K,)}
      batch_summaries, batch_rows = [], []
      for j, T in enumerate(chunk):
        s, pr = run_temperature(T, exact_rows, exact_mask, exact_pos, check_pos, epsilons,
                                name, params, row_ids=exact_idx,
                                g_vals=g_all[:, g_of[c0 + j]], fd_idx=fd_idx,
                                all_stats=None if stats is None else
                                {k: v[j] for k, v in stats.items()},
                                dense=dense, groups=groups, n_groups=src.n_groups,
                                dtype_tol=dtype_tol, power_iters=c.power_iters, dtype=dtype)
        batch_summaries.append(s)
        batch_rows.extend(pr)
        prog.update(1)
      units.add(key, {"summaries": batch_summaries, "per_row": batch_rows})
      summaries += batch_summaries
      per_row += batch_rows
      emit()  # a safe point: an interrupted run keeps every finished temperature
  elapsed = time.perf_counter() - t0
  return Result(results(True, elapsed), summaries, per_row, elapsed)
