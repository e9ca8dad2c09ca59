"""Jacobians of normalizers: exact (autodiff), closed forms, spectral norms, finite differences.

A normalizer ``fn`` maps a logit row ``(L,)`` to weights ``(L,)``. Everything here is batched
over leading axes: ``logits (..., L)`` gives Jacobians ``(..., L, L)`` or norms ``(...,)``. When a
``mask`` is given, ``fn`` is called as ``fn(logits, mask)``; otherwise as ``fn(logits)``.

- :func:`exact` — ``jax.jacfwd`` or ``jax.jacrev`` per row (vmapped).
- Closed forms: :func:`softmax_closed_form` (Corollary 3: J = (diag α − ααᵀ)/T),
  :func:`general_closed_form` (Lemma 2, first line: ∂α_i/∂l_j = (F'_j/S)(δ_ij − α_i)),
  :func:`entmax_closed_form` (J = diag(s) − s sᵀ/Σs, s = α^{2−a} on the support; a = 2 is
  sparsemax), and :func:`closed_form` to pick one by normalizer name.
- :func:`softmax_closed_form_norm` — ‖(diag α − ααᵀ)/T‖₂ without building the matrix: the top
  eigenvalue of a diagonal-minus-rank-one PSD matrix is the root of the secular equation
  1 = Σ α_i² / (α_i − λ) in [α_(2), α_(1)] (interlacing), found by bisection in O(L).
- :func:`spectral_norm` (dense SVD) and :func:`spectral_norm_matfree` (power iteration on JᵀJ
  through jvp/vjp; never builds the L×L matrix).
- :func:`finite_difference` — central-difference Jacobian; :func:`fd_sensitivity` — the
  paper's g(T, ε) = ‖fn(l + εv) − fn(l)‖₂/ε with a random unit v over the visible positions
  (AMBIG-13); :func:`compare` — exact vs jacrev vs closed form vs finite differences with the
  per-dtype tolerances it used (in the manner of ``jax._src.public_test_util.check_grads``).

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from limits import normalizers, numerics
from limits.errors import LimitsError

Array = jax.Array

# Central-difference step per dtype, for logits of unit scale (a normalizer applied to l / T
# varies on the scale T: pass eps = FD_EPS * T). h ≈ eps_mach^(1/3) balances the O(h²)
# truncation error against the O(eps_mach / h) rounding error.
FD_EPS = {np.dtype(np.float32): 3e-3, np.dtype(np.float64): 1e-5}

# Tolerances, as |A − B| ≤ atol + rtol · max|B| (max over the compared block).
# exact-vs-exact: jacfwd, jacrev and closed forms are the same mathematics, differing only by
# rounding, so a few hundred ulps. exact-vs-FD: truncation O((h/scale)²) ≈ 1e-10 (f64) or 1e-5
# (f32) plus rounding eps_mach/h ≈ 1e-11 (f64) or 4e-5 (f32), with a safety factor of ~100.
EXACT_TOL = {np.dtype(np.float32): dict(atol=1e-5, rtol=1e-4),
             np.dtype(np.float64): dict(atol=1e-12, rtol=1e-10)}
FD_TOL = {np.dtype(np.float32): dict(atol=2e-3, rtol=2e-2),
          np.dtype(np.float64): dict(atol=1e-7, rtol=1e-6)}


def _dtype(x) -> np.dtype:
  return np.dtype(jnp.asarray(x).dtype)


def _check_step(eps, name: str = "eps") -> None:
  """One-line LimitsError for a concrete finite-difference step that is not finite and > 0
  (eps = 0 divides by zero; a traced eps passes)."""
  v = numerics.concrete_float(eps)
  if v is not None and not (math.isfinite(v) and v > 0):
    raise LimitsError(f"{name}={v!r} is not allowed; the finite-difference step must be a finite "
                      "number > 0")


def _check_iters(iters) -> int:
  ok = isinstance(iters, (int, np.integer)) and not isinstance(iters, bool) and iters >= 1
  if not ok:
    raise LimitsError(f"iters={iters!r} is not allowed; power iteration needs an integer >= 1 "
                      "(0 steps would return the norm along the random start vector)")
  return int(iters)


def _flatten_rows(logits, mask):
  normalizers.check_logits(logits)
  logits = jnp.asarray(logits)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    logits = logits.astype(jnp.result_type(float))
  lead = logits.shape[:-1]
  flat = logits.reshape((-1, logits.shape[-1]))  # (R, L)
  m = None if mask is None else numerics.mask_like(logits, mask).reshape(flat.shape)
  return flat, m, lead


def _call(fn, logits, mask):
  return fn(logits) if mask is None else fn(logits, mask)


# ----------------------------------------------------------------------------- exact


def exact(fn: Callable, logits, mode: str = "fwd", mask=None) -> Array:
  """The exact Jacobian ∂fn(l)/∂l per row by ``jax.jacfwd`` (mode="fwd") or ``jax.jacrev``.

  logits (..., L) -> (..., L, L) with J[..., i, j] = ∂α_i/∂l_j.
  """
  if mode not in ("fwd", "rev"):
    raise LimitsError(f"mode={mode!r} is not allowed; use 'fwd' or 'rev'")
  jac = jax.jacfwd if mode == "fwd" else jax.jacrev
  flat, m, lead = _flatten_rows(logits, mask)
  if m is None:
    J = jax.vmap(jac(fn))(flat)
  else:
    J = jax.vmap(jac(fn), in_axes=(0, 0))(flat, m)
  L = flat.shape[-1]
  return J.reshape(lead + (L, L))


# ----------------------------------------------------------------------------- closed forms


def softmax_closed_form(logits, temperature, mask=None) -> Array:
  """Corollary 3's Jacobian of softmax(l / T): J = (diag α − ααᵀ) / T, (..., L) -> (..., L, L).

  ``temperature`` may be a scalar or broadcast against ``logits[..., :1]`` (one T per row).
  """
  a = normalizers.softmax(logits, temperature, mask)  # (..., L)
  T = jnp.asarray(temperature, a.dtype)[..., None]  # (..., 1, 1) or scalar
  return (_diag(a) - a[..., :, None] * a[..., None, :]) / T


def _diag(v: Array) -> Array:
  return v[..., :, None] * jnp.eye(v.shape[-1], dtype=v.dtype)


def general_closed_form(F: Callable, dF: Callable, logits, mask=None) -> Array:
  """Lemma 2, first line: ∂α_i/∂l_j = (δ_ij F'_j S − F_i F'_j)/S² = (F'_j/S)(δ_ij − α_i).

  F, dF: elementwise F(l) > 0 and its derivative ∂F/∂l (θ closed over). Masked keys have
  F_j = F'_j = 0 (they are not in the sum). (..., L) -> (..., L, L).
  """
  logits = jnp.asarray(logits)
  m = numerics.mask_like(logits, mask)
  li = jnp.where(m, logits, 0)
  f = jnp.where(m, F(li), 0)
  df = jnp.where(m, dF(li), 0)
  S = jnp.sum(f, axis=-1, keepdims=True)  # (..., 1)
  a = numerics.safe_div(f, S)
  c = numerics.safe_div(df, S)  # F'_j / S, (..., L)
  eye = jnp.eye(logits.shape[-1], dtype=a.dtype)
  return c[..., None, :] * (eye - a[..., :, None])


def entmax_closed_form(logits, alpha=1.5, mask=None) -> Array:
  """Jacobian of α-entmax: J = diag(s) − s sᵀ / Σs with s_i = p_i^{2−α} for p_i > 0, else 0.

  α = 2 is sparsemax's J = diag(1_S) − 1_S 1_Sᵀ / |S| (Martins & Astudillo 2016).
  """
  p = normalizers.entmax(logits, alpha, mask)
  pos = p > 0
  s = jnp.where(pos, jnp.power(jnp.where(pos, p, 1), 2.0 - float(alpha)), 0)
  S = jnp.sum(s, axis=-1)[..., None, None]
  outer = s[..., :, None] * s[..., None, :]
  return _diag(s) - jnp.where(S > 0, outer / jnp.where(S > 0, S, 1), 0)


def closed_form(name: str, **params) -> Callable[..., Array] | None:
  """Closed-form Jacobian ``J(logits, mask=None)`` of ``normalizers.get(name, **params)``.

  Returns None for a name without one. For ssmax a row with n visible keys is softmax at
  temperature 1/(s log n); for sa_softmax, y = z ⊙ α with z = l/T gives
  J = (diag α + diag z · (diag α − ααᵀ)) / T. The Jacobian of l ↦ N(l / T) is J(l / T) / T.
  """
  params = {k: v for k, v in params.items() if v is not None}
  if name == "softmax":
    t = params.get("temperature", 1.0)
    return lambda l, mask=None: softmax_closed_form(l, t, mask)
  if name in ("sparsemax", "entmax", "entmax15_exact"):
    a = {"sparsemax": 2.0, "entmax15_exact": 1.5}.get(name, params.get("alpha", 1.5))
    return lambda l, mask=None: entmax_closed_form(l, a, mask)
  if name == "ssmax":
    s = params.get("s", 1.0)

    def ss(l, mask=None):
      l = jnp.asarray(l)
      m = numerics.mask_like(l, mask)
      n = jnp.maximum(normalizers.visible_count(m), 1).astype(l.dtype)[..., None]
      scale = s * jnp.log(n)  # (..., 1); n = 1 gives a constant output (J = 0)
      a = normalizers.ssmax(l, s, m)
      return (_diag(a) - a[..., :, None] * a[..., None, :]) * scale[..., None]

    return ss
  if name == "sa_softmax":
    t = params.get("temperature", 1.0)

    def sa(l, mask=None):
      l = jnp.asarray(l)
      m = numerics.mask_like(l, mask)
      a = normalizers.softmax(l, t, m)
      z = jnp.where(m, l, 0) / t
      Js = _diag(a) - a[..., :, None] * a[..., None, :]
      return (_diag(a) + z[..., :, None] * Js) / t

    return sa
  return None


def _bisect_iters(dtype) -> int:
  return 100 if np.dtype(dtype) == np.float64 else 50


def softmax_closed_form_norm(logits, temperature, mask=None) -> Array:
  """‖(diag α − ααᵀ)/T‖₂ in O(L) per row, without the matrix: (..., L) -> (...,).

  M = diag α − ααᵀ is PSD (vᵀMv = Var_α(v)), so its norm is its top eigenvalue λ. By
  interlacing for a diagonal minus rank one, λ ∈ [α_(2), α_(1)]; it is α_(1) when the top two
  weights tie, and otherwise the unique root there of the secular equation
  f(λ) = 1 − Σ_i α_i²/(α_i − λ) (f decreases from +∞ to −∞ on the open interval), found by
  bisection (100 steps in float64).
  """
  a = normalizers.softmax(logits, temperature, mask)  # (..., L)
  if a.shape[-1] == 1:
    return jnp.zeros(a.shape[:-1], a.dtype)
  top2 = jax.lax.top_k(a, 2)[0]
  a1, a2 = top2[..., 0:1], top2[..., 1:2]  # (..., 1)

  def body(_, bracket):
    lo, hi = bracket
    mid = (lo + hi) / 2
    inside = (mid > a2) & (mid < a1)
    den = a - mid  # nonzero for every i when a2 < mid < a1
    f = 1 - jnp.sum(a * a / jnp.where(inside, den, 1), axis=-1, keepdims=True)
    go_up = jnp.where(inside, f > 0, mid <= a2)
    return jnp.where(go_up, mid, lo), jnp.where(go_up, hi, mid)

  lo, hi = jax.lax.fori_loop(0, _bisect_iters(a.dtype), body, (a2, a1))
  lam = jnp.where(a1 - a2 > 0, (lo + hi) / 2, a1)
  lam = jnp.where(a2 > 0, lam, 0)  # α_(2) = 0 means α is one-hot (or zero): J = 0 exactly
  T = jnp.asarray(temperature, a.dtype)
  T = T[..., 0] if T.ndim and T.shape[-1:] == (1,) and T.ndim == a.ndim else T
  return lam[..., 0] / T


# ----------------------------------------------------------------------------- norms


def spectral_norm(J) -> Array:
  """Largest singular value of each (..., L, L) matrix (dense SVD)."""
  J = jnp.asarray(J)
  return jnp.linalg.svd(J, compute_uv=False)[..., 0]


def spectral_norm_matfree(fn: Callable, logits, iters: int = 100, mask=None, key=None) -> Array:
  """‖∂fn/∂l‖₂ per row by power iteration on JᵀJ via jvp and vjp (no L×L matrix).

  Starts from a Gaussian vector over the visible positions (``key``, default key(0); not the
  all-ones vector, which is in the null space of every simplex normalizer's J). Returns ‖Jv‖
  for the final unit v: a lower bound that converges to ‖J‖₂ at rate (σ₂/σ₁)^(2·iters).
  ``iters`` must be an integer >= 1 (LimitsError otherwise).
  """
  iters = _check_iters(iters)
  flat, m, lead = _flatten_rows(logits, mask)
  key = jax.random.key(0) if key is None else key
  v0 = jax.random.normal(key, flat.shape, flat.dtype)
  mm = jnp.ones(flat.shape, bool) if m is None else m

  def one(l, mrow, v):
    f = (lambda x: fn(x)) if m is None else (lambda x: fn(x, mrow))
    _, jvp = jax.linearize(f, l)
    _, vjp = jax.vjp(f, l)

    def unit(w):
      w = jnp.where(mrow, w, 0)
      n = jnp.linalg.norm(w)
      return jnp.where(n > 0, w / jnp.where(n > 0, n, 1), w)

    def body(_, v):
      w = vjp(jvp(v))[0]
      wn = unit(w)
      return jnp.where(jnp.linalg.norm(wn) > 0, wn, v)

    v = jax.lax.fori_loop(0, iters, body, unit(v))
    return jnp.linalg.norm(jvp(v))

  return jax.vmap(one)(flat, mm, v0).reshape(lead)


# ----------------------------------------------------------------------------- differences


def finite_difference(fn: Callable, logits, eps=None, mask=None) -> Array:
  """Central-difference Jacobian (fn(l + h e_j) − fn(l − h e_j)) / 2h, (..., L) -> (..., L, L).

  h = ``eps`` (default :data:`FD_EPS` for the dtype; a given eps must be finite and > 0).
  Columns of masked keys are 0.
  """
  flat, m, lead = _flatten_rows(logits, mask)
  if eps is not None:
    _check_step(eps)
  h = FD_EPS[_dtype(flat)] if eps is None else eps
  L = flat.shape[-1]
  E = jnp.eye(L, dtype=flat.dtype) * h  # (L, L), row j = h e_j

  def one(l, mrow):
    lp = l[None, :] + E  # (L, L): row j = l + h e_j
    lm = l[None, :] - E
    if m is None:
      d = (fn(lp) - fn(lm)) / (2 * h)  # (L_j, L_i)
    else:
      mb = jnp.broadcast_to(mrow, (L, L))
      d = (fn(lp, mb) - fn(lm, mb)) / (2 * h)
      d = jnp.where(mrow[:, None], d, 0)
    return d.T  # (L_i, L_j)

  mm = jnp.ones(flat.shape, bool) if m is None else m
  return jax.vmap(one)(flat, mm).reshape(lead + (L, L))


def random_directions(key, shape, mask=None, dtype=jnp.float32) -> Array:
  """Isotropic Gaussian directions over the visible positions, unit ℓ2 norm per row (AMBIG-13).

  A fully masked row gets the zero vector.
  """
  return unit_directions(jax.random.normal(key, shape, dtype), mask)


def unit_directions(v, mask=None) -> Array:
  """The normals ``v`` (..., L) masked to the visible positions and scaled to unit ℓ2 norm per
  row (:func:`random_directions` after its draw; a row with nothing visible gives 0)."""
  if mask is not None:
    v = jnp.where(jnp.broadcast_to(jnp.asarray(mask, bool), v.shape), v, 0)
  n = jnp.linalg.norm(v, axis=-1, keepdims=True)
  return jnp.where(n > 0, v / jnp.where(n > 0, n, 1), 0)


def fd_sensitivity(fn: Callable, logits, eps, key, mask=None) -> Array:
  """The paper's g(T, ε) = ‖fn(l + εv) − fn(l)‖₂ / ε per row, v a fresh random unit direction.

  Section 3.4 / Algorithm 5 (T lives inside fn). (..., L) -> (...,). For a normalizer onto the
  simplex, g ≤ √2/ε (the diameter of the simplex) and g ≤ ‖J‖₂ + O(ε). A concrete ε must
  be finite and > 0 (LimitsError).
  """
  _check_step(eps, "epsilon")
  normalizers.check_logits(logits)
  logits = jnp.asarray(logits)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    logits = logits.astype(jnp.result_type(float))
  v = random_directions(key, logits.shape, mask, logits.dtype)
  d = _call(fn, logits + eps * v, mask) - _call(fn, logits, mask)
  return jnp.linalg.norm(d, axis=-1) / eps


# ----------------------------------------------------------------------------- comparison


def _err(a, b, tol) -> dict:
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  diff = np.abs(a - b)
  max_abs = float(diff.max()) if diff.size else 0.0
  scale = float(np.abs(b).max()) if b.size else 0.0
  max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
  ok = bool(np.all(diff <= tol["atol"] + tol["rtol"] * scale)) and bool(np.all(np.isfinite(a)))
  return {"max_abs": max_abs, "max_rel": max_rel, "atol": tol["atol"], "rtol": tol["rtol"],
          "ok": ok}


def compare_arrays(J, J_rev=None, J_closed=None, J_fd=None, *, fd_eps=None, exact_tol=None,
                   fd_tol=None) -> dict:
  """Errors of jacrev, closed-form and finite-difference Jacobians against J (jacfwd).

  Same output as :func:`compare` for precomputed arrays (e.g. from a jitted kernel).
  """
  dt = _dtype(J)
  exact_tol = exact_tol or EXACT_TOL[dt]
  fd_tol = fd_tol or FD_TOL[dt]
  out = {"dtype": str(dt), "fd_eps": fd_eps}
  out["rev"] = None if J_rev is None else _err(J_rev, J, exact_tol)
  out["closed"] = None if J_closed is None else _err(J_closed, J, exact_tol)
  out["fd"] = None if J_fd is None else _err(J_fd, J, fd_tol)
  out["ok"] = all(v["ok"] for v in out.values() if isinstance(v, dict))
  return out


def compare(fn: Callable, logits, *, mask=None, closed: Callable | None = None, fd_eps=None,
            exact_tol=None, fd_tol=None) -> dict:
  """Exact (jacfwd) vs jacrev vs closed form vs central differences, with the tolerances used.

  Returns ``{"dtype", "fd_eps", "rev": err, "closed": err or None, "fd": err, "ok"}`` where
  each ``err = {"max_abs", "max_rel", "atol", "rtol", "ok"}``; max_rel is max|A − B| divided by
  max|B| (elementwise relative error is meaningless for the many zero entries), and ok means
  |A − B| ≤ atol + rtol·max|B| everywhere. Tolerances default to :data:`EXACT_TOL` and
  :data:`FD_TOL` for the dtype; the FD comparison is against the jacfwd Jacobian.
  """
  dt = _dtype(logits)
  fd_eps = FD_EPS[dt] if fd_eps is None else fd_eps

  @jax.jit  # one compile instead of one per primitive
  def all_jacobians(l, m):
    return (exact(fn, l, "fwd", m), exact(fn, l, "rev", m),
            None if closed is None else _call(closed, l, m),
            finite_difference(fn, l, fd_eps, m))

  Jf, Jr, Jc, Jd = all_jacobians(jnp.asarray(logits), mask)
  return compare_arrays(Jf, Jr, Jc, Jd, fd_eps=fd_eps, exact_tol=exact_tol, fd_tol=fd_tol)
