r"""The normalizer scorecard (issue 17): which normalizer escapes which limitation, at what cost.

Every candidate normalizer is swapped into *every* attention layer of a trained model at
inference (weights unchanged; ``limits.models.forward(normalizer=...)``), and the paper's four
limitations are measured on held-out *War and Peace* windows, next to the language-model loss
and the forward time. Logit convention (AMBIG-12): the model's logits are z = q·k / T0 with
T0 = √d_head; a candidate with multiplier c sees c·z (``temperature = T0 / c`` in the engine).

Candidates (:data:`CANDIDATES`): softmax at T0, T0×0.5 and T0×2 (c = 1, 2, 0.5); sparsemax
(computed as α-entmax with α = 2 by bisection, ~2× faster on CPU than the sort; equal to
``normalizers.sparsemax``, tested); α-entmax α = 1.5 and 4/3 (4/3 rather than 1.25: the
bisection raises to the power 1/(α−1), and XLA on CPU computes x³ by multiplication but x⁴
through exp/log, which made 1.25-entmax 3× slower than softmax on SmolLM2 and 15× on the
embedded model); SSMax with s0 = 1/ln(L) (the
model's softmax at the last query of a window of the evaluation length); the general
normalizer of Eq. 3 with F = softplus.

Fair comparison (:func:`calibrate`): per *family* (softmax at any T is one family: c absorbs T)
one scalar c minimising the mean next-token NLL on calibration windows: ``grid`` log-spaced
points on [lo, hi] plus c = 1, then Brent's bounded search (``iters`` evaluations) between the
best grid point's neighbours; the answer is the best point evaluated. Deterministic given the
windows; the calibration windows are drawn with the seed from the corpus after the evaluation
windows (:func:`split_windows`), so the two sets are disjoint by construction.

Metrics (one row per candidate and calibration; all on the evaluation windows, float32 except
the Jacobians, which are float64 because they are compared with bounds):

- LM loss: mean next-token NLL (nats/token) and its paired difference to softmax at T0 with
  the standard error over tokens.
- Lemma 1: for causal prefixes t (query t−1 of each window sees exactly t keys, identical to
  a window of length t), max α·t per (window, layer, head): median over them, and the share of
  exactly-zero weights among the t visible ones (mean); the log-log slope of the median
  max α·t against t (0 = the Θ(1/L) of Lemma 1).
- Theorem 1 (``limits.distance`` fast path, value vectors, sum form, inclusion N/(t−1)):
  per-head token-averaged d̃ at N = 5 and 100 (median over heads) and the critical N of
  Algorithm 3 (KS at α = 0.01 on per-head d̄ vs Ē, batch bisection over [1, L−1]) over L.
- Theorem 2 (``limits.separability.layer_sums``, value vectors on the unit sphere, strict
  rule): per head the mean over N ∈ ``sep_ns`` of the token-averaged N_s/N ("plateau"),
  median and IQR over heads.
- Lemma 2: on ``jac_rows`` seeded rows (window, layer, head, query with t ≥ 2) of the swapped
  model's own raw scores l, the exact ‖∂α/∂l‖₂ (jacfwd + SVD) of the normalizer as it runs in
  the model (α = N(c·l/T0)); its largest value and the bound it is checked against (softmax:
  Cor. 3 tight c/(2T0); SSMax: s0·ln t·c/(2T0); entmax family: c/T0, since J = diag(s) − ssᵀ/Σs
  with 0 ≤ s ≤ 1; softplus: Lemma 2's bound per row); and g(T, ε) = ‖α(l + εv) − α(l)‖₂/ε with
  a seeded random unit v (mean over the rows).
- Cost: forward time (with the LM head, the calibration batch) relative to softmax, the median
  over ``timing_rounds`` interleaved rounds (:func:`time_forwards`; each round times every
  family once, after one compiling call each). A multiplier does not change the cost, so the
  calibrated rows and softmax at other T share their family's number.

:func:`run` drives a whole scorecard with resume: each calibration (after every evaluation)
and each finished row is written under ``out_dir/parts`` with the configuration's digest and
reused by a rerun of the same configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from limits import normalizers
from limits.errors import LimitsError, check

# --------------------------------------------------------------------------------------------
# Candidates.


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One candidate normalizer: ``family`` groups candidates that one multiplier maps onto each
  other (softmax at any T); ``base`` is its multiplier of z = q·k/√d_head when uncalibrated."""
  key: str
  label: str
  family: str
  base: float = 1.0


CANDIDATES: dict[str, Candidate] = {c.key: c for c in (
    Candidate("softmax", "softmax (T0)", "softmax", 1.0),
    Candidate("softmax_t0.5", "softmax (T0×0.5)", "softmax", 2.0),
    Candidate("softmax_t2", "softmax (T0×2)", "softmax", 0.5),
    Candidate("sparsemax", "sparsemax", "sparsemax"),
    Candidate("entmax1.5", "1.5-entmax", "entmax1.5"),
    Candidate("entmax4/3", "4/3-entmax", "entmax4/3"),
    Candidate("ssmax", "SSMax", "ssmax"),
    Candidate("softplus", "Eq. 3, F = softplus", "softplus"),
)}
REFERENCE = "softmax"
FAMILY_LABELS = {"softmax": "softmax", "sparsemax": "sparsemax", "entmax1.5": "1.5-entmax",
                 "entmax4/3": "4/3-entmax", "ssmax": "SSMax", "softplus": "Eq. 3, F = softplus"}


def softplus_normalizer(logits, mask=None):
  """Eq. 3 with F = softplus: α_i = softplus(l_i) / Σ_j softplus(l_j) over visible j."""
  return normalizers.general(logits, jax.nn.softplus, mask)


