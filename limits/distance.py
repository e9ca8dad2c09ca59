"""Theorem 1 and Corollary 2: cumulative distance d̃, its bound d_max, the expectation E.

Notation (PAPER.md §1-2). One query row: weights ``alpha (L,)``, vectors ``x (L, d)``, a
boolean ``mask (L,)`` (True = visible; the causal prefix). Inside a row "L" in the formulas is
the number of visible keys t (AMBIG-8); masked entries never count. ``I_N`` is the set of the N
visible keys with the largest weights; **ties** are broken by ``lax.top_k``'s rule (the lower
index first). A row with t <= N has no non-selected key: every quantity is 0 there and
``counted`` is False, so token averages skip it (AMBIG-8).

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
:func:`head_stats` applies it to per-layer records ``(B, H, L, L)`` with the causal mask and
reduces per head, streaming in query batches (traceable: the sweep engine uses it under jit).

:func:`layer_stats` is the fast path for the same numbers (Algorithms 1-3 on a model,
:class:`ModelEvaluator`): every causal row is sorted once on the host (:func:`sort_rows`;
NumPy's sort is ~20× XLA's on CPU), each N becomes a threshold with an index cut for ties at
the N-th place (:func:`thresholds_from_sorted`, the same lower-index-first rule), and the per-N
work of all queries of a head is two (L, L)·(L, d) products (s_N = A_N X, c_N = s_N Xᵀ). d_1 is
computed only when the bound is verified, from the per-head distance matrix by gathering the
rows of the ≤ N selected keys (in causal query blocks). tests/test_distance_fast.py checks it
against :func:`head_stats` (1e-12 relative, float64, ties included).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from limits.errors import LimitsError

FORMS = ("sum", "norm")
INCLUSIONS = ("n_over_l_minus_1", "n_over_l")


def _sqrt0(q):
  """sqrt(max(q, 0)) with a finite gradient at 0 (Gram forms can round slightly below 0)."""
  pos = q > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, q, 1.0)), 0.0)


def _valid(alpha, mask):
  if mask is None:
    return jnp.ones(alpha.shape[-1], dtype=bool)
  return jnp.asarray(mask, dtype=bool)


def _check_form(form):
  if form not in FORMS:
    raise LimitsError(f"form={form!r} is not one of {FORMS}")


def _check_inclusion(inclusion):
  if inclusion not in INCLUSIONS:
    raise LimitsError(f"inclusion={inclusion!r} is not one of {INCLUSIONS}")


def top_n_rank(alpha, n_cap: int, mask=None):
  """Rank of each key among the visible keys by weight (0 = largest), n_cap if not in top n_cap.

  Ties: ``lax.top_k`` puts the lower index first. Returns ``(rank (L,) int32, idx (n_cap,),
  idx_valid (n_cap,) bool)``; ``idx_valid`` is False for slots beyond the t visible keys.
  """
  valid = _valid(alpha, mask)
  L = alpha.shape[-1]
  if not 1 <= n_cap <= L:
    raise LimitsError(f"top-N cap n_cap={n_cap} must be in [1, L={L}]")
  score = jnp.where(valid, alpha, -jnp.inf)
  _, idx = lax.top_k(score, n_cap)  # (n_cap,)
  idx_valid = valid[idx]
  ranks = jnp.arange(n_cap, dtype=jnp.int32)
  rank = jnp.full((L,), n_cap, dtype=jnp.int32)
  rank = rank.at[idx].set(jnp.where(idx_valid, ranks, n_cap))
  return rank, idx, idx_valid


def selection_terms(alpha, x, selected, mask=None):
  """d̃ (both forms), s, ᾱ for an arbitrary selected set ``selected (L,) bool`` (within mask).

  Returns ``(d_sum, d_norm, s (d,), alpha_bar)``. Used for top-N and for random N-subsets.
  """
  valid = _valid(alpha, mask)
  a = jnp.where(valid, alpha, 0.0)  # (L,)
  sel = selected & valid
  rest = valid & ~sel
  s = jnp.where(sel, a, 0.0) @ x  # (d,)
  n2 = jnp.sum(x * x, axis=-1)  # (L,)
  c = x @ s  # (L,)
  s2 = s @ s
  d_sum = jnp.sum(jnp.where(rest, _sqrt0(a * a * n2 - 2.0 * a * c + s2), 0.0))
  u = jnp.where(rest, a, 0.0) @ x - s  # (d,)
  d_norm = _sqrt0(u @ u)
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
  _check_inclusion(inclusion)
  valid = _valid(alpha, mask)
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
  d_sum = jnp.sum(jnp.where(rest, _sqrt0(a * a * n2 - 2.0 * a * c + s2[:, None]), 0.0), -1)
  u = jnp.where(rest, a[None, :], 0.0) @ x - s  # (K, d)
  d_norm = _sqrt0(jnp.sum(u * u, axis=-1))
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
  expected = pref * jnp.sum(jnp.where(valid, _sqrt0(e_terms), 0.0), axis=-1)
  w2 = a * a * n2  # (L,)
  ratio = jnp.where(t > 2, (t - 1.0) / jnp.maximum(t - 2.0, 1.0), 0.0)
  var = (p * (1 - p) * ratio)[:, None] * (jnp.sum(w2) - w2)[None, :]  # (K, L)
  gap = pref * jnp.sum(jnp.where(valid, _sqrt0(var), 0.0), axis=-1)

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
    d1 = _sqrt0(jnp.where(jnp.isfinite(d1_sq), d1_sq, 0.0))
    r_n = _sqrt0(jnp.max(jnp.where(row_ok, n2[idx][None, :], 0.0), axis=-1))
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
  _check_form(form)
  st = _one(alpha, x, n, mask, bound=False)
  return st.d_sum if form == "sum" else st.d_norm


def theorem1_bound(alpha, x, n: int, form: str = "sum", mask=None):
  """d_max (Theorem 1 part 1, Eq. 9) for the chosen d̃ form; see the module docstring."""
  _check_form(form)
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
  _check_form(form)
  if samples < 2:
    raise LimitsError(f"samples={samples} must be at least 2")
  return _monte_carlo(key, alpha, x, _valid(alpha, mask), n, samples, form, confidence)


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


# ---------------------------------------------------------------------------------------------
# Batched helpers over per-layer records.


class HeadStats(NamedTuple):
  """Per head and N, summed over windows and counted queries (shape (H, K) after reduce).

  ``count`` = number of counted queries (t > N); the ``*_sum`` fields divided by ``count`` are
  token averages (Algorithm 1-3). ``viol_*`` count rows with d̃ > d_max (strict, exact
  comparison), ``max_ratio_*`` = max d̃/d_max over counted rows (0 where d_max = 0 and d̃ = 0).
  """
  count: jax.Array
  d_sum: jax.Array
  d_norm: jax.Array
  expected: jax.Array
  gap: jax.Array
  dmax_sum: jax.Array
  dmax_norm: jax.Array
  viol_sum: jax.Array
  viol_norm: jax.Array
  max_ratio_sum: jax.Array
  max_ratio_norm: jax.Array


def _ratio(d, dmax):
  return jnp.where(dmax > 0, d / jnp.where(dmax > 0, dmax, 1.0), jnp.where(d > 0, jnp.inf, 0.0))


def _reduce_rows(st: RowStats) -> HeadStats:
  """(Q, K) rows → (K,) per-head sums."""
  c = st.counted
  f = lambda v: jnp.sum(jnp.where(c, v, 0.0), axis=0)
  return HeadStats(
      count=jnp.sum(c, axis=0).astype(jnp.int32),
      d_sum=f(st.d_sum), d_norm=f(st.d_norm), expected=f(st.expected), gap=f(st.gap),
      dmax_sum=f(st.dmax_sum), dmax_norm=f(st.dmax_norm),
      viol_sum=jnp.sum(c & (st.d_sum > st.dmax_sum), axis=0).astype(jnp.int32),
      viol_norm=jnp.sum(c & (st.d_norm > st.dmax_norm), axis=0).astype(jnp.int32),
      max_ratio_sum=jnp.max(jnp.where(c, _ratio(st.d_sum, st.dmax_sum), 0.0), axis=0),
      max_ratio_norm=jnp.max(jnp.where(c, _ratio(st.d_norm, st.dmax_norm), 0.0), axis=0))


def _batch_sizes(L, n_cap, bound, d, budget=1 << 23):
  per_row = L * (max(n_cap, 8) if bound else 8) + L * 4 + (n_cap * d if bound else 0)
  q = max(1, min(L, budget // max(per_row, 1)))
  return q


@functools.partial(jax.jit, static_argnames=("n_cap", "inclusion", "bound", "query_batch"))
def head_stats(weights, x, ns, *, n_cap: int, inclusion: str = "n_over_l_minus_1",
               bound: bool = True, valid_length=None, query_batch: int | None = None):
  """Per-head Theorem 1 statistics for one layer, every query with its causal prefix.

  Args:
    weights: (B, H, L, L) attention weights, row = query t, column = key (causal).
    x: (B, H, L, d) per-head vectors (value vectors) or (B, L, D) shared by every head
      (hidden states / embeddings).
    ns: (K,) int top-N sizes (dynamic), each <= n_cap (static).
    valid_length: optional (B,) int number of real tokens per window (keys/queries beyond it
      are ignored); default all L.
    query_batch: queries per vmapped batch (memory vs speed); default from a size budget.
  Returns:
    HeadStats with fields (B, H, K), summed over queries (see :func:`reduce_windows`).
  """
  B, H, L, _ = weights.shape
  if x.ndim == 3:
    x = jnp.broadcast_to(x[:, None], (B, H) + x.shape[1:])
  d = x.shape[-1]
  qb = query_batch or _batch_sizes(L, n_cap, bound, d)
  if valid_length is None:
    valid_length = jnp.full((B,), L, dtype=jnp.int32)
  vl = jnp.broadcast_to(jnp.asarray(valid_length, jnp.int32)[:, None], (B, H)).reshape(B * H)
  pos = jnp.arange(L)

  def per_head(args):
    w, xh, n_valid = args  # (L, L), (L, d), ()

    def per_row(rargs):
      row, tq = rargs
      mask = (pos <= tq) & (pos < n_valid) & (tq < n_valid)
      return row_stats(row, xh, ns, n_cap, mask, inclusion=inclusion, bound=bound)

    rows = lax.map(per_row, (w, pos), batch_size=qb)  # fields (L, K)
    return _reduce_rows(rows)

  out = lax.map(per_head, (weights.reshape(B * H, L, L), x.reshape(B * H, L, d), vl))
  return jax.tree.map(lambda v: v.reshape((B, H) + v.shape[1:]), out)


def reduce_windows(st: HeadStats) -> HeadStats:
  """Sums (B, H, K) → (H, K) over windows (max for the ratios)."""
  out = {}
  for name, v in st._asdict().items():
    out[name] = jnp.max(v, axis=0) if name.startswith("max_ratio") else jnp.sum(v, axis=0)
  return HeadStats(**out)


def concat_heads(parts: Sequence[HeadStats]) -> HeadStats:
  """Stacks per-layer (H, K) stats into (n_layer·H, K) (layer-major head order)."""
  return HeadStats(*[jnp.concatenate(vs, axis=0) for vs in zip(*parts)])


def token_means(st: HeadStats) -> dict[str, jax.Array]:
  """Token-averaged per-head values (H, K): d_sum, d_norm, expected, gap, dmax_sum, dmax_norm.

  A head with no counted query (every t <= N) gives NaN.
  """
  cnt = st.count.astype(st.d_sum.dtype)
  safe = jnp.where(cnt > 0, cnt, 1.0)
  return {k: jnp.where(cnt > 0, getattr(st, k) / safe, jnp.nan)
          for k in ("d_sum", "d_norm", "expected", "gap", "dmax_sum", "dmax_norm")}


# ---------------------------------------------------------------------------------------------
# Model records → per-head statistics (Algorithms 1-3). Records are duck-typed: ``.weights``
# (B, H, L, L), ``.v`` (B, H, L, d_head) and ``.x`` (B, L, D), as ``limits.models.iter_layers``
# yields them; the models package is imported only here, lazily.

VECTORS = ("value", "key", "hidden", "embedding")


def record_vectors(rec, vectors: str, embeddings=None):
  """x_i for one layer record (AMBIG-7): value or key (B,H,L,d) per query head, the layer's
  normalised residual stream (hidden, the attention block's input) or wte (B,L,D)."""
  if vectors == "value":
    return rec.v
  if vectors == "key":
    return rec.k
  if vectors == "hidden":
    return rec.x
  if vectors == "embedding":
    return embeddings
  raise LimitsError(f"--vectors={vectors!r} is not one of {VECTORS}")


def _combine(a: HeadStats, b: HeadStats) -> HeadStats:
  return HeadStats(*[jnp.maximum(p, q) if name.startswith("max_ratio") else p + q
                     for name, p, q in zip(HeadStats._fields, a, b)])


def _token_embeddings(params, tok):
  """wte[token] (B, L, D) for ``--vectors=embedding`` (GPT-2 ``wte`` or Llama ``embed_tokens``)."""
  for name in ("wte", "embed_tokens"):
    if name in params:
      return params[name]["weight"][tok]
  raise LimitsError("--vectors=embedding: the model has no token-embedding table "
                    "(looked for 'wte' and 'embed_tokens')")


class PrintedExpectations:
  """A ``layer_hook`` for :meth:`ModelEvaluator.head_stats`: token-averaged printed E (both x̄
  readings) and reconstructed E with p = N/L per head (``limits.printed.layer_expectation_means``
  on each layer), averaged over windows; ``means()`` -> ``{name: (n_layer·H, K)}``."""

  def __init__(self, ns: Sequence[int]):
    self.ns = [int(n) for n in ns]
    self.parts: dict[int, list] = {}

  def __call__(self, window, weights, x):
    from limits import printed

    xh = np.broadcast_to(x[:, None], weights.shape[:2] + x.shape[1:]) if x.ndim == 3 else x
    self.parts.setdefault(window, []).append(
        printed.layer_expectation_means(weights[0], xh[0], self.ns))

  def means(self) -> dict[str, np.ndarray]:
    per_window = [{k: np.concatenate([p[k] for p in parts], axis=0) for k in parts[0]}
                  for parts in self.parts.values()]
    return {k: sum(w[k] for w in per_window) / len(per_window) for k in per_window[0]}


class ModelEvaluator:
  """Streams a model (any family of ``limits.models``) layer by layer, reducing every head.

  One forward per window serves every N in a call. Each layer goes through the fast path
  :func:`layer_stats` (rows sorted once, per-N work as matrix products). ``dtype`` is the
  precision of :meth:`head_stats` (float64 by default: a bound is verified there);
  ``ks_dtype`` that of the KS-only calls (:meth:`ks_pvalues`, :meth:`critical_n`: float32 by
  default, only a decision and plotted values depend on them; tests/test_distance_fast.py
  shows both precisions give the same decisions on the embedded model). :meth:`critical_n`
  keeps every layer's weights, vectors and sorted rows between bisection probes when they fit
  in ``cache_bytes`` (one forward and one sort per row per L), else recomputes per probe.
  """

  def __init__(self, params, config, *, vectors: str = "value",
               inclusion: str = "n_over_l_minus_1", dtype=np.float64, ks_dtype=np.float32,
               cache_bytes: int = 3 << 30):
    if vectors not in VECTORS:
      raise LimitsError(f"--vectors={vectors!r} is not one of {VECTORS}")
    _check_inclusion(inclusion)
    self.params, self.config = params, config
    self.vectors, self.inclusion = vectors, inclusion
    self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)
    self.ks_dtype = np.dtype(ks_dtype) if ks_dtype is not None else self.dtype
    self.cache_bytes = cache_bytes

  def _layers(self, tok, dtype):
    """Yields (weights (1, H, L, L), x) as NumPy arrays of ``dtype`` for each layer."""
    from limits import models

    emb = _token_embeddings(self.params, tok) if self.vectors == "embedding" else None
    for _, rec in models.iter_layers(self.params, tok, self.config):
      x = record_vectors(rec, self.vectors, emb)
      yield np.asarray(rec.weights, dtype), np.asarray(x, dtype)
      del rec

  def head_stats(self, tokens, ns: Sequence[int], *, n_cap: int | None = None,
                 bound: bool = True, on_layer=None, dtype=None, layer_hook=None) -> HeadStats:
    """HeadStats (n_layer·H, K), summed over the windows ``tokens (W, L)``; layer-major heads.

    ``n_cap`` is accepted for compatibility (every N is exact, whatever the cap).
    ``layer_hook(window, weights (1, H, L, L), x)`` sees every layer's arrays of the same forward
    (e.g. :class:`PrintedExpectations`), so other per-layer statistics need no second pass.
    """
    dtype = np.dtype(dtype) if dtype is not None else self.dtype
    tokens = jnp.asarray(tokens, jnp.int32)
    ns = [int(n) for n in ns]
    total = None
    for w in range(tokens.shape[0]):
      layers = []
      for wts, x in self._layers(tokens[w:w + 1], dtype):
        hs = layer_stats(wts, x, ns, inclusion=self.inclusion, bound=bound, dtype=dtype)
        layers.append(jax.tree.map(lambda v: v[0], hs))  # (H, K)
        if layer_hook is not None:
          layer_hook(w, wts, x)
        if on_layer is not None:
          on_layer()
      st = concat_heads(layers)
      total = st if total is None else _combine(total, st)
    return jax.tree.map(np.asarray, total)

  def _ks_from_stats(self, st, k_used, form):
    from limits import stats

    means = token_means(st)
    d = means["d_sum" if form == "sum" else "d_norm"]
    return [stats.ks_2samp(d[:, k], means["expected"][:, k]).pvalue for k in range(k_used)]

  def ks_pvalues(self, tokens, ns: Sequence[int], *, n_cap: int | None = None,
                 form: str = "sum", pad_to: int | None = None, cache=None):
    """KS p-values of per-head token-averaged d̃ vs E for each N (Algorithm 3's test)."""
    _check_form(form)
    ns = [int(n) for n in ns]
    padded = ns + [ns[-1]] * max(0, (pad_to or len(ns)) - len(ns))  # fixed K: one compile
    if cache is None:
      st = self.head_stats(tokens, padded, bound=False, dtype=self.ks_dtype)
    else:
      st = self._cached_stats(cache, padded)
    return self._ks_from_stats(st, len(ns), form)

  def _build_cache(self, tokens):
    """[(window, [(weights, x, sorted rows) per layer])] in ks_dtype, or None if too large."""
    tokens = jnp.asarray(tokens, jnp.int32)
    W, L = tokens.shape
    c = self.config
    d = c.d_head if self.vectors in ("value", "key") else c.n_embd
    per_layer = c.n_head * L * (2 * L + d) * self.ks_dtype.itemsize
    if W * c.n_layer * per_layer > self.cache_bytes:
      return None
    return [[(wts, x, sort_rows(wts)) for wts, x in self._layers(tokens[w:w + 1], self.ks_dtype)]
            for w in range(W)]

  def _cached_stats(self, cache, ns):
    total = None
    for layers in cache:
      parts = [jax.tree.map(lambda v: v[0], layer_stats(wts, x, ns, inclusion=self.inclusion,
                                                        bound=False, sorted_rows=srt))
               for wts, x, srt in layers]
      st = concat_heads(parts)
      total = st if total is None else _combine(total, st)
    return jax.tree.map(np.asarray, total)

  def critical_n(self, tokens, n_max: int, *, alpha: float = 0.01, form: str = "sum",
                 method: str = "bisect", batch: int = 8):
    """Algorithm 3 for one L: smallest N in [1, n_max] where the KS test does not reject."""
    from limits import stats

    cache = self._build_cache(tokens)
    try:
      return stats.critical_n(
          lambda ns: self.ks_pvalues(tokens, ns, form=form, pad_to=batch, cache=cache),
          1, n_max, alpha=alpha, method=method, batch=batch)
    finally:
      del cache


