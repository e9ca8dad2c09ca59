"""Per-row measurements of the gradient experiment: Corollary 3, Lemma 2 and Algorithm 5.

The computations shared by the task (:func:`limits.gradient.task.run`) and the ``gradient`` sweep
kind (``limits/sweep/kinds/gradient.py``): the synthetic logit rows (:func:`synthetic_rows`),
g(T, ε) of each row (:func:`g_rows`) and the exact Jacobian norm of each row
(:func:`row_norms`); plus what the task measures at one
temperature (:func:`run_temperature`: exact norms against the closed form and central
differences, Corollary 3's two bounds, Lemma 2's bound, the tied-top-two counterexample, and
the statistics of g(T, ε)). Shapes: a block of rows is (R, L); Jacobians are (R, L, L).
JAX is imported on first use, so a bad flag is reported without importing it.
"""

from __future__ import annotations

import functools
import math

import numpy as np


def synthetic_rows(key, rows: int, length: int, scale, dtype):
  """(rows, L) i.i.d. N(0, scale²) logits: ``scale * jax.random.normal(key, (rows, L))``.

  The one synthetic source of the experiment: the CLI (scale 8, 256 rows by default) and the
  ``gradient`` sweep kind (scale 1, 128 rows by default; scale may be a traced per-cell value)
  both call it. Returns a JAX array; every position is visible.
  """
  import jax

  return scale * jax.random.normal(key, (rows, length), dtype)


def g_rows(norm_fn, logits, mask, temperatures, epsilons, keys):
  """The paper's g(T, ε) = ‖N((l + εv)/T) − N(l/T)‖₂/ε (Algorithm 5) of each row: the one
  implementation, used by the CLI (through ``sensitivity.fd_batch``, which cuts the sampled
  rows into padded blocks and calls this function on each) and by the ``gradient``
  sweep kind (inside its jitted, sharded step).

  logits, mask (S, L); temperatures (K,); epsilons (E,); keys (S,): one PRNG key per row.
  Direction convention (AMBIG-13): row r with key k_r gets, for the e-th ε, the unit vector
  ``jacobians.random_directions(jax.random.split(k_r, E)[e], (L,), mask_r)`` (isotropic
  Gaussian over the visible positions), shared by the K temperatures (common random numbers).
  ``norm_fn(z, mask)`` is the normalizer applied to z = l/T and must be hashable (a
  ``normalizers.get`` result). Traceable (T, ε and the keys may be traced). Returns (S, K, E).
  """
  return _g_rows_jit()(norm_fn, logits, mask, temperatures, epsilons, keys)


@functools.lru_cache(maxsize=None)
def _g_rows_jit():
  import jax

  def block(norm_fn, l, m, T, eps, keys):
    return g_from_normals(norm_fn, l, m, T, eps, row_normals(keys, eps.size, l.shape[-1], l.dtype))

  return jax.jit(block, static_argnums=(0,))


def row_normals(keys, n_eps: int, length: int, dtype):
  """The raw standard normals of :func:`g_rows`'s directions: keys (S,) → (S, E, L), row r's
  e-th draw ``jax.random.normal(jax.random.split(keys[r], E)[e], (L,), dtype)`` (AMBIG-13;
  :func:`g_from_normals` masks and normalises them). Traceable."""
  import jax

  def one(k):
    return jax.vmap(lambda ke: jax.random.normal(ke, (length,), dtype))(jax.random.split(k, n_eps))

  return jax.vmap(one)(keys)


def g_from_normals(norm_fn, l, m, T, eps, normals):
  """:func:`g_rows` given its raw normals (S, E, L) (:func:`row_normals`): the unit directions
  ``jacobians.unit_directions(normals, mask)`` (those of ``jacobians.random_directions``), then
  g(T, ε) (S, K, E). Traceable. Split from the draw so a caller can materialise the normals
  first (``sensitivity.fd_rows``: XLA on CPU otherwise fuses the draw, threefry and the
  float64 erfinv, into both users of the normals, the norm and the division, and runs it
  twice)."""
  import jax
  import jax.numpy as jnp

  from limits import jacobians

  v = jacobians.unit_directions(normals, m[:, None, :])  # (S, E, L)
  if _plain_softmax(norm_fn):
    return _g_plain(l, m, T, eps, v)

  def one(lr, mr, vr):
    base = jax.vmap(lambda t: norm_fn(lr / t, mr))(T)  # (K, L)
    pert = jax.vmap(lambda t: jax.vmap(lambda e, vv: norm_fn((lr + e * vv) / t, mr))(
        eps, vr))(T)  # (K, E, L)
    return jnp.linalg.norm(pert - base[:, None, :], axis=-1) / eps[None, :]  # (K, E)

  return jax.vmap(one)(l, m, v)


