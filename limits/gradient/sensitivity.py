"""Figure 4's measurements (§3.4, Algorithm 5): the exact softmax Jacobian norm per row
(:func:`softmax_norms`, Corollary 3), the finite-difference sensitivity
g(T, ε) = ‖α((l + εv)/T) − α(l/T)‖₂ / ε of a batch of rows (:func:`fd_batch`) and the seeded
row sample (:func:`sample_rows`). Figure 4's two claims (the 1/T trend below T = 0.1, the
collapse above T = 1) are judged from these curves by ``limits.claims`` (docs/claims.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from limits import normalizers


# g(T, ε) and the screen cut rows to their span rounded up to this multiple: causal rows of
# L = 1,024 then average 640 keys (688 with powers of two, 576 with 128) in 4 span groups, each
# a few jitted programs per run (8 groups with 128: +30 programs, ~0.2 s to trace and lower
# each, ~1.3 s to compile without the persistent cache, for 10 % fewer keys).
SPAN_STEP = 256
# g(T, ε) (fd_rows) cuts its rows finer: 8 span groups, a causal row at position t costs
# t + 64 keys on average instead of t + 128 (≈ 10 % fewer float64 exps and random normals at
# L = 1,024), for 4 more compiled programs (persistent cache) per number of temperatures; the
# same bits (the keys past the span have weight 0 and add exact zeros;
# tests/test_gradient_fd_span.py).
FD_SPAN_STEP = 128


def _softmax_norm_newton(a, max_iters: int):
  """λ_max(diag α − ααᵀ) per row by Newton's method; a (..., L) softmax rows → (...,).

  Corollary 3's exact norm (×1/T). With α_(1) > α_(2) the top eigenvalue λ is the root in
  (α_(2), α_(1)) of φ(λ) = (α_(1) − λ)(1 + ψ(λ)) − α_(1)², ψ(λ) = Σ_{i≠(1)} α_i²/(λ − α_i)
  (the secular equation times α_(1) − λ > 0). φ is decreasing and convex there, so Newton's
  method from a point left of the root increases monotonically to it (every iterate is a lower
  bound) and converges quadratically. Start: the Rayleigh quotient of (e_(1) − e_(2))/√2,
  (α_(1) + α_(2) − (α_(1) − α_(2))²)/2 ∈ (α_(2), λ], evaluated with 1 − α_(1) = Σ_{i≠(1)} α_i
  (no cancellation for nearly one-hot rows). Tied top two: λ = α_(1); α_(2) = 0 (one-hot): 0.
  """
  # Top two by max/argmax (lax.top_k is ~50× slower on CPU). Ties: argmax takes one of them.
  i1 = jnp.argmax(a, axis=-1)  # (...,)
  others = jnp.arange(a.shape[-1]) != i1[..., None]  # (..., L)
  ao = jnp.where(others, a, 0.0)
  a1 = jnp.take_along_axis(a, i1[..., None], axis=-1)[..., 0]
  a2 = jnp.max(ao, axis=-1)
  rest = jnp.sum(ao, axis=-1)  # 1 − α_(1) without cancellation when α_(1) ≈ 1
  # Rayleigh quotients of (e_(1) − e_(2))/√2 and e_(1), written without 1 − α_(1).
  lam0 = jnp.maximum((a1 * rest + a2 * (1 + 2 * a1 - a2)) / 2, a1 * rest)
  lam0 = jnp.clip(lam0, jnp.nextafter(a2, a1), a1)
  solve = (a1 > a2) & (a2 > 0)

  def step(lam):
    den = jnp.where(solve, lam, 2.0)[..., None] - ao  # > 0 for every other key
    r = ao / den
    psi = jnp.sum(ao * r, axis=-1)
    dpsi = -jnp.sum(r * r, axis=-1)
    phi = a1 * (rest + psi) - lam * (1 + psi)  # = (α_(1) − λ)(1 + ψ) − α_(1)²
    dphi = -(1 + psi) + (a1 - lam) * dpsi
    new = lam - phi / dphi
    return jnp.where(solve, jnp.clip(new, lam, a1), lam)

  tol = 4 * jnp.finfo(a.dtype).eps

  def cond(c):  # Newton's steps shrink quadratically; stop when every row's is at rounding level
    i, lam, prev = c
    return (i < max_iters) & jnp.any(lam - prev > tol * lam)

  def body(c):
    i, lam, _ = c
    return i + 1, step(lam), lam

  _, lam, _ = lax.while_loop(cond, body, (0, step(lam0), lam0))
  lam = jnp.where(a1 > a2, lam, a1)
  return jnp.where(a2 > 0, lam, 0.0)


@functools.partial(jax.jit, static_argnames=("max_iters",))
def _norms_block(logits, mask, temperatures, max_iters):
  a = normalizers.softmax(logits[:, None, :], temperatures[None, :, None], mask[:, None, :])
  return _softmax_norm_newton(a, max_iters) / temperatures[None, :]  # (R, K)


def softmax_norms(logits, temperatures, mask=None, *, block_elems: int = 1 << 22,
                  max_iters: int = 60) -> np.ndarray:
  """‖∂softmax(l/T)/∂l‖₂ for every row and temperature: (R, L), (K,) → (R, K) NumPy.

  The exact norm (Corollary 3) by :func:`_softmax_norm_newton`, all K temperatures of a row in
  one pass. Causal rows are cut to their visible span (rounded up to a power of two ≥ 128), so a
  query at position t costs O(t), not O(L).
  """
  l = np.asarray(logits)
  R, L = l.shape
  m = np.ones(l.shape, bool) if mask is None else np.asarray(mask, bool)
  T = np.asarray(temperatures, l.dtype)
  out = np.zeros((R, T.size), l.dtype)
  for rows, width in span_groups(m):
    block = min(rows.size, max(1, block_elems // (width * T.size)))
    for s in range(0, rows.size, block):
      r = rows[s:s + block]
      lb, mb = np.zeros((block, width), l.dtype), np.zeros((block, width), bool)
      lb[:r.size], mb[:r.size] = l[r, :width], m[r, :width]  # padded: one compile per width
      out[r] = np.asarray(_norms_block(jnp.asarray(lb), jnp.asarray(mb), jnp.asarray(T),
                                       max_iters))[:r.size]
  return out


def span_groups(mask, min_width: int = 128, step: int | None = None):
  """[(rows (n,) int, width)]: rows grouped by visible span (last visible key + 1) rounded up
  to a power of two ≥ ``min_width``, or with ``step`` to a multiple of ``step`` (a causal row
  at position t then costs t + step/2 keys on average, not ≈ 1.34·t; more groups, one
  compile each); never above L."""
  m = np.asarray(mask, bool)
  L = m.shape[-1]
  last = np.maximum(last_visible(m), 1)  # (R,) a row with nothing visible counts as span 1
  if step is not None:
    up = -(-last // step) * step
  else:
    up = 2 ** np.ceil(np.log2(last))
  width = np.minimum(L, np.maximum(min_width, up))
  width = width.astype(int)
  return [(np.nonzero(width == w)[0], int(w)) for w in np.unique(width)]


# HIGH_BIT[b]: the index of byte b's highest set bit (little bit order), -1 for b = 0
HIGH_BIT = np.array([-1] + [int(b).bit_length() - 1 for b in range(1, 256)], np.int64)


def last_visible(mask) -> np.ndarray:
  """(R,) int: 1 + the index of each row's last True of ``mask`` (R, L), 0 where a row has
  none. From the rows packed to bits (``np.packbits``: L/8 bytes a row), the last non-zero byte
  and its highest bit: 1 ms per (9,216, 1,024) block, against 6 ms for ``argmax`` over the
  reversed bool rows (a strided scan of every entry), which every block of the gradient screen
  paid (2.2 s of the step at SmolLM2 paper settings)."""
  m = np.asarray(mask, bool)
  R = m.shape[0]
  packed = np.packbits(m, axis=-1, bitorder="little")  # (R, ⌈L/8⌉) uint8
  nz = packed != 0
  nb = packed.shape[-1]
  byte = nb - 1 - np.argmax(nz[:, ::-1], axis=-1)  # (R,) the last non-zero byte
  top = HIGH_BIT[packed[np.arange(R), byte]]  # (R,) -1 where the row is all False
  return np.where(top >= 0, 8 * byte + top + 1, 0)


def fd_batch(norm_fn, logits, mask, temperatures, epsilons, key, *,
             block_elems: int = 1 << 18) -> np.ndarray:
  """The paper's g(T, ε) = ‖α((l + εv)/T) − α(l/T)‖₂/ε for rows × temperatures × ε.

  logits (S, L), mask (S, L), temperatures (K,), epsilons (E,) → (S, K, E) NumPy. One random
  unit direction v per (row, ε) over the visible keys (isotropic Gaussian, AMBIG-13), fresh per
  row and ε and shared by the K temperatures (common random numbers make the curves of one
  row comparable across T); row r uses ``split(key, S)[r]``. ``norm_fn(z, mask)`` is the
  normalizer applied to z = l/T. :func:`fd_rows` on all S rows.
  """
  l = np.asarray(logits)
  m = np.asarray(mask, bool)
  return fd_rows(norm_fn, jax.device_put(l), jax.device_put(m), m, np.arange(l.shape[0]),
                 temperatures, epsilons, key, dtype=l.dtype, block_elems=block_elems)


def fd_rows(norm_fn, rows, mask, host_mask, idx, temperatures, epsilons, key, *, dtype,
            block_elems: int = 1 << 18, span_step: int = FD_SPAN_STEP) -> np.ndarray:
  """g(T, ε) of the rows ``idx`` (S,) of device arrays rows, mask (R, L): (S, K, E) NumPy.

  Sample position s (row ``idx[s]``) uses key ``split(key, S)[s]`` and the direction
  convention of ``gradient_rows.g_rows``. Rows are cut to their visible span (rounded up to a
  multiple of ``span_step``, default :data:`FD_SPAN_STEP`; ``host_mask`` (R, L) says where
  it ends): the random
  direction of a row is a prefix of the full-length draw (JAX's partitionable threefry) and
  masked keys get weight 0, so the values equal the full-length computation up to rounding.
  Each span group is one jitted call (or a few, when its random normals would pass
  :data:`NORMALS_BYTES`) that draws the normals of its rows into a buffer, then walks the rows
  in chunks of ≈ ``block_elems`` (row, T, ε, key) elements with ``lax.map``
  (:func:`_fd_group_fn`); the rows never leave the device.
  """
  idx = np.asarray(idx)
  S = idx.size
  T = jax.device_put(np.asarray(temperatures, dtype))
  eps = jax.device_put(np.asarray(epsilons, dtype))
  K, E = T.size, eps.size
  out = np.zeros((S, K, E), dtype)
  if S == 0:
    return out
  keys = jax.random.split(key, S)
  for pos, w in span_groups(np.asarray(host_mask, bool)[idx], step=span_step):
    chunk = max(1, block_elems // (w * K * (E + 1)))
    # calls of `per` rows (a multiple of chunk), so one call's normals stay <= NORMALS_BYTES;
    # the group's rows split evenly over the calls (one shape: one compile), the last padded
    calls = _ceil_div(pos.size, max(chunk, NORMALS_BYTES // (E * w * np.dtype(dtype).itemsize)))
    per = chunk * _ceil_div(_ceil_div(pos.size, calls), chunk)
    pad = calls * per - pos.size
    p = np.concatenate([pos, np.full(pad, pos[0], pos.dtype)])
    fn = _fd_group_fn(norm_fn, w, chunk, np.dtype(dtype).name)
    gs = [fn(rows, mask, *jax.device_put((idx[p[a:a + per]], p[a:a + per])), keys, T, eps)
          for a in range(0, p.size, per)]
    out[pos] = np.concatenate([np.asarray(jax.device_get(g)) for g in gs])[:pos.size]
  return out


def _ceil_div(a: int, b: int) -> int:
  return -(-a // b)


# g(T, eps) draws one call's random normals into a buffer of at most this many bytes before
# using them (fd_rows: 8,640 sampled rows of span 1,024 at SmolLM2 paper settings are 212 MB
# in float64 for E = 3; 64 MB is 4 calls there)
NORMALS_BYTES = 1 << 26


@functools.lru_cache(maxsize=None)
def _fd_group_fn(norm_fn, width: int, chunk: int, dtype_name: str):
  """jit: g(T, eps) of one span group's rows (a call of ``per`` rows, chunk | per): first every
  row's raw normals (per, E, w) in one draw over the whole call (a buffer: threefry and the
  float64 erfinv run once per normal; drawn inside the g loop, XLA on CPU fuses them into both
  users of the normals, the norm and the division, and runs them twice), then g by a
  ``lax.map`` over the chunks (``gradient_rows.g_from_normals``). The draw is one fusion over
  the call, which XLA spreads over the cores (drawn per chunk inside a ``lax.map``, it used
  ~1.3 of 2 cores; the whole gradient step 1.10× faster at SmolLM2 paper settings, ``python -m
  benchmarks.reproduce --model=smollm2 --only=gradient --reference_rev=3287094 --pairs=3``,
  WORKSPACE). The same bits as ``gradient_rows.g_rows`` on each chunk
  under XLA's default flags (tests/test_gradient_fd_normals.py; to 1e-13 under the test
  suite's -O0 flags)."""
  from limits.gradient import rows as gradient_rows

  dtype = jnp.dtype(dtype_name)

  def fn(rows, mask, idx, pos, keys, T, eps):
    keys = keys[pos]  # (C·B,) the sample positions' keys
    E = eps.shape[0]
    normals = gradient_rows.row_normals(keys, E, width, dtype)  # (C·B, E, w)
    normals = normals.reshape((-1, chunk) + normals.shape[1:])  # (C, B, E, w)

    def one(args):
      ix, nb = args
      l = rows[ix, :width].astype(dtype)
      return gradient_rows.g_from_normals(norm_fn, l, mask[ix, :width], T, eps, nb)  # (B, K, E)

    g = lax.map(one, (idx.reshape(-1, chunk), normals))
    return g.reshape((-1,) + g.shape[2:])

  return jax.jit(fn)


def sample_rows(groups, per_group: int, seed: int) -> np.ndarray:
  """Sorted indices of a seeded sample: min(per_group, size) rows of each group, uniformly
  without replacement (``numpy.random.default_rng(seed)``, groups in ascending order)."""
  g = np.asarray(groups)
  rng = np.random.default_rng(seed)
  picks = []
  for v in np.unique(g):
    idx = np.nonzero(g == v)[0]
    picks.append(idx if idx.size <= per_group else rng.choice(idx, per_group, replace=False))
  return np.sort(np.concatenate(picks)) if picks else np.zeros(0, int)
