"""Gradient sensitivity (Corollary 3, Lemma 2; Algorithm 5 and Figure 4 of the paper).

For each temperature T the normalizer is applied to l / T (raw-logit scale, AMBIG-12) and:

- the exact Jacobian norm ‖∂α/∂l‖₂ of a subsample of ``--rows`` rows: jacfwd + dense SVD for
  L ≤ ``--dense_max_length``, matrix-free power iteration (jvp/vjp) above; compared with the
  closed form (dense matrix, or the O(L) secular-equation norm for softmax) and with central
  differences on ``--check_rows`` rows, with the tolerances used;
- the paper's g(T, ε) = ‖α(l + εv) − α(l)‖₂/ε with a fresh random unit v over the visible
  positions, for every row and every ε (mean and max over rows; for ``--source=model`` also the
  paper's statistic: max over (layer, head) of the token-averaged g);
- Corollary 3 in the paper's form min{1/(4T), √2} and the tight bound 1/(2T), marking every row
  whose exact norm exceeds either (softmax only: the bounds are about softmax), Lemma 2's bound,
  and the tied-top-two counterexample row (α = (½, ½, 0, …), ‖J‖₂ = 1/(2T) exactly).

Synthetic source: ``--rows`` rows of length ``--length``, entries i.i.d. N(0, σ²) with
σ = ``--logit_scale`` (default 8 = √64, the scale on which GPT-2's own T is 8), all visible.
Model source: ``limits.sources.model_logit_rows`` (raw q·k of every layer, head and query with
the causal mask); exact Jacobians on a random subsample of ``--rows`` rows.

Writes results.json, gradient.csv (one line per T), rows.csv (one line per T and exact row, with
the violation flags) and gradient.png (Figure 4 style).

  python -m experiments.gradient --temperature=0.05
  python -m experiments.gradient --source=model --model=tiny --length=128
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
from absl import app, flags

from limits import cli
from limits import results as results_lib
from limits.errors import LimitsError

EXPERIMENT = "gradient"
DEFAULT_EPSILONS = "1e-3,1e-1,10"

flags.DEFINE_float("temperature", None, "One temperature T (> 0); overrides the default grid.")
flags.DEFINE_string("temperatures", None, "Comma-separated temperatures; default: log grid "
                    "1e-3..1e2 with 5 points per decade (AMBIG-11).")
flags.DEFINE_string("epsilons", DEFAULT_EPSILONS, "Comma-separated finite-difference sizes ε.")
flags.DEFINE_string("normalizer", "softmax", "Normalizer name (limits.normalizers.NAMES).")
flags.DEFINE_float("alpha", 1.5, "α for --normalizer=entmax (> 1).")
flags.DEFINE_float("s", 1.0, "s for --normalizer=ssmax (> 0).")
flags.DEFINE_integer("length", 64, "Row length L (keys per row / window length).")
flags.DEFINE_integer("rows", 256, "Synthetic: number of rows. Model: rows subsampled for the "
                     "exact Jacobians (g uses every row).")
flags.DEFINE_integer("check_rows", 16, "Rows on which jacrev and central differences are "
                     "compared with the exact Jacobian.")
flags.DEFINE_float("logit_scale", 8.0, "Synthetic: standard deviation σ of the logits.")
flags.DEFINE_enum("source", "synthetic", ["synthetic", "model"], "Where the logit rows come from.")
flags.DEFINE_string("model", "tiny", "Model for --source=model (tiny, a GPT-2 name, or a dir).")
flags.DEFINE_integer("windows", 1, "Model: number of L-token corpus windows.")
flags.DEFINE_string("text", None, "Model: a text file overriding the corpus.")
flags.DEFINE_string("data_dir", None, "Model: overrides $LIMITS_DATA_DIR.")
flags.DEFINE_integer("dense_max_length", 256, "Largest L for dense jacfwd + SVD; longer rows use "
                     "the matrix-free power iteration.")
flags.DEFINE_integer("power_iters", 100, "Power-iteration steps for the matrix-free norm.")
flags.DEFINE_integer("fd_rows", 256, "Rows on which g(T, eps) is measured: per (layer, head) "
                     "for --source=model, in all for synthetic; a seeded uniform sample without "
                     "replacement (the exact O(L) norm covers every row).")
flags.DEFINE_integer("t_batch", 8, "Temperatures computed together per row; results.json is "
                     "rewritten after each batch, so an interrupted run keeps finished ones.")
flags.DEFINE_integer("seed", 0, "Random seed (synthetic rows, directions v, subsampling).")
flags.DEFINE_boolean("x64", True, "Compute in float64 (a bound is verified here).")
flags.DEFINE_string("out_dir", None, "Run directory (default results/gradient/<timestamp>).")

flags.register_validator("temperature", cli.positive, message="--temperature must be > 0")
flags.register_validator("alpha", lambda v: v is not None and v > 1,
                         message="--alpha must be > 1 (α-entmax)")
flags.register_validator("s", cli.positive, message="--s must be > 0")
flags.register_validator("logit_scale", cli.positive, message="--logit_scale must be > 0")
for _name in ("length", "rows", "windows", "dense_max_length", "power_iters", "fd_rows",
              "t_batch"):
  flags.register_validator(_name, lambda v: v is not None and v >= 1,
                           message=f"--{_name} must be a positive integer")
flags.register_validator("check_rows", cli.nonnegative, message="--check_rows must be >= 0")

FLAGS = flags.FLAGS

CONFIG_FLAGS = ("temperature", "temperatures", "epsilons", "normalizer", "alpha", "s", "length",
                "rows", "check_rows", "logit_scale", "source", "model", "windows", "text",
                "data_dir", "dense_max_length", "power_iters", "fd_rows", "t_batch", "seed",
                "x64", "out_dir")


# ----------------------------------------------------------------------------- inputs


def default_temperatures() -> list[float]:
  """AMBIG-11: 10^-3 … 10^2 with 5 points per decade (26 values)."""
  return [float(t) for t in np.logspace(-3, 2, 26)]


def parse_temperatures(temperature, temperatures) -> list[float]:
  if temperature is not None and temperatures is not None:
    raise LimitsError("give either --temperature or --temperatures, not both")
  if temperature is not None:
    ts = [float(temperature)]
  elif temperatures is not None:
    ts = cli.parse_floats(temperatures, "temperatures")
  else:
    ts = default_temperatures()
  for t in ts:
    if not (math.isfinite(t) and t > 0):
      raise LimitsError(f"temperature {t!r} is not allowed; every temperature must be > 0")
  return ts


def check_temperature_range(temps, rows, mask, epsilons, dtype) -> None:
  """Every T must keep (l + εv)/T finite in ``dtype`` (else softmax is NaN and a verdict would
  be read off NaN norms): the largest |logit| plus the largest ε, divided by T, and 1/T, must
  stay below the dtype's largest finite value. One line naming the smallest allowed T."""
  fin = np.finfo(dtype)
  big = 0.0
  for lo in range(0, rows.shape[0], 8192):  # row chunks: no (R, L) temporary
    x = np.where(mask[lo:lo + 8192], rows[lo:lo + 8192], 0)
    big = max(big, float(np.abs(x).max()) if x.size else 0.0)
  need = 2.0 * (big + max(epsilons)) + 1.0  # differences of two logits, plus margin
  t_min = max(need / float(fin.max), float(fin.tiny)) * 16
  for t in temps:
    if t < t_min:
      raise LimitsError(
          f"temperature {t:g} is below the {np.dtype(dtype).name} range for these logits: "
          f"(logits + eps)/T overflows (max |logit| = {big:.3g}); the smallest allowed T is "
          f"{t_min:.3g}" + ("" if np.dtype(dtype) == np.float64 else "; use --x64"))