def _g_plain(l, m, T, eps, v):
  """g(T, ε) of plain softmax for a block: l, m (S, L), T (K,), eps (E,), v (S, E, L) the unit
  directions → (S, K, E). The masked keys are −inf logits; the base row and its E perturbed
  rows form one (S, E + 1, L) array whose maxima are taken once, before the division by T
  (T > 0 and rounding are monotone, so fl(max z)/T is bit for bit the maximum of the divided
  row that :func:`_softmax_inf` takes, 15 % of the kernel's time when taken per T); then
  :func:`_softmax_inf` (exp of the shifted row, one reciprocal of the sum per row) and
  ‖α_pert − α_base‖₂/ε. Per (row, T, ε or base, key): one division, one exp, one multiply;
  the (S, K, E + 1, L) form lets XLA fuse them: 2.5× less CPU time than the per-row
  (K, E, L) form of 13a01df at K = 8, the same bits (2,048 causal rows of N(0, 8²) logits,
  L = 1,024; ``benchmarks.gradient --parts=g`` on SmolLM2's rows)."""
  import jax.numpy as jnp

  lm = jnp.where(m, l, -jnp.inf)  # (S, L)
  z = jnp.concatenate([lm[:, None, :], lm[:, None, :] + eps[None, :, None] * v], axis=1)
  mx = jnp.max(z, axis=-1)  # (S, E + 1): the max of each row, before dividing by T
  zt = z[:, None] / T[None, :, None, None]  # (S, K, E + 1, L)
  mt = mx[:, None, :] / T[None, :, None]  # (S, K, E + 1)
  a = _softmax_inf(zt, mt[..., None])
  d = a[:, :, 1:] - a[:, :, :1]  # (S, K, E, L)
  return jnp.sqrt(jnp.sum(d * d, axis=-1)) / eps[None, None, :]


def _plain_softmax(norm_fn) -> bool:
  """True for ``normalizers.get("softmax")`` with no parameter bound (T = 1 inside)."""
  return (getattr(norm_fn, "__name__", None) == "softmax"
          and getattr(norm_fn, "params", None) == {})


def _softmax_inf(z, mx=None):
  """Softmax over the last axis of z whose masked entries are −inf: shift by the visible max
  (``mx`` (..., 1) when the caller has it: it must equal ``max(z, axis=-1, keepdims=True)``),
  exp, multiply by the reciprocal of the sum (a row with nothing visible gives 0). Without the
  masks' selects and with one division per row instead of one per entry, g(T, ε) of the
  gradient step runs 1.9× faster (spread 0.9-2.9×; ``python -m benchmarks.gradient
  --model=smollm2 --length=1024 --layers=0,15,29 --pairs=2 --parts=g``, load ~12), with
  values identical there to the masked ``normalizers.softmax`` path (6912 rows × 8 T × 3 ε).
  In general each weight is within one rounding of ``normalizers.softmax``'s, so g differs by
  ≲ √L·2⁻⁵²/ε absolute, below float64's resolution of ‖Δα‖ (tests/test_sensitivity.py)."""
  import jax.numpy as jnp

  mx = jnp.max(z, axis=-1, keepdims=True) if mx is None else mx
  e = jnp.exp(z - jnp.where(jnp.isfinite(mx), mx, 0))
  s = jnp.sum(e, axis=-1, keepdims=True)
  ok = s != 0  # a NaN sum (NaN logit) stays NaN, as in numerics.safe_div
  return e * jnp.where(ok, 1.0 / jnp.where(ok, s, 1.0), 0.0)


# ----------------------------------------------------------------------------- Jacobian norms


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