FIELDS = ("d_sum", "d_norm", "expected", "gap", "dmax_sum", "dmax_norm")


def tabulate(st: HeadStats, L: int, ns: Sequence[int], n_layer: int, n_head: int,
             form: str = "sum"):
  """Per-head CSV rows, per-N summary rows (mean, q25, q75 over heads) and KS results."""
  from limits import stats

  st = jax.tree.map(np.asarray, st)
  means = {k: np.asarray(v) for k, v in token_means(st).items()}
  rows, summary, ks = [], [], []
  for k, n in enumerate(ns):
    for h in range(st.count.shape[0]):
      r = {"L": L, "N": n, "layer": h // n_head, "head": h % n_head,
           "queries": int(st.count[h, k])}
      r.update({f: float(means[f][h, k]) for f in FIELDS})
      r.update({"violations_sum": int(st.viol_sum[h, k]),
                "violations_norm": int(st.viol_norm[h, k]),
                "max_ratio_sum": float(st.max_ratio_sum[h, k]),
                "max_ratio_norm": float(st.max_ratio_norm[h, k])})
      rows.append(r)
    s = {"L": L, "N": n, "heads": int(st.count.shape[0]),
         "rows_checked": int(st.count[:, k].sum())}
    for f in FIELDS:
      v = means[f][:, k]
      s[f"{f}_mean"] = float(np.nanmean(v))
      s[f"{f}_q25"], s[f"{f}_q75"] = (float(q) for q in np.nanpercentile(v, [25, 75]))
    s["violations_sum"] = int(st.viol_sum[:, k].sum())
    s["violations_norm"] = int(st.viol_norm[:, k].sum())
    s["max_ratio_sum"] = float(st.max_ratio_sum[:, k].max())
    s["max_ratio_norm"] = float(st.max_ratio_norm[:, k].max())
    d = means["d_sum" if form == "sum" else "d_norm"][:, k]
    r = stats.ks_2samp(d, means["expected"][:, k])
    s["ks_statistic"], s["ks_pvalue"] = r.statistic, r.pvalue
    ks.append({"L": L, "N": n, "form": form, "statistic": r.statistic, "pvalue": r.pvalue})
    summary.append(s)
  return rows, summary, ks


