"""The gradient step's all-rows decisions: a one-pass screen, Newton only where it is needed.

For every (row, T) the gradient experiment asks of λ = λ_max(M), M = diag α − ααᵀ,
α = softmax(l/T), ‖J‖₂ = λ/T (Corollary 3; M is PSD, so its spectral norm is λ):

- is λ/T above Corollary 3 as printed, min{1/(4T), √2}?  above the tight bound 1/(2T)?
- is λ/T above Lemma 2's bound (e^{r/T} + e^{2r/T})/(T·n) (where that bound is finite)?
- which row has the largest λ/T (the reported max T‖J‖)?

Each comparison is made, as in the reference path (every pair by Newton), with the threshold
times (1 + rtol). Most pairs are decided by a bracket λ₀ ≤ λ ≤ λ¹ computed in one pass over
the row; of the rest, most are decided by the secular test (:func:`secular_decide`: the sign
of the secular equation at the threshold, bounded from α₁, α₂ and q = Σ_{i≠(1)} α_i², which
the same pass sums); only the pairs neither can decide (and the candidates for the maximum)
go to Newton on the secular equation (``sensitivity._softmax_norm_newton``) in the run's
dtype, a few passes over the row each.

**The bracket** (proved here; tested against dense ``eigvalsh`` in float64). Let α₁ ≥ α₂ be the
two largest weights (α₂ taken over the keys other than one arg-max), ρ = 1 − α₁ = Σ_{i≠(1)} α_i.

- Lower: Rayleigh quotients. For a unit v, λ ≥ vᵀMv = Σα_i v_i² − (Σα_i v_i)². v = e_(1) gives
  α₁ρ; v = (e_(1) − e_(2))/√2 gives (α₁ + α₂ − (α₁ − α₂)²)/2 = (α₁ρ + α₂(1 + 2α₁ − α₂))/2.
  λ₀ is the larger. (It is ≥ α₂, the interlacing lower bound: the difference is
  (α₁ − α₂)(1 − α₁ + α₂)/2 ≥ 0.) Two visible keys, or tied top two: λ₀ = λ exactly.
- Upper 1: Weyl. M = diag α − ααᵀ with ααᵀ PSD, so λ_max(M) ≤ λ_max(diag α) = α₁.
- Upper 2: Gershgorin. Row i of M has diagonal α_i − α_i² = α_i(1 − α_i) and off-diagonal
  absolute sum α_i Σ_{j≠i} α_j = α_i(1 − α_i) (Σα = 1), so every eigenvalue is
  ≤ max_i 2α_i(1 − α_i). x(1 − x) increases on [0, ½] and every α_i with i ≠ (1) is ≤ α₂ ≤ ½,
  so that max is 2·max(α₁ρ, α₂(1 − α₂)). Since 2x(1 − x) ≤ ½, this also gives λ ≤ ½, the tight
  bound 1/(2T) (no pair can exceed it; the screen decides that comparison for every pair).
- λ¹ = min(α₁, 2·max(α₁ρ, α₂(1 − α₂))).

**Precision.** The bracket is computed in float32 (one exp per visible key and T, the whole
cost), from differences l_i − l_max taken in the rows' dtype and then rounded: with
u = 2⁻²⁴, each d_i = (l_i − l_max)·(1/T) has relative error ≤ 3u (the difference, 1/T and
the product each rounded once to float32), so e^{d_i} has relative error
≤ (3|d_i| + 2)u; keys with d_i < −87 (e^{d_i} below float32's normal range) change sums by
at most n·2⁻¹²⁵ in absolute terms. The sum over the ≤ w keys adds ≤ w·u, the division u, so
every α_i (and ρ) used has relative error ≤ (w + 270)u, and each bracket formula (products
and sums of positive terms in α₁, α₂, ρ) ≤ 3(w + 270)u + 4u. The margin is therefore
δ = 4(w + 270)·2⁻²⁴ relative (3.1e-4 at w = 1,024) plus 2⁻¹⁰⁰ absolute: λ₀(1 − δ) − 2⁻¹⁰⁰
and λ¹(1 + δ) + 2⁻¹⁰⁰ bracket the exact λ and also the reference's float64 Newton value (its
own error, ≤ 1e-12 relative, is far inside δ). A pair is decided only when the widened bracket
lies entirely on one side of the threshold; every pair within δ of a threshold is rechecked by
Newton in the run's dtype (float64 by default), so the decisions are those of the all-Newton
path. A non-finite bracket, or T outside [2⁻¹⁰⁰, 2¹⁰⁰], leaves the pair to Newton.

**Shapes.** Rows are grouped by visible span (last visible key + 1, rounded up to a multiple of
``sensitivity.SPAN_STEP`` = 256: a causal query at position t costs t + 128 keys on average);
each group is one jitted call that walks the rows in chunks of ≈ 2¹⁸ (row, T, key) elements
(the L2-sized block) with ``lax.map``. Nothing per row leaves the device: the result is a dict of (K,) per-temperature counts and maxima.
"""