def ssmax_s0(length: int) -> float:
  """SSMax's uncalibrated s = 1/ln L: at a query seeing L keys it is the model's own softmax."""
  return 1.0 / math.log(max(int(length), 2))


_NORMALIZERS: dict[tuple, Callable] = {}


def normalizer(family: str, length: int) -> Callable:
  """The normalizer ``fn(logits, mask)`` of a family (one object per (family, length), so jit
  does not recompile between calls)."""
  key = (family, int(length) if family == "ssmax" else 0)
  fn = _NORMALIZERS.get(key)
  if fn is None:
    if family == "softmax":
      fn = normalizers.get("softmax")
    elif family == "sparsemax":
      fn = normalizers.get("entmax", alpha=2.0)  # = sparsemax, bisection (see module doc)
    elif family == "entmax1.5":
      fn = normalizers.get("entmax", alpha=1.5)
    elif family == "entmax4/3":
      fn = normalizers.get("entmax", alpha=4 / 3)
    elif family == "ssmax":
      fn = normalizers.get("ssmax", s=ssmax_s0(length))
    elif family == "softplus":
      fn = softplus_normalizer
    else:
      raise LimitsError(f"unknown normalizer family {family!r}")
    _NORMALIZERS[key] = fn
  return fn


def parse_candidates(text: str) -> tuple[str, ...]:
  """Candidate keys from 'softmax,sparsemax,...' (must include the softmax reference)."""
  keys = [k.strip() for k in str(text).split(",") if k.strip()]
  bad = [k for k in keys if k not in CANDIDATES]
  check(not bad, f"--candidates: unknown {', '.join(bad)}; choose from {', '.join(CANDIDATES)}")
  check(REFERENCE in keys, f"--candidates must include {REFERENCE!r} (the reference row)")
  return tuple(dict.fromkeys(keys))