def add_head_means(rows, summary, extra: dict, ns: Sequence[int]) -> None:
  """Adds per-head values ``extra[name] (heads, K)`` to the per-head rows (as ``name``) and
  their mean over heads to the summary rows (as ``name_mean``), in place (rows ordered as
  :func:`tabulate` writes them: N-major, then heads)."""
  for name, v in extra.items():
    v = np.asarray(v, dtype=np.float64)
    heads = v.shape[0]
    for k, _ in enumerate(ns):
      for h in range(heads):
        rows[k * heads + h][name] = float(v[h, k])
      summary[k][f"{name}_mean"] = float(np.nanmean(v[:, k]))


def figure2_verdicts(mode: str, summary, crit_rows, per_head=None, *, form: str = "sum",
                     ks_alpha: float = 0.01) -> dict:
  """The Figure 2 claims as ``limits.results.verdict`` records, from the summary rows.

  Criteria (stated so a reader can disagree): "linear in L" = straight-line fit of the
  head-mean d̃ against L with R² >= 0.95 and a log-log exponent in [0.8, 1.2]; "plateau beyond
  N ≈ 20" = head-mean d̃ changes by less than 10% from N = 20 to the largest N; "converge as
  N → 100" = the relative gap |d̃ − E|/d̃ at the largest N is below 0.1 and below the gap at the
  smallest N; "critical N ≈ 0.06 L" = the fitted ratio N_crit/L (through the origin) lies in
  [0.03, 0.12] (within a factor 2).
  """
  import numpy as np_

  from limits import results as res
  from limits import stats

  key = "d_sum" if form == "sum" else "d_norm"
  out = []
  na = lambda claim, need: res.verdict(claim, None, None, reason=f"run --mode={need}")
  if summary:
    viol_s = sum(s["violations_sum"] for s in summary)
    viol_n = sum(s["violations_norm"] for s in summary)
    checked = sum(s["rows_checked"] for s in summary)
    out.append(res.verdict(
        "bound held for every head and query", viol_s == 0 and viol_n == 0,
        {"violations_sum_form": viol_s, "violations_norm_form": viol_n, "rows_checked": checked,
         "max_ratio_sum": max(s["max_ratio_sum"] for s in summary),
         "max_ratio_norm": max(s["max_ratio_norm"] for s in summary)},
        detail="d̃ > d_max counted per (window, head, query, N); max_ratio = max d̃/d_max"))
  else:
    out.append(na("bound held for every head and query", "vary_length or vary_n"))

  if mode == "vary_length" and summary:
    n_fit = 5 if any(s["N"] == 5 for s in summary) else min(s["N"] for s in summary)
    rows_n = sorted((s for s in summary if s["N"] == n_fit), key=lambda s: s["L"])
    ls = np_.array([s["L"] for s in rows_n], float)
    measured = {"N": n_fit}
    for f in ("d_sum", "d_norm", "expected", "dmax_sum"):
      y = np_.array([s[f"{f}_mean"] for s in rows_n], float)
      fit = stats.linear_fit(ls, y)
      pos = (ls > 0) & (y > 0)
      fit["loglog_exponent"] = (stats.linear_fit(np_.log(ls[pos]), np_.log(y[pos]))["slope"]
                                if pos.sum() >= 2 else None)
      measured[f] = fit
    m = measured[key]
    holds = (None if m["r2"] is None else
             bool(m["r2"] >= 0.95 and m["loglog_exponent"] is not None
                  and 0.8 <= m["loglog_exponent"] <= 1.2))
    out.append(res.verdict(
        f"d̃ grows linearly with L at N = {n_fit}", holds, measured,
        detail=f"form={form}; head-mean d̃ vs L: straight-line R² >= 0.95 and log-log exponent "
        "in [0.8, 1.2]; fits for both forms, E and d_max reported",
        reason="fewer than two lengths" if holds is None else ""))
  else:
    out.append(na("d̃ grows linearly with L at N = 5", "vary_length"))

  if mode == "vary_n" and summary:
    l_fit = max(s["L"] for s in summary)
    by_n = {s["N"]: s for s in summary if s["L"] == l_fit}
    n_last = max(by_n)
    if 20 in by_n and n_last > 20:
      d20, dl = by_n[20][f"{key}_mean"], by_n[n_last][f"{key}_mean"]
      rel = abs(dl - d20) / abs(d20) if d20 else float("inf")
      tight = {n: by_n[n]["dmax_sum_mean"] / by_n[n]["d_sum_mean"] if by_n[n]["d_sum_mean"]
               else None for n in sorted(by_n)}
      out.append(res.verdict(
          "plateau beyond N ≈ 20", bool(rel < 0.1),
          {"relative_change_20_to_last": rel, "N_last": n_last,
           "mean_by_N": {n: by_n[n][f"{key}_mean"] for n in sorted(by_n)},
           "bound_over_true_by_N": tight},
          detail=f"form={form}; |d̃(N_last) − d̃(20)|/d̃(20) < 0.1"))
    else:
      out.append(res.verdict("plateau beyond N ≈ 20", None, None,
                             reason="needs N = 20 and a larger N in --ns"))
    n_first = min(by_n)
    rel_gap = {n: (abs(by_n[n][f"{key}_mean"] - by_n[n]["expected_mean"])
                   / abs(by_n[n][f"{key}_mean"]) if by_n[n][f"{key}_mean"] else None)
               for n in sorted(by_n)}
    conv = (rel_gap[n_last] is not None and rel_gap[n_first] is not None and n_last > n_first
            and rel_gap[n_last] < 0.1 and rel_gap[n_last] < rel_gap[n_first])
    out.append(res.verdict(
        f"true and expected distances converge as N → {n_last}", bool(conv),
        {"relative_gap_by_N": rel_gap,
         "ks_pvalue_by_N": {n: by_n[n]["ks_pvalue"] for n in sorted(by_n)}},
        detail=f"form={form}; head means; |d̃ − E|/d̃ < 0.1 at the largest N and smaller than "
        "at the smallest N"))
  else:
    out.append(na("plateau beyond N ≈ 20", "vary_n"))
    out.append(na("true and expected distances converge as N → 100", "vary_n"))

  if mode == "critical_n" and crit_rows:
    found = [(r["L"], r["critical_n"]) for r in crit_rows if r["critical_n"]]
    fit = stats.fit_ratio([f[0] for f in found], [f[1] for f in found])
    holds = None if fit["ratio"] is None else bool(0.03 <= fit["ratio"] <= 0.12)
    out.append(res.verdict(
        "critical N ≈ 0.06 L", holds,
        {"fit": fit, "by_L": {r["L"]: r["critical_n"] for r in crit_rows},
         "all_below_6_percent": all(n / L < 0.06 for L, n in found) if found else None,
         "not_found_L": [r["L"] for r in crit_rows if not r["critical_n"]],
         "monotone_p_values": all(r["pvalues_monotone"] for r in crit_rows),
         "monotone_decisions": all(r["decisions_monotone"] for r in crit_rows)},
        detail=f"KS alpha={ks_alpha}, form={form}; ratio = least squares N_crit ≈ c·L; holds "
        "if c in [0.03, 0.12]",
        reason="the KS test rejected for every N searched" if holds is None else ""))
  else:
    out.append(na("critical N ≈ 0.06 L", "critical_n"))
  return {"verdicts": out, "summary": summary}