from __future__ import annotations

import functools

import numpy as np

from limits.gradient import sensitivity

BLOCK_ELEMS = 1 << 18  # elements of one (rows, T, keys) chunk: ~1 MB float32, fits L2
KEEP_BYTES = 1 << 28  # rows pass 1 keeps for Newton (float32 + mask), else a second pass
_ABS = 2.0 ** -100  # absolute slack of the float32 bracket (see the module docstring)
_T_MIN, _T_MAX = 2.0 ** -100, 2.0 ** 100  # temperatures the float32 screen accepts


def margin(width: int) -> float:
  """δ = 4(w + 270)·2⁻²⁴: the float32 bracket's relative margin for rows of ≤ w keys."""
  return 4.0 * (width + 270) * 2.0 ** -24


def bracket(a1, a2, rho):
  """(λ₀, λ¹) with λ₀ ≤ λ_max(diag α − ααᵀ) ≤ λ¹ from α₁ ≥ α₂ and ρ = 1 − α₁ (module docstring).

  Elementwise over any shape; a one-hot row (α₂ = 0) gives (0, 0), tied top two (α₁ = α₂)
  gives λ₀ = λ¹ = α₁ up to rounding.
  """
  import jax.numpy as jnp

  lo = jnp.maximum((a1 * rho + a2 * (1 + 2 * a1 - a2)) / 2, a1 * rho)
  hi = jnp.minimum(a1, 2 * jnp.maximum(a1 * rho, a2 * (1 - a2)))
  return lo, hi


# ----------------------------------------------------------------------------- per group


def _row_facts(l, m):
  """Per row (B,): arg-max index, top logit, top logit among the other keys (−inf if none),
  visible range r (0 if fewer than one visible key) and count n. l, m (B, w)."""
  import jax.numpy as jnp

  neg = jnp.asarray(-jnp.inf, l.dtype)
  x = jnp.where(m, l, neg)
  i1 = jnp.argmax(x, axis=-1)  # (B,)
  n = jnp.sum(m, axis=-1)
  l1 = jnp.where(n > 0, jnp.max(x, axis=-1), 0)
  others = m & (jnp.arange(l.shape[-1]) != i1[:, None])
  l2 = jnp.max(jnp.where(others, l, neg), axis=-1)
  lmin = jnp.min(jnp.where(m, l, jnp.inf), axis=-1)
  r = l1 - lmin
  return i1, l1, l2, others, jnp.where(jnp.isfinite(r), r, 0), n