def row_fn(name: str, params: dict, T):
  """f(l, mask=None) = N(l / T, mask): the normalizer ``normalizers.get(name, **params)`` at
  temperature T (Eq. 2 for softmax, Eq. 3 in general); rows (..., L) -> (..., L)."""
  from limits import normalizers

  norm = normalizers.get(name, **params)
  return lambda l, m=None: norm(l / T, m)


def jacobian(name: str, params: dict, logits, T, mask=None, *, how: str):
  """The Jacobian ∂N(l/T)/∂l of each row, (R, L) -> (R, L, L): ``how="jacfwd"`` by forward-mode
  autodiff, ``how="closed"`` by the closed form J(l/T)/T (Corollary 3 for softmax,
  (diag α − ααᵀ)/T; Lemma 2's first line for the others; ``jacobians.closed_form``)."""
  from limits import jacobians

  if how == "jacfwd":
    return jacobians.exact(row_fn(name, params, T), logits, "fwd", mask)
  return jacobians.closed_form(name, **params)(logits / T, mask) / T


def scaled_spectral_norm(J):
  """‖J‖₂ of each (..., L, L) matrix by dense SVD of J / max|J| (times max|J|), entries below
  the dtype's smallest normal number flushed to 0: LAPACK's scaling step (DLASCL) rejects
  matrices whose norm is subnormal or far outside its safe range and prints an error on stdout
  (seen at T ≈ 1.6e-3, L = 256)."""
  import jax.numpy as jnp

  from limits import jacobians

  tiny = jnp.finfo(J.dtype).tiny
  J = jnp.where(jnp.abs(J) < tiny, 0, J)
  s = jnp.max(jnp.abs(J), axis=(-2, -1), keepdims=True)  # (..., 1, 1)
  safe = jnp.where(s > 0, s, 1)
  return jacobians.spectral_norm(J / safe) * safe[..., 0, 0]


def row_norms(name: str, params: dict, logits, T, mask=None, *, how: str, iters: int = 100):
  """‖∂N(l/T)/∂l‖₂ of each row, (R, L) -> (R,) (the quantity Corollary 3 bounds).

  ``how``: "jacfwd" or "closed" (:func:`jacobian`, then :func:`scaled_spectral_norm`),
  "secular" (softmax only: ``jacobians.softmax_closed_form_norm``, O(L) per row) or "matfree"
  (power iteration on jvp/vjp, ``iters`` steps, no L×L matrix). Shared by :func:`run` and the
  ``gradient`` sweep kind; jit- and vmap-able (T may be traced).
  """
  from limits import jacobians

  if how == "secular":
    return jacobians.softmax_closed_form_norm(logits, T, mask)
  if how == "matfree":
    return jacobians.spectral_norm_matfree(row_fn(name, params, T), logits, iters, mask)
  return scaled_spectral_norm(jacobian(name, params, logits, T, mask, how=how))


@_lazy_jit(static_argnames=("name", "params_items", "dense", "iters"))
def _exact_block(l, m, T, *, name, params_items, dense, iters=100):
  """Exact norms ‖J‖₂ of a block of rows (B, L), plus the closed-form norm, the max |J − J_c|
  and max |J_c| per row (B,) each (-1 where there is no closed form)."""
  import jax.numpy as jnp

  from limits import jacobians

  params = dict(params_items)
  has_cf = jacobians.closed_form(name, **params) is not None
  if dense:
    J = jacobian(name, params, l, T, m, how="jacfwd")  # (B, L, L)
    norm = scaled_spectral_norm(J)
    if has_cf:
      Jc = jacobian(name, params, l, T, m, how="closed")  # (B, L, L)
      closed_norm = scaled_spectral_norm(Jc)
      err = jnp.max(jnp.abs(J - Jc), axis=(-2, -1))
      scale = jnp.max(jnp.abs(Jc), axis=(-2, -1))
    else:
      closed_norm = err = scale = jnp.full(norm.shape, -1.0, norm.dtype)
  else:
    norm = row_norms(name, params, l, T, m, how="matfree", iters=iters)
    if name == "softmax":
      closed_norm = row_norms(name, params, l, T, m, how="secular")
      err = jnp.abs(norm - closed_norm)
      scale = closed_norm
    else:
      closed_norm = err = scale = jnp.full(norm.shape, -1.0, norm.dtype)
  return norm, closed_norm, err, scale