# ---------------------------------------------------------------------------------------------
# Fast per-layer path (Algorithms 1-3): every row sorted once on the host (NumPy's sort is ~20×
# XLA's on CPU), every N a threshold on the sorted row, and the per-N work of all queries of a
# head done as matrix products through the Gram identities:
#   s_N = A_N X (L, d),  c_N = s_N Xᵀ (L, L),  ‖α_i x_i − s‖² = α_i²‖x_i‖² − 2α_i c_i + ‖s‖².
# Same semantics as :func:`head_stats` (causal prefix, ties to the lower index, t <= N skipped).


class Thresholds(NamedTuple):
  """Top-N selection of every causal row for K values of N, as thresholds on the weights.

  Key i is selected in row q for the k-th N iff ``i <= q`` and (α_i > thr or (α_i == thr and
  i <= cut)): ``thr`` (..., L, K) is the N-th largest visible weight and ``cut`` (..., L, K)
  int32 the index of the last tied key kept (L where no tie straddles the boundary), which
  reproduces ``lax.top_k``'s lower-index-first rule exactly.
  """
  thr: np.ndarray
  cut: np.ndarray


def sort_rows(weights) -> np.ndarray:
  """(…, L, L) causal weights → (…, L, L) each row's visible weights sorted descending, −inf
  padded (masked keys). One sort per row serves every N (:func:`thresholds_from_sorted`)."""
  w = np.asarray(weights)
  L = w.shape[-1]
  vis = np.tri(L, dtype=bool)  # (L, L) key <= query
  neg = np.where(vis, -w, np.inf)  # ascending sort of −α = descending α, masked last
  neg.sort(axis=-1)
  return -neg