def _screen_chunk(l, m, T, *, dtype):
  """The float32 bracket for a chunk: l, m (B, w); T (K,) in ``dtype``. Returns λ₀, λ¹ (B, K)
  float32 (NaN where the screen cannot be trusted), the secular test's inputs (α₁, α₂, q)
  (B, K) float32 each (:func:`secular_decide`; q = Σ_{i≠(1)} α_i², one more multiply-add per
  key) and the row facts (r, n) of Lemma 2's bound (:func:`lemma2`): the visible range (B,)
  in ``dtype`` and the visible count (B,)."""
  import jax.numpy as jnp

  f32 = jnp.float32
  _, l1, l2, others, r, n = _row_facts(l, m)
  T32 = T.astype(f32)
  inv = (1 / T).astype(f32)  # (K,) 1/T rounded once: d·(1/T) has the 3u error of d/T
  d = jnp.where(others, l - l1[:, None], 0).astype(f32)  # (B, w) <= 0, rounded once
  e = jnp.where(others[:, None, :], jnp.exp(d[:, None, :] * inv[None, :, None]), 0)  # (B,K,w)
  s_o = jnp.sum(e, axis=-1)  # (B, K) Σ over the keys other than the arg-max
  q_o = jnp.sum(e * e, axis=-1)  # (B, K) Σ e² over the same keys
  S = 1 + s_o
  d2 = jnp.where(n >= 2, (l2 - l1).astype(f32), -jnp.inf)  # (B,)
  a1, rho = 1 / S, s_o / S
  a2 = jnp.exp(d2[:, None] * inv[None, :]) / S
  lo, hi = bracket(a1, a2, rho)
  ok = (T32 >= _T_MIN) & (T32 <= _T_MAX)
  lo = jnp.where(ok[None, :], lo, jnp.nan)
  hi = jnp.where(ok[None, :], hi, jnp.nan)
  q = q_o / (S * S)
  return lo, hi, (a1, a2, q), (r.astype(dtype), n)


def lemma2(r, n, T):
  """Lemma 2's softmax bound (``bounds.softmax_lemma2_from_range``): r, n (N,) a row's visible
  range and count, T (K,) → (N, K) in T's dtype (inf where it overflows)."""
  import jax.numpy as jnp

  from limits import bounds

  rc = r.astype(T.dtype)[:, None]
  nn = jnp.maximum(n, 1).astype(T.dtype)[:, None]
  return bounds.softmax_lemma2_from_range(rc, nn, T[None, :])


def _gather(rows, mask, idx, width, dtype):
  """Rows ``idx`` cut to their first ``width`` keys, cast to ``dtype``: (B, w), (B, w)."""
  return rows[idx, :width].astype(dtype), mask[idx, :width]