# --------------------------------------------------------------------------------------------
# Configuration.


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a scorecard's numbers depend on (its digest keys the resumable parts)."""
  model: str = "tiny"
  candidates: tuple[str, ...] = tuple(CANDIDATES)
  length: int = 256
  eval_windows: int = 2
  calib_windows: int = 2
  calib_lo: float = 1 / 64
  calib_hi: float = 16.0
  calib_grid: int = 5
  calib_iters: int = 5
  lemma1_lengths: tuple[int, ...] = ()   # () = powers of two from 16 to L, and L
  distance_ns: tuple[int, ...] = (5, 100)
  ks_alpha: float = 0.01
  sep_ns: tuple[int, ...] = (16, 32, 64)
  radius: float = 1.0
  jac_rows: int = 64
  epsilon: float = 0.1
  layer_stride: int = 1
  timing_rounds: int = 3
  seed: int = 0
  text: str | None = None
  data_dir: str | None = None

  def __post_init__(self):
    check(self.length >= 4, f"--length={self.length} must be >= 4")
    for name in ("eval_windows", "calib_windows", "jac_rows", "layer_stride", "timing_rounds"):
      v = getattr(self, name)
      check(isinstance(v, int) and v >= 1, f"--{name}={v!r} must be a positive integer")
    check(0 < self.calib_lo < 1 < self.calib_hi < math.inf,
          f"calibration bracket [{self.calib_lo}, {self.calib_hi}] must satisfy 0 < lo < 1 < hi")
    check(self.calib_grid >= 3, f"--calib_grid={self.calib_grid} must be >= 3")
    check(self.calib_iters >= 0, f"--calib_iters={self.calib_iters} must be >= 0")
    check(0 < self.ks_alpha < 1, f"ks_alpha={self.ks_alpha} must be in (0, 1)")
    check(self.epsilon > 0 and math.isfinite(self.epsilon), f"--epsilon={self.epsilon} must be > 0")
    check(self.radius > 0, f"radius={self.radius} must be > 0")
    for name in ("lemma1_lengths", "distance_ns", "sep_ns"):
      vals = getattr(self, name)
      check(all(isinstance(v, int) and v >= 1 for v in vals),
            f"--{name} must hold positive integers, got {list(vals)}")
    check(all(t <= self.length for t in self.lemma1_lengths),
          f"--lemma1_lengths {list(self.lemma1_lengths)} must be <= --length={self.length}")
    parse_candidates(",".join(self.candidates))

  @property
  def prefix_lengths(self) -> tuple[int, ...]:
    if self.lemma1_lengths:
      return tuple(sorted(set(self.lemma1_lengths)))
    ts = [t for t in (2 ** k for k in range(4, 20)) if t < self.length]
    return tuple(ts + [self.length])

  @property
  def families(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(CANDIDATES[k].family for k in self.candidates))

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)

  def digest(self) -> str:
    blob = json.dumps(self.as_dict(), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def row_keys(cfg: Config) -> list[tuple[str, str, bool]]:
  """(row key, family, calibrated) in run order: every uncalibrated candidate (softmax first),
  then one calibrated row per family."""
  rows = [(k, CANDIDATES[k].family, False) for k in cfg.candidates]
  rows.sort(key=lambda r: r[0] != REFERENCE)
  rows += [(f"{fam}+cal", fam, True) for fam in cfg.families]
  return rows


# --------------------------------------------------------------------------------------------
# Windows.


def split_windows(n_tokens: int, length: int, eval_windows: int, calib_windows: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Window indices (window w = tokens [w·L, (w+1)·L)): evaluation = the first ``eval_windows``
  (as every other experiment), calibration = ``calib_windows`` drawn without replacement by
  ``numpy.random.default_rng(seed)`` from the rest of the corpus; disjoint by construction."""
  total = int(n_tokens) // int(length)
  check(total >= eval_windows + calib_windows,
        f"the corpus has {total} windows of L={length}; {eval_windows} evaluation + "
        f"{calib_windows} calibration windows do not fit; use fewer or a shorter --length")
  ev = np.arange(eval_windows)
  rng = np.random.default_rng(seed)
  cal = np.sort(rng.choice(np.arange(eval_windows, total), size=calib_windows, replace=False))
  return ev, cal


def take_windows(tokens, length: int, idx) -> np.ndarray:
  """int32 (len(idx), L): the windows ``idx`` of the token stream."""
  t = np.asarray(tokens)
  return np.stack([t[i * length:(i + 1) * length] for i in idx]).astype(np.int32)


# --------------------------------------------------------------------------------------------
# Language-model loss and calibration.


@jax.jit
def _nll(logits, tokens):
  lp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(lp, tokens[:, 1:, None], axis=-1)[..., 0]


def token_nll(params, config, tokens, family: str, multiplier: float, length: int) -> np.ndarray:
  """Next-token NLL (B, L−1) of the model with ``family`` at multiplier c in every layer."""
  from limits import models

  t0 = math.sqrt(config.d_head)
  out = models.forward(params, jnp.asarray(tokens), config, normalizer=normalizer(family, length),
                       temperature=t0 / float(multiplier), layers=())
  return np.asarray(_nll(out.logits, jnp.asarray(tokens)))


def time_forwards(params, config, tokens, families: Sequence[str], length: int,
                  rounds: int, compiled: Sequence[str] = ()) -> dict:
  """Forward (loss) seconds per family, interleaved: one warm-up (compile) call per family not
  in ``compiled`` (already run on this shape in this process), then ``rounds`` rounds each timing
  every family once, so a change of machine load hits all families alike.
  Returns {family: [seconds per round]}."""
  from limits import models

  t0 = math.sqrt(config.d_head)
  tok = jnp.asarray(tokens)

  def once(fam):
    start = time.perf_counter()
    out = models.forward(params, tok, config, normalizer=normalizer(fam, length),
                         temperature=t0, layers=())
    out.logits.block_until_ready()
    return time.perf_counter() - start

  for fam in families:
    if fam not in compiled:
      once(fam)
  secs: dict[str, list] = {fam: [] for fam in families}
  for _ in range(rounds):
    for fam in families:
      secs[fam].append(once(fam))
  return secs


def relative_cost(secs: dict, ref: str = "softmax") -> dict:
  """Median over rounds of t_family / t_ref within the same round."""
  r = np.asarray(secs[ref], np.float64)
  return {f: float(np.median(np.asarray(v, np.float64) / r)) for f, v in secs.items()}


def calibrate(loss_fn: Callable[[float], float], lo: float, hi: float, *, grid: int = 5,
              iters: int = 5) -> dict:
  """argmin of ``loss_fn(c)`` over c ∈ [lo, hi], searched on u = ln c.

  ``grid`` log-spaced points plus c = 1 (the model's own scale, so a calibrated row is never
  worse than the uncalibrated one on the calibration windows), then ``iters`` evaluations of
  Brent's bounded method (golden-section steps with parabolic interpolation;
  ``scipy.optimize.minimize_scalar(method="bounded")``, tolerance 0.01 in ln c) between the
  best grid point's neighbours. Deterministic. Returns ``{"multiplier", "loss",
  "trace": [[c, loss], ...], "at_edge"}`` with the best point evaluated; ``at_edge`` is True
  when that point is an end of the bracket (the minimum may lie outside it).
  """
  import scipy.optimize

  trace: list[list[float]] = []

  def f(u):
    c = float(math.exp(u))
    v = float(loss_fn(c))
    trace.append([c, v])
    return v if math.isfinite(v) else math.inf

  us = sorted(set(np.linspace(math.log(lo), math.log(hi), int(grid)).tolist()) | {0.0})
  vals = [f(u) for u in us]
  i = int(np.argmin(vals))
  a, b = us[max(i - 1, 0)], us[min(i + 1, len(us) - 1)]
  if iters >= 1 and b > a:
    scipy.optimize.minimize_scalar(f, bounds=(a, b), method="bounded",
                                   options={"maxiter": int(iters), "xatol": 0.01})
  best = min(trace, key=lambda cv: cv[1] if math.isfinite(cv[1]) else math.inf)
  return {"multiplier": best[0], "loss": best[1], "trace": trace,
          "at_edge": bool(best[0] in (math.exp(us[0]), math.exp(us[-1])))}


# --------------------------------------------------------------------------------------------
# Metrics over arrays (pure).


def lemma1_rows(weights, lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """For causal weights (..., L, L) and prefixes t: max α·t (..., K) and the share of exactly
  zero weights (..., K) among the t visible keys of query t−1."""
  w = np.asarray(weights)
  mx, zs = [], []
  for t in lengths:
    row = w[..., t - 1, :t]
    mx.append(row.max(axis=-1) * t)
    zs.append(np.mean(row == 0, axis=-1))
  return np.stack(mx, axis=-1), np.stack(zs, axis=-1)


def lemma1_summary(max_al, zero_share, lengths: Sequence[int]) -> dict:
  """Per-t median of max α·t, mean zero share, and the log-log slope of the median vs t."""
  from limits import stats

  m = np.asarray(max_al, np.float64).reshape(-1, len(lengths))
  z = np.asarray(zero_share, np.float64).reshape(-1, len(lengths))
  med = np.median(m, axis=0)
  fit = stats.linear_fit(np.log10(lengths), np.log10(np.maximum(med, 1e-300)))
  return {"lengths": list(lengths), "median_max_aL": med.tolist(),
          "zero_share": z.mean(axis=0).tolist(), "slope_loglog": fit["slope"],
          "n_per_length": int(m.shape[0])}


def distance_metrics(layers, ns_report: Sequence[int], length: int, *, alpha: float = 0.01,
                     batch: int = 4) -> dict:
  """Theorem 1 on per-layer ``(weights (W, H, L, L), x (W, H, L, d))`` arrays (float32).

  Per-head token-averaged d̃ (sum form) and E at each N of ``ns_report`` < L (median over
  heads), and Algorithm 3's critical N over [1, L−1] (KS on per-head d̄ vs Ē at level alpha,
  batch bisection; ``stats.critical_n``).
  """
  from limits import distance, stats

  srt = [distance.sort_rows(w) for w, _ in layers]

  def head_means(ns):
    padded = list(ns) + [ns[-1]] * (batch - len(ns))
    parts = [distance.reduce_windows(distance.layer_stats(w, x, padded, bound=False,
                                                          sorted_rows=s))
             for (w, x), s in zip(layers, srt)]
    m = distance.token_means(distance.concat_heads(parts))
    return {k: np.asarray(v)[:, :len(ns)] for k, v in m.items()}

  def pvalues(ns):
    m = head_means(ns)
    return [stats.ks_2samp(m["d_sum"][:, k], m["expected"][:, k]).pvalue
            for k in range(len(ns))]

  report = [int(n) for n in ns_report if n < length]
  out: dict[str, Any] = {"d_sum_median": {}, "expected_median": {}}
  if report:
    m = head_means(report)
    for k, n in enumerate(report):
      out["d_sum_median"][str(n)] = float(np.nanmedian(m["d_sum"][:, k]))
      out["expected_median"][str(n)] = float(np.nanmedian(m["expected"][:, k]))
  crit = stats.critical_n(pvalues, 1, length - 1, alpha=alpha, method="bisect", batch=batch)
  out.update({"critical_n": crit.n,
              "critical_n_over_L": None if crit.n is None else crit.n / length,
              "ks": crit.as_dict(), "heads": int(sum(w.shape[1] for w, _ in layers)),
              "windows": int(layers[0][0].shape[0]) if layers else 0})
  return out


def separability_sums(weights, v, ns: Sequence[int], radius: float) -> np.ndarray:
  """``separability.layer_sums`` for one layer of one window: (H, K, F) sums."""
  from limits import separability

  return np.asarray(separability.layer_sums(jnp.asarray(weights), jnp.asarray(v),
                                            jnp.asarray(ns, jnp.int32), radius))


def separability_summary(sums, ns: Sequence[int]) -> dict:
  """From (heads, K, F) sums over windows: per-head N_s/N per N, the plateau (mean over N) per
  head, its median and IQR over heads."""
  from limits import separability

  s = np.asarray(sums, np.float64)
  fi, ci = separability.LAYER_FIELDS.index("frac"), separability.LAYER_FIELDS.index("count")
  frac = s[..., fi] / np.maximum(s[..., ci], 1)  # (heads, K)
  plateau = frac.mean(axis=-1)
  q25, med, q75 = np.percentile(plateau, [25, 50, 75])
  return {"ns": list(ns), "plateau_median": float(med), "plateau_q25": float(q25),
          "plateau_q75": float(q75), "median_by_n": np.median(frac, axis=0).tolist(),
          "heads": int(frac.shape[0])}


def sample_rows(n_windows: int, n_layers: int, n_heads: int, length: int, rows: int,
                seed: int) -> np.ndarray:
  """(R, 4) int rows (window, layer index, head, query) uniform over queries with t ≥ 2
  (``default_rng(seed)``, without replacement, sorted)."""
  per = n_layers * n_heads * (length - 1)
  total = n_windows * per
  rng = np.random.default_rng(seed)
  flat = np.sort(rng.choice(total, size=min(rows, total), replace=False))
  w, rem = np.divmod(flat, per)
  li, rem = np.divmod(rem, n_heads * (length - 1))
  h, q = np.divmod(rem, length - 1)
  return np.stack([w, li, h, q + 1], axis=-1)


def jacobian_bound(family: str, logits, mask, temperature: float, length: int):
  """Per-row bound on ‖∂α/∂l‖₂ for α = N(l/T) (float64 rows) and its name."""
  from limits import bounds

  T = float(temperature)
  if family == "softmax":
    return jnp.full(logits.shape[:-1], 1.0 / (2.0 * T)), "Cor. 3 tight 1/(2T)"
  if family == "ssmax":
    n = jnp.maximum(normalizers.visible_count(jnp.asarray(mask)), 1).astype(logits.dtype)
    return ssmax_s0(length) * jnp.log(n) / (2.0 * T), "s·ln t/(2T) (softmax at T/(s ln t))"
  if family in ("sparsemax", "entmax1.5", "entmax4/3"):
    return jnp.full(logits.shape[:-1], 1.0 / T), "1/T (J = diag(s) − ssᵀ/Σs, 0 ≤ s ≤ 1)"
  if family == "softplus":
    F = lambda l: jax.nn.softplus(l / T)
    dF = lambda l: jax.nn.sigmoid(l / T) / T
    return bounds.lemma2_bound(F, dF, logits, mask), "Lemma 2"
  raise LimitsError(f"unknown normalizer family {family!r}")


_JAC: dict = {}


def _jac_kernel(family: str, length: int):
  """jit(rows (R, L), masks (R, L), T) -> J (R, L, L) of l ↦ N(l/T): one compile per family
  and shape (T is traced)."""
  key = (family, int(length))
  fn = _JAC.get(key)
  if fn is None:
    norm = normalizer(family, length)
    jac = jax.jacfwd(lambda x, mm, T: norm(x / T, mm))
    fn = _JAC[key] = jax.jit(jax.vmap(jac, in_axes=(0, 0, None)))
  return fn


def jacobian_norms(family: str, logits, mask, temperature: float, length: int) -> np.ndarray:
  """Exact ‖∂N(l/T)/∂l‖₂ per row (R,) for the family's normalizer N: J by jacfwd, then
  √λ_max(J_t J_tᵀ) by LAPACK (NumPy eigvalsh) on the t×t block of the t visible keys (masked
  keys have zero rows and columns, so the cut is exact and a row costs O(t³), not O(L³))."""
  l = jnp.asarray(logits)
  m = np.asarray(mask, bool)
  J = np.asarray(_jac_kernel(family, length)(l, jnp.asarray(m), jnp.asarray(temperature, l.dtype)))
  out = np.zeros(m.shape[0], J.dtype)
  for i in range(m.shape[0]):
    t = int(np.max(np.nonzero(m[i])[0], initial=0)) + 1
    Ji = J[i, :t, :t]
    out[i] = math.sqrt(max(float(np.linalg.eigvalsh(Ji @ Ji.T)[-1]), 0.0))
  return out


def jacobian_metrics(family: str, rows, mask, temperature: float, length: int, *,
                     epsilon: float, seed: int) -> dict:
  """Lemma 2 on raw score rows (R, L) with causal masks (R, L), in float64: exact
  ‖∂N(l/T)/∂l‖₂ (:func:`jacobian_norms`), its bound (:func:`jacobian_bound`), and g(T, ε) with
  a random unit direction over the visible keys (``jax.random.key(seed)``)."""
  from limits import jacobians

  fn = normalizer(family, length)
  with jax.enable_x64(True):
    l = jnp.asarray(np.asarray(rows, np.float64))
    m = jnp.asarray(np.asarray(mask, bool))
    T = jnp.float64(temperature)
    f = lambda x, mm: fn(x / T, mm)
    norms = jacobian_norms(family, l, m, temperature, length)
    g = np.asarray(jacobians.fd_sensitivity(f, l, float(epsilon), jax.random.key(seed), mask=m))
    bound, name = jacobian_bound(family, l, m, temperature, length)
    bound = np.asarray(bound, np.float64)
  ratio = np.where(bound > 0, norms / np.where(bound > 0, bound, 1), np.where(norms > 0, np.inf, 0))
  return {"max_norm": float(norms.max()), "mean_norm": float(norms.mean()),
          "bound_name": name, "max_bound": float(np.max(bound)),
          "bound_violations": int(np.sum(norms > bound * (1 + 1e-9))),
          "max_norm_over_bound": float(ratio.max()),
          "g_mean": float(g.mean()), "g_max": float(g.max()), "epsilon": float(epsilon),
          "rows": int(norms.size)}


# --------------------------------------------------------------------------------------------
# One row: a swapped model on the evaluation windows.


def _keep(rec):
  return rec.scores, rec.weights, rec.v


def metric_layers(cfg: Config, n_layer: int) -> tuple[int, ...]:
  return tuple(range(0, n_layer, cfg.layer_stride))


def evaluate_row(params, config, eval_tokens, family: str, multiplier: float,
                 cfg: Config) -> dict:
  """Every scorecard metric of ``family`` at multiplier c on the evaluation windows."""
  from limits import models

  L = cfg.length
  T = math.sqrt(config.d_head) / float(multiplier)
  fn = normalizer(family, L)
  keep = metric_layers(cfg, config.n_layer)
  ts = cfg.prefix_lengths
  sep_ns = [n for n in cfg.sep_ns if n < L]
  samples = sample_rows(len(eval_tokens), len(keep), config.n_head, L, cfg.jac_rows, cfg.seed)
  nll, mx, zs, jrows, jmask = [], [], [], [], []
  per_layer: list[list] = [[] for _ in keep]
  sep = None
  t0 = time.perf_counter()
  for w in range(len(eval_tokens)):
    tok = jnp.asarray(eval_tokens[w:w + 1])
    out = models.forward(params, tok, config, normalizer=fn, temperature=T, layers=keep,
                         record_fn=_keep)
    nll.append(np.asarray(_nll(out.logits, tok))[0])
    scores, weights, v = (np.asarray(a[:, 0], np.float32) for a in out.attn)  # (nK, H, L, ·)
    del out
    a, b = lemma1_rows(weights, ts)
    mx.append(a)
    zs.append(b)
    for li in range(len(keep)):
      per_layer[li].append((weights[li], v[li]))
    if sep_ns:
      s = np.concatenate([separability_sums(weights[li], v[li], sep_ns, cfg.radius)
                          for li in range(len(keep))])  # (nK·H, K, F)
      sep = s if sep is None else sep + s
    for _, li, h, q in samples[samples[:, 0] == w]:
      jrows.append(scores[li, h, q])
      jmask.append(np.arange(L) <= q)
  forward_s = time.perf_counter() - t0
  layers = [(np.stack([p[0] for p in ws]), np.stack([p[1] for p in ws])) for ws in per_layer]
  dist = distance_metrics(layers, cfg.distance_ns, L, alpha=cfg.ks_alpha)
  del layers, per_layer
  jac = jacobian_metrics(family, np.stack(jrows), np.stack(jmask), T, L, epsilon=cfg.epsilon,
                         seed=cfg.seed)
  nll_arr = np.stack(nll)
  return {
      "loss": {"mean": float(nll_arr.mean()), "per_window": nll_arr.mean(axis=1).tolist(),
               "tokens": int(nll_arr.size), "nll": nll_arr.astype(np.float64).tolist()},
      "lemma1": lemma1_summary(np.stack(mx), np.stack(zs), ts),
      "theorem1": dist,
      "theorem2": separability_summary(sep, sep_ns) if sep_ns else None,
      "lemma2": jac,
      "layers": list(keep), "temperature": T, "forward_records_s": forward_s,
      "seconds": time.perf_counter() - t0,
  }


# --------------------------------------------------------------------------------------------
# Table, sentences, report.


def _get(d, *path):
  for p in path:
    if d is None:
      return None
    d = d.get(p) if isinstance(d, dict) else None
  return d


def row_scale(row: dict) -> str:
  c = row["multiplier"]
  if row["family"] == "ssmax":
    return f"s={c * row['s0']:.3g}"
  return f"c={c:.3g}"


def paired_delta(nll, ref_nll) -> tuple[float, float]:
  """Mean and standard error over tokens of nll − ref_nll (paired, same tokens)."""
  d = np.asarray(nll, np.float64).ravel() - np.asarray(ref_nll, np.float64).ravel()
  return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0


def table_rows(rows: Sequence[dict], costs: dict) -> list[dict]:
  """Flat per-row numbers for the table, CSV and figure (Δ against the softmax row)."""
  ref = next(r for r in rows if r["key"] == REFERENCE)
  out = []
  for r in rows:
    dl, se = paired_delta(r["loss"]["nll"], ref["loss"]["nll"])
    l1, t1, t2, l2 = r["lemma1"], r["theorem1"], r["theorem2"], r["lemma2"]
    out.append({
        "key": r["key"], "label": r["label"], "family": r["family"],
        "calibrated": r["calibrated"], "scale": row_scale(r), "multiplier": r["multiplier"],
        "loss": r["loss"]["mean"], "delta_loss": dl, "delta_loss_se": se,
        "max_aL_first": l1["median_max_aL"][0], "max_aL_last": l1["median_max_aL"][-1],
        "max_aL_slope": l1["slope_loglog"],
        "zeros_first": l1["zero_share"][0], "zeros_last": l1["zero_share"][-1],
        "critical_n_over_L": t1["critical_n_over_L"],
        **{f"d_N{n}": v for n, v in t1["d_sum_median"].items()},
        "plateau_median": _get(t2, "plateau_median"), "plateau_q25": _get(t2, "plateau_q25"),
        "plateau_q75": _get(t2, "plateau_q75"),
        "max_jac": l2["max_norm"], "jac_bound_violations": l2["bound_violations"],
        "g_mean": l2["g_mean"], "cost": costs.get(r["family"]),
    })
  return out


def _f(v, fmt="{:.3g}", none="—"):
  if v is None or (isinstance(v, float) and not math.isfinite(v)):
    return none
  return fmt.format(v)


def sample_sizes(rows: Sequence[dict], cfg: Config, n_layer: int, n_head: int) -> dict:
  """The sample behind each column (the same for every row)."""
  r = rows[0]
  L = cfg.length
  heads = len(metric_layers(cfg, n_layer)) * n_head
  return {
      "loss": f"{r['loss']['tokens']} tokens ({cfg.eval_windows} windows × {L - 1})",
      "lemma1": f"{r['lemma1']['n_per_length']} (window, head) rows per t ∈ "
                f"{{{', '.join(map(str, r['lemma1']['lengths']))}}}",
      "theorem1": f"{heads} heads × {cfg.eval_windows} windows, queries t > N",
      "theorem2": f"{heads} heads, N ∈ {{{', '.join(str(n) for n in cfg.sep_ns if n < L)}}}",
      "lemma2": f"{r['lemma2']['rows']} rows, ε = {cfg.epsilon:g}",
      "cost": f"median of {cfg.timing_rounds} interleaved rounds, {cfg.calib_windows} × {L} "
              "tokens",
  }


def markdown_table(trows: Sequence[dict], sizes: dict, cfg: Config) -> str:
  ts = cfg.prefix_lengths
  dn = [n for n in cfg.distance_ns if n < cfg.length]
  head = (["candidate", "scale", "LM loss", "Δ vs softmax", f"max α·L (L={ts[0]}→{ts[-1]})",
           f"zeros (L={ts[0]}→{ts[-1]})", "crit. N/L"] + [f"d̃ N={n}" for n in dn]
          + ["N_s/N plateau [IQR]", "max ‖J‖", f"g(ε={cfg.epsilon:g})", "cost"])
  n_row = (["*n*", "", sizes["loss"], sizes["loss"], sizes["lemma1"], sizes["lemma1"],
            sizes["theorem1"]] + [sizes["theorem1"]] * len(dn)
           + [sizes["theorem2"], sizes["lemma2"], sizes["lemma2"], sizes["cost"]])
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
           "| " + " | ".join(n_row) + " |"]
  for r in trows:
    name = r["label"] + (" (calibrated)" if r["calibrated"] else "")
    cells = [name, r["scale"], f"{r['loss']:.3f}",
             "0 (ref.)" if r["key"] == REFERENCE else
             f"{r['delta_loss']:+.3f} ± {r['delta_loss_se']:.3f}",
             f"{r['max_aL_first']:.3g}→{r['max_aL_last']:.3g} "
             f"(slope {_f(r['max_aL_slope'], '{:.2f}')})",
             f"{100 * r['zeros_first']:.0f}%→{100 * r['zeros_last']:.0f}%",
             _f(r["critical_n_over_L"], "{:.3f}", "none ≤ L−1")]
    cells += [_f(r.get(f"d_N{n}")) for n in dn]
    cells += [f"{_f(r['plateau_median'], '{:.2f}')} [{_f(r['plateau_q25'], '{:.2f}')}, "
              f"{_f(r['plateau_q75'], '{:.2f}')}]", _f(r["max_jac"]), _f(r["g_mean"]),
              _f(r["cost"], "{:.2f}×")]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _moves(r: dict, ref: dict) -> list[str]:
  """The limitations a row moves against softmax (relative change > 10%, or > 5 points for
  shares), in words."""
  out = []

  def rel(a, b):
    if a is None or b is None:
      return None
    return (a - b) / abs(b) if b else (math.inf if a else 0.0)

  dz = r["zeros_last"] - ref["zeros_last"]
  if abs(dz) > 0.05:
    out.append(f"exact zeros at the largest L {100 * r['zeros_last']:.0f}% (softmax "
               f"{100 * ref['zeros_last']:.0f}%), so weights need not vanish like 1/L (Lemma 1)")
  x = rel(r["max_aL_last"], ref["max_aL_last"])
  if x is not None and abs(x) > 0.10:
    out.append(f"max α·L at the largest L {r['max_aL_last']:.3g} (softmax "
               f"{ref['max_aL_last']:.3g})")
  a, b = r["critical_n_over_L"], ref["critical_n_over_L"]
  if a != b and (a is None or b is None or abs(a - b) > 0.1 * max(abs(b), 1e-9)):
    out.append(f"critical N/L {_f(a, '{:.3f}', 'not reached')} (softmax "
               f"{_f(b, '{:.3f}', 'not reached')}) (Theorem 1)")
  x = None if r["plateau_median"] is None else r["plateau_median"] - ref["plateau_median"]
  if x is not None and abs(x) > 0.05:
    out.append(f"N_s/N plateau {r['plateau_median']:.2f} (softmax {ref['plateau_median']:.2f}) "
               f"(Theorem 2)")
  x = rel(r["max_jac"], ref["max_jac"])
  if x is not None and abs(x) > 0.10:
    out.append(f"max ‖J‖ {r['max_jac']:.3g} (softmax {ref['max_jac']:.3g}) (Lemma 2)")
  return out


def sentences(trows: Sequence[dict]) -> list[str]:
  """One sentence per row: which limitation it moves, by how much, at what loss and cost."""
  ref = next(r for r in trows if r["key"] == REFERENCE)
  out = []
  for r in trows:
    name = r["label"] + (" calibrated" if r["calibrated"] else "") + f" ({r['scale']})"
    if r["key"] == REFERENCE:
      out.append(f"{name} is the reference: loss {r['loss']:.3f} nats/token.")
      continue
    mv = _moves(r, ref)
    what = "; ".join(mv) if mv else "moves none of the four limitations by more than 10%"
    cost = "" if r["cost"] is None else f", {r['cost']:.2f}× the forward time"
    out.append(f"{name}: {what}; at {r['delta_loss']:+.3f} nats/token against softmax{cost}.")
  return out


# --------------------------------------------------------------------------------------------
# Resumable driver.


def _safe(name: str) -> str:
  return name.replace("/", "_")


def _load_part(path: Path, digest: str):
  try:
    d = json.loads(path.read_text())
  except (OSError, ValueError):
    return None
  return d if d.get("digest") == digest else None


def run(cfg: Config, model, out_dir: Path, *, log: Callable[[str], None] = print) -> dict:
  """Runs (or resumes) the scorecard; returns ``{"rows", "calibrations", "windows", ...}``.

  Writes ``out_dir/parts/calibration_<family>.json`` after every calibration evaluation and
  ``out_dir/parts/row_<key>.json`` for every finished row; a rerun of the same ``cfg`` (same
  digest) reuses them.
  """
  from limits import data, results, sources

  t_start = time.perf_counter()
  digest = cfg.digest()
  parts = Path(out_dir) / "parts"
  parts.mkdir(parents=True, exist_ok=True)
  check(cfg.length <= model.config.n_positions,
        f"--length={cfg.length} exceeds the context of {model.name!r} "
        f"(n_positions={model.config.n_positions})")
  tokens = sources.encode_corpus(model, data.resolve_corpus(text=cfg.text,
                                                            data_dir=cfg.data_dir))
  ev_idx, cal_idx = split_windows(tokens.size, cfg.length, cfg.eval_windows, cfg.calib_windows,
                                  cfg.seed)
  ev, cal = take_windows(tokens, cfg.length, ev_idx), take_windows(tokens, cfg.length, cal_idx)
  params, config, L = model.params, model.config, cfg.length

  calibrations, computed = {}, []
  for fam in cfg.families:
    path = parts / f"calibration_{_safe(fam)}.json"
    part = _load_part(path, digest)
    if part is not None and part.get("done"):
      log(f"calibration {fam}: reused c = {part['multiplier']:.4g}")
      calibrations[fam] = part
      continue
    cache = {round(math.log(c), 9): (v, s) for c, v, s in (part or {}).get("evals", [])}
    evals: list = []

    def loss_fn(c, fam=fam, cache=cache, evals=evals, path=path):
      k = round(math.log(c), 9)
      if k in cache:
        v, s = cache[k]
      else:
        t0 = time.perf_counter()
        v = float(token_nll(params, config, cal, fam, c, L).mean())
        s = time.perf_counter() - t0
      evals.append([c, v, s])
      results.write_json(path, {"digest": digest, "family": fam, "done": False, "evals": evals})
      return v

    res = calibrate(loss_fn, cfg.calib_lo, cfg.calib_hi, grid=cfg.calib_grid,
                    iters=cfg.calib_iters)
    if len(cache) < len(evals):
      computed.append(fam)  # its loss forward on the calibration batch is compiled
    part = {"digest": digest, "family": fam, "done": True, **res, "evals": evals,
            "windows": cal_idx.tolist()}
    results.write_json(path, part)
    calibrations[fam] = part
    log(f"calibration {fam}: c = {res['multiplier']:.4g} (loss {res['loss']:.4f}"
        f"{', at the bracket edge' if res['at_edge'] else ''})")

  path = parts / "timing.json"
  part = _load_part(path, digest)
  if part is None:
    t0 = time.perf_counter()
    secs = time_forwards(params, config, cal, cfg.families, L, cfg.timing_rounds,
                         compiled=computed)
    part = {"digest": digest, "seconds": secs, "relative": relative_cost(secs),
            "wall_s": time.perf_counter() - t0}
    results.write_json(path, part)
    log("timing: " + ", ".join(f"{f} {v:.2f}×" for f, v in part["relative"].items()))
  timing = part

  rows = []
  for key, fam, calibrated in row_keys(cfg):
    path = parts / f"row_{_safe(key)}.json"
    part = _load_part(path, digest)
    if part is None:
      c = calibrations[fam]["multiplier"] if calibrated else CANDIDATES[key].base
      t0 = time.perf_counter()
      metrics = evaluate_row(params, config, ev, fam, c, cfg)
      label = FAMILY_LABELS[fam] if calibrated else CANDIDATES[key].label
      part = {"digest": digest, "key": key, "label": label, "family": fam,
              "calibrated": calibrated, "multiplier": c, "s0": ssmax_s0(L), **metrics,
              "row_seconds": time.perf_counter() - t0}
      results.write_json(path, part)
      log(f"row {key}: loss {metrics['loss']['mean']:.4f} ({part['row_seconds']:.1f} s)")
    else:
      log(f"row {key}: reused")
    rows.append(part)
  compute = {"calibration_s": sum(e[2] for c in calibrations.values() for e in c["evals"]),
             "timing_s": timing.get("wall_s", sum(map(sum, timing["seconds"].values()))),
             "rows_s": sum(r["row_seconds"] for r in rows)}
  compute["total_s"] = sum(compute.values())
  return {"rows": rows, "calibrations": calibrations, "costs": timing["relative"],
          "compute_s": compute,
          "cost_seconds": timing["seconds"],
          "windows": {"evaluation": ev_idx.tolist(), "calibration": cal_idx.tolist(),
                      "length": L, "corpus_tokens": int(tokens.size)},
          "wall_s": time.perf_counter() - t_start}


def report(result: dict, cfg: Config, model_info: dict, command: str = "") -> tuple[list, str]:
  """(table rows, scorecard.md text) from :func:`run`'s result."""
  rows = result["rows"]
  trows = table_rows(rows, result["costs"])
  sizes = sample_sizes(rows, cfg, model_info["n_layer"], model_info["n_head"])
  keep = metric_layers(cfg, model_info["n_layer"])
  cal = result["calibrations"]
  edge = [f for f, c in cal.items() if c.get("at_edge")]
  w = result["windows"]
  lines = [
      f"# Normalizer scorecard: {model_info['name']}", "",
      f"Command: `{command}`" if command else "", "",
      f"Model {model_info['name']} ({model_info['family']}, {model_info['n_layer']} layers × "
      f"{model_info['n_head']} heads, d_head {model_info['d_head']}; T0 = √d_head = "
      f"{math.sqrt(model_info['d_head']):.3g} on the raw q·k scale). Every candidate replaces "
      f"the normalizer in every layer; weights unchanged. Evaluation windows "
      f"{w['evaluation']} and calibration windows {w['calibration']} (L = {w['length']}, window "
      f"w = tokens [w·L, (w+1)·L) of War and Peace; calibration windows drawn with seed "
      f"{cfg.seed}, disjoint). Metrics on layers {list(keep)}; float32 forward passes, float64 "
      f"Jacobians. Scale: c multiplies the model's logits q·k/T0 (SSMax: s). Calibration: "
      f"{cfg.calib_grid} log-spaced c in [{cfg.calib_lo:g}, {cfg.calib_hi:g}] then "
      f"{cfg.calib_iters} steps of Brent's bounded search, minimising the NLL of the "
      "calibration windows"
      + (f"; best at the bracket edge for {', '.join(edge)}" if edge else "") + ".", "",
      markdown_table(trows, sizes, cfg), "",
      "Columns: Δ = paired mean NLL difference to softmax (T0) on the same tokens ± its standard "
      "error over tokens; max α·L = median over (window, layer, head) of the largest weight × t "
      "at query t−1 (t keys), with the log-log slope over t; zeros = share of exactly-zero "
      "weights at that query; crit. N/L = Algorithm 3's smallest N where KS (α = "
      f"{cfg.ks_alpha:g}) does not reject d̄ = Ē over heads ('none' if it rejects for every N); "
      "d̃ = median over heads of the token-averaged cumulative distance (value vectors); "
      "N_s/N plateau = per head the mean of N_s/N over the N shown, median [IQR] over heads; "
      "max ‖J‖ = largest exact Jacobian norm w.r.t. the raw scores, checked against its bound ("
      + "; ".join(sorted({r["lemma2"]["bound_name"] for r in rows})) + f"; rows above it: "
      f"{sum(r['lemma2']['bound_violations'] for r in rows)}); g = mean finite-difference "
      "sensitivity; cost = forward time relative to softmax (a multiplier costs nothing, so "
      "calibrated rows share their family's cost).", "",
      "## In one sentence each", ""]
  lines += [f"- {s}" for s in sentences(trows)]
  cs = result["compute_s"]
  lines += ["", f"Computation recorded in parts/ (all invocations of this command): "
            f"{cs['total_s']:.0f} s (calibration {cs['calibration_s']:.0f} s, timing "
            f"{cs['timing_s']:.0f} s, rows {cs['rows_s']:.0f} s; loading the model and "
            f"tokenizing the corpus not included); this invocation: {result['wall_s']:.0f} s."]
  return trows, "\n".join(l for l in lines if l is not None) + "\n"