def thresholds_from_sorted(weights, sorted_desc, ns: Sequence[int]) -> Thresholds:
  """Thresholds (…, L, K) for every N in ``ns`` from rows sorted by :func:`sort_rows`."""
  w = np.asarray(weights)
  L = w.shape[-1]
  ns = [int(n) for n in ns]
  thr = np.stack([sorted_desc[..., min(n, L) - 1] for n in ns], axis=-1)  # (…, L, K)
  nxt = np.stack([sorted_desc[..., n] if n < L else np.full(w.shape[:-1], -np.inf, w.dtype)
                  for n in ns], axis=-1)
  cut = np.full(thr.shape, L, np.int32)
  t = np.arange(1, L + 1)  # visible keys per query
  counted = t[:, None] > np.asarray(ns)[None, :]  # (L, K)
  straddle = (thr == nxt) & counted  # a tie crosses the N-th place: choose by index
  if straddle.any():
    idx = np.nonzero(straddle)
    k = idx[-1]
    rows = w[idx[:-1]]  # (R, L) the straddling rows
    q = idx[-2]
    vis = np.arange(L)[None, :] <= q[:, None]
    tr = thr[idx][:, None]
    n_gt = np.sum(vis & (rows > tr), axis=-1)
    need = np.asarray(ns)[k] - n_gt  # >= 1 tied keys to keep, lowest indices first
    cs = np.cumsum(vis & (rows == tr), axis=-1)
    cut[idx] = np.argmax(cs >= need[:, None], axis=-1)
  return Thresholds(thr, cut)


