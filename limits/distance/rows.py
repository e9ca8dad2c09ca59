"""Theorem 1 and Corollary 2 for one query row: cumulative distance d̃, its bound d_max, E.

Notation (the paper, §2; AMBIG-n labels name the options of docs/ambiguities.md). One query
row: weights ``alpha (L,)``, vectors ``x (L, d)``, a boolean ``mask (L,)`` (True = visible; the
causal prefix). Inside a row "L" in the formulas is the number of visible keys t (AMBIG-8);
masked entries never count. ``I_N`` is the set of the N visible keys with the largest weights;
**ties** are broken by ``lax.top_k``'s rule (the lower index first). A row with t <= N has no
non-selected key: every quantity is 0 there and ``counted`` is False, so token averages skip it
(AMBIG-8).

- context vector  s = Σ_{i∈I_N} α_i x_i                       (Eq. 6, not renormalised)
- d̃ ("sum", AMBIG-1 default) = Σ_{i∉I_N} ‖α_i x_i − s‖        (Eq. 7)
- d̃' ("norm")                = ‖Σ_{i∉I_N} α_i x_i − s‖
- ᾱ_N = Σ_{j∈I_N} α_j;  d_1 = max_{i∉I_N, j∈I_N} ‖x_i − x_j‖;  R_N = max_{j∈I_N} ‖x_j‖
- Theorem 1 part 1 (d_max, Eq. 9):
    sum form:  d̃  ≤ (m − ᾱ_N)·d_1 + R_N · Σ_{i∉I_N} |ᾱ_N − α_i|
    norm form: d̃' ≤ (m − ᾱ_N)·d_1 + |m − 2ᾱ_N| · R_N
  where m = Σ_i α_i is the row's total mass (= 1 for a normaliser's output, as in the paper).
  Using the actual m keeps the bound exactly valid when rounding makes Σα ≠ 1. Proof: with
  x̄ = s/ᾱ_N, α_i x_i − s = α_i(x_i − x̄) + (α_i − ᾱ_N)x̄, ‖x_i − x̄‖ ≤ d_1, ‖x̄‖ ≤ R_N.
- Theorem 1 part 2 (E, Eq. 10, the Jensen main sum; AMBIG-3/4), I_N uniform over N-subsets:
    E = ((t−N)/t) · Σ_i ‖α_i x_i − p Σ_{j≠i} α_j x_j‖,   p = N/(t−1) (default) or N/t.
  With p = N/(t−1), E ≤ E[d̃] ≤ E + ε exactly (Jensen, sampling without replacement), with
    ε ≤ ((t−N)/t) Σ_i sqrt(p(1−p)·(t−1)/(t−2)·Σ_{j≠i} α_j²‖x_j‖²)  (``jensen_gap_bound``).

Every norm is evaluated through Gram identities, ‖α_i x_i − s‖² = α_i²‖x_i‖² − 2α_i⟨x_i, s⟩ +
‖s‖², so a row costs a few (L, d) matrix-vector products and ``vmap`` over queries turns them
into matrix products. Gram forms lose relative accuracy ~eps·‖x‖²/‖difference‖²: verify bounds
in float64 (``--x64``).

The single-row functions take a static ``n`` (Python int) and are ``jax.vmap``-able. The
multi-N core :func:`row_stats` takes a dynamic vector of Ns and a static cap ``n_cap`` (the top
``n_cap`` are taken once and every N is a mask by rank, so a new N does not recompile).
Per-head reductions over many rows: :mod:`limits.distance.heads`; the fast per-layer path:
:mod:`limits.distance.kernels`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from limits.errors import LimitsError
from limits.numerics import mask_like
from limits.selection import top_n_rank

FORMS = ("sum", "norm")
INCLUSIONS = ("n_over_l_minus_1", "n_over_l")


def sqrt0(q):
  """sqrt(max(q, 0)) with a finite gradient at 0 (Gram forms can round slightly below 0)."""
  pos = q > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, q, 1.0)), 0.0)


def check_form(form):
  if form not in FORMS:
    raise LimitsError(f"form={form!r} is not one of {FORMS}")


def check_inclusion(inclusion):
  if inclusion not in INCLUSIONS:
    raise LimitsError(f"inclusion={inclusion!r} is not one of {INCLUSIONS}")


def selection_terms(alpha, x, selected, mask=None):
  """d̃ (both forms), s, ᾱ for an arbitrary selected set ``selected (L,) bool`` (within mask).

  Returns ``(d_sum, d_norm, s (d,), alpha_bar)``. Used for top-N and for random N-subsets.
  """
  valid = mask_like(alpha, mask)
  a = jnp.where(valid, alpha, 0.0)  # (L,)
  sel = selected & valid
  rest = valid & ~sel
  s = jnp.where(sel, a, 0.0) @ x  # (d,)
  n2 = jnp.sum(x * x, axis=-1)  # (L,)
  c = x @ s  # (L,)
  s2 = s @ s
  d_sum = jnp.sum(jnp.where(rest, sqrt0(a * a * n2 - 2.0 * a * c + s2), 0.0))
  u = jnp.where(rest, a, 0.0) @ x - s  # (d,)
  d_norm = sqrt0(u @ u)
  alpha_bar = jnp.sum(jnp.where(sel, a, 0.0))
  return d_sum, d_norm, s, alpha_bar


class RowStats(NamedTuple):
  """Per query row, one entry per N (shape (K,)). Zero where ``counted`` is False (t <= N)."""
  counted: jax.Array
  d_sum: jax.Array
  d_norm: jax.Array
  expected: jax.Array
  gap: jax.Array
  dmax_sum: jax.Array
  dmax_norm: jax.Array
  alpha_bar: jax.Array
  d1: jax.Array
  r_n: jax.Array


@functools.partial(jax.jit, static_argnames=("n_cap", "inclusion", "bound"))
def row_stats(alpha, x, ns, n_cap: int, mask=None, *, inclusion: str = "n_over_l_minus_1",
              bound: bool = True) -> RowStats:
  """Theorem 1 quantities for one row and several N at once.

  Args:
    alpha: (L,) weights; x: (L, d) vectors; ns: (K,) int top-N sizes, each in [1, n_cap];
    n_cap: static cap (top n_cap taken once); mask: (L,) bool visible keys;
    inclusion: "n_over_l_minus_1" (p = N/(t−1), AMBIG-3 default) or "n_over_l" (p = N/t);
    bound: also compute d_1, R_N, d_max (costs an (n_cap, L, d) product per row).
  """
  check_inclusion(inclusion)
  valid = mask_like(alpha, mask)
  dt = jnp.result_type(alpha, x, jnp.float32)
  a = jnp.where(valid, alpha, 0.0).astype(dt)  # (L,)
  x = x.astype(dt)
  ns = jnp.asarray(ns, dtype=jnp.int32)  # (K,)
  t = jnp.sum(valid).astype(dt)
  m = jnp.sum(a)  # row mass, 1 for a normaliser output
  rank, idx, idx_valid = top_n_rank(a, n_cap, valid)
  n2 = jnp.sum(x * x, axis=-1)  # (L,)

  sel = (rank[None, :] < ns[:, None]) & valid[None, :]  # (K, L)
  rest = valid[None, :] & ~sel  # (K, L)
  a_sel = jnp.where(sel, a[None, :], 0.0)  # (K, L)
  s = a_sel @ x  # (K, d)
  c = s @ x.T  # (K, L)  <x_i, s_N>
  s2 = jnp.sum(s * s, axis=-1)  # (K,)
  d_sum = jnp.sum(jnp.where(rest, sqrt0(a * a * n2 - 2.0 * a * c + s2[:, None]), 0.0), -1)
  u = jnp.where(rest, a[None, :], 0.0) @ x - s  # (K, d)
  d_norm = sqrt0(jnp.sum(u * u, axis=-1))
  alpha_bar = jnp.sum(a_sel, axis=-1)  # (K,)

  # Expectation (Jensen main sum) and its gap bound.
  nf = ns.astype(dt)
  t_safe = jnp.maximum(t, 1.0)
  if inclusion == "n_over_l_minus_1":
    p = nf / jnp.maximum(t - 1.0, 1.0)
  else:
    p = nf / t_safe
  p = jnp.clip(p, 0.0, 1.0)  # (K,)
  s_all = a @ x  # (d,)
  c_all = x @ s_all  # (L,)
  q_all = s_all @ s_all
  e_terms = ((1 + p[:, None]) ** 2 * (a * a * n2) - 2 * p[:, None] * (1 + p[:, None]) * a * c_all
             + (p * p)[:, None] * q_all)  # (K, L)
  pref = (t - nf) / t_safe  # (K,)
  expected = pref * jnp.sum(jnp.where(valid, sqrt0(e_terms), 0.0), axis=-1)
  w2 = a * a * n2  # (L,)
  ratio = jnp.where(t > 2, (t - 1.0) / jnp.maximum(t - 2.0, 1.0), 0.0)
  var = (p * (1 - p) * ratio)[:, None] * (jnp.sum(w2) - w2)[None, :]  # (K, L)
  gap = pref * jnp.sum(jnp.where(valid, sqrt0(var), 0.0), axis=-1)

  counted = t > nf  # (K,)
  if bound:
    x_top = x[idx]  # (n_cap, d)
    d2 = n2[idx][:, None] + n2[None, :] - 2.0 * (x_top @ x.T)  # (n_cap, L) ‖x_j - x_i‖²
    # Columns outside the top n_cap are non-selected for every N: reduce them once.
    out_top = valid & (rank >= n_cap)  # (L,)
    base = jnp.max(jnp.where(out_top[None, :], d2, -jnp.inf), axis=-1)  # (n_cap,)
    w = d2[:, idx]  # (n_cap, n_cap) distances between top keys, rows j = selected candidates
    r = jnp.arange(n_cap)
    col_ok = idx_valid[None, None, :] & (r[None, None, :] >= ns[:, None, None])  # (K,1,n_cap)
    inner = jnp.max(jnp.where(col_ok, w[None], -jnp.inf), axis=-1)  # (K, n_cap)
    per_row = jnp.maximum(base[None, :], inner)  # (K, n_cap)
    row_ok = idx_valid[None, :] & (r[None, :] < ns[:, None])  # (K, n_cap)
    d1_sq = jnp.max(jnp.where(row_ok, per_row, -jnp.inf), axis=-1)  # (K,)
    d1 = sqrt0(jnp.where(jnp.isfinite(d1_sq), d1_sq, 0.0))
    r_n = sqrt0(jnp.max(jnp.where(row_ok, n2[idx][None, :], 0.0), axis=-1))
    spread = jnp.sum(jnp.where(rest, jnp.abs(alpha_bar[:, None] - a[None, :]), 0.0), axis=-1)
    dmax_sum = (m - alpha_bar) * d1 + r_n * spread
    dmax_norm = (m - alpha_bar) * d1 + jnp.abs(m - 2.0 * alpha_bar) * r_n
  else:
    zeros = jnp.zeros_like(d_sum)
    d1 = r_n = dmax_sum = dmax_norm = zeros

  z = lambda v: jnp.where(counted, v, 0.0)
  return RowStats(counted, z(d_sum), z(d_norm), z(expected), z(gap), z(dmax_sum), z(dmax_norm),
                  z(alpha_bar), z(d1), z(r_n))


def _one(alpha, x, n, mask, **kw) -> RowStats:
  try:
    n = int(n)
  except (TypeError, ValueError):
    raise LimitsError(f"top-N size n={n!r} must be a positive integer") from None
  if n < 1:
    raise LimitsError(f"top-N size n={n!r} must be a positive integer")
  L = alpha.shape[-1]
  if n >= L:
    raise LimitsError(f"top-N size n={n} must be smaller than the row length L={L}")
  st = row_stats(alpha, x, jnp.array([n]), n, mask, **kw)
  return jax.tree.map(lambda v: v[0], st)


def cumulative_distance(alpha, x, n: int, form: str = "sum", mask=None):
  """d̃ (Eq. 7): Σ_{i∉I_N}‖α_i x_i − s‖ ("sum", AMBIG-1 default) or ‖Σ_{i∉I_N}α_i x_i − s‖."""
  check_form(form)
  st = _one(alpha, x, n, mask, bound=False)
  return st.d_sum if form == "sum" else st.d_norm


def theorem1_bound(alpha, x, n: int, form: str = "sum", mask=None):
  """d_max (Theorem 1 part 1, Eq. 9) for the chosen d̃ form; see the module docstring."""
  check_form(form)
  st = _one(alpha, x, n, mask, bound=True)
  return st.dmax_sum if form == "sum" else st.dmax_norm


def expected_distance(alpha, x, n: int, inclusion: str = "n_over_l_minus_1", mask=None):
  """E (Eq. 10): the Jensen main sum for a uniformly random N-subset (AMBIG-3/4)."""
  return _one(alpha, x, n, mask, inclusion=inclusion, bound=False).expected


def jensen_gap_bound(alpha, x, n: int, mask=None):
  """ε bound: E ≤ E_{I_N}[d̃] ≤ E + ε with p = N/(t−1) (sampling without replacement)."""
  return _one(alpha, x, n, mask, bound=False).gap


class TopN(NamedTuple):
  alpha_bar: jax.Array
  d1: jax.Array
  r_n: jax.Array
  s: jax.Array


def top_n_terms(alpha, x, n: int, mask=None) -> TopN:
  """ᾱ_N, d_1, R_N and the context vector s (d,) for the top-N set."""
  st = _one(alpha, x, n, mask, bound=True)
  rank, _, _ = top_n_rank(alpha, n, mask)
  _, _, s, _ = selection_terms(alpha, x, rank < n, mask)
  return TopN(st.alpha_bar, st.d1, st.r_n, s)


def context_vector(alpha, x, n: int, mask=None):
  """s = Σ_{i∈I_N} α_i x_i (Eq. 6), not renormalised."""
  return top_n_terms(alpha, x, n, mask).s


class MonteCarloEstimate(NamedTuple):
  mean: jax.Array
  stderr: jax.Array
  lower: jax.Array
  upper: jax.Array


def monte_carlo_distance(key, alpha, x, n: int, samples: int, form: str = "sum", mask=None,
                         confidence: float = 0.99) -> MonteCarloEstimate:
  """Monte-Carlo E_{I_N}[d̃] over uniform N-subsets of the visible keys (Theorem 1 part 2).

  Each sample ranks i.i.d. uniforms on the visible keys and takes the N smallest: a uniform
  N-subset. Returns the mean, its standard error and the normal-approximation two-sided
  ``confidence`` interval mean ± z·stderr (CLT; samples should be in the hundreds or more).
  """
  check_form(form)
  if samples < 2:
    raise LimitsError(f"samples={samples} must be at least 2")
  return _monte_carlo(key, alpha, x, mask_like(alpha, mask), n, samples, form, confidence)


@functools.partial(jax.jit, static_argnames=("n", "samples", "form"))
def _monte_carlo(key, alpha, x, valid, n, samples, form, confidence):
  L = alpha.shape[-1]

  def one(k):
    u = jax.random.uniform(k, (L,))
    score = jnp.where(valid, -u, -jnp.inf)
    _, idx = lax.top_k(score, n)
    sel = jnp.zeros((L,), bool).at[idx].set(True)
    d_sum, d_norm, _, _ = selection_terms(alpha, x, sel, valid)
    return d_sum if form == "sum" else d_norm

  vals = jax.vmap(one)(jax.random.split(key, samples))  # (samples,)
  mean = jnp.mean(vals)
  stderr = jnp.std(vals, ddof=1) / jnp.sqrt(samples)
  z = jax.scipy.special.ndtri(0.5 + confidence / 2.0)
  return MonteCarloEstimate(mean, stderr, mean - z * stderr, mean + z * stderr)
