"""One causal query block of one head: Theorem 1's per-row statistics in matrix form (the body
of :func:`limits.distance.kernels.layer_kernel`; see that module for the selection, the causal
blocks and the shared per-head arrays).

Per N, two (R, C)·(C, d) products through the Gram identities (s_N = A_N X, c_N = s_N Xᵀ,
‖α_i x_i − s‖² = α_i²‖x_i‖² − 2α_i c_i + ‖s‖²) and one pass over the block's (R, C) rows per
quantity. Precision (issue 27): the passes whose results are only summed into reported token
averages (E, ε, the printed E, the E with p = N/L: ``avg_dtype``, float32 in the steps) may be
narrower than the compute dtype; everything a decision reads (the selection, d̃ in both
forms, d_1, R_N, ᾱ_N, d_max: the violation counts and max ratios of Theorem 1's bound) stays
in the compute dtype (float64 where the bound is verified).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from limits.distance import farthest
from limits.distance.rows import RowStats, sqrt0


def causal_blocks(L: int, blocks: int = 4) -> list[tuple[int, int]]:
  """Query blocks [lo, hi) of a causal L × L layer; block b reads only keys < hi, so the
  per-row work is Σ_b (hi − lo)·hi ≈ 0.62·L² for 4 blocks instead of L²."""
  edges = sorted({0, L} | {round(L * (b + 1) / blocks) for b in range(blocks)})
  return list(zip(edges[:-1], edges[1:]))


def block_visible(lo: int, R: int, C: int, window: int = 0, xp=jnp):
  """(R, C) bool: key j visible from query lo + r (causal, and j > query − W when W > 0);
  ``xp=numpy`` builds it on the host (no device array, nothing to read back)."""
  kpos = xp.arange(C)[None, :]
  qpos = (lo + xp.arange(R))[:, None]
  vis = kpos <= qpos
  return vis & (kpos > qpos - window) if window else vis


def block_rows(a, x, select, ns, lo, *, cap: int, inclusion: str, bound: bool,
                row_block: int, top_idx=None, printed: bool = False, window: int = 0,
                lean: bool = False, shared=None, rank=None, avg_dtype=None,
                top_s: bool = False):
  """RowStats (R, K) of the queries lo … lo + R − 1 of one head (Theorem 1, matrix form), and
  with ``printed`` the per-row printed E (both x̄ readings) and the E with p = N/L, (R, K, 3).

  a: (R, C) their causal weights over the keys 0 … C − 1 they can see (C = lo + R: a causal
  block reads only its prefix); x: (C, d); select(k) → (R, C) the mask of I_N for N = ns[k]
  (k traced); ns: (K,); cap: static upper bound of the N values (the size of the d_1 gather).
  top_idx: None (d_1 by the gather) or (R, k) the keys of each row in selection order (d_1
  from the prefix maxima, :func:`.farthest.d1_sq_prefix`). The per-N body is traced once and
  looped over the K values of N (``lax.map``): its compile time does not grow with K.
  window: static W > 0 for a sliding-window layer (0 = global). lean (static, Algorithm 3's scan): only what its KS
  samples read (d̃ both forms, E, the printed E with x̄ = Σ α_j x_j); the Jensen gap, the
  x̄ = mean reading and the E with p = N/L are left 0.
  shared: None, or what does not depend on the block, computed once per head over all L keys
  (:func:`_head_shared`) and cut to this block: ``n2`` (C,), ``dist2`` (C, C), ``P``, ``I``
  (R, C) (with ``bound``), ``xcum`` (R, d) the prefix sums of x (printed, global layers).
  rank: with ``top_idx``, (R, C) the rank of each key in that order (``select(k)`` is
  ``vis & (rank < ns[k])``): the gathers of d_1 that do not depend on N are then done once
  (:func:`.farthest.prefix_gathers`), not per N.
  avg_dtype: None (the compute dtype), or the dtype of the (R, C) passes whose results are
  only summed into reported token averages and decide nothing (:data:`limits.distance.kernels.AVERAGED`: E, the
  printed E and the E with p = N/L, per N, and their products c_all, c_mean; ε's
  N-independent sum stays in the compute dtype, its per-N factor is a scalar per row).
  Everything a decision reads stays in the compute dtype: the selection, d̃ (both forms, its
  s_N and c_N products), d_1, R_N, ᾱ_N, d_max, hence the violation counts and max ratios.

  Forms that save a pass over (R, C) per N (same values up to rounding, a few ulp per term):
  the Jensen gap's sqrt(p(1 − p)·r·(Σα²‖x‖² − α_i²‖x_i‖²)) factors as sqrt(p(1 − p)·r) times
  a sum computed once; the d_max spread Σ_{i∉I_N}|ᾱ_N − α_i| is ᾱ_N·|rest| − (m − ᾱ_N) when
  every visible weight of the block is >= 0 (then ᾱ_N >= each non-selected α_i, Lemma: ᾱ_N
  sums the N largest; else the pass).
  """
  R, C = a.shape
  dt = a.dtype
  fa = dt if avg_dtype is None else jnp.dtype(avg_dtype)  # the averaged-only passes
  vis = block_visible(lo, R, C, window)  # (R, C)
  a = jnp.where(vis, a, 0.0)
  t = jnp.sum(vis, axis=-1).astype(dt)  # (R,) visible keys per query: min(t + 1, W)
  n2 = jnp.sum(x * x, axis=-1) if shared is None else shared["n2"]  # (C,)
  w2 = a * a * n2[None, :]  # (R, C) α_i²‖x_i‖²
  m = jnp.sum(a, axis=-1)  # (R,) row mass
  s_all = a @ x  # (R, d)
  q_all = jnp.sum(s_all * s_all, axis=-1)  # (R,)
  s_top = None
  if top_s and top_idx is not None and 16 * top_idx.shape[-1] <= C:
    # s_N and ᾱ_N of every N from the selection order: the N selected keys are the first N
    # visible ones of top_idx (invisible keys come last), so one (K, k)·(k, R·d) product
    # over the k gathered keys replaces K (R, C)·(C, d) products (same sums, another order:
    # ~1e-16 relative). Only for k << C: Algorithm 1's N = 5 (k = 6); at Algorithm 2's
    # k = 101 the (R, k, d) gather cost as much as the products it saves (CPU seconds, one
    # process, SmolLM2 layers 0 and 20 at L = 1,024, loaded machine).
    k_top = top_idx.shape[-1]
    vis_i = jnp.take_along_axis(vis, top_idx, -1)  # (R, k)
    a_i = jnp.where(vis_i, jnp.take_along_axis(a, top_idx, -1), 0.0)  # (R, k)
    first = (jnp.arange(k_top)[None, :] < ns[:, None]).astype(dt)  # (K, k) rank < N
    s_top = jnp.einsum("nk,rkd->nrd", first, a_i[..., None] * x[top_idx])  # (K, R, d)
    abar_top = first @ a_i.T  # (K, R)
  # The averaged-only passes' operands in fa (the same arrays when fa is the compute dtype).
  af, xf, n2f = a.astype(fa), x.astype(fa), n2.astype(fa)
  w2f = w2 if fa == dt else af * af * n2f[None, :]  # (R, C)
  c_all = s_all.astype(fa) @ xf.T  # (R, C) ⟨x_i, s_all⟩
  q_allf = q_all.astype(fa)
  ratio = jnp.where(t > 2, (t - 1.0) / jnp.maximum(t - 2.0, 1.0), 0.0)  # (R,)
  w2_tot = jnp.sum(w2, axis=-1)  # (R,)
  if not lean:  # the Jensen gap's N-independent sum: Σ_i sqrt(Σ_j α_j²‖x_j‖² − α_i²‖x_i‖²),
    # in the compute dtype: one pass per block, and in float32 the difference loses digits
    # where one key holds most of Σ α²‖x‖² (an attention sink: 2e-6 relative on SmolLM2)
    gap_base = jnp.sum(jnp.where(vis, sqrt0(w2_tot[:, None] - w2), 0.0), axis=-1)  # (R,)
  cap = min(cap, C)
  if bound and shared is not None:
    dist2, P, I = shared["dist2"], shared.get("P"), shared.get("I")
  elif bound:
    dist2 = farthest.dist2(x, n2)  # (C, C) ‖x_j − x_i‖²
    if top_idx is not None:
      P, I = (v[lo:] for v in farthest.prefix_maxima(dist2))  # (R, C) each
  if printed and not lean:  # limits.distance.printed.head_expectations, same s, c and block
    if window:  # the mean of the query's window
      xm = (vis.astype(dt) @ x) / t[:, None]  # (R, d)
    else:
      xcum = jnp.cumsum(x, axis=0)[lo:] if shared is None else shared["xcum"]
      xm = xcum / t[:, None]  # (R, d) prefix mean per query
    c_mean = xm.astype(fa) @ xf.T  # (R, C) ⟨x_i, x̄_t⟩
    q_mean = jnp.sum(xm * xm, axis=-1).astype(fa)
  pre = None
  if bound and top_idx is not None:
    k_top = top_idx.shape[-1]
    if P is None:  # d_1 directly from the selected keys' rows (farthest.d1_sq_top)
      pre = {"vis_idx": jnp.take_along_axis(vis, top_idx, -1), "n2_idx": n2[top_idx]}
    else:
      pre = farthest.prefix_gathers(top_idx, P, I, vis, rank, n2)  # (R, k) each, once
    nonneg = jnp.all(~vis | (a >= 0))  # every visible weight >= 0: the spread's closed form
  if printed:

    def printed_sum(coef, c, q):  # coef (R, C) = α_i + N/(L_t − 1), in fa
      terms = coef * coef * n2f[None, :] - 2.0 * coef * c + q[:, None]
      return jnp.sum(jnp.where(vis, sqrt0(terms), 0.0), axis=-1).astype(dt)  # (R,)

  def per_n(k):  # one N: the (R,) columns of RowStats and the (R, 3) printed E
    n = ns[k].astype(dt)
    sel = select(k)  # (R, C)
    rest = vis & ~sel
    if s_top is None:
      a_sel = jnp.where(sel, a, 0.0)
      s, alpha_bar = a_sel @ x, jnp.sum(a_sel, axis=-1)  # (R, d), (R,)
    else:
      s, alpha_bar = s_top[k], abar_top[k]
    c = s @ x.T  # (R, C)
    s2 = jnp.sum(s * s, axis=-1)  # (R,)
    d_sum = jnp.sum(jnp.where(rest, sqrt0(w2 - 2.0 * a * c + s2[:, None]), 0.0), axis=-1)
    u = s_all - 2.0 * s  # Σ_{rest} α_i x_i − s
    d_norm = sqrt0(jnp.sum(u * u, axis=-1))
    if inclusion == "n_over_l_minus_1":
      p = n / jnp.maximum(t - 1.0, 1.0)
    else:
      p = n / t
    p = jnp.clip(p, 0.0, 1.0)  # (R,)
    pref = (t - n) / t  # (R,)
    pk = p.astype(fa)[:, None]  # (R, 1)
    e_terms = (1 + pk) ** 2 * w2f - 2 * pk * (1 + pk) * af * c_all + pk * pk * q_allf[:, None]
    expected = pref * jnp.sum(jnp.where(vis, sqrt0(e_terms), 0.0), axis=-1).astype(dt)
    if lean:
      gap = jnp.zeros_like(d_sum)
    else:
      gap = pref * sqrt0(p * (1 - p) * ratio) * gap_base
    if bound:
      if top_idx is None:
        r_n = sqrt0(jnp.max(jnp.where(sel, n2[None, :], 0.0), axis=-1))
        d1 = sqrt0(farthest.d1_sq_gather(sel, rest, dist2, cap=cap, row_block=row_block))
        spread = jnp.sum(jnp.where(rest, jnp.abs(alpha_bar[:, None] - a), 0.0), axis=-1)
      else:  # R_N over the (R, k) selection order: the same maximum, no (R, C) pass
        in_n = pre["vis_idx"] & (jnp.arange(k_top)[None, :] < ns[k])  # (R, k) = sel at idx
        r_n = sqrt0(jnp.max(jnp.where(in_n, pre["n2_idx"], 0.0), axis=-1))
        if P is None:
          d1 = sqrt0(farthest.d1_sq_top(dist2, top_idx, in_n, rest))
        else:
          d1 = sqrt0(farthest.d1_sq_prefix(sel, rest, dist2, top_idx, P, I, in_n=in_n,
                                           pre=pre, n=ns[k]))
        n_rest = t - jnp.sum(in_n, axis=-1).astype(dt)  # (R,) visible keys not selected
        spread = lax.cond(
            nonneg, lambda: alpha_bar * n_rest - (m - alpha_bar),
            lambda: jnp.sum(jnp.where(rest, jnp.abs(alpha_bar[:, None] - a), 0.0), axis=-1))
      dmax_sum = (m - alpha_bar) * d1 + r_n * spread
      dmax_norm = (m - alpha_bar) * d1 + jnp.abs(m - 2.0 * alpha_bar) * r_n
    else:
      d1 = r_n = dmax_sum = dmax_norm = jnp.zeros_like(d_sum)
    cols = (d_sum, d_norm, expected, gap, dmax_sum, dmax_norm, alpha_bar, d1, r_n)
    if not printed:
      return cols, None
    coef = af + (n / jnp.maximum(t - 1.0, 1.0)).astype(fa)[:, None]
    if lean:
      zero = jnp.zeros_like(d_sum)
      return cols, pref[:, None] * jnp.stack([printed_sum(coef, c_all, q_allf), zero, zero], -1)
    pl = jnp.clip(n / t, 0.0, 1.0).astype(fa)[:, None]  # (R, 1) N/L_t
    nl_terms = (1 + pl) ** 2 * w2f - 2 * pl * (1 + pl) * af * c_all + pl * pl * q_allf[:, None]
    extra = pref[:, None] * jnp.stack(
        [printed_sum(coef, c_all, q_allf), printed_sum(coef, c_mean, q_mean),
         jnp.sum(jnp.where(vis, sqrt0(nl_terms), 0.0), axis=-1).astype(dt)], axis=-1)  # (R, 3)
    return cols, extra

  if ns.shape[0] == 1:  # one N (Algorithm 1): no loop
    cols, extra = jax.tree.map(lambda v: v[None], per_n(0))
  else:
    cols, extra = lax.map(per_n, jnp.arange(ns.shape[0]))  # each (K, R); extra (K, R, 3)
  counted = t[:, None] > ns[None, :].astype(dt)  # (R, K)
  fields = [jnp.where(counted, f.T, 0.0) for f in cols]  # each (R, K)
  rows = RowStats(counted, *fields)
  if not printed:
    return rows, None
  return rows, jnp.where(counted[..., None], jnp.swapaxes(extra, 0, 1), 0.0)  # (R, K, 3)