def thresholds(weights, ns: Sequence[int]) -> Thresholds:
  """Thresholds (…, L, K) of causal rows for every N in ``ns`` (one sort per row)."""
  return thresholds_from_sorted(weights, sort_rows(weights), ns)


def _select(a, thr, cut, vis, kpos):
  """(R, K) selected keys for one N: thr, cut (R,) per row; vis (R, K) causal; kpos (K,)."""
  return vis & ((a > thr[:, None]) | ((a == thr[:, None]) & (kpos[None, :] <= cut[:, None])))


def _block_rows(a, x, thr, cut, ns, lo, *, caps: tuple, inclusion: str, bound: bool,
                row_block: int) -> RowStats:
  """RowStats (R, K) of the queries lo … lo + R − 1 of one head (Theorem 1, matrix form).

  a: (R, C) their causal weights over the keys 0 … C − 1 they can see (C = lo + R: a causal
  block reads only its prefix); x: (C, d); thr, cut: (R, K); ns: (K,); caps: static (K,) upper
  bounds of the N values (the size of the d_1 gather).
  """
  R, C = a.shape
  dt = a.dtype
  kpos = jnp.arange(C)
  qpos = lo + jnp.arange(R)
  vis = kpos[None, :] <= qpos[:, None]  # (R, C)
  a = jnp.where(vis, a, 0.0)
  t = (qpos + 1).astype(dt)  # (R,) visible keys per query
  n2 = jnp.sum(x * x, axis=-1)  # (C,)
  w2 = a * a * n2[None, :]  # (R, C) α_i²‖x_i‖²
  m = jnp.sum(a, axis=-1)  # (R,) row mass
  s_all = a @ x  # (R, d)
  c_all = s_all @ x.T  # (R, C) ⟨x_i, s_all⟩
  q_all = jnp.sum(s_all * s_all, axis=-1)  # (R,)
  nf = ns.astype(dt)  # (K,)
  if inclusion == "n_over_l_minus_1":
    p = nf[None, :] / jnp.maximum(t - 1.0, 1.0)[:, None]
  else:
    p = nf[None, :] / t[:, None]
  p = jnp.clip(p, 0.0, 1.0)  # (R, K)
  pref = (t[:, None] - nf[None, :]) / t[:, None]  # (R, K)
  ratio = jnp.where(t > 2, (t - 1.0) / jnp.maximum(t - 2.0, 1.0), 0.0)  # (R,)
  w2_tot = jnp.sum(w2, axis=-1)  # (R,)
  if bound:
    gram = x @ x.T
    dist2 = n2[:, None] + n2[None, :] - 2.0 * gram  # (C, C) ‖x_j − x_i‖²
  cols = []
  for k in range(ns.shape[0]):
    sel = _select(a, thr[:, k], cut[:, k], vis, kpos)  # (R, C)
    rest = vis & ~sel
    a_sel = jnp.where(sel, a, 0.0)
    s = a_sel @ x  # (R, d)
    c = s @ x.T  # (R, C)
    s2 = jnp.sum(s * s, axis=-1)  # (R,)
    d_sum = jnp.sum(jnp.where(rest, _sqrt0(w2 - 2.0 * a * c + s2[:, None]), 0.0), axis=-1)
    u = s_all - 2.0 * s  # Σ_{rest} α_i x_i − s
    d_norm = _sqrt0(jnp.sum(u * u, axis=-1))
    alpha_bar = jnp.sum(a_sel, axis=-1)
    pk = p[:, k:k + 1]  # (R, 1)
    e_terms = (1 + pk) ** 2 * w2 - 2 * pk * (1 + pk) * a * c_all + pk * pk * q_all[:, None]
    expected = pref[:, k] * jnp.sum(jnp.where(vis, _sqrt0(e_terms), 0.0), axis=-1)
    var = (p[:, k] * (1 - p[:, k]) * ratio)[:, None] * (w2_tot[:, None] - w2)
    gap = pref[:, k] * jnp.sum(jnp.where(vis, _sqrt0(var), 0.0), axis=-1)
    if bound:
      r_n = _sqrt0(jnp.max(jnp.where(sel, n2[None, :], 0.0), axis=-1))
      d1 = _sqrt0(_d1_sq(sel, rest, dist2, cap=min(caps[k], C), row_block=row_block))
      spread = jnp.sum(jnp.where(rest, jnp.abs(alpha_bar[:, None] - a), 0.0), axis=-1)
      dmax_sum = (m - alpha_bar) * d1 + r_n * spread
      dmax_norm = (m - alpha_bar) * d1 + jnp.abs(m - 2.0 * alpha_bar) * r_n
    else:
      d1 = r_n = dmax_sum = dmax_norm = jnp.zeros_like(d_sum)
    cols.append((d_sum, d_norm, expected, gap, dmax_sum, dmax_norm, alpha_bar, d1, r_n))
  counted = t[:, None] > nf[None, :]  # (R, K)
  fields = [jnp.stack(f, axis=-1) for f in zip(*cols)]  # each (R, K)
  fields = [jnp.where(counted, f, 0.0) for f in fields]
  return RowStats(counted, *fields)


