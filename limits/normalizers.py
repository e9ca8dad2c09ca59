"""Attention normalizers: the general normalizer of Eq. 3 and the alternatives the paper cites.

Every function maps a logit row ``(..., L)`` to weights ``(..., L)``; leading axes batch.
``mask`` is boolean, ``True`` = visible (broadcast against ``logits``). Conventions:

- masked entries get weight exactly 0 and receive zero gradient;
- a fully masked row gives all zeros, finite forward and backward (no ``-inf - -inf``);
- stable at extreme but legal input (temperature 1e-4, logits ±1e4) in float32 and float64;
- a NaN among a row's visible logits makes that whole row NaN (as ``jax.nn.softmax`` does):
  never all zeros, which would look like a fully masked row. The same holds for a traced
  temperature (or ``s``) that is ≤ 0 or NaN under ``jit``: the rows it scales are NaN. A
  concrete temperature ≤ 0 is a :class:`~limits.errors.LimitsError`, as is a scalar or
  empty (L = 0) logit array and a mask that does not broadcast to the logits' shape.

Implemented:

- :func:`general` — Eq. 3, α_i = F(l_i) / Σ_j F(l_j) for any positive elementwise F (θ, e.g. the
  temperature, is closed over by F). Lemma 1 and Lemma 2 are statements about this family.
- :func:`softmax` — F(l, T) = exp(l / T), computed with max-subtraction.
- :func:`sparsemax` — Euclidean projection onto the simplex (Martins & Astudillo 2016),
  sort-based; tested against ``optax.projections.projection_simplex`` and ``entmax.sparsemax``.
- :func:`entmax` — α-entmax (Peters et al. 2019) for any α > 1 by bisection on the threshold τ,
  with the exact implicit-function Jacobian as a ``custom_jvp``; :func:`entmax15_exact` is the
  sort-based closed form for α = 1.5 (α = 2 is :func:`sparsemax`).
- :func:`ssmax` — Scalable-Softmax (Nakanishi 2025): softmax of s·log(n)·z with n the number of
  *visible* keys in each row (not the padded row length).
- :func:`sa_softmax` — Self-Adjusted softmax z ⊙ softmax(z) (Zheng et al. 2025). NOT a
  probability vector (entries can be negative and need not sum to 1).

:func:`get` builds any of these from a name and parameters; :data:`NAMES` lists the names.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from limits import numerics
from limits.errors import LimitsError

# Public re-exports (their home is limits.numerics).
check_logits = numerics.check_logits
visible_count = numerics.visible_count

Array = jax.Array


# ----------------------------------------------------------------------------- helpers


def _check_alpha(alpha) -> float:
  v = numerics.concrete_float(alpha)
  if v is None:
    raise LimitsError("entmax alpha must be a concrete Python number (it selects the algorithm)")
  if not (np.isfinite(v) and v > 1):
    raise LimitsError(f"entmax alpha={v!r} is not allowed; it must be a finite number > 1")
  return v


def _positive_or_nan(value, dtype) -> Array:
  """value where > 0, else NaN: a traced temperature ≤ 0 gives NaN rows, not plausible ones."""
  v = jnp.asarray(value, dtype)
  return jnp.where(v > 0, v, jnp.nan)


# ----------------------------------------------------------------------------- Eq. 3


def general(logits, F: Callable[[Array], Array], mask=None) -> Array:
  """Eq. 3: α_i = F(l_i) / Σ_{j visible} F(l_j) for a positive elementwise F.

  F holds its parameters θ (e.g. ``lambda l: jnp.exp(l / T)``) and must not depend on L
  (Lemma 1's hypothesis). No rescaling is done, so an F that over- or underflows at the given
  logits does so here too; use :func:`softmax` for the exponential. Masked entries are fed
  ``0`` (F(0) must be finite) and get weight 0.
  """
  logits = numerics.as_float(logits)
  m = numerics.mask_like(logits, mask)
  f = jnp.where(m, F(jnp.where(m, logits, 0)), 0)  # (..., L)
  return numerics.safe_div(f, jnp.sum(f, axis=-1, keepdims=True))


# ----------------------------------------------------------------------------- softmax


def _masked_max(z: Array, m: Array) -> Array:
  """Max over visible entries (0 for a fully masked row), gradient-free, keepdims."""
  zmax = jnp.max(jnp.where(m, z, -jnp.inf), axis=-1, keepdims=True)
  zmax = jnp.where(jnp.isfinite(zmax), zmax, 0)
  return jax.lax.stop_gradient(zmax)


def softmax(logits, temperature=1.0, mask=None) -> Array:
  """Softmax with temperature, Eq. 2: α_i = exp(l_i/T) / Σ_j exp(l_j/T) over visible j.

  ``temperature`` is a positive scalar or an array broadcasting against ``logits[..., :1]``
  (one T per row). Max-subtraction keeps exp ≤ 1; the max is stop-gradient (softmax is
  shift-invariant, so the gradient is unchanged).
  """
  numerics.check_positive(temperature, "temperature")
  logits = numerics.as_float(logits)
  m = numerics.mask_like(logits, mask)
  temperature = _positive_or_nan(temperature, logits.dtype)
  # Shift in logit space *before* dividing by T: XLA may compile x / T as x * (1/T) in one
  # place and not another, so a shift after scaling need not give exactly 0 at the max.
  x = jnp.where(m, logits, 0)
  z = (x - _masked_max(x, m)) / temperature  # (..., L), <= 0, exactly 0 at the max
  e = jnp.where(m, jnp.exp(jnp.where(m, z, 0)), 0)
  return numerics.safe_div(e, jnp.sum(e, axis=-1, keepdims=True))


def ssmax(logits, s=1.0, mask=None) -> Array:
  """Scalable-Softmax: softmax(s · log(n) · z) with n = number of visible keys in each row.

  n counts the visible (unmasked) keys, so a causal query at position t uses n = t, not the
  padded length. With n = 1, log n = 0 and the single visible key gets weight 1.
  """
  numerics.check_positive(s, "s")
  logits = numerics.as_float(logits)
  m = numerics.mask_like(logits, mask)
  s = _positive_or_nan(s, logits.dtype)
  n = numerics.visible_count(m)[..., None].astype(logits.dtype)  # (..., 1)
  scale = s * jnp.log(jnp.maximum(n, 1))
  x = jnp.where(m, logits, 0)
  z = (x - _masked_max(x, m)) * scale  # shift before scaling (see softmax)
  e = jnp.where(m, jnp.exp(jnp.where(m, z, 0)), 0)
  return numerics.safe_div(e, jnp.sum(e, axis=-1, keepdims=True))


def sa_softmax(logits, temperature=1.0, mask=None) -> Array:
  """Self-Adjusted softmax z ⊙ softmax(z), z = logits / T (Zheng et al. 2025, cited by the paper).

  Not a probability vector: entries may be negative and need not sum to 1, so bounds that rely
  on the simplex (√2 for finite differences) do not apply to it.
  """
  numerics.check_positive(temperature, "temperature")
  logits = numerics.as_float(logits)
  m = numerics.mask_like(logits, mask)
  temperature = _positive_or_nan(temperature, logits.dtype)
  z = jnp.where(m, logits, 0) / temperature
  return jnp.where(m, z * softmax(logits, temperature, m), 0)


# ----------------------------------------------------------------------------- sparsemax


def _sorted_visible(z: Array, m: Array):
  """Visible values sorted descending (masked ones last, replaced by 0) and their ranks."""
  zs = -jnp.sort(-jnp.where(m, z, -jnp.inf), axis=-1)  # (..., L), masked -> -inf at the end
  n = numerics.visible_count(m)[..., None]  # (..., 1)
  rank = jnp.arange(1, z.shape[-1] + 1, dtype=jnp.int32)  # (L,)
  valid = rank <= n  # (..., L)
  zs = jnp.where(valid, zs, 0)
  return zs, rank, valid, n


def sparsemax(logits, mask=None) -> Array:
  """Sparsemax: argmin_{p ∈ Δ} ‖p − z‖² = [z − τ]_+ over the visible entries (sort-based).

  τ = (Σ_{k ≤ k*} z_(k) − 1) / k* with k* = max{k : 1 + k z_(k) > Σ_{j ≤ k} z_(j)}
  (Martins & Astudillo 2016, Prop. 1). Equal to ``optax.projections.projection_simplex`` per row.
  """
  z = numerics.as_float(logits)
  m = numerics.mask_like(z, mask)
  z = jnp.where(m, z, 0)
  z = z - _masked_max(z, m)
  zs, rank, valid, _ = _sorted_visible(z, m)
  cs = jnp.cumsum(zs, axis=-1)
  support = valid & (1 + rank * zs > cs)
  k = jnp.maximum(jnp.sum(support, axis=-1, keepdims=True, dtype=jnp.int32), 1)  # (..., 1)
  cs_k = jnp.take_along_axis(cs, k - 1, axis=-1)
  tau = (cs_k - 1) / k.astype(z.dtype)
  out = jnp.where(m, jnp.maximum(z - tau, 0), 0)
  # The sort puts a NaN last, so the threshold could look fine: make the whole row NaN.
  has_nan = jnp.any(m & jnp.isnan(z), axis=-1, keepdims=True)
  return jnp.where(has_nan, jnp.nan, out)


# ----------------------------------------------------------------------------- entmax


def entmax15_exact(logits, mask=None) -> Array:
  """1.5-entmax by the exact sort-based algorithm (Peters et al. 2019, Alg. 2).

  p_i = [z_i/2 − τ]_+², τ from the sorted prefix moments. Used to check :func:`entmax`.
  """
  z = numerics.as_float(logits)
  m = numerics.mask_like(z, mask)
  x = jnp.where(m, z, 0)
  x = (x - _masked_max(x, m)) / 2  # shift before scaling (see softmax)
  xs, rank, valid, _ = _sorted_visible(x, m)
  r = rank.astype(x.dtype)
  mean = jnp.cumsum(xs, axis=-1) / r
  mean_sq = jnp.cumsum(xs * xs, axis=-1) / r
  ss = r * (mean_sq - mean * mean)
  delta = (1 - ss) / r
  dpos = delta > 0  # safe sqrt: no inf gradient at delta == 0
  tau = mean - jnp.where(dpos, jnp.sqrt(jnp.where(dpos, delta, 1)), 0)
  support = valid & (tau <= xs)
  k = jnp.maximum(jnp.sum(support, axis=-1, keepdims=True, dtype=jnp.int32), 1)
  tau_star = jnp.take_along_axis(tau, k - 1, axis=-1)
  p = jnp.where(m, jnp.square(jnp.maximum(x - tau_star, 0)), 0)
  return numerics.safe_div(p, jnp.sum(p, axis=-1, keepdims=True))


def _bisect_iters(dtype) -> int:
  # The τ bracket has width < 1 and halves each step: 2^-64 is below float64 resolution.
  return 64 if jnp.dtype(dtype) == jnp.float64 else 40


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _entmax_bisect(z: Array, m: Array, alpha: float) -> Array:
  """p_i = [(α−1) z_i − τ]_+^{1/(α−1)} with Σ p = 1, τ by bisection (masked rows -> 0)."""
  am1 = alpha - 1.0
  x = jnp.where(m, z, 0)
  x = (x - _masked_max(x, m)) * am1  # max visible entry is exactly 0 (shift before scaling)
  n = jnp.maximum(numerics.visible_count(m)[..., None], 1).astype(x.dtype)
  # Σ p(τ) is decreasing in τ; at τ = −1 the top entry alone gives 1, at τ = −n^{1−α}... every
  # entry is ≤ 1/n. So τ* ∈ [−1, −(1/n)^{α−1}].
  lo = jnp.full_like(n, -1.0)
  hi = -jnp.power(1.0 / n, am1)

  def p_of(tau):
    return jnp.where(m, jnp.power(jnp.maximum(x - tau, 0), 1.0 / am1), 0)

  def body(_, bracket):
    lo, hi = bracket
    mid = (lo + hi) / 2
    too_big = jnp.sum(p_of(mid), axis=-1, keepdims=True) >= 1  # τ* ≥ mid
    return jnp.where(too_big, mid, lo), jnp.where(too_big, hi, mid)

  lo, hi = jax.lax.fori_loop(0, _bisect_iters(x.dtype), body, (lo, hi))
  p = p_of(lo)  # Σ p(lo) ≥ 1: the support is never empty
  return numerics.safe_div(p, jnp.sum(p, axis=-1, keepdims=True))


@_entmax_bisect.defjvp
def _entmax_bisect_jvp(alpha, primals, tangents):
  """Implicit-function Jacobian: J = diag(s) − s sᵀ / Σs, s_i = p_i^{2−α} on the support."""
  z, m = primals
  dz, _ = tangents
  p = _entmax_bisect(z, m, alpha)
  pos = p > 0
  s = jnp.where(pos, jnp.power(jnp.where(pos, p, 1), 2.0 - alpha), 0)
  sdz = s * jnp.where(m, dz, 0)
  q = numerics.safe_div(jnp.sum(sdz, axis=-1, keepdims=True), jnp.sum(s, axis=-1, keepdims=True))
  return p, sdz - q * s


def entmax(logits, alpha=1.5, mask=None) -> Array:
  """α-entmax for any α > 1: argmax_{p∈Δ} pᵀz + H^T_α(p) = [(α−1)z − τ]_+^{1/(α−1)}.

  τ by bisection (64 steps in float64, 40 in float32) then renormalised; the derivative is the
  exact implicit one (``custom_jvp``), so jacfwd and jacrev both work. α → 1 approaches softmax,
  α = 2 is :func:`sparsemax`, α = 1.5 equals :func:`entmax15_exact`.
  """
  a = _check_alpha(alpha)
  z = numerics.as_float(logits)
  m = numerics.mask_like(z, mask)
  return _entmax_bisect(z, m, a)


# ----------------------------------------------------------------------------- registry


_REGISTRY: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "softmax": (softmax, ("temperature",)),
    "sparsemax": (sparsemax, ()),
    "entmax": (entmax, ("alpha",)),
    "entmax15_exact": (entmax15_exact, ()),
    "ssmax": (ssmax, ("s",)),
    "sa_softmax": (sa_softmax, ("temperature",)),
}

NAMES: tuple[str, ...] = tuple(_REGISTRY)

# Normalizers whose output is a probability vector (on the simplex).
SIMPLEX: frozenset[str] = frozenset({"softmax", "sparsemax", "entmax", "entmax15_exact", "ssmax"})


def get(name: str, **params) -> Callable[..., Array]:
  """The normalizer ``name`` with its parameters bound: ``fn(logits, mask=None)``.

  Parameters set to None are ignored (so a CLI can pass every flag). Unknown names, unknown
  parameters and bad values (T ≤ 0, α ≤ 1, s ≤ 0) raise a one-line LimitsError.
  """
  if name not in _REGISTRY:
    raise LimitsError(f"unknown normalizer {name!r}; choose one of {', '.join(NAMES)}")
  fn, allowed = _REGISTRY[name]
  params = {k: v for k, v in params.items() if v is not None}
  extra = sorted(set(params) - set(allowed))
  if extra:
    allowed_txt = ", ".join(allowed) if allowed else "none"
    raise LimitsError(f"normalizer {name!r} takes no parameter {', '.join(extra)} "
                      f"(allowed: {allowed_txt})")
  if "temperature" in params:
    numerics.check_positive(params["temperature"], "temperature")
  if "s" in params:
    numerics.check_positive(params["s"], "s")
  if "alpha" in params:
    params["alpha"] = _check_alpha(params["alpha"])

  return Normalizer(name, fn, params)


class Normalizer:
  """A normalizer with its parameters bound (:func:`get`): ``fn(logits, mask=None)``;
  ``__name__`` its name, ``params`` its parameters.

  Equal, with equal hashes, when the name and parameters are: the library's compiled kernels
  are cached by their normalizer (``jax.jit`` static arguments, ``functools.lru_cache``), so
  every ``get`` of the same normalizer shares them. A fresh closure per ``get`` compiled them
  again on every call (g(T, ε) of 1,024 rows × 26 T: 5.1–5.6 s a call against 0.7 s; the
  CLIs hid it behind the persistent compilation cache) and kept every copy alive.
  Parameters that cannot be hashed (an array temperature) make it equal only to itself.
  """

  def __init__(self, name: str, fn: Callable[..., Array], params: dict):
    self.__name__ = self.__qualname__ = name
    self._fn = fn
    self.params = dict(params)
    try:
      self._key = (name, fn, tuple(sorted(self.params.items())))
      hash(self._key)
    except TypeError:
      self._key = None

  def __call__(self, logits, mask=None):
    return self._fn(logits, mask=mask, **self.params)

  def __eq__(self, other):
    if self is other:
      return True
    return (isinstance(other, Normalizer) and self._key is not None
            and self._key == other._key)

  def __hash__(self):
    return id(self) if self._key is None else hash(self._key)

  def __repr__(self):
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
    return f"normalizers.get({self.__name__!r}{', ' if args else ''}{args})"