@functools.lru_cache(maxsize=None)
def _screen_group_fn(width: int, chunk: int, n: int, dtype_name: str):
  """jit: (rows (R, L), mask (R, L), idx (C·B,), T (K,)) → one span group's λ₀/T and λ¹/T
  widened by the margin (N, K) (NaN where the bracket is not finite), the secular test's
  float32 (α₁, α₂, q) stacked (N, 3, K) (NaN there too), its rows' visible range
  r and count (N,) (Lemma 2's bound: :func:`lemma2`) and the largest λ₀/T per T (K,). The
  first ``n`` of the N = C·B positions are rows; the rest is padding."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  dtype = jnp.dtype(dtype_name)
  delta = margin(width)

  def fn(rows, mask, idx, T):
    def one(ix):
      l, m = _gather(rows, mask, ix, width, dtype)
      return _screen_chunk(l, m, T, dtype=dtype)

    lo, hi, abq, (r, cnt) = lax.map(one, idx.reshape(-1, chunk))
    lo, hi, r, cnt = (o.reshape((-1,) + o.shape[2:]) for o in (lo, hi, r, cnt))
    abq = tuple(o.reshape((-1,) + o.shape[2:]) for o in abq)
    lo_n = (lo.astype(dtype) * (1 - delta) - _ABS) / T  # (N, K), norm units
    hi_n = (hi.astype(dtype) * (1 + delta) + _ABS) / T
    live = (jnp.arange(lo.shape[0]) < n)[:, None]
    valid = jnp.isfinite(lo_n) & jnp.isfinite(hi_n)
    max_lo = jnp.max(jnp.where(live & valid, lo_n, -jnp.inf), axis=0)  # (K,)
    nan = jnp.asarray(jnp.nan, dtype)
    abq = jnp.stack([jnp.where(valid, o, jnp.nan) for o in abq], axis=1)  # (N, 3, K) f32
    return jnp.where(valid, lo_n, nan), jnp.where(valid, hi_n, nan), abq, r, cnt, max_lo

  return jax.jit(fn)


@functools.lru_cache(maxsize=None)
def _decide_fn(n: int, rtol: float, width: int):
  """jit: the decisions of the bracket and the secular test (:func:`secular_decide`). A pair is
  left to Newton (``und``) unless, for each threshold (Lemma 2's only where finite), its
  widened bracket is on one side of it or the secular test decides it, and its upper end is
  below the largest lower end of its T (then it cannot be the max). Also returns Lemma 2's
  bound (N, K), from the rows' range r and count (N,)."""
  import jax
  import jax.numpy as jnp

  delta = margin(width)

  def fn(lo_n, hi_n, abq, r, count, max_lo, T, paper, tight):
    lem = lemma2(r, count, T)  # (N, K)
    valid = jnp.isfinite(lo_n) & jnp.isfinite(hi_n)
    thr_p, thr_t = paper * (1 + rtol), tight * (1 + rtol)  # (K,)
    thr_l = lem * (1 + rtol)  # (N, K)
    fin = jnp.isfinite(lem)
    live = (jnp.arange(lo_n.shape[0]) < n)[:, None]
    a, b, q = (abq[:, i].astype(T.dtype) for i in range(3))  # (N, K) each

    def side(thr):  # (below, above): λ/T ≤ thr / > thr decided
      s_below, s_above = secular_decide(a, b, q, thr * T, delta)
      return (valid & ((hi_n <= thr) | s_below)), (valid & ((lo_n > thr) | s_above))

    (bp, ap), (bt, at), (bl, al) = side(thr_p), side(thr_t), side(thr_l)
    und = ~((bp | ap) & (bt | at) & (bl | al | ~fin) & (hi_n < max_lo)) & live  # (N, K)
    keep = live & ~und
    cnt = lambda x: jnp.sum(x & keep, axis=0, dtype=jnp.int32)
    counts = {"n_exceed_paper": cnt(ap), "n_exceed_tight": cnt(at),
              "n_exceed_lemma2": cnt(fin & al),
              "lemma2_finite": jnp.sum(fin & live, axis=0, dtype=jnp.int32),
              "newton": jnp.sum(und, axis=0, dtype=jnp.int32)}
    return und, counts, jnp.sum(und), lem

  return jax.jit(fn)


SECULAR_ETA = 1e-9  # relative gap the secular test leaves around a threshold for Newton's error


def secular_decide(a, b, q, theta, delta: float):
  """Decides λ ≤ θ or λ > θ for λ = λ_max(diag α − ααᵀ) from α₁, α₂ and q = Σ_{i≠(1)} α_i²
  alone, where the bracket cannot (the secular equation; proved here, tested against dense
  ``eigvalsh`` in float64). a, b, q: float32 values with relative error ≤ ``delta`` (the
  screen's margin δ: α₁ and α₂ are within (w + 270)u, q = Σe²/S² within (3w + 1055)u, both
  below δ = 4(w + 270)u; plus 2⁻¹⁰⁰ absolute for the keys whose e^{d} underflows), cast to the
  run's dtype; θ the threshold in λ units (thr·T); any broadcastable shapes. Returns
  (below, above) bool: λ ≤ θ(1 − η), λ > θ(1 + η) with η = :data:`SECULAR_ETA`, so Newton's
  float64 value (error ≤ 1e-12 relative, far inside η) is on the same side of θ.

  With α₁ > α₂ > 0 the top eigenvalue is the root in (α₂, α₁) of
  F(λ) = α₁²/(α₁ − λ) − ψ(λ) − 1, ψ(λ) = Σ_{i≠(1)} α_i²/(λ − α_i) (det(D − λ − ααᵀ) = 0),
  and F increases on (α₂, α₁) from −∞ to +∞. For θ in (α₂, α₁), since
  α_i ≤ α₂ < θ for i ≠ (1):

  - ψ(θ) ≤ q/(θ − α₂), so F(θ) ≥ α₁²/(α₁ − θ) − q/(θ − α₂) − 1; if that is ≥ 0, λ ≤ θ;
  - ψ(θ) ≥ α₂²/(θ − α₂) + (q − α₂²)/θ, so F(θ) ≤ α₁²/(α₁ − θ) − α₂²/(θ − α₂) − (q − α₂²)/θ − 1;
    if that is < 0, λ > θ.

  Outside: λ ≤ α₁ (Weyl) decides θ ≥ α₁; λ ≥ α₂ (interlacing) decides θ < α₂. The inputs'
  errors are taken at their worst: each of α₁, α₂, q is replaced by the end of its interval
  [x(1 − δ) − 2⁻¹⁰⁰, x(1 + δ) + 2⁻¹⁰⁰] that makes the test hardest (α₁²/(α₁ − θ) ≥
  α₁lo²/(α₁hi − θ); α₂²/(θ − α₂) increases with α₂; q − α₂² ≥ qlo − α₂hi²), and the float64
  evaluation must clear zero by 1e-12 of its terms' size. NaN inputs decide nothing.
  """
  import jax.numpy as jnp

  lo = lambda x: jnp.maximum(x * (1 - delta) - _ABS, 0)
  hi = lambda x: x * (1 + delta) + _ABS
  a_lo, a_hi, b_lo, b_hi, q_lo, q_hi = lo(a), hi(a), lo(b), hi(b), lo(q), hi(q)
  t_lo, t_hi = theta * (1 - SECULAR_ETA), theta * (1 + SECULAR_ETA)
  slack = 1e-12
  with_safe = lambda ok, x: jnp.where(ok, x, 1.0)  # no division by 0 where the branch is off

  # λ ≤ t_lo: α₁ ≤ t_lo, or F(t_lo) ≥ 0 by the lower bound of F.
  inside = (b_hi < t_lo) & (t_lo < a_lo)
  f1 = a_lo * a_lo / with_safe(inside, a_hi - t_lo)
  f2 = q_hi / with_safe(inside, t_lo - b_hi)
  below = (a_hi <= t_lo) | (inside & (f1 - f2 - 1 >= slack * (f1 + f2 + 1)))

  # λ > t_hi: α₂ > t_hi, or F(t_hi) < 0 by the upper bound of F.
  inside = (b_hi < t_hi) & (t_hi < a_lo)
  g1 = a_hi * a_hi / with_safe(inside, a_lo - t_hi)
  g2 = b_lo * b_lo / with_safe(inside, t_hi - b_lo)
  g3 = jnp.maximum(q_lo - b_hi * b_hi, 0) / t_hi
  above = (b_lo > t_hi) | (inside & (g1 - g2 - g3 - 1 < -slack * (g1 + g2 + g3 + 1)))
  ok = jnp.isfinite(a) & jnp.isfinite(b) & jnp.isfinite(q) & jnp.isfinite(theta)
  return below & ok, above & ok


NEWTON_CHUNKS = 8  # Newton's chunks of pairs per jitted call (a power of two)


def _pow2(n: int) -> int:
  return 1 << max(0, int(n - 1).bit_length())


@functools.lru_cache(maxsize=None)
def _newton_pairs_fn(width: int, chunk: int, size: int, dtype_name: str, max_iters: int,
                     rtol: float):
  """jit: Newton's exact norm λ/T of ``size`` (row, T) pairs, in chunks of ``chunk`` pairs
  (one ``lax.map`` step each; the while loop of a chunk runs until its slowest pair converged,
  so the chunks are those of the group's pairs in (row, T) order, whatever the call);
  l, m (size, w) the pairs' rows cut to w keys, k (size,) their temperature index, lem (size,)
  Lemma 2's bound, ok (size,) False for padding. Returns their counts per T, max norm per T
  and whether a NaN norm occurred per T."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  from limits import normalizers

  dtype = jnp.dtype(dtype_name)

  def fn(l, m, k, lem, ok, T, paper, tight):
    K = T.shape[0]

    def one(args):
      lb, mb, kk = args
      t = T[kk]  # (P,)
      a = normalizers.softmax(lb.astype(dtype), t[:, None], mb)  # (P, w)
      return sensitivity._softmax_norm_newton(a, max_iters) / t

    norm = lax.map(one, (l.reshape(-1, chunk, width), m.reshape(-1, chunk, width),
                         k.reshape(-1, chunk))).reshape(-1)
    seg = lambda x: jax.ops.segment_sum((x & ok).astype(jnp.int32), k, num_segments=K)
    counts = {"n_exceed_paper": seg(norm > (paper * (1 + rtol))[k]),
              "n_exceed_tight": seg(norm > (tight * (1 + rtol))[k]),
              "n_exceed_lemma2": seg(jnp.isfinite(lem) & (norm > lem * (1 + rtol))),
              "nonfinite": seg(~jnp.isfinite(norm))}
    max_k = jax.ops.segment_max(jnp.where(ok & ~jnp.isnan(norm), norm, -jnp.inf), k,
                                num_segments=K)
    nan_k = seg(jnp.isnan(norm)) > 0
    return counts, max_k, nan_k

  return jax.jit(fn)


class _Pairs:
  """One span group's undecided (row, T) pairs, in (row, T) order, gathered block by block
  and sent to Newton ``size`` at a time; the last call (a power of two of chunks) is padded
  with the group's first row at T index 0, the padding of the all-rows path (``ok`` False)."""

  def __init__(self, screen, width, rows, k, lem, first, consts):
    self.s, self.w = screen, width
    self.rows, self.k, self.lem = rows, k, lem  # (P,) global row, T index, Lemma 2 bound
    self.first = first  # the group's first row and mask, cut to w
    self.consts = consts  # (T, paper, tight) on the device
    self.chunk = max(1, screen.block_elems // width)
    self.size = self.chunk * NEWTON_CHUNKS
    self.done = 0  # pairs sent so far
    self.buf: list = []  # [(l (p, w), m (p, w))] gathered, not yet sent
    self.n_buf = 0

  def take(self, start, rows, mask):
    """Gathers the pairs whose rows are in the block ``rows[0]`` = row ``start``."""
    b = int(np.searchsorted(self.rows, start + rows.shape[0]))
    self._feed(b, lambda sel: (rows[sel - start, :self.w], mask[sel - start, :self.w]))

  def take_kept(self, ids, rows, mask):
    """Gathers every pair from rows kept by the bracket pass: ``ids`` (M,) ascending global
    rows (a superset of the pairs' rows), ``rows``, ``mask`` (M, w) those rows cut to w."""
    pos = np.searchsorted(ids, self.rows)  # (P,)
    assert pos.size == 0 or (pos.max() < ids.size and np.array_equal(ids[pos], self.rows))
    self._feed(self.rows.size, lambda sel: (rows[np.searchsorted(ids, sel)],
                                            mask[np.searchsorted(ids, sel)]))

  def _feed(self, b, get):
    """Buffers the pairs done + buffered .. b (``get(global rows)`` → their (l, m) cut to w)
    and sends every full ``size`` to Newton: the same calls, in the same order, whichever
    way the rows come."""
    a = self.done + self.n_buf
    for lo in range(a, b, self.size):
      hi = min(b, lo + self.size)
      l, m = get(self.rows[lo:hi])
      self.buf.append((np.asarray(l), np.asarray(m)))
      self.n_buf += hi - lo
      while self.n_buf >= self.size:
        self._send(self.size)

  def finish(self):
    while self.n_buf:
      self._send(min(self.n_buf, self.size))

  def _send(self, n):
    """Newton on the next n buffered pairs, padded to a power-of-two number of chunks."""
    import jax

    l = np.concatenate([b[0] for b in self.buf])
    m = np.concatenate([b[1] for b in self.buf])
    rest_l, rest_m = l[n:], m[n:]
    self.buf = [(rest_l, rest_m)] if len(rest_l) else []
    self.n_buf = len(rest_l)
    size = self.chunk * _pow2(-(-n // self.chunk))  # <= self.size
    pad = size - n
    fl, fm = self.first
    l = np.concatenate([l[:n], np.broadcast_to(fl, (pad, self.w))])
    m = np.concatenate([m[:n], np.broadcast_to(fm, (pad, self.w))])
    sl = slice(self.done, self.done + n)
    k = np.concatenate([self.k[sl], np.zeros(pad, self.k.dtype)])
    lem = np.concatenate([self.lem[sl], np.full(pad, self.lem[0])])
    ok = np.arange(size) < n
    self.done += n
    fn = _newton_pairs_fn(self.w, self.chunk, size, self.s.dtype.name, self.s.max_iters,
                          self.s.rtol)
    counts, max_k, nan_k = jax.device_get(fn(*jax.device_put((l, m, k, lem, ok)),
                                             *self.consts))
    for key, v in counts.items():
      self.s.total[key] += v
    self.s.max_norm = np.maximum(self.s.max_norm, max_k)
    self.s.nan |= nan_k


class Screen:
  """The all-rows decisions of a run: :meth:`stats` for any number of temperatures, one pass
  over the rows (the bracket of every pair; the rows of the pairs it may leave open are kept,
  up to :data:`KEEP_BYTES`, for Newton; past that, a second pass reads them).
  The task calls it once for every temperature its memory allows (``task.SCREEN_PAIR_BYTES``:
  the 26 of the paper grid at SmolLM2 paper settings), so the rows are read, cut to their
  span and their per-row facts computed once, not once per batch of temperatures; each pair
  keeps 28 bytes on the device between the passes (its widened λ₀/T, λ¹/T in float64, the
  secular test's float32 α₁, α₂, q) and
  Lemma 2's bound is recomputed at decision time from the rows' range and count.

  rows (R, L) any float dtype (the model's float32 rows stay float32; they are cast to
  ``dtype`` chunk by chunk), mask (R, L) bool; or ``rows`` a
  :class:`limits.gradient.blocks.RowBlocks` and ``mask`` None (a model's rows, one
  (window, layer) block at a time: memory is one block plus a few numbers per (row, T)).
  ``dtype`` is the run's dtype (Newton, Lemma 2 and the thresholds); ``rtol`` the relative
  tolerance of every comparison. Blocks give the same numbers as one (R, L) array: every
  per-row value is computed by the same jitted code on the same (chunk, w) slices, the
  maxima and counts do not depend on the order, and Newton's chunks are the same pairs.
  """

  def __init__(self, rows, mask, dtype, rtol: float, *, block_elems: int = BLOCK_ELEMS,
               max_iters: int = 60):
    from limits.gradient.blocks import RowBlocks

    self.dtype = np.dtype(dtype)
    self.rtol = float(rtol)
    self.block_elems = int(block_elems)
    self.max_iters = int(max_iters)
    self.source = rows if isinstance(rows, RowBlocks) else RowBlocks.from_arrays(rows, mask)

  def _padded(self, idx, chunk):
    import jax

    pad = (-idx.size) % chunk
    return jax.device_put(np.concatenate([idx, np.full(pad, idx[0] if idx.size else 0,
                                                        idx.dtype)]))

  def _bracket_pass(self, Td, K, pd, td):
    """Pass 1: per span group w, its parts (one per block, in row order): rows (global,
    ascending), the widened bracket (n, K), the secular test's inputs and the row facts of
    Lemma 2's bound (n,) on the device; the group's first row; the largest
    λ₀/T per T over every row; and ``kept``: per w, (global rows (M,), rows, mask (M, w)) the
    rows that may need Newton, or None when they exceed :data:`KEEP_BYTES` (then Newton reads
    the rows in a pass of their own).

    A row is kept when one of its pairs is open by :func:`_decide_fn` with the largest λ₀/T
    so far (this group's included) in place of the final one: that maximum only grows, so
    every pair open at the end was open then, and the kept rows hold every row Newton needs.
    """
    import jax
    import jax.numpy as jnp
    from jax import lax

    dt = self.dtype
    parts: dict = {}  # w -> [(rows (n,), lo_n, hi_n (n, K), abq (n, 3, K), r, count (n,))]
    first: dict = {}
    kept: dict | None = {}  # w -> [(global rows (m,), rows (m, w) f32, mask (m, w))]
    kept_bytes = 0
    max_lo = np.full(K, -np.inf, dt)
    for start, rows, mask in self.source.blocks():
      host_mask = np.asarray(mask, bool)  # blocks are host arrays (RowBlocks)
      rows_d, mask_d = jax.device_put((rows, host_mask))
      for idx, w in sensitivity.span_groups(host_mask, step=sensitivity.SPAN_STEP):
        chunk = max(1, self.block_elems // (K * w))
        out = _screen_group_fn(w, chunk, idx.size, dt.name)(rows_d, mask_d,
                                                            self._padded(idx, chunk), Td)
        part = tuple(lax.slice_in_dim(o, 0, idx.size) for o in out[:5])
        parts.setdefault(w, []).append((start + idx,) + part)
        max_lo = np.maximum(max_lo, np.asarray(jax.device_get(out[5])))
        if w not in first:
          first[w] = (np.asarray(rows[idx[0], :w]), host_mask[idx[0], :w])
        if kept is not None:
          und = _decide_fn(idx.size, self.rtol, w)(*part, jax.device_put(max_lo), Td, pd, td)[0]
          sel = idx[np.asarray(jax.device_get(jnp.any(und, axis=1)))]
          kept_bytes += sel.size * w * 5
          if kept_bytes > KEEP_BYTES:
            kept = None
          elif sel.size:
            kept.setdefault(w, []).append((start + sel, np.asarray(rows[sel, :w]),
                                           host_mask[sel, :w]))
      del rows_d, mask_d
    groups = {w: parts[w] for w in sorted(parts)}  # not concatenated: half the peak memory
    if kept is not None:
      kept = {w: tuple(np.concatenate([q[i] for q in v]) for i in range(3))
              for w, v in kept.items()}
    return groups, first, max_lo, kept

  def stats(self, temperatures) -> dict:
    """Per temperature (K,) NumPy: ``n_exceed_paper``, ``n_exceed_tight``,
    ``n_exceed_lemma2`` (where Lemma 2's bound is finite), ``lemma2_finite``, ``nonfinite``
    (Newton norms that are not finite), ``max_norm`` (max ‖J‖₂ over rows), ``rows``,
    ``newton`` (pairs Newton decided; the rest were decided by the bracket or the secular
    test).

    Device work only, in jitted functions: the rows go in a block at a time, (K,) counts (and
    the open pairs, to gather their rows for Newton) come out.
    """
    import jax

    from limits import bounds

    dt = self.dtype
    Ts = np.asarray(temperatures, dt)
    K = Ts.size
    with np.errstate(divide="ignore"):
      paper = np.minimum(1 / (4 * Ts), dt.type(bounds.SQRT2))  # Corollary 3 as printed
      tight = 1 / (2 * Ts)
    Td, pd, td = jax.device_put((Ts, paper, tight))
    groups, first, max_lo, kept = self._bracket_pass(Td, K, pd, td)
    max_lo_d = jax.device_put(max_lo)
    self.total = {k: np.zeros(K, np.int64) for k in
                  ("n_exceed_paper", "n_exceed_tight", "n_exceed_lemma2", "lemma2_finite",
                   "nonfinite", "newton")}
    self.max_norm = np.full(K, -np.inf, dt)
    self.nan = np.zeros(K, bool)
    open_pairs = []
    for w, parts in groups.items():
      found = []  # per part: (rows, T index, Lemma 2 bound) of its open pairs, (row, T) order
      for rows, lo_n, hi_n, abq, r, cnt in parts:
        und, counts, n_und, lem = _decide_fn(rows.size, self.rtol, w)(lo_n, hi_n, abq, r, cnt,
                                                                      max_lo_d, Td, pd, td)
        counts, n_und_h = jax.device_get((counts, n_und))
        for key, v in counts.items():
          self.total[key] += v
        if int(n_und_h) == 0:
          continue
        flat = np.flatnonzero(np.asarray(jax.device_get(und)))  # (row, T) order
        pos, k = flat // K, (flat % K).astype(np.int32)
        found.append((rows[pos], k, np.asarray(jax.device_get(lem))[pos, k]))
      if found:
        open_pairs.append(_Pairs(self, w, *(np.concatenate([f[i] for f in found])
                                            for i in range(3)), first[w], (Td, pd, td)))
    if open_pairs and kept is not None:  # the open pairs' rows, kept by pass 1
      for pairs in open_pairs:
        pairs.take_kept(*kept[pairs.w])
        pairs.finish()
    elif open_pairs:  # pass 2: the open pairs' rows, block by block
      for start, rows, mask in self.source.blocks():
        for pairs in open_pairs:
          pairs.take(start, rows, mask)
      for pairs in open_pairs:
        pairs.finish()
    total = self.total
    total["rows"] = np.full(K, sum(p[0].size for g in groups.values() for p in g), np.int64)
    total["max_norm"] = np.where(self.nan, np.nan, self.max_norm)
    return total