def _d1_sq(sel, rest, dist2, *, cap: int, row_block: int):
  """d_1² per row: max ‖x_i − x_j‖² over selected j and non-selected visible i. (R,)

  sel, rest: (R, C); dist2: (C, C). The ≤ cap selected keys of each row are compacted to
  indices and their rows of the distance matrix gathered: cap·C work per query instead of C².
  """
  C = sel.shape[-1]
  pos = jnp.arange(C, dtype=jnp.int32)

  def one(args):
    srow, rrow = args  # (C,) bool
    slot = jnp.cumsum(srow) - 1
    idx = jnp.zeros((cap,), jnp.int32).at[jnp.where(srow, slot, cap)].set(pos, mode="drop")
    ok = jnp.arange(cap) < jnp.sum(srow)
    v = jnp.where(ok[:, None] & rrow[None, :], dist2[idx], -jnp.inf)  # (cap, C)
    best = jnp.max(v)
    return jnp.where(jnp.isfinite(best), best, 0.0)

  return lax.map(one, (sel, rest), batch_size=max(1, min(sel.shape[0], row_block)))


def causal_blocks(L: int, blocks: int = 4) -> list[tuple[int, int]]:
  """Query blocks [lo, hi) of a causal L × L layer; block b reads only keys < hi, so the
  per-row work is Σ_b (hi − lo)·hi ≈ 0.62·L² for 4 blocks instead of L²."""
  edges = sorted({0, L} | {round(L * (b + 1) / blocks) for b in range(blocks)})
  return list(zip(edges[:-1], edges[1:]))


