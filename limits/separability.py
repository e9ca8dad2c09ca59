"""Theorem 2 (§2.2, Algorithm 4): geometric separability of the top-N tokens.

Notation (PAPER.md §2 "Section 2.2"): weights ``alpha (L,)``, vectors ``x (L, d)`` on the sphere
S^{d-1}(M) (Assumption 1), the top-N set I_N (the N largest weights), the context vector
``s = sum_{i in I_N} alpha_i x_i`` (not renormalised) and the per-token distance
``X_i = ||alpha_i x_i - s||``.

Decisions (AMBIG-10), each an explicit option:

- **Radius r** (Algorithm 4): ``r = min_{j not in I_N} ||alpha_j x_j - s||``, recomputed for every
  row / sample.
- **Counting rule** ``rule="strict"`` (default): N_s = #{i in I_N : X_i < r}. With r defined as
  the minimum non-selected distance, every non-selected token is automatically at distance
  >= r, so the second indicator of the paper's definition is implied by the strict inequality.
  ``rule="literal"`` is the paper's literal formula (closed ball ``X_i <= r`` *and* every
  non-selected ``> r``); with this r it is 0 whenever a non-selected token exists, because the
  token that sets r lies on the sphere of radius r. It is exposed only to show that.
- **All tokens selected** (N >= number of visible tokens): there is no non-selected token, so
  r = +inf, every selected token counts (N_s/N = 1) and both bounds equal 1. No NaN.
- **Empty selection** (a fully masked row): N_s/N, lower and upper are all defined as 1
  (vacuously true); no NaN.
- **Ties in alpha** are broken by position (lower index first, stable sort).
- **delta** (Assumption 2): the minimum pairwise distance among the visible tokens, excluding
  duplicates (pairs whose Gram-identity squared distance is within rounding of 0, i.e.
  <= 16 eps (|x_i|^2 + |x_j|^2)); +inf when fewer than two distinct tokens. Inside ``xi`` it is
  clipped to [0, 2M] (no two points of S^{d-1}(M) are farther than 2M apart).
- **Theorem 2** (AMBIG-5 default, §2 reconstruction):
  ``1 - sum_i xi_i / (N r) <= E[N_s]/N <= (1/N) sum_i exp(-(xi_i - r)_+^2 / (2 M^2))`` with
  ``xi_i^2 = (M^2 - delta^2/2) (sum_{j in I_N, j!=i} alpha_j)^2
  + (delta^2/2) sum_{j in I_N, j!=i} alpha_j^2`` (clipped at 0 before the square root).
  The lower bound is Markov + Cauchy-Schwarz for a *fixed* r; it is clipped at 0 by default
  (``clip=False`` returns the raw value). At r = 0 it is vacuous: the raw value is -inf and the
  clipped one 0. The upper bound is a heuristic envelope (PAPER.md "strict-math caveat").

Monte Carlo (``monte_carlo``) draws fresh points uniform on S^{d-1}(M) (normalised Gaussians)
for each sample, with per-sample keys ``fold_in(key, sample_index)``, so the estimate does not
depend on the chunk size or on the number of devices the sample axis is sharded over.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from limits.errors import LimitsError, check

RULES = ("strict", "literal")
ALPHA_KINDS = ("uniform", "zipf", "softmax")


# --------------------------------------------------------------------------------------------
# Selection and the distinguishability count.
# --------------------------------------------------------------------------------------------

def _visible(alpha, mask):
  return jnp.ones(alpha.shape, bool) if mask is None else jnp.broadcast_to(mask, alpha.shape)


@jax.jit
def ranks(alpha, mask=None):
  """Rank of each token by weight within its row (0 = largest), masked tokens last.

  Ties are broken by position (stable sort). alpha (..., L) -> int32 (..., L).
  """
  visible = _visible(alpha, mask)
  key = jnp.where(visible, alpha, -jnp.inf)
  order = jnp.argsort(-key, axis=-1, stable=True)
  return jnp.argsort(order, axis=-1, stable=True).astype(jnp.int32)


def sort_desc(alpha, mask=None):
  """Row-wise weights sorted in decreasing order, masked entries as -inf last. (..., L)."""
  key = jnp.where(_visible(alpha, mask), alpha, -jnp.inf)
  return -jnp.sort(-key, axis=-1)


def _select(alpha, sorted_desc, visible, n):
  """I_N from one sort: tokens above the N-th largest weight, plus ties at it by position.

  Equals ``ranks(alpha, mask) < n`` (stable tie-breaking) without a second sort; n may be
  traced.
  """
  L = alpha.shape[-1]
  key = jnp.where(visible, alpha, -jnp.inf)
  idx = jnp.clip(jnp.asarray(n, jnp.int32) - 1, 0, L - 1)
  thr = jnp.take(sorted_desc, idx, axis=-1)[..., None]              # N-th largest weight
  gt = (key > thr) & visible
  eq = (key == thr) & visible
  need = n - jnp.sum(gt, axis=-1, keepdims=True)
  return (gt | (eq & (jnp.cumsum(eq, axis=-1) <= need))) & (n >= 1)


@jax.jit
def top_n_mask(alpha, n, mask=None):
  """Boolean (..., L): the N visible tokens with the largest weights (I_N). n may be traced.

  Ties are broken by position (lower index first).
  """
  visible = _visible(alpha, mask)
  return _select(alpha, sort_desc(alpha, mask), visible, n)


@functools.partial(jax.jit, static_argnames=("rule",))
def count_distinguishable(alpha, x, n, mask=None, *, rule: str = "strict"):
  """N_s and r of §2.2 for one row, by direct differences (the reference definition).

  Args:
    alpha: (L,) attention weights of one query.
    x: (L, d) vectors (on S^{d-1}(M) for Theorem 2; any vectors are accepted).
    n: top-N size (int, may be traced); capped at the number of visible tokens.
    mask: optional (L,) bool, True = visible (causal prefix).
    rule: "strict" (default, AMBIG-10) or "literal" (the paper's literal formula; always 0 when a
      non-selected token exists, see the module docstring).

  Returns:
    (n_s int32 scalar, r scalar); r = +inf when every visible token is selected.
  """
  check(rule in RULES, f"rule={rule!r} is not one of {RULES}")
  visible = _visible(alpha, mask)
  sel = top_n_mask(alpha, n, mask)
  a = jnp.where(visible, alpha, 0)
  ax = a[:, None] * x                                     # (L, d)
  s = jnp.sum(jnp.where(sel[:, None], ax, 0), axis=0)     # (d,)
  diff = ax - s
  dist = jnp.sqrt(jnp.sum(diff * diff, axis=-1))          # (L,)
  nonsel = visible & ~sel
  r = jnp.min(jnp.where(nonsel, dist, jnp.inf))
  if rule == "strict":
    inside = sel & (dist < r)
  else:
    outside = jnp.all(jnp.where(nonsel, dist > r, True))
    inside = sel & (dist <= r) & outside
  return jnp.sum(inside).astype(jnp.int32), r


@functools.partial(jax.jit, static_argnames=("rule",))
def separable_fraction(alpha, x, n, mask=None, *, rule: str = "strict"):
  """N_s / N for one row, with N = min(n, visible tokens); 1 for an empty selection."""
  n_s, _ = count_distinguishable(alpha, x, n, mask, rule=rule)
  n_eff = jnp.sum(top_n_mask(alpha, n, mask))
  return jnp.where(n_eff > 0, n_s / jnp.maximum(n_eff, 1), 1.0)


# --------------------------------------------------------------------------------------------
# delta (Assumption 2).
# --------------------------------------------------------------------------------------------

def _pairwise_sq(x):
  """Squared distances by the Gram identity and the duplicate threshold. x (..., L, d)."""
  sq = jnp.sum(x * x, axis=-1)                                      # (..., L)
  gram = jnp.einsum("...id,...jd->...ij", x, x)                      # (..., L, L)
  d2 = jnp.maximum(sq[..., :, None] + sq[..., None, :] - 2 * gram, 0)
  eps = jnp.finfo(x.dtype).eps
  dup = d2 <= 16 * eps * (sq[..., :, None] + sq[..., None, :])
  return d2, dup


@jax.jit
def min_pairwise_distance(x, mask=None):
  """delta: min ||x_i - x_j|| over visible i != j, duplicates excluded; +inf if no pair.

  x (L, d), mask (L,) bool. Uses the Gram identity (one (L, L) matmul).
  """
  L = x.shape[-2]
  d2, dup = _pairwise_sq(x)
  ok = ~dup & ~jnp.eye(L, dtype=bool)
  if mask is not None:
    ok = ok & mask[:, None] & mask[None, :]
  return jnp.sqrt(jnp.min(jnp.where(ok, d2, jnp.inf)))


@jax.jit
def prefix_min_pairwise_distance(x):
  """delta_t for every causal prefix: (L,) with entry t = min distance among x_0..x_t.

  Entry 0 is +inf (a single token has no pair). x (L, d); duplicates excluded as in
  ``min_pairwise_distance``.
  """
  L = x.shape[-2]
  d2, dup = _pairwise_sq(x)
  lower = jnp.tril(jnp.ones((L, L), bool), k=-1)            # pairs (i, j) with j < i
  m = jnp.min(jnp.where(lower & ~dup, d2, jnp.inf), axis=-1)  # (L,) nearest earlier token
  return jnp.sqrt(jax.lax.cummin(m, axis=m.ndim - 1))


# --------------------------------------------------------------------------------------------
# Theorem 2.
# --------------------------------------------------------------------------------------------

def _leave_one_out_sum(v):
  """sum_{j != i} v_j for every i, (..., L), without the subtraction sum(v) - v_i.

  Built from exclusive prefix and suffix sums, so a row with one non-zero entry gives exactly 0
  there. ``sum(v) - v`` does not: under jit XLA may contract it with the products that formed v
  into an FMA and return the rounding residual of v_i^2 (~1e-9), which the square root in xi
  turns into ~3e-5 (seen as a Theorem 2 lower bound of 0.99993 instead of 1 at N = 1).
  """
  zero = jnp.zeros_like(v[..., :1])
  before = jnp.concatenate([zero, jnp.cumsum(v[..., :-1], axis=-1)], axis=-1)
  after = jnp.concatenate([jnp.cumsum(v[..., :0:-1], axis=-1)[..., ::-1], zero], axis=-1)
  return before + after


def _xi_from_selected(alpha, sel, M, delta):
  """xi_i (..., L) from a selection mask; 0 outside I_N. delta broadcasts against alpha[..., 0]."""
  dtype = alpha.dtype
  M = jnp.asarray(M, dtype)
  delta = jnp.clip(jnp.asarray(delta, dtype), 0, 2 * M)[..., None]
  w = jnp.where(sel, alpha, 0)
  s1 = _leave_one_out_sum(w)           # sum over I_N \ {i} of alpha_j
  s2 = _leave_one_out_sum(w * w)       # sum over I_N \ {i} of alpha_j^2
  xi2 = (M * M - delta * delta / 2) * s1 * s1 + (delta * delta / 2) * s2
  return jnp.where(sel, jnp.sqrt(jnp.maximum(xi2, 0)), 0)


@jax.jit
def xi(alpha, n, M, delta, mask=None):
  """xi_i of Theorem 2 for every token: (..., L), 0 for tokens outside I_N.

  xi_i^2 = M^2 sum_{j in I_N\\{i}} alpha_j^2 + (M^2 - delta^2/2) sum_{j != k in I_N\\{i}} alpha_j
  alpha_k, computed as (M^2 - delta^2/2) S1^2 + (delta^2/2) S2 (AMBIG-5 default).
  """
  return _xi_from_selected(alpha, top_n_mask(alpha, n, mask), M, delta)


def _bounds_from_selected(alpha, sel, M, delta, r, clip=True, printed=False):
  dtype = alpha.dtype
  M = jnp.asarray(M, dtype)
  r = jnp.asarray(r, dtype)
  xis = _xi_from_selected(alpha, sel, M, delta)
  n_eff = jnp.sum(sel, axis=-1)
  nf = jnp.maximum(n_eff, 1).astype(dtype)
  xi_sum = jnp.sum(xis, axis=-1)
  safe_r = jnp.where(r > 0, r, 1)
  lower = jnp.where(r > 0, 1 - xi_sum / (nf * safe_r), -jnp.inf)
  lower = jnp.where(n_eff > 0, lower, 1)
  if clip:
    lower = jnp.maximum(lower, 0)
  gap = jnp.maximum(xis - r[..., None], 0)          # (xi_i - r)_+ ; 0 when r = +inf
  terms = jnp.where(sel, jnp.exp(-gap * gap / (2 * M * M)), 0)
  upper = jnp.where(n_eff > 0, jnp.sum(terms, axis=-1) / nf, 1)
  if not printed:
    return lower, upper
  # The printed form (1/N)·Σ exp[−(r − ξ_i)²/(16M²)] (no positive part; limits.printed); 1 where
  # r = +inf (every token selected), as the derived form.
  finite = jnp.isfinite(r)
  d = jnp.where(finite[..., None], r[..., None] - xis, 0)
  pterms = jnp.where(sel, jnp.exp(-d * d / (16 * M * M)), 0)
  upper_printed = jnp.where((n_eff > 0) & finite, jnp.sum(pterms, axis=-1) / nf, 1)
  return lower, upper, upper_printed


@functools.partial(jax.jit, static_argnames=("clip",))
def theorem2_bounds(alpha, n, M, delta, r, mask=None, *, clip: bool = True):
  """Theorem 2 (Eq. 11, AMBIG-5 default) for a row (or rows) of weights.

  Args:
    alpha: (..., L) weights; n: top-N size; M: sphere radius; delta: (...) minimum pairwise
      distance; r: (...) tolerance radius (Algorithm 4 passes the data-dependent r).
    clip: if True (default) the lower bound is clipped at 0; False returns the raw value
      (-inf at r = 0, where the Markov bound is vacuous).

  Returns:
    (lower, upper), each (...). Both are 1 when r = +inf (all tokens selected).
  """
  return _bounds_from_selected(alpha, top_n_mask(alpha, n, mask), M, delta, r, clip)


# --------------------------------------------------------------------------------------------
# Batched rows (Gram identity): shared by the Monte Carlo and the model source.
# --------------------------------------------------------------------------------------------

class RowStats(NamedTuple):
  """Per-row results; every field has the row shape."""
  frac: Any            # N_s / N
  n_s: Any
  n_eff: Any           # min(n, visible)
  r: Any
  lower: Any           # clipped at 0
  lower_raw: Any       # unclipped
  upper: Any
  upper_printed: Any   # the paper's printed form (16M², no positive part)


def row_stats(alpha, sorted_desc, visible, x, n, M, delta, *, rule: str = "strict",
              method: str = "gram") -> RowStats:
  """N_s/N, r and both bounds for rows of weights over one shared set of vectors.

  Args:
    alpha: (R, L) weights; sorted_desc: (R, L) from ``sort_desc`` (computed once, reused for
      every n); visible: (R, L) bool.
    x: (L, d) vectors shared by all rows; n: top-N size (may be traced); M: radius;
    delta: (R,) or scalar minimum pairwise distance for the bounds.
    method: "gram" uses ||a_i x_i - s||^2 = a_i^2 |x_i|^2 - 2 a_i <x_i, s> + |s|^2 (two matmuls,
      no (R, L, d) array; loses accuracy when a distance is below ~sqrt(eps) times
      max(a_i |x_i|, |s|), e.g. thousands of points in 2-3 dimensions in float32); "direct"
      forms the (R, L, d) differences (exact up to rounding of each difference).
  """
  sel = _select(alpha, sorted_desc, visible, n)
  a = jnp.where(visible, alpha, 0)
  w = jnp.where(sel, a, 0)
  s = w @ x                                                     # (R, d)
  if method == "gram":
    xs = s @ x.T                                                # (R, L) <x_i, s>
    xx = jnp.sum(x * x, axis=-1)                                # (L,)
    ss = jnp.sum(s * s, axis=-1)                                # (R,)
    d2 = a * a * xx - 2 * a * xs + ss[:, None]
    dist = jnp.sqrt(jnp.maximum(d2, 0))                         # (R, L)
  elif method == "direct":
    diff = a[:, :, None] * x[None] - s[:, None, :]              # (R, L, d)
    dist = jnp.sqrt(jnp.sum(diff * diff, axis=-1))              # (R, L)
  else:
    raise LimitsError(f"method={method!r} is not 'gram' or 'direct'")
  nonsel = visible & ~sel
  r = jnp.min(jnp.where(nonsel, dist, jnp.inf), axis=-1)        # (R,)
  if rule == "strict":
    inside = sel & (dist < r[:, None])
  else:
    outside = jnp.all(jnp.where(nonsel, dist > r[:, None], True), axis=-1)
    inside = sel & (dist <= r[:, None]) & outside[:, None]
  n_s = jnp.sum(inside, axis=-1)
  n_eff = jnp.sum(sel, axis=-1)
  frac = jnp.where(n_eff > 0, n_s / jnp.maximum(n_eff, 1), 1.0).astype(alpha.dtype)
  delta = jnp.broadcast_to(jnp.asarray(delta, alpha.dtype), r.shape)
  lower_raw, upper, upper_p = _bounds_from_selected(a, sel, M, delta, r, clip=False,
                                                    printed=True)
  return RowStats(frac, n_s, n_eff, r, jnp.maximum(lower_raw, 0), lower_raw, upper, upper_p)


# --------------------------------------------------------------------------------------------
# Synthetic weights and points on the sphere.
# --------------------------------------------------------------------------------------------

def synthetic_alpha(kind: str, L: int, key=None, *, temperature: float = 1.0,
                    zipf_s: float = 1.0, dtype=None):
  """Synthetic attention weights (L,) summing to 1.

  kind: "uniform" (1/L), "zipf" (alpha_i proportional to i^-zipf_s, i = 1..L, in a random order
  when a key is given), "softmax" (softmax of standard Gaussian logits / temperature; needs key).
  """
  check(kind in ALPHA_KINDS, f"alpha kind {kind!r} is not one of {ALPHA_KINDS}")
  check(int(L) >= 1, f"L={L} must be >= 1")
  check(temperature > 0, f"temperature={temperature} must be > 0")
  dtype = dtype or jnp.result_type(float)
  if kind == "uniform":
    return jnp.full((L,), 1.0 / L, dtype)
  if kind == "zipf":
    a = jnp.arange(1, L + 1, dtype=dtype) ** (-jnp.asarray(zipf_s, dtype))
    if key is not None:
      a = jax.random.permutation(key, a)
    return a / jnp.sum(a)
  check(key is not None, "alpha kind 'softmax' needs a random key")
  g = jax.random.normal(key, (L,), dtype)
  return jax.nn.softmax(g / temperature)


def sphere_points(key, L: int, dim: int, M, dtype=None):
  """(L, dim) points uniform on S^{dim-1}(M): normalised standard Gaussians."""
  dtype = dtype or jnp.result_type(float)
  g = jax.random.normal(key, (L, dim), dtype)
  norm = jnp.sqrt(jnp.sum(g * g, axis=-1, keepdims=True))
  g = jnp.where(norm > 0, g, jnp.ones_like(g))       # measure-zero guard
  norm = jnp.sqrt(jnp.sum(g * g, axis=-1, keepdims=True))
  return jnp.asarray(M, dtype) * g / norm


# --------------------------------------------------------------------------------------------
# Monte Carlo on the sphere (Algorithm 4 with synthetic embeddings).
# --------------------------------------------------------------------------------------------

STAT_NAMES = ("frac", "r", "delta", "lower", "lower_raw", "upper")


def _sample_stats(key, index, alphas, rank, ns, dim, M, delta_fixed, with_bounds, rule):
  """Stats of one sample: (S, H, K) with S = len(STAT_NAMES). alphas (H, L), ns (K,)."""
  L = alphas.shape[-1]
  x = sphere_points(jax.random.fold_in(key, index), L, dim, M, alphas.dtype)   # (L, dim)
  if with_bounds and delta_fixed is None:
    delta = min_pairwise_distance(x)
  elif delta_fixed is None:
    delta = jnp.asarray(jnp.nan, alphas.dtype)   # not computed (bounds off)
  else:
    delta = jnp.asarray(delta_fixed, alphas.dtype)
  visible = jnp.ones(alphas.shape, bool)
  dl = jnp.where(jnp.isfinite(delta), delta, 0)

  def per_n(n):
    st = row_stats(alphas, rank, visible, x, n, M, dl, rule=rule, method="direct")
    return jnp.stack([st.frac, st.r, jnp.broadcast_to(delta, st.r.shape), st.lower,
                      st.lower_raw, st.upper])             # (S, H)

  out = jax.lax.map(per_n, ns)                              # (K, S, H); one n at a time
  return jnp.moveaxis(out, 0, -1)                           # (S, H, K)


def _chunk_stats(key, indices, alphas, rank, ns, M, delta_fixed, *, dim, with_bounds, rule):
  """(c, S, H, K) stats for the sample indices of one chunk (vmapped over samples)."""
  one = lambda i: _sample_stats(key, i, alphas, rank, ns, dim, M, delta_fixed, with_bounds, rule)
  return jax.vmap(one)(indices)


_chunk_stats_jit = jax.jit(_chunk_stats, static_argnames=("dim", "with_bounds", "rule"))


class MonteCarlo(NamedTuple):
  """Monte Carlo summary; each field (H, K) for alphas (H, L) and K values of n.

  ``mean``/``stderr`` of N_s/N; ``mean_*`` the averages of the per-sample r, delta and the
  per-sample bounds (Algorithm 4 computes the bounds with each sample's own r and delta);
  ``samples`` the sample count. Non-finite per-sample values (r = +inf when n >= L) give
  +inf means.
  """
  mean: Any
  stderr: Any
  mean_r: Any
  mean_delta: Any
  mean_lower: Any
  mean_lower_raw: Any
  mean_upper: Any
  samples: int


def _default_chunk(L, dim, H, K, with_bounds, itemsize, budget=192 * 2**20):
  per = itemsize * (3 * L * dim + (4 * L * L if with_bounds else 0) + 4 * H * L * dim
                    + 12 * H * K * L)
  return int(max(1, min(4096, budget // max(per, 1))))


def _mesh_sharding(devices: int | None):
  if not devices:
    return None
  avail = jax.devices()
  check(devices <= len(avail),
        f"devices={devices} but only {len(avail)} device(s) are available")
  mesh = jax.make_mesh((devices,), ("samples",), devices=avail[:devices])
  P = jax.sharding.PartitionSpec
  return (jax.sharding.NamedSharding(mesh, P("samples")),
          jax.sharding.NamedSharding(mesh, P()))


def monte_carlo_detail(key, alpha, n, dim: int, M, samples: int, chunk: int | None = None, *,
                       devices: int | None = None, rule: str = "strict",
                       with_bounds: bool = True, delta=None,
                       progress: Callable[[int], Any] | None = None) -> MonteCarlo:
  """Algorithm 4 on synthetic spherical embeddings: N_s/N over fresh point sets.

  Every sample draws x (L, dim) uniform on S^{dim-1}(M) from ``fold_in(key, sample_index)``,
  recomputes s, r (and delta, unless given) and counts N_s/N for every weight row and every n
  (the same points serve all rows and all n: common random numbers).

  Args:
    key: a ``jax.random.key``.
    alpha: (L,) or (H, L) weights. n: int or sequence of ints.
    dim, M: sphere dimension and radius. samples: number of point sets.
    chunk: samples per jitted vmapped batch (default: from a ~192 MiB memory budget); rounded
      up to a multiple of ``devices``. Memory is bounded by the chunk, not by ``samples``.
    devices: shard the sample axis over the first ``devices`` devices (a 1-D
      ``jax.make_mesh`` with ``NamedSharding``); None = default device.
    rule: counting rule (see module docstring). with_bounds: also compute delta and the
      per-sample Theorem 2 bounds (costs one (L, L) Gram per sample). delta: fix delta instead
      of the per-sample empirical minimum pairwise distance.
    progress: optional callable receiving the number of samples finished after each chunk.

  Returns:
    ``MonteCarlo`` with fields shaped like (H?, K?) following alpha and n.
  """
  check(rule in RULES, f"rule={rule!r} is not one of {RULES}")
  check(int(samples) >= 1, f"samples={samples} must be >= 1")
  check(int(dim) >= 1, f"dim={dim} must be >= 1")
  check(float(M) > 0, f"M={M} must be > 0")
  alpha = jnp.asarray(alpha)
  if not jnp.issubdtype(alpha.dtype, jnp.floating):
    alpha = alpha.astype(jnp.result_type(float))
  single_row = alpha.ndim == 1
  alphas = alpha[None] if single_row else alpha
  check(alphas.ndim == 2, f"alpha must be (L,) or (H, L), got shape {tuple(alpha.shape)}")
  scalar_n = np.ndim(n) == 0
  ns_list = [int(v) for v in np.atleast_1d(n)]
  L = alphas.shape[-1]
  for v in ns_list:
    check(1 <= v <= L, f"n={v} must be in [1, L={L}]")
  ns = jnp.asarray(ns_list, jnp.int32)
  H, K = alphas.shape[0], len(ns_list)
  rank = sort_desc(alphas)
  samples = int(samples)
  nd = int(devices) if devices else 1
  chunk = int(chunk) if chunk else _default_chunk(L, dim, H, K, with_bounds,
                                                  alphas.dtype.itemsize)
  check(chunk >= 1, f"chunk={chunk} must be >= 1")
  chunk = min(chunk, samples)
  chunk = -(-chunk // nd) * nd
  shard = _mesh_sharding(devices)
  M_arr = jnp.asarray(M, alphas.dtype)
  dfix = None if delta is None else jnp.asarray(delta, alphas.dtype)
  args = (key, alphas, rank, ns, M_arr, dfix)
  if shard is not None:
    args = jax.device_put(args, shard[1])
  key_r, alphas_r, rank_r, ns_r, M_r, dfix_r = args
  S = len(STAT_NAMES)
  tot = np.zeros((S, H, K))
  tot2 = np.zeros((H, K))
  for start in range(0, samples, chunk):
    idx = np.arange(start, start + chunk, dtype=np.int32)
    valid = idx < samples
    idx_dev = jnp.asarray(idx) if shard is None else jax.device_put(idx, shard[0])
    out = _chunk_stats_jit(key_r, idx_dev, alphas_r, rank_r, ns_r, M_r, dfix_r, dim=int(dim),
                           with_bounds=bool(with_bounds), rule=rule)
    out = np.asarray(out, dtype=np.float64)[valid]            # (c, S, H, K)
    tot += out.sum(axis=0)
    tot2 += (out[:, 0] ** 2).sum(axis=0)
    if progress is not None:
      progress(int(valid.sum()))
  mean = tot / samples
  f = mean[0]
  if samples > 1:
    var = np.maximum(tot2 - samples * f * f, 0) / (samples - 1)
    stderr = np.sqrt(var / samples)
  else:
    stderr = np.full_like(f, np.inf)

  def shape(a):
    a = np.asarray(a)
    if scalar_n:
      a = a[..., 0]
    if single_row:
      a = a[0]
    return a

  nanify = (lambda a: shape(a)) if with_bounds or delta is not None else (
      lambda a: shape(np.full_like(a, np.nan)))
  return MonteCarlo(shape(f), shape(stderr), shape(mean[1]), nanify(mean[2]), nanify(mean[3]),
                    nanify(mean[4]), nanify(mean[5]), samples)


def monte_carlo(key, alpha, n, dim: int, M, samples: int, chunk: int | None = None, *,
                devices: int | None = None, rule: str = "strict"):
  """(mean, stderr) of N_s/N over ``samples`` fresh point sets on S^{dim-1}(M).

  See ``monte_carlo_detail`` (this skips the bounds, so no per-sample Gram is formed).
  """
  mc = monte_carlo_detail(key, alpha, n, dim, M, samples, chunk, devices=devices, rule=rule,
                          with_bounds=False)
  return mc.mean, mc.stderr


def multi_head_coverage(p, heads):
  """1 - (1 - p)^H: the fraction of the top-N covered by H independent heads (PAPER.md §4)."""
  return 1.0 - (1.0 - np.asarray(p, np.float64)) ** np.asarray(heads, np.float64)


# --------------------------------------------------------------------------------------------
# Model source: one layer's heads, all queries with their causal prefix.
# --------------------------------------------------------------------------------------------

LAYER_FIELDS = ("frac", "lower", "lower_raw", "upper", "r", "delta", "upper_printed", "count")


def normalize_to_sphere(v, M):
  """Projects vectors onto S^{d-1}(M) (Assumption 1, "in practice we normalize"); 0 stays 0."""
  norm = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
  return jnp.asarray(M, v.dtype) * v / jnp.where(norm > 0, norm, 1)


def _head_sums(weights, v, ns, M, rule, srt=None):
  """One head: sums over queries with more than n visible keys (AMBIG-8), (K, len(LAYER_FIELDS)).

  The sort of every attention row, the projection onto the sphere and the prefix deltas are
  computed once and shared by every n in ``ns``. ``srt`` (L, L): the rows already sorted
  (:func:`sort_rows_host`); else sorted here.
  """
  L = weights.shape[-1]
  visible = jnp.tril(jnp.ones((L, L), bool))                 # causal prefix of each query
  x = normalize_to_sphere(v, M)                              # (L, d)
  if srt is None:
    srt = sort_desc(weights, visible)                        # (L, L)
  delta = prefix_min_pairwise_distance(x)                    # (L,) delta of query t's prefix
  dl = jnp.where(jnp.isfinite(delta), delta, 0)

  def one(n):
    st = row_stats(weights, srt, visible, x, n, M, dl, rule=rule)
    keep = jnp.arange(1, L + 1) > n                          # t = query index + 1 visible keys
    z = lambda a: jnp.sum(jnp.where(keep, a, 0))
    return jnp.stack([z(st.frac), z(st.lower), z(st.lower_raw), z(st.upper), z(st.r), z(dl),
                      z(st.upper_printed), jnp.sum(keep).astype(weights.dtype)])

  return jax.lax.map(one, ns)


def sort_rows_host(weights):
  """(…, L, L) causal rows sorted descending on the host, masked keys −inf last: the same
  array as ``sort_desc(weights, tril)``; NumPy's sort is ~20× XLA's on CPU, and the one sort
  per row serves every N."""
  import numpy as np

  w = np.asarray(weights)
  L = w.shape[-1]
  neg = np.where(np.tri(L, dtype=bool), -w, np.inf)
  neg.sort(axis=-1)
  return -neg


@functools.partial(jax.jit, static_argnames=("rule",))
def layer_sums(weights, v, ns, M, *, rule: str = "strict", sorted_rows=None):
  """Sums for every head of one layer and every n: (H, K, F).

  Args:
    weights: (H, L, L) causal attention rows; v: (H, L, d) value vectors (projected onto
      S^{d-1}(M) here); ns: (K,) int32 top-N values (traced: one compilation per K); M: radius.

  F = len(LAYER_FIELDS): sums over the kept queries (t > n) of N_s/N, clipped and raw lower
  bound, upper bound, r, delta, and the number of kept queries. Heads run one at a time
  (``lax.map``) so memory is a few (L, L) arrays. ``sorted_rows`` (H, L, L): from
  :func:`sort_rows_host` (else each row is sorted inside, by XLA).
  """
  ns = jnp.atleast_1d(jnp.asarray(ns, jnp.int32))
  if sorted_rows is None:
    return jax.lax.map(lambda wv: _head_sums(wv[0], wv[1], ns, M, rule), (weights, v))
  return jax.lax.map(lambda a: _head_sums(a[0], a[1], ns, M, rule, a[2]),
                     (weights, v, sorted_rows))


# --------------------------------------------------------------------------------------------
# Figure 3 claims.
# --------------------------------------------------------------------------------------------

def figure3_verdicts(ns: Sequence[int], frac, lower, upper, *, stderr=None, heads: int,
                     band=(0.70, 0.85), knee=16, flat_tol=0.05, track_tol=0.10, z=3.0):
  """The paper's Figure 3 claims checked on per-head results.

  Args:
    ns: N grid (K,). frac, lower, upper: (K, heads) per-head N_s/N and per-head bounds
      (token- or sample-averaged, lower clipped at 0 as Algorithm 4 averages it).
    stderr: optional (K, heads) Monte Carlo standard errors: a bound is violated only when it
      is off by more than z * stderr.
    heads: H for the multi-head coverage 1 - (1 - p)^H.
    band: the claimed saturation band. knee: the claimed end of the decline.
    flat_tol: a change of the median smaller than this counts as flat (saturated).
    track_tol: "tracks the maxima" means upper - max frac <= track_tol at every N.

  Returns:
    (verdicts: list of ``limits.results.verdict`` dicts, summary: dict of per-N numbers).
  """
  from limits.results import verdict

  ns = [int(n) for n in ns]
  frac = np.asarray(frac, np.float64)
  lower = np.asarray(lower, np.float64)
  upper = np.asarray(upper, np.float64)
  tol = np.zeros_like(frac) if stderr is None else z * np.nan_to_num(
      np.asarray(stderr, np.float64), posinf=0.0)
  med = np.nanmedian(frac, axis=1)
  mx = np.nanmax(frac, axis=1)
  arg = np.nanargmax(frac, axis=1)
  summary = {
      "n": ns, "median": med, "mean": np.nanmean(frac, axis=1), "min": np.nanmin(frac, axis=1),
      "max": mx, "q25": np.nanpercentile(frac, 25, axis=1),
      "q75": np.nanpercentile(frac, 75, axis=1),
      "lower_median": np.nanmedian(lower, axis=1), "lower_max": np.nanmax(lower, axis=1),
      "upper_at_max_head": upper[np.arange(len(ns)), arg], "upper_max": np.nanmax(upper, axis=1),
  }
  out = []

  # 1. Decline until N ~ knee, then flat.
  stop = None
  for k in range(len(ns)):
    if all(med[j] >= med[k] - flat_tol for j in range(k, len(ns))):
      stop = ns[k]
      break
  declined = len(ns) > 1 and med[0] - np.min(med) > flat_tol
  holds = None if len(ns) < 3 else bool(
      declined and stop is not None and knee / 2 <= stop <= knee * 2)
  out.append(verdict(
      f"N_s/N declines until N ~ {knee}, then stays flat", holds,
      {"decline_stops_at_N": stop, "median_by_N": dict(zip(ns, med.round(4).tolist()))},
      detail=f"decline stops at the first N after which the median over heads never drops by "
      f"more than {flat_tol}; holds if that N is within [{knee // 2}, {knee * 2}]",
      reason="" if len(ns) >= 3 else "needs at least 3 values of N"))

  # 2. Saturation band.
  big = [k for k, n in enumerate(ns) if n >= knee]
  if big:
    mb = med[big]
    holds = bool(np.all((mb >= band[0]) & (mb <= band[1])))
    measured = {"median_range_N_ge_knee": [float(mb.min()), float(mb.max())],
                "mean_over_N_ge_knee": float(np.mean(mb))}
  else:
    holds, measured = None, None
  out.append(verdict(
      f"N_s/N saturates between {band[0]:.2f} and {band[1]:.2f} (about 80%)", holds, measured,
      detail=f"median over heads at every N >= {knee}",
      reason="" if big else f"no N >= {knee} in the grid"))

  # 3. Lower bound.
  viol = frac < lower - tol
  margin = frac - lower
  vacuous = float(np.mean(lower <= 0))
  out.append(verdict(
      "Theorem 2 lower bound holds", bool(not viol.any()),
      {"violations": int(viol.sum()), "cases": int(viol.size),
       "worst_margin_frac_minus_lower": float(np.nanmin(margin)),
       "fraction_clipped_to_zero": vacuous},
      detail="per head and N: N_s/N >= averaged clipped lower bound"
      + ("" if stderr is None else f" - {z} stderr")
      + "; 'fraction_clipped_to_zero' is where it is vacuous"))

  # 4. Upper bound tracks the maxima.
  uviol = frac > upper + tol
  gap = summary["upper_at_max_head"] - mx
  holds = bool(not uviol.any() and np.all(gap <= track_tol))
  out.append(verdict(
      "Theorem 2 upper bound tracks the empirical maxima", holds,
      {"upper_violations": int(uviol.sum()), "cases": int(uviol.size),
       "upper_minus_max_by_N": dict(zip(ns, gap.round(4).tolist())),
       "fails_at_N": [n for n, g in zip(ns, gap) if g > track_tol]},
      detail=f"gap = upper bound of the head with the largest N_s/N minus that N_s/N; holds if "
      f"the bound is never below N_s/N and the gap is <= {track_tol} at every N"))

  # 5. Multi-head coverage.
  p = float(np.mean(med[big])) if big else float(med[-1])
  cov = {"p": p, f"H={heads}": float(multi_head_coverage(p, heads)),
         "H=3": float(multi_head_coverage(p, 3))}
  out.append(verdict(
      "multi-head coverage 1-(1-p)^H: with p ~ 0.8, H ~ 3 heads cover ~99%",
      bool(cov["H=3"] >= 0.99), cov,
      detail="p = mean over N >= knee of the median N_s/N; assumes independent heads (not "
      "tested); holds if 3 heads reach 0.99 with the measured p"))
  return out, summary