@_lazy_jit(static_argnames=("name", "params_items"))
def _check_block(l, m, T, fd_eps, *, name, params_items):
  """jacfwd, jacrev and central-difference Jacobians (B, L, L) of a few rows (B, L)."""
  from limits import jacobians

  f = row_fn(name, dict(params_items), T)
  return (jacobians.exact(f, l, "fwd", m), jacobians.exact(f, l, "rev", m),
          jacobians.finite_difference(f, l, fd_eps, m))


def _chunks(n: int, size: int):
  for i in range(0, n, max(size, 1)):
    yield slice(i, min(i + size, n))


# ----------------------------------------------------------------------------- Lemma 2


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
  T = np.asarray(temps, rows.dtype)[None, :]  # (1, K)
  with np.errstate(over="ignore", invalid="ignore"):
    return ((np.exp(r / T) + np.exp(2 * r / T)) / (T * n)).astype(rows.dtype)


# ----------------------------------------------------------------------------- one temperature


def counterexample(T, paper, tight, rtol, dtype, name="softmax", params_items=(),
                   check_length: int = 8) -> dict:
  """The tied-top-two row (α = (½, ½, 0, …), ``bounds.tied_top_two``) at T: its norm is
  1/(2T) exactly (closed form: M = diag α − ααᵀ has eigenvalue ½ on (e₁ − e₂)/√2 and
  λ ≤ 2·max α_i(1 − α_i) = ½ by Gershgorin, ``gradient_screen``), independent of L. One
  numeric check: jacfwd + dense SVD of the row at length ``check_length``, relative error and
  whether it is within 1e3 ulps (SVD is backward stable, ~L·eps)."""
  import jax.numpy as jnp

  from limits import bounds

  norm = float(tight)  # = 1/(2T), bounds.softmax_jacobian_bound(T, "tight")
  cl, cm = bounds.tied_top_two(check_length, dtype)  # (check_length,)
  got = float(np.asarray(_exact_block(cl[None], cm[None], jnp.asarray(T, dtype), name=name,
                                      params_items=params_items, dense=True)[0])[0])
  rel = abs(got - norm) / norm
  return {"row": "two tied visible logits (alpha = 1/2, 1/2)", "norm": norm, "T_norm": T * norm,
          "how": "closed form 1/(2T)",
          "numeric_check": {"length": check_length, "jacfwd_svd_norm": got, "rel_err": rel,
                            "ok": bool(rel <= 1e3 * float(np.finfo(dtype).eps))},
          "exceeds_paper": bool(norm > paper * (1 + rtol)),
          "exceeds_tight": bool(norm > tight * (1 + rtol))}