@functools.partial(jax.jit, static_argnames=("caps", "inclusion", "bound", "row_block"))
def _layer_kernel(weights, x, thr, cut, ns, *, caps: tuple, inclusion: str, bound: bool,
                  row_block: int):
  """HeadStats (G, K) for G heads: weights (G, L, L), x (G, L, d), thr/cut (G, L, K)."""
  L = weights.shape[-1]

  def per_head(args):
    a, xh, th, ct = args
    parts = [_block_rows(a[lo:hi, :hi], xh[:hi], th[lo:hi], ct[lo:hi], ns, lo, caps=caps,
                         inclusion=inclusion, bound=bound, row_block=row_block)
             for lo, hi in causal_blocks(L)]
    rows = RowStats(*[jnp.concatenate(f, axis=0) for f in zip(*parts)])
    return _reduce_rows(rows)

  return lax.map(per_head, (weights, x, thr, cut))


def layer_stats(weights, x, ns: Sequence[int], *, inclusion: str = "n_over_l_minus_1",
                bound: bool = True, dtype=None, sorted_rows=None) -> HeadStats:
  """Per-head Theorem 1 statistics of one layer, fast path; same values as :func:`head_stats`.

  Args:
    weights: (B, H, L, L) causal attention weights (every query uses its causal prefix).
    x: (B, H, L, d) per-head vectors or (B, L, D) shared by the heads.
    ns: top-N sizes (each < L is counted only for queries with t > N).
    bound: also d_1, R_N, d_max (the verification of Eq. 9).
    dtype: compute dtype (float64 where a bound is verified; float32 suffices for KS).
    sorted_rows: rows already sorted by :func:`sort_rows` (reused between calls).
  Returns:
    HeadStats with fields (B, H, K) (NumPy arrays).
  """
  _check_inclusion(inclusion)
  ns = [int(n) for n in ns]
  if not ns or min(ns) < 1:
    raise LimitsError(f"top-N sizes {ns} must be positive integers")
  w = np.asarray(weights, dtype=dtype or np.asarray(weights).dtype)
  B, H, L, _ = w.shape
  x = np.asarray(x, dtype=w.dtype)
  if x.ndim == 3:
    x = np.broadcast_to(x[:, None], (B, H) + x.shape[1:])
  srt = sort_rows(w) if sorted_rows is None else sorted_rows
  th = thresholds_from_sorted(w, srt, ns)
  # The d_1 gather size is static: the Ns themselves when the bound is computed (Alg. 1-2 use
  # a few fixed Ns); without the bound nothing depends on it, so one compile serves every N.
  caps = tuple(max(1, min(n, L)) for n in ns) if bound else (1,) * len(ns)
  d = x.shape[-1]
  out = _layer_kernel(jnp.asarray(w.reshape(B * H, L, L)), jnp.asarray(x.reshape(B * H, L, d)),
                      jnp.asarray(th.thr.reshape(B * H, L, -1)),
                      jnp.asarray(th.cut.reshape(B * H, L, -1)), jnp.asarray(ns, jnp.int32),
                      caps=caps, inclusion=inclusion, bound=bound,
                      row_block=max(1, min(L, (1 << 21) // max(max(caps) * L, 1))))
  return jax.tree.map(lambda v: np.asarray(v).reshape((B, H) + v.shape[1:]), out)