def parse_epsilons(text) -> list[float]:
  eps = cli.parse_floats(text, "epsilons")
  for e in eps:
    if not (math.isfinite(e) and e > 0):
      raise LimitsError(f"epsilon {e!r} is not allowed; every epsilon must be > 0")
  return eps


def normalizer_params(name: str, alpha: float, s: float) -> dict:
  return {"entmax": {"alpha": alpha}, "ssmax": {"s": s}}.get(name, {})


def synthetic_rows(key, rows: int, length: int, scale: float, dtype):
  """(rows, L) i.i.d. N(0, scale²) logits, all visible."""
  import jax

  x = scale * jax.random.normal(key, (rows, length), dtype)
  return np.asarray(x), np.ones((rows, length), bool)


def model_rows(model_spec, length, windows, text, data_dir):
  try:
    from limits import sources
  except ImportError as e:  # pragma: no cover - sources.py ships with limits
    raise LimitsError(f"--source=model needs limits.sources, which failed to import: {e}") from None
  model = sources.load_model(model_spec)
  rows, mask, meta = sources.model_logit_rows(model, length, windows, text=text,
                                              data_dir=data_dir)
  return model, np.asarray(rows), np.asarray(mask, bool), meta


# ----------------------------------------------------------------------------- kernels


def _lazy_jit(static_argnames=()):
  """jax.jit applied on first call, so a bad flag is reported without importing JAX."""

  def deco(f):
    compiled = []

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
      if not compiled:
        import jax

        compiled.append(jax.jit(f, static_argnames=static_argnames))
      return compiled[0](*args, **kwargs)

    return wrapper

  return deco


