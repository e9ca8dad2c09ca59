"""The random-set expectation E as one public summary of the paper prints it, beside the
suite's reconstruction (Theorem 1 / Algorithms 1-3; the Theorem 2 forms are in
:mod:`limits.separability.printed`).

The display formulas of arXiv 2508.17821 were not recoverable; the suite evaluates forms it
rebuilt from the proofs (:mod:`limits.distance.rows`). One public summary of the paper prints E
differently (docs/claims.md, "Printed and derived forms"):

- **Random-set expectation, printed:**
  E = ((L − N)/L)·Σ_{i=1}^{L} ‖(α_i + N/(L − 1))·x_i − x̄‖₂ + ε, with x̄ undefined there. Two natural readings (AMBIG-17): the attention output Σ_j α_j x_j
  (adopted by default) or the plain mean of the x_j. The reconstruction is
  ((L − N)/L)·Σ_i ‖α_i x_i − p·Σ_{j≠i} α_j x_j‖ with p = N/(L − 1) (AMBIG-3: or N/L).

Every function here is pure, takes one query row (weights ``alpha (L,)``, vectors ``x (L, d)``
and an optional boolean ``mask (L,)``, True = visible, so a causal prefix is a masked row with
L = the number of visible keys), and can be ``jax.vmap``-ed over leading axes. The Jensen term
ε is not included: ``limits.distance.jensen_gap_bound`` bounds it, and a claim's "+ ε" reading
adds that bound.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

XBAR_READINGS = ("output", "mean")
INCLUSION_READINGS = ("L-1", "L")


def _visible(alpha, mask):
  """(mask as float, number of visible keys L) for one row."""
  m = jnp.ones_like(alpha) if mask is None else jnp.asarray(mask, alpha.dtype)
  return m, jnp.sum(m)


def xbar(alpha, x, mask: Optional[jnp.ndarray] = None, reading: str = "output"):
  """x̄ of the printed E: the attention output Σ_j α_j x_j ("output") or the mean of the
  visible x_j ("mean"). Shape (d,)."""
  m, count = _visible(alpha, mask)
  if reading == "output":
    return (alpha * m) @ x
  if reading == "mean":
    return m @ x / count
  raise ValueError(f"xbar reading must be one of {XBAR_READINGS}, got {reading!r}")


def expected_printed(alpha, x, n, mask: Optional[jnp.ndarray] = None, xbar_reading="output"):
  """The printed main sum ((L − N)/L)·Σ_{i visible} ‖(α_i + N/(L − 1))·x_i − x̄‖₂ (no ε).

  Args:
    alpha: (L,) attention weights of one query. x: (L, d) vectors. n: top-N size (may be a
      traced scalar). mask: (L,) visible keys (default all); L in the formula is their count.
    xbar_reading: "output" (x̄ = Σ_j α_j x_j) or "mean" (x̄ = mean of the visible x_j).
  """
  m, count = _visible(alpha, mask)
  xb = xbar(alpha, x, mask, xbar_reading)
  coef = alpha + n / (count - 1.0)
  terms = jnp.linalg.norm(coef[:, None] * x - xb[None, :], axis=-1) * m
  return (count - n) / count * jnp.sum(terms)


def expected_reconstructed(alpha, x, n, mask: Optional[jnp.ndarray] = None, inclusion="L-1"):
  """The reconstruction ((L − N)/L)·Σ_{i visible} ‖α_i x_i − p·Σ_{j≠i} α_j x_j‖₂ (no ε), with
  p = N/(L − 1) (``inclusion="L-1"``, the default of AMBIG-3) or N/L (``"L"``)."""
  m, count = _visible(alpha, mask)
  if inclusion == "L-1":
    p = n / (count - 1.0)
  elif inclusion == "L":
    p = n / count
  else:
    raise ValueError(f"inclusion must be one of {INCLUSION_READINGS}, got {inclusion!r}")
  ax = (alpha * m)[:, None] * x
  others = jnp.sum(ax, axis=0)[None, :] - ax
  terms = jnp.linalg.norm(ax - p * others, axis=-1) * m
  return (count - n) / count * jnp.sum(terms)


def expected_printed_rows(weights, x, n, xbar_reading="output"):
  """The printed E for every query of one head, each over its causal prefix (AMBIG-8).

  Args:
    weights: (L, L) causal attention weights of one head (row t = query t, zeros above the
      diagonal). x: (L, d) vectors. n: top-N size. xbar_reading: see :func:`expected_printed`.

  Returns:
    (L,) printed E per query; NaN for queries that see t + 1 <= N keys (skipped, as the
    suite skips them for d̃), so ``jnp.nanmean`` gives the head's token average.
  """
  L = weights.shape[-1]
  masks = jnp.arange(L)[None, :] <= jnp.arange(L)[:, None]
  vals = jax.vmap(lambda a, m: expected_printed(a, x, n, m, xbar_reading))(weights, masks)
  return jnp.where(jnp.arange(L) + 1 > n, vals, jnp.nan)


def _sqrt0(q):
  return jnp.sqrt(jnp.maximum(q, 0.0))


@functools.partial(jax.jit, static_argnames=("window",))
def head_expectations(weights, x, ns, window: int = 0):
  """Per-query printed E (both x̄ readings) and reconstructed E with p = N/L, one head, in
  matrix form (Gram identities), for the distance steps to record beside d̃.

  Args:
    weights: (L, L) causal weights of one head (row t = query t, zeros above the diagonal);
      query t's formula uses its causal prefix (L_t = t + 1 keys), as the suite does for d̃.
    x: (L, d) vectors. ns: (K,) top-N sizes.
    window: static sliding window W > 0 of a local layer (Gemma 3): query t sees keys
      t − W + 1 … t, so its length is min(t + 1, W) and x̄ of the ``xmean`` reading is the mean
      of that window; keys before it are not tokens of the row. 0: global (causal prefix).

  Returns:
    (printed_output, printed_mean, reconstructed_n_over_l), each (L, K); NaN where
    t + 1 <= N (the query is skipped, as for d̃), so ``nanmean`` over L is the head's average.
    Equal to :func:`expected_printed` / :func:`expected_reconstructed` row by row.
  """
  L = weights.shape[-1]
  dt = weights.dtype
  pos = jnp.arange(L)
  vis = pos[None, :] <= pos[:, None]  # (L, L)
  if window:
    vis = vis & (pos[None, :] > pos[:, None] - window)  # (L, L) within the window
  a = jnp.where(vis, weights, 0.0)
  t = (jnp.minimum(pos + 1, window) if window else pos + 1).astype(dt)  # (L,) visible keys
  n2 = jnp.sum(x * x, axis=-1)  # (L,) ‖x_i‖²
  s = a @ x  # (L, d) attention output per query
  cs = jnp.cumsum(x, axis=0)  # (L, d)
  if window:  # minus the sum of the keys before the window
    cs = cs - jnp.concatenate([jnp.zeros((window,) + x.shape[1:], x.dtype), cs[:-window]])[:L]
  xm = cs / t[:, None]  # (L, d) mean of each query's visible keys
  c_out = s @ x.T  # (L, L) ⟨x_i, s_t⟩
  c_mean = xm @ x.T  # (L, L) ⟨x_i, x̄_t⟩
  q_out = jnp.sum(s * s, axis=-1)  # (L,)
  q_mean = jnp.sum(xm * xm, axis=-1)
  nf = ns.astype(dt)  # (K,)
  pref = (t[:, None] - nf[None, :]) / t[:, None]  # (L, K)
  counted = t[:, None] > nf[None, :]

  def printed(coef, c, q):  # coef (L, L) = α_i + N/(L_t − 1)
    terms = coef * coef * n2[None, :] - 2.0 * coef * c + q[:, None]
    return jnp.sum(jnp.where(vis, _sqrt0(terms), 0.0), axis=-1)  # (L,)

  out_o, out_m, out_r = [], [], []
  w2 = a * a * n2[None, :]
  for k in range(ns.shape[0]):
    coef = a + (nf[k] / jnp.maximum(t - 1.0, 1.0))[:, None]
    out_o.append(printed(coef, c_out, q_out))
    out_m.append(printed(coef, c_mean, q_mean))
    p = jnp.clip(nf[k] / t, 0.0, 1.0)[:, None]  # (L, 1) N/L_t
    e_terms = (1 + p) ** 2 * w2 - 2 * p * (1 + p) * a * c_out + p * p * q_out[:, None]
    out_r.append(jnp.sum(jnp.where(vis, _sqrt0(e_terms), 0.0), axis=-1))
  stack = lambda cols: jnp.where(counted, pref * jnp.stack(cols, axis=-1), jnp.nan)
  return stack(out_o), stack(out_m), stack(out_r)


def layer_expectation_means(weights, x, ns):
  """Token averages (H, K) of :func:`head_expectations` for every head of one layer.

  weights: (H, L, L); x: (H, L, d). Returns a dict with keys ``expected_printed_output``,
  ``expected_printed_xmean`` and ``expected_nl`` (NumPy arrays (H, K)).
  """
  import numpy as np

  ns = jnp.asarray([int(n) for n in ns])
  outs = jax.lax.map(lambda args: head_expectations(args[0], args[1], ns),
                     (jnp.asarray(weights), jnp.asarray(x, dtype=jnp.asarray(weights).dtype)))
  keys = ("expected_printed_output", "expected_printed_xmean", "expected_nl")
  return {k: np.nanmean(np.asarray(v), axis=1) for k, v in zip(keys, outs)}