def run_temperature(T, rows, mask, exact_idx, check_idx, epsilons, name, params, *, g_vals,
                    fd_idx, all_stats, dense, groups=None, n_groups=None, dtype_tol,
                    power_iters=100, dtype=None, row_ids=None):
  """Every measurement at one temperature. Returns (summary dict, per-exact-row list).

  rows, mask (R, L) (rows are cast to ``dtype``, default their own); exact_idx (X,) and
  check_idx (C,) row indices; ``row_ids`` (X,): the run's row number of each exact row (the
  task passes only the exact rows, ``exact_idx`` = 0..X−1; default ``exact_idx``); ``all_stats``: every row's decisions at T (softmax; None
  otherwise), one temperature's entries of ``gradient_screen.Screen.stats``; ``g_vals``
  (S, E): g(T, ε) of Algorithm 5 on the sampled rows ``fd_idx`` (S,) for each ε; ``groups``
  (R,): the (layer, head) of each row (model source).
  """
  import jax.numpy as jnp

  from limits import bounds, jacobians

  params_items = tuple(sorted(params.items()))
  dt = np.dtype(dtype or rows.dtype)
  Tj = jnp.asarray(T, dt)
  L = rows.shape[-1]
  paper = float(bounds.softmax_jacobian_bound(T, "paper"))  # Corollary 3 as printed
  tight = float(bounds.softmax_jacobian_bound(T, "tight"))  # 1/(2T)
  is_softmax = name == "softmax"

  # Exact norms on the subsample, in blocks that keep J at ~4M entries.
  el, em = rows[exact_idx].astype(dt), mask[exact_idx]  # (X, L)
  block = max(1, (1 << 22) // (L * L)) if dense else 256
  outs = [_exact_block(jnp.asarray(el[s]), jnp.asarray(em[s]), Tj, name=name,
                       params_items=params_items, dense=dense, iters=power_iters)
          for s in _chunks(len(el), block)]
  norm, closed_norm, cerr, cscale = (np.concatenate([np.asarray(o[i]) for o in outs])
                                     for i in range(4))  # (X,) each
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
    Jf, Jr, Jd = _check_block(jnp.asarray(rows[check_idx].astype(dt)), jnp.asarray(mask[check_idx]), Tj,
                              jnp.asarray(fd_eps, dt), name=name, params_items=params_items)
    r = jacobians.compare_arrays(Jf, Jr, None, Jd, fd_eps=fd_eps)
    checks = {"rows": len(check_idx), "fd_eps": r["fd_eps"], "jacrev": r["rev"], "fd": r["fd"]}

  # g(T, ε) on the seeded sample of rows (Algorithm 5; statistics over the sample).
  g = {}
  for e_i, eps in enumerate(epsilons):
    vals = g_vals[:, e_i]  # (S,)
    entry = {"eps": eps, "mean": float(vals.mean()), "max": float(vals.max()),
             "n_rows": int(vals.size),
             "n_above_paper_bound": int(np.sum(vals > paper)) if is_softmax else None,
             "n_above_sqrt2_over_eps": int(np.sum(vals > math.sqrt(2) / eps * (1 + 1e-6)))}
    if groups is not None:
      gs = groups[fd_idx]
      sums = np.bincount(gs, weights=vals, minlength=n_groups)
      cnts = np.bincount(gs, minlength=n_groups)
      avg = np.where(cnts > 0, sums / np.maximum(cnts, 1), -np.inf)  # (n_groups,)
      entry["paper_stat"] = float(avg.max())  # max over (layer, head) of the token average
      entry["paper_stat_head"] = int(avg.argmax())
    else:
      entry["paper_stat"] = entry["mean"]
    g[f"{eps:g}"] = entry
  g_of_row = dict(zip(fd_idx.tolist(), g_vals[:, 0].tolist()))

  summary = {"T": T, "paper_bound": paper, "tight_bound": tight,
             "exact_rows": len(exact_idx), "exact_method": "jacfwd+svd" if dense else
             f"matfree power iteration ({power_iters} steps)",
             "max_norm": float(norm.max()), "mean_norm": float(norm.mean()),
             "max_T_norm": float(T * norm.max()), "closed_form": closed, "checks": checks, "g": g}
  rtol = dtype_tol["violation_rtol"]
  per_row = []
  if is_softmax:
    over_paper = norm > paper * (1 + rtol)
    over_tight = norm > tight * (1 + rtol)
    l2 = np.asarray(bounds.softmax_lemma2_bound(jnp.asarray(el), Tj, jnp.asarray(em)))  # (X,)
    over_l2 = norm > l2 * (1 + rtol)
    # Every row (gradient_screen.Screen): Lemma 2 only where its bound is a finite number in
    # this dtype (else min F underflowed and the "bound" constrains nothing).
    st = all_stats
    summary.update({
        "n_exceed_paper": int(over_paper.sum()), "n_exceed_tight": int(over_tight.sum()),
        "n_exceed_lemma2": int(over_l2.sum()),
        "all_rows_n_exceed_lemma2": int(st["n_exceed_lemma2"]),
        "all_rows_lemma2_finite": int(st["lemma2_finite"]),
        "all_rows_nonfinite_norm": int(st["nonfinite"]),
        "all_rows": int(st["rows"]),
        "all_rows_n_exceed_paper": int(st["n_exceed_paper"]),
        "all_rows_n_exceed_tight": int(st["n_exceed_tight"]),
        "all_rows_max_T_norm": float(T * st["max_norm"]),
        "all_rows_newton": int(st["newton"]),
    })
    summary["counterexample"] = counterexample(T, paper, tight, rtol, dt, name, params_items)
  for j, i in enumerate(exact_idx if row_ids is None else row_ids):
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