def _make_fn(name: str, params: dict):
  from limits import normalizers

  norm = normalizers.get(name, **params)

  def fn(l, m, T):  # the normalizer of l / T, Eq. 2 / Eq. 3 with temperature T
    return norm(l / T, m)

  return fn


@_lazy_jit(static_argnames=("name", "params_items", "dense", "iters"))
def _exact_block(l, m, T, *, name, params_items, dense, iters=100):
  """Exact norms ‖J‖₂ of a block of rows, plus the closed-form norm (or -1 where none)."""
  import jax.numpy as jnp

  from limits import jacobians

  params = dict(params_items)
  fn = _make_fn(name, params)
  f = lambda x, mm: fn(x, mm, T)
  cf = jacobians.closed_form(name, **params)
  if dense:
    J = jacobians.exact(f, l, "fwd", m)  # (B, L, L)
    norm = _scaled_norm(J)
    if cf is not None:
      Jc = cf(l / T, m) / T
      closed_norm = _scaled_norm(Jc)
      err = jnp.max(jnp.abs(J - Jc), axis=(-2, -1))
      scale = jnp.max(jnp.abs(Jc), axis=(-2, -1))
    else:
      closed_norm = err = scale = jnp.full(norm.shape, -1.0, norm.dtype)
  else:
    norm = jacobians.spectral_norm_matfree(f, l, iters, m)
    if name == "softmax":
      closed_norm = jacobians.softmax_closed_form_norm(l, T, m)
      err = jnp.abs(norm - closed_norm)
      scale = closed_norm
    else:
      closed_norm = err = scale = jnp.full(norm.shape, -1.0, norm.dtype)
  return norm, closed_norm, err, scale


def _scaled_norm(J):
  """‖J‖₂ by dense SVD of J / max|J| (times max|J|), entries below the dtype's smallest normal
  number flushed to 0: LAPACK's scaling step (DLASCL) rejects matrices whose norm is subnormal
  or far outside its safe range and prints an error on stdout (seen at T ≈ 1.6e-3, L = 256)."""
  import jax.numpy as jnp

  from limits import jacobians

  tiny = jnp.finfo(J.dtype).tiny
  J = jnp.where(jnp.abs(J) < tiny, 0, J)
  s = jnp.max(jnp.abs(J), axis=(-2, -1), keepdims=True)
  safe = jnp.where(s > 0, s, 1)
  return jacobians.spectral_norm(J / safe) * safe[..., 0, 0]


@_lazy_jit(static_argnames=("name", "params_items"))
def _check_block(l, m, T, fd_eps, *, name, params_items):
  """jacfwd, jacrev and central-difference Jacobians of a few rows."""

  from limits import jacobians

  fn = _make_fn(name, dict(params_items))
  f = lambda x, mm: fn(x, mm, T)
  return (jacobians.exact(f, l, "fwd", m), jacobians.exact(f, l, "rev", m),
          jacobians.finite_difference(f, l, fd_eps, m))


def _chunks(n: int, size: int):
  for i in range(0, n, max(size, 1)):
    yield slice(i, min(i + size, n))


# ----------------------------------------------------------------------------- one temperature


def row_range_and_count(rows, mask, chunk: int = 8192):
  """(r (R, 1), n (R, 1)): each row's visible logit range and visible count, computed in row
  chunks so no (R, L) temporary is made (1.1M rows × 1024 in float64 is 9 GB per temporary)."""
  big = np.finfo(rows.dtype).max
  r = np.zeros((rows.shape[0], 1), rows.dtype)
  n = np.ones((rows.shape[0], 1), rows.dtype)
  for lo in range(0, rows.shape[0], chunk):
    x, m = rows[lo:lo + chunk], mask[lo:lo + chunk]
    span = np.max(np.where(m, x, -big), axis=-1) - np.min(np.where(m, x, big), axis=-1)
    r[lo:lo + chunk, 0] = np.where(m.any(-1), span, 0.0)
    n[lo:lo + chunk, 0] = np.maximum(m.sum(-1), 1)
  return r, n


def lemma2_all_rows(rows, mask, temps, range_count=None) -> np.ndarray:
  """Lemma 2's softmax bound (e^{r/T} + e^{2r/T})/(T·n) for every row and T: (R, K), inf where
  it overflows the dtype (same formula as ``bounds.softmax_lemma2_bound``; the row range r and
  visible count n are computed once for all temperatures: pass ``row_range_and_count``)."""
  r, n = range_count if range_count is not None else row_range_and_count(rows, mask)
  T = np.asarray(temps, rows.dtype)[None, :]
  with np.errstate(over="ignore", invalid="ignore"):
    return ((np.exp(r / T) + np.exp(2 * r / T)) / (T * n)).astype(rows.dtype)


def run_temperature(T, rows, mask, exact_idx, check_idx, epsilons, name, params, *, g_vals,
                    fd_idx, allnorm, dense, groups=None, n_groups=None, dtype_tol,
                    power_iters=100, l2_all=None):
  """Every measurement at one temperature. Returns (summary dict, per-exact-row list).

  ``allnorm`` (R,): the exact O(L) norm of every row at T (softmax; None otherwise);
  ``g_vals`` (S, E): g(T, ε) on the sampled rows ``fd_idx`` (S,) for each ε.
  """
  import jax
  import jax.numpy as jnp

  from limits import bounds, jacobians

  params_items = tuple(sorted(params.items()))
  dt = rows.dtype
  Tj = jnp.asarray(T, dt)
  L = rows.shape[-1]
  paper = float(bounds.softmax_jacobian_bound(T, "paper"))
  tight = float(bounds.softmax_jacobian_bound(T, "tight"))
  is_softmax = name == "softmax"

  # Exact norms on the subsample, in blocks that keep J at ~4M entries.
  el, em = rows[exact_idx], mask[exact_idx]
  block = max(1, (1 << 22) // (L * L)) if dense else 256
  outs = [_exact_block(jnp.asarray(el[s]), jnp.asarray(em[s]), Tj, name=name,
                       params_items=params_items, dense=dense, iters=power_iters)
          for s in _chunks(len(el), block)]
  norm, closed_norm, cerr, cscale = (np.concatenate([np.asarray(o[i]) for o in outs])
                                     for i in range(4))
  has_closed = bool(np.all(closed_norm >= 0))
  closed = None
  if has_closed:
    tol = dtype_tol["exact"] if dense else dtype_tol["matfree"]
    closed = {"what": "dense closed-form J" if dense else "O(L) secular closed-form norm",
              "max_abs": float(cerr.max()),
              "max_rel": float(cerr.max() / max(cscale.max(), 1e-300)),
              "atol": tol["atol"], "rtol": tol["rtol"],
              "ok": bool(np.all(cerr <= tol["atol"] + tol["rtol"] * cscale))}

  # jacrev and central differences on a few rows (dense Jacobians; only for L <= dense max).
  checks = None
  if dense and len(check_idx):
    fd_eps = jacobians.FD_EPS[np.dtype(dt)] * T  # the normalizer of l/T varies on scale T
    Jf, Jr, Jd = _check_block(jnp.asarray(rows[check_idx]), jnp.asarray(mask[check_idx]), Tj,
                              jnp.asarray(fd_eps, dt), name=name, params_items=params_items)
    r = jacobians.compare_arrays(Jf, Jr, None, Jd, fd_eps=fd_eps)
    checks = {"rows": len(check_idx), "fd_eps": r["fd_eps"], "jacrev": r["rev"], "fd": r["fd"]}

  # g(T, ε) on the seeded sample of rows (Algorithm 5; statistics over the sample).
  g = {}
  for e_i, eps in enumerate(epsilons):
    vals = g_vals[:, e_i]
    entry = {"eps": eps, "mean": float(vals.mean()), "max": float(vals.max()),
             "n_rows": int(vals.size),
             "n_above_paper_bound": int(np.sum(vals > paper)) if is_softmax else None,
             "n_above_sqrt2_over_eps": int(np.sum(vals > math.sqrt(2) / eps * (1 + 1e-6)))}
    if groups is not None:
      gs = groups[fd_idx]
      sums = np.bincount(gs, weights=vals, minlength=n_groups)
      cnts = np.bincount(gs, minlength=n_groups)
      avg = np.where(cnts > 0, sums / np.maximum(cnts, 1), -np.inf)
      entry["paper_stat"] = float(avg.max())  # max over (layer, head) of the token average
      entry["paper_stat_head"] = int(avg.argmax())
    else:
      entry["paper_stat"] = entry["mean"]
    g[f"{eps:g}"] = entry
  g_of_row = dict(zip(fd_idx.tolist(), g_vals[:, 0].tolist()))

  summary = {"T": T, "paper_bound": paper, "tight_bound": tight,
             "exact_rows": int(len(exact_idx)), "exact_method": "jacfwd+svd" if dense else
             f"matfree power iteration ({power_iters} steps)",
             "max_norm": float(norm.max()), "mean_norm": float(norm.mean()),
             "max_T_norm": float(T * norm.max()), "closed_form": closed, "checks": checks, "g": g}
  rtol = dtype_tol["violation_rtol"]
  per_row = []
  if is_softmax:
    over_paper = norm > paper * (1 + rtol)
    over_tight = norm > tight * (1 + rtol)
    l2 = np.asarray(bounds.softmax_lemma2_bound(jnp.asarray(el), Tj, jnp.asarray(em)))
    over_l2 = norm > l2 * (1 + rtol)
    # Lemma 2 on every row against the exact O(L) norm; only where the bound is a finite
    # number in this dtype (else min F underflowed and the "bound" constrains nothing).
    l2_fin = np.isfinite(l2_all)
    summary.update({
        "n_exceed_paper": int(over_paper.sum()), "n_exceed_tight": int(over_tight.sum()),
        "n_exceed_lemma2": int(over_l2.sum()),
        "all_rows_n_exceed_lemma2": int(np.sum(l2_fin & (allnorm > l2_all * (1 + rtol)))),
        "all_rows_lemma2_finite": int(l2_fin.sum()),
        "all_rows_nonfinite_norm": int(np.sum(~np.isfinite(allnorm))),
        "all_rows": int(allnorm.size),
        "all_rows_n_exceed_paper": int(np.sum(allnorm > paper * (1 + rtol))),
        "all_rows_n_exceed_tight": int(np.sum(allnorm > tight * (1 + rtol))),
        "all_rows_max_T_norm": float(T * allnorm.max()),
    })
    # The counterexample: two tied visible logits.
    cl, cm = bounds.tied_top_two(L, dt)
    cnorm = float(np.asarray(_exact_block(cl[None], cm[None], Tj, name=name,
                                          params_items=params_items, dense=True)[0])[0])
    summary["counterexample"] = {"row": "two tied visible logits (alpha = 1/2, 1/2)",
                                 "norm": cnorm, "T_norm": T * cnorm,
                                 "exceeds_paper": bool(cnorm > paper * (1 + rtol)),
                                 "exceeds_tight": bool(cnorm > tight * (1 + rtol))}
  for j, i in enumerate(exact_idx):
    r = {"T": T, "row": int(i), "norm": float(norm[j]), "T_norm": float(T * norm[j]),
         f"g_eps_{epsilons[0]:g}": g_of_row.get(int(i), float("nan"))}
    if has_closed:
      r["closed_norm"] = float(closed_norm[j])
    if is_softmax:
      r.update({"paper_bound": paper, "tight_bound": tight, "lemma2_bound": float(l2[j]),
                "exceeds_paper": bool(over_paper[j]), "exceeds_tight": bool(over_tight[j]),
                "exceeds_lemma2": bool(over_l2[j])})
    per_row.append(r)
  return summary, per_row


# ----------------------------------------------------------------------------- reporting


def format_table(summaries, epsilons, name) -> str:
  eps_cols = [f"g({e:g})" for e in epsilons]
  head = ["T", "1/4T∧√2", "1/2T", "max‖J‖", "maxT‖J‖"]
  if name == "softmax":
    head += [">paper", ">tight", "all>paper", "cex T‖J‖", "cex>paper"]
  head += eps_cols + ["|Δ|closed", "|Δ|fd"]
  lines = []
  for s in summaries:
    row = [f"{s['T']:.4g}", f"{s['paper_bound']:.4g}", f"{s['tight_bound']:.4g}",
           f"{s['max_norm']:.4g}", f"{s['max_T_norm']:.4f}"]
    if name == "softmax":
      c = s["counterexample"]
      row += [f"{s['n_exceed_paper']}/{s['exact_rows']}", f"{s['n_exceed_tight']}/{s['exact_rows']}",
              f"{s['all_rows_n_exceed_paper']}/{s['all_rows']}", f"{c['T_norm']:.4f}",
              "YES" if c["exceeds_paper"] else "no"]
    row += [f"{s['g'][f'{e:g}']['paper_stat']:.4g}" for e in epsilons]
    cf = s["closed_form"]
    row.append("n/a" if cf is None else f"{cf['max_abs']:.1e}{'' if cf['ok'] else '!'}")
    ch = s["checks"]
    row.append("n/a" if ch is None else f"{ch['fd']['max_abs']:.1e}{'' if ch['fd']['ok'] else '!'}")
    lines.append(row)
  widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
  fmt = lambda r: "  ".join(x.rjust(w) for x, w in zip(r, widths))
  return "\n".join([fmt(head)] + [fmt(r) for r in lines])


def findings(summaries, name, epsilons) -> dict:
  from limits import sensitivity
  from limits.results import verdict

  out = []
  if name == "softmax":
    cex = [s["counterexample"] for s in summaries]
    max_random = max(s["all_rows_max_T_norm"] for s in summaries)
    # A NaN/inf norm makes every comparison False: the verdict would silently read "holds".
    bad = [s["T"] for s in summaries
           if s["all_rows_nonfinite_norm"] or not math.isfinite(s["max_norm"])
           or not math.isfinite(s["counterexample"]["T_norm"])]
    nan_reason = (f"non-finite Jacobian norms at T = {', '.join(f'{t:g}' for t in bad)} "
                  "(outside the dtype's range)") if bad else ""
    out.append(verdict(
        "Corollary 3 as printed: ||d softmax(l/T)/dl||_2 <= min{1/(4T), sqrt 2}",
        None if bad else not any(c["exceeds_paper"] for c in cex) and not any(
            s["all_rows_n_exceed_paper"] for s in summaries),
        {"counterexample_max_T_norm": max(c["T_norm"] for c in cex),
         "temperatures_violated_by_counterexample": sum(c["exceeds_paper"] for c in cex),
         "temperatures": len(cex),
         "data_rows_exceeding_paper": sum(s["all_rows_n_exceed_paper"] for s in summaries),
         "data_row_T_pairs_checked": sum(s["all_rows"] for s in summaries),
         "max_T_norm_data_rows": max_random},
        detail="two tied top logits give exactly 1/(2T); only each entry of J is <= 1/(4T)",
        reason=nan_reason))
    out.append(verdict(
        "tight spectral bound ||J||_2 <= 1/(2T)",
        None if bad else not any(s["n_exceed_tight"] or s["all_rows_n_exceed_tight"]
                                 for s in summaries),
        {"max_T_norm": max(max(s["max_T_norm"], s["all_rows_max_T_norm"],
                               s["counterexample"]["T_norm"]) for s in summaries)},
        reason=nan_reason))
    pairs = sum(s["all_rows"] for s in summaries)
    finite = sum(s["all_rows_lemma2_finite"] for s in summaries)
    over = sum(s["all_rows_n_exceed_lemma2"] + s["n_exceed_lemma2"] for s in summaries)
    l2_holds = (False if over else None if bad or 2 * finite < pairs else True)
    out.append(verdict(
        "Lemma 2 bound (reconstructed) holds for softmax rows", l2_holds,
        {"rows_exceeding": over, "row_T_pairs": pairs, "row_T_pairs_with_finite_bound": finite},
        detail="every (row, T) pair's exact norm against the bound where the bound is a finite "
        "number; not testable when it is infinite (min F underflows) on half the pairs or more",
        reason="" if l2_holds is not None else nan_reason or
        f"the bound overflows to infinity on {pairs - finite} of {pairs} (row, T) pairs: it "
        "constrains nothing there"))
  simplex = name not in ("sa_softmax",)
  out.append(verdict(
      "g(T, eps) <= sqrt(2)/eps (simplex diameter)",
      (not any(s["g"][f"{e:g}"]["n_above_sqrt2_over_eps"] for s in summaries for e in epsilons))
      if simplex else None,
      {f"{e:g}": sum(s["g"][f"{e:g}"]["n_above_sqrt2_over_eps"] for s in summaries)
       for e in epsilons},
      reason="" if simplex else "sa_softmax is not a probability vector"))
  out += sensitivity.figure4_verdicts(
      [s["T"] for s in summaries],
      {f"{e:g}": [s["g"][f"{e:g}"]["paper_stat"] for s in summaries] for e in epsilons})
  return {"verdicts": out}


# ----------------------------------------------------------------------------- main


def main(argv):
  import jax

  del argv
  cli.setup_precision(FLAGS.x64)
  from limits import normalizers, sensitivity
  from limits.plotting import gradient as gradient_plot

  temps = parse_temperatures(FLAGS.temperature, FLAGS.temperatures)
  epsilons = parse_epsilons(FLAGS.epsilons)
  name = FLAGS.normalizer
  params = normalizer_params(name, FLAGS.alpha, FLAGS.s)
  normalizers.get(name, **params)  # validates the name and parameters (one-line errors)
  dtype = np.float64 if FLAGS.x64 else np.float32
  key = jax.random.key(FLAGS.seed)
  k_rows, k_sub, k_dir = jax.random.split(key, 3)
  out_dir = results_lib.prepare_out_dir(FLAGS.out_dir, EXPERIMENT)

  groups = n_groups = None
  source_info = {"source": FLAGS.source}
  if FLAGS.source == "synthetic":
    rows, mask = synthetic_rows(k_rows, FLAGS.rows, FLAGS.length, FLAGS.logit_scale, dtype)
    exact_idx = np.arange(rows.shape[0])
    source_info["distribution"] = f"iid N(0, {FLAGS.logit_scale:g}^2), all visible"
  else:
    model, rows, mask, meta = model_rows(FLAGS.model, FLAGS.length, FLAGS.windows, FLAGS.text,
                                         FLAGS.data_dir)
    rows = rows.astype(dtype)
    n_head = model.config.n_head
    layer = np.asarray(meta["layer"])
    groups = layer * n_head + np.asarray(meta["head"])
    n_groups = int(groups.max()) + 1
    rng = np.random.default_rng(np.asarray(jax.random.key_data(k_sub)).ravel()[-1])
    exact_idx = np.sort(rng.choice(rows.shape[0], min(FLAGS.rows, rows.shape[0]), replace=False))
    source_info.update({"model": model.info(), "windows": FLAGS.windows,
                        "native_temperature": model.native_temperature})
  L = rows.shape[-1]
  dense = L <= FLAGS.dense_max_length
  check_idx = exact_idx[:FLAGS.check_rows]
  eps_mach = float(np.finfo(dtype).eps)
  from limits import jacobians
  dtype_tol = {"exact": jacobians.EXACT_TOL[np.dtype(dtype)],
               # power iteration converges linearly at (σ2/σ1)² per step: 1e-3 relative
               "matfree": {"atol": 1e3 * eps_mach, "rtol": 1e-3},
               "violation_rtol": 100 * eps_mach}
  print(f"gradient: {name} {params or ''} source={FLAGS.source} rows={rows.shape[0]} L={L} "
        f"exact rows={len(exact_idx)} ({'dense' if dense else 'matrix-free'}) "
        f"T values={len(temps)} eps={epsilons} dtype={np.dtype(dtype).name}", flush=True)

  check_temperature_range(temps, rows, mask, epsilons, dtype)
  # g(T, eps) on a seeded sample: --fd_rows per (layer, head) (model) or in all (synthetic).
  fd_seed = int(np.asarray(jax.random.key_data(jax.random.fold_in(k_sub, 1))).ravel()[-1])
  fd_groups = groups if groups is not None else np.zeros(rows.shape[0], int)
  fd_idx = sensitivity.sample_rows(fd_groups, FLAGS.fd_rows, fd_seed)
  sampling = {"fd_rows": int(fd_idx.size), "of_rows": int(rows.shape[0]),
              "how": (f"min({FLAGS.fd_rows}, rows of the group) rows per (layer, head)"
                      if groups is not None else f"min({FLAGS.fd_rows}, rows) rows")
              + f", uniform without replacement, numpy default_rng({fd_seed}) (from --seed); "
              "one direction v per (row, eps), shared by the temperatures",
              "exact_rows": int(len(exact_idx)),
              "exact_how": "every row" if len(exact_idx) == rows.shape[0] else
              f"{len(exact_idx)} rows uniform without replacement (from --seed)",
              "closed_form_rows": int(rows.shape[0]) if name == "softmax" else 0}
  print(f"gradient: g(T, eps) on {fd_idx.size} sampled rows; exact O(L) norm on every row"
        if name == "softmax" else f"gradient: g(T, eps) on {fd_idx.size} sampled rows",
        flush=True)
  norm_fn = normalizers.get(name, **params)
  config = results_lib.flags_config(FLAGS, CONFIG_FLAGS)

  summaries, per_row = [], []
  t0 = time.perf_counter()

  def flush(complete: bool):
    res = {"source": source_info, "normalizer": name, "params": params, "sampling": sampling,
           "temperatures": temps, "epsilons": epsilons, "length": L,
           "n_rows": int(rows.shape[0]), "per_temperature": summaries,
           "temperatures_done": len(summaries), "complete": complete,
           "seconds": time.perf_counter() - t0}
    if summaries:
      res.update(findings(summaries, name, epsilons))
    results_lib.write_results(out_dir, EXPERIMENT, config, res, seed=FLAGS.seed)
    return res

  from limits.progress import Progress
  range_count = row_range_and_count(rows, mask) if name == "softmax" else None
  with Progress(len(temps), "temperatures", unit="T", enabled=len(temps) > 1) as prog:
    for c0 in range(0, len(temps), FLAGS.t_batch):
      chunk = temps[c0:c0 + FLAGS.t_batch]
      allnorm = (sensitivity.softmax_norms(rows, chunk, mask) if name == "softmax" else None)
      l2 = lemma2_all_rows(rows, mask, chunk, range_count) if name == "softmax" else None
      g_all = sensitivity.fd_batch(norm_fn, rows[fd_idx], mask[fd_idx], chunk, epsilons,
                                   jax.random.fold_in(k_dir, c0))  # (S, K, E)
      for j, T in enumerate(chunk):
        s, pr = run_temperature(T, rows, mask, exact_idx, check_idx, epsilons, name, params,
                                g_vals=g_all[:, j], fd_idx=fd_idx,
                                allnorm=None if allnorm is None else allnorm[:, j],
                                dense=dense, groups=groups, n_groups=n_groups,
                                dtype_tol=dtype_tol, power_iters=FLAGS.power_iters,
                                l2_all=None if l2 is None else l2[:, j])
        summaries.append(s)
        per_row.extend(pr)
        prog.update(1)
      flush(complete=False)  # an interrupted run keeps every finished temperature
  elapsed = time.perf_counter() - t0

  table = format_table(summaries, epsilons, name)
  legend = ("columns: paper = min{1/(4T), sqrt 2}; tight = 1/(2T); max||J|| over the exact rows; "
            ">paper/>tight = exact rows above each bound; all>paper = all rows (O(L) closed-form "
            "norm); cex = tied-top-two row; g(eps) = "
            + ("max over (layer, head) of the token-mean g" if FLAGS.source == "model"
               else "mean over rows of g")
            + "; |Δ| = max abs difference of jacfwd vs closed form / central differences "
            "('!' = above tolerance)")
  print(table)
  print(legend)
  res = {"source": source_info, "normalizer": name, "params": params, "sampling": sampling,
         "temperatures": temps, "epsilons": epsilons, "length": L, "n_rows": int(rows.shape[0]),
         "per_temperature": summaries, "temperatures_done": len(summaries), "complete": True,
         "seconds": elapsed}
  res.update(findings(summaries, name, epsilons))
  if name == "softmax":
    n_ex = sum(s["all_rows_n_exceed_paper"] for s in summaries)
    n_all = sum(s["all_rows"] for s in summaries)
    msg = (f"1/(4T) finding: the tied-top-two row has T*||J|| = "
           f"{max(s['counterexample']['T_norm'] for s in summaries):.6f} (> 1/4 at every T: "
           f"the paper's bound is violated at {sum(s['counterexample']['exceeds_paper'] for s in summaries)}"
           f"/{len(summaries)} temperatures); {n_ex}/{n_all} (row, T) pairs of the data exceed "
           f"min{{1/(4T), sqrt 2}}; max T*||J|| over data rows = "
           f"{max(s['all_rows_max_T_norm'] for s in summaries):.6f} (tight bound 1/2)")
    print(msg)
    res["finding_1_over_4T"] = msg
  res["table"] = table
  res["table_legend"] = legend
  results_lib.write_results(out_dir, EXPERIMENT, config, res, seed=FLAGS.seed)
  csv_rows = []
  for s in summaries:
    r = {k: v for k, v in s.items() if k not in ("g", "closed_form", "checks", "counterexample")}
    for e in epsilons:
      ge = s["g"][f"{e:g}"]
      r[f"g_mean_eps_{e:g}"] = ge["mean"]
      r[f"g_max_eps_{e:g}"] = ge["max"]
      r[f"g_paper_stat_eps_{e:g}"] = ge["paper_stat"]
    if s.get("counterexample"):
      r["counterexample_T_norm"] = s["counterexample"]["T_norm"]
      r["counterexample_exceeds_paper"] = s["counterexample"]["exceeds_paper"]
    if s["closed_form"]:
      r["closed_form_max_rel_err"] = s["closed_form"]["max_rel"]
    if s["checks"]:
      r["jacrev_max_rel_err"] = s["checks"]["jacrev"]["max_rel"]
      r["fd_max_rel_err"] = s["checks"]["fd"]["max_rel"]
    csv_rows.append(r)
  results_lib.write_csv(out_dir / "gradient.csv", csv_rows)
  results_lib.write_csv(out_dir / "rows.csv", per_row)
  gradient_plot.figure4(summaries, epsilons, out_dir / "gradient.png",
                        title=f"{name} on {FLAGS.source} rows (L={L})",
                        stat_label=("max over (layer, head) of token-mean g"
                                    if FLAGS.source == "model" else "mean over rows of g"),
                        softmax=name == "softmax")
  print(f"wrote {out_dir}/results.json, gradient.csv, rows.csv, gradient.png "
        f"({elapsed:.1f} s)")


if __name__ == "__main__":
  app.run(cli.guard(main))
