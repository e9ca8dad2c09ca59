"""Theorem 2 on synthetic data (Algorithm 4 with spherical embeddings): synthetic weight rows,
points uniform on the sphere S^{d-1}(M) and the Monte Carlo estimate of N_s/N with the
per-sample bounds (the counting itself: :mod:`limits.separability.rows`).

Monte Carlo (``monte_carlo_detail``, ``monte_carlo``; the ``separability_sphere`` sweep kind
runs the same per-sample core :func:`sample_stats` and reductions) draws fresh points uniform on S^{d-1}(M) (normalised Gaussians)
for each sample, with per-sample keys ``fold_in(key, sample_index)``, so the estimate does not
depend on the chunk size or on the number of devices the sample axis is sharded over.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from limits.errors import check
from limits.selection import sort_desc
from limits.separability.rows import RULES, min_pairwise_distance, row_stats
from limits.separability.sphere_fast import (  # noqa: F401  (the fast form; tests read them)
    DELTA_CANDIDATES, _delta_checked, _stats_fast, _top_rows, _TopRows)

ALPHA_KINDS = ("uniform", "zipf", "softmax")


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


STAT_NAMES = ("frac", "r", "delta", "lower", "lower_raw", "upper")
def _sample_fast(key, index, alphas, top: _TopRows, ns, dim: int, M):
  """The fast form of :func:`sample_stats` (rule "strict", delta from the points): (stats
  (S, H, K), flag). Same draw; delta from :func:`_delta_checked`, the rest from
  :func:`_stats_fast`. ``flag`` is True when delta is not certified or a decision is within
  the rounding margin: the caller recomputes that sample with the float64 reference."""
  x = sphere_points(jax.random.fold_in(key, index), alphas.shape[-1], dim, M, alphas.dtype)
  delta, ok = _delta_checked(x)
  out, uncertain = _stats_fast(x, delta, alphas, top, ns, M)
  return out, ~ok | uncertain


def _sample_core(key, index, alphas, rank, ns, dim: int, M, delta_fixed, *, with_bounds: bool,
                 rule: str):
  """:func:`sample_stats`: stats (S, H, K) by the float64 reference (direct differences)."""
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
                      st.lower_raw, st.upper])                     # (S, H)

  out = jax.lax.map(per_n, ns)                                     # (K, S, H)
  return jnp.moveaxis(out, 0, -1)                                  # (S, H, K)


def sample_stats(key, index, alphas, rank, ns, dim: int, M, delta_fixed=None, *,
                 with_bounds: bool = True, rule: str = "strict"):
  """The Monte Carlo's per-sample core (jittable, vmappable; ``index`` and ``ns`` may be traced).

  Sample ``index`` draws x (L, dim) uniform on S^{dim-1}(M) from ``fold_in(key, index)``
  (:func:`sphere_points`), then for every weight row and every n: N_s/N, r, delta (the
  minimum pairwise distance, or ``delta_fixed``; NaN when ``with_bounds`` is False and no
  delta is fixed) and both Theorem 2 bounds with that sample's r and delta
  (``separability_rows.row_stats``, direct differences: the float64 reference). alphas
  (H, L), rank = ``sort_desc(alphas)``, ns (K,). Returns (S, H, K) with S = len(STAT_NAMES).
  :func:`monte_carlo_detail` (through its checked fast form, which falls back to this) and
  the ``separability_sphere`` sweep kind both call it; reduce its outputs with
  :func:`sample_moments`, :func:`merge_moments` and :func:`mean_stderr`.
  """
  return _sample_core(key, index, alphas, rank, ns, dim, M, delta_fixed,
                      with_bounds=with_bounds, rule=rule)


def _chunk_stats(key, indices, alphas, rank, ns, M, delta_fixed, *, dim, with_bounds, rule,
                 checked=False, k=None, top=None):
  """((c, S, H, K) stats, (c,) flags) for the sample indices of one chunk (vmapped).

  ``checked`` (rule "strict", bounds on, delta from the points): the fast form
  (:func:`_sample_fast`; ``top`` its weights' part, :func:`_top_rows`, computed here when None
  (the Monte Carlo computes it once per run: its cumulative sums cost more than a chunk);
  ``k`` the static width of its top keys, at least max(ns), default L); ``flags`` marks the
  samples to recompute by the reference. Otherwise the reference (:func:`sample_stats`), flags all False.
  """
  if checked:
    if top is None:
      top = _top_rows(alphas, rank, ns, int(k or alphas.shape[-1]))
    return jax.vmap(lambda i: _sample_fast(key, i, alphas, top, ns, dim, M))(indices)
  one = lambda i: _sample_core(key, i, alphas, rank, ns, dim, M, delta_fixed,
                               with_bounds=with_bounds, rule=rule)
  stats = jax.vmap(one)(indices)
  return stats, jnp.zeros(indices.shape, bool)


class Moments(NamedTuple):
  """Running moments of per-sample stats: ``count`` samples, ``total`` (S, H, K) their sums,
  ``m2`` (H, K) the sum of squared deviations of N_s/N from its mean. NumPy or JAX arrays
  (traced too): only arithmetic is used."""
  count: int
  total: Any
  m2: Any


def sample_moments(stats) -> Moments:
  """Moments of a block of per-sample stats (c, S, H, K) from :func:`sample_stats` (two-pass:
  deviations from the block's own mean)."""
  c = int(stats.shape[0])
  total = stats.sum(axis=0)
  f = stats[:, 0]
  return Moments(c, total, ((f - total[0] / c) ** 2).sum(axis=0))


def merge_moments(a: "Moments | None", b: Moments) -> Moments:
  """Moments of two disjoint blocks of samples as one (Chan et al.'s pairwise update)."""
  if a is None:
    return b
  n = a.count + b.count
  d = b.total[0] / b.count - a.total[0] / a.count
  return Moments(n, a.total + b.total, a.m2 + b.m2 + d * d * (a.count * b.count / n))


def mean_stderr(m: Moments):
  """(mean (S, H, K), stderr (H, K)): sample means of every stat, and the standard error of
  the mean of N_s/N, sqrt(m2 / ((count - 1) count)) (+inf for one sample). The one place the
  Monte Carlo's standard error is computed (library and sweep kind)."""
  mean = m.total / m.count
  if m.count > 1:
    stderr = (m.m2 / ((m.count - 1) * m.count)) ** 0.5
  else:
    stderr = m.m2 * 0 + float("inf")
  return mean, stderr


_top_rows_jit = jax.jit(_top_rows, static_argnums=3)
_chunk_stats_jit = jax.jit(_chunk_stats,
                           static_argnames=("dim", "with_bounds", "rule", "checked", "k"))


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


def _default_chunk(L, dim, H, K, with_bounds, itemsize, budget=192 * 2**20, checked=False):
  if checked:  # float32 Gram in 128-row blocks, no (H, L, dim) differences, every n at once;
    # a third of the budget: at the sphere step's settings (L = 1,024, d = 64, 12 rows, 8 n)
    # chunks of 4-5 samples spent the least CPU, larger ones page-faulting on fresh buffers
    per = itemsize * (3 * L * dim + 12 * H * K * L) + 4 * 4 * min(L, 128) * L
    budget //= 3
  else:
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


class _Prepared(NamedTuple):
  """The checked arguments of a Monte Carlo (:func:`_prepare`)."""
  args: tuple            # (key, alphas, rank, ns, M, delta) on the device(s)
  shard: Any             # (sample sharding, replicated sharding) or None
  chunk: int
  dim: int
  with_bounds: bool
  rule: str
  single_row: bool
  scalar_n: bool
  samples: int
  checked: bool          # the fast form with its float64 fallback (_sample_fast)
  k: int                 # the fast form's top keys per row: max(n)
  top: Any               # _TopRows of the fast form (None for the reference)


def _prepare(key, alpha, n, dim, M, samples, chunk, devices, rule, with_bounds,
             delta) -> _Prepared:
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
  checked = bool(with_bounds) and delta is None and rule == "strict"
  chunk = int(chunk) if chunk else _default_chunk(L, dim, H, K, with_bounds,
                                                  alphas.dtype.itemsize, checked=checked)
  check(chunk >= 1, f"chunk={chunk} must be >= 1")
  chunk = min(chunk, samples)
  chunk = -(-chunk // nd) * nd
  shard = _mesh_sharding(devices)
  M_arr = jnp.asarray(M, alphas.dtype)
  dfix = None if delta is None else jnp.asarray(delta, alphas.dtype)
  args = (key, alphas, rank, ns, M_arr, dfix)
  if shard is not None:
    args = jax.device_put(args, shard[1])
  k = max(ns_list)
  top = _top_rows_jit(alphas, rank, ns, k) if checked else None
  if top is not None and shard is not None:
    top = jax.device_put(top, shard[1])
  return _Prepared(args, shard, chunk, int(dim), bool(with_bounds), rule, single_row, scalar_n,
                   samples, checked, k, top)


# Chunks computed at once by worker threads (XLA runs each on the calling thread and releases
# the GIL): on 2 cores the sphere step's chunks take ~1.3 cores one at a time, and 2-3 in flight
# keep both busy (/work scratch measurement, L = 1,024, loaded machine: 5.0 ms per sample
# serial, 4.1 with 2, 3.5 with 3 in flight, the same CPU per sample). Results are merged in
# sample order, so the moments do not depend on it.
CHUNKS_IN_FLIGHT = 3


def _chunk_out(prep: _Prepared, lo: int, stop: int):
  """(c', S, H, K) float64 stats of the valid samples lo … min(lo + chunk, stop) − 1: the fast
  form, and the float64 reference for a sample it cannot vouch for."""
  key_r, alphas_r, rank_r, ns_r, M_r, dfix_r = prep.args
  idx = np.arange(lo, lo + prep.chunk, dtype=np.int32)
  valid = idx < stop
  idx_dev = jnp.asarray(idx) if prep.shard is None else jax.device_put(idx, prep.shard[0])
  run = lambda checked: _chunk_stats_jit(key_r, idx_dev, alphas_r, rank_r, ns_r, M_r, dfix_r,
                                         dim=prep.dim, with_bounds=prep.with_bounds,
                                         rule=prep.rule, checked=checked, k=prep.k,
                                         top=prep.top if checked else None)
  out, flag = run(prep.checked)
  out = np.array(out, dtype=np.float64)                       # (c, S, H, K), writable
  flag = np.asarray(flag) & valid
  if flag.any():  # a sample the fast form cannot vouch for: the float64 reference path
    out[flag] = np.asarray(run(False)[0], dtype=np.float64)[flag]
  return out[valid]


def _moments_between(prep: _Prepared, start: int, stop: int,
                     progress: Callable[[int], Any] | None) -> Moments:
  """Moments of the samples start … stop − 1, in chunks of ``prep.chunk`` from ``start``
  (up to :data:`CHUNKS_IN_FLIGHT` computed at once, merged in order; ``progress`` is called
  on this thread after each merged chunk, so an exception it raises stops the run after at
  most the chunks in flight). The workers run with this thread's ``jax_enable_x64``."""
  from collections import deque
  from concurrent.futures import ThreadPoolExecutor

  x64 = bool(jax.config.jax_enable_x64)  # this thread's (a `with jax.enable_x64` is local)

  def chunk(lo):
    with jax.enable_x64(x64):
      return _chunk_out(prep, lo, stop)

  mom = None
  pending: deque = deque()
  ex = ThreadPoolExecutor(max_workers=CHUNKS_IN_FLIGHT)
  try:
    for lo in range(start, stop, prep.chunk):
      pending.append(ex.submit(chunk, lo))
      while pending and (len(pending) >= CHUNKS_IN_FLIGHT or lo + prep.chunk >= stop):
        out = pending.popleft().result()
        mom = merge_moments(mom, sample_moments(out))
        if progress is not None:
          progress(int(out.shape[0]))
  finally:
    ex.shutdown(wait=True, cancel_futures=True)
  return mom


def _summary(prep: _Prepared, mom: Moments, with_delta: bool) -> "MonteCarlo":
  mean, stderr = mean_stderr(mom)
  f = mean[0]

  def shape(a):
    a = np.asarray(a)
    if prep.scalar_n:
      a = a[..., 0]
    if prep.single_row:
      a = a[0]
    return a

  nanify = (lambda a: shape(a)) if with_delta else (lambda a: shape(np.full_like(a, np.nan)))
  return MonteCarlo(shape(f), shape(stderr), shape(mean[1]), nanify(mean[2]), nanify(mean[3]),
                    nanify(mean[4]), nanify(mean[5]), int(mom.count))


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
    rule: counting rule (AMBIG-10, :mod:`limits.separability.rows`). with_bounds: also
      compute delta and the per-sample Theorem 2 bounds (costs one (L, L) Gram per sample).
      delta: fix delta instead of the per-sample empirical minimum pairwise distance.
      With bounds, rule "strict" and delta from the points, each chunk runs the fast form
      (:func:`_delta_checked` and the Gram-identity counts with ``rows.gram_margin``) and a
      sample it cannot vouch for is recomputed by the float64 reference
      (:func:`sample_stats`): the counts are the reference's, r, delta and the bounds equal
      it up to rounding (tests/test_sphere_checked.py).
    progress: optional callable receiving the number of samples finished after each chunk.

  Returns:
    ``MonteCarlo`` with fields shaped like (H?, K?) following alpha and n.
  """
  prep = _prepare(key, alpha, n, dim, M, samples, chunk, devices, rule, with_bounds, delta)
  mom = _moments_between(prep, 0, prep.samples, progress)
  return _summary(prep, mom, with_bounds or delta is not None)


def monte_carlo_blocks(key, alpha, n, dim: int, M, samples: int, chunk: int | None = None, *,
                       blocks: int = 8, devices: int | None = None, rule: str = "strict",
                       done: Callable[[int, int], Moments | None] | None = None,
                       finished: Callable[[int, int, Moments, float], Any] | None = None,
                       progress: Callable[[int], Any] | None = None) -> MonteCarlo:
  """:func:`monte_carlo_detail` (with bounds) in ``blocks`` blocks of whole chunks of samples,
  every n at once, for runs that keep what they finished (limits.runs.resume).

  The samples are cut into at most ``blocks`` consecutive ranges, each a whole number of
  chunks; ``done(start, stop)`` may return a block's :class:`Moments` finished earlier (then it
  is not computed), ``finished(start, stop, moments, seconds)`` is called after each computed
  block. The blocks' moments are merged in order, so the result depends on ``blocks`` and
  ``chunk`` only through rounding (~1e-16 relative), never on which blocks were restored.
  Every sample's points and delta serve every n: one draw and one Gram per sample, where a
  call per n repeats both for each n.
  """
  import time

  prep = _prepare(key, alpha, n, dim, M, samples, chunk, devices, rule, True, None)
  n_chunks = -(-prep.samples // prep.chunk)
  per = -(-n_chunks // max(int(blocks), 1)) * prep.chunk
  mom = None
  for start in range(0, prep.samples, per):
    stop = min(start + per, prep.samples)
    block = done(start, stop) if done is not None else None
    if block is None:
      t0 = time.perf_counter()
      block = _moments_between(prep, start, stop, progress)
      if finished is not None:
        finished(start, stop, block, time.perf_counter() - t0)
    elif progress is not None:
      progress(stop - start)
    mom = merge_moments(mom, block)
  return _summary(prep, mom, True)


def monte_carlo(key, alpha, n, dim: int, M, samples: int, chunk: int | None = None, *,
                devices: int | None = None, rule: str = "strict"):
  """(mean, stderr) of N_s/N over ``samples`` fresh point sets on S^{dim-1}(M).

  See ``monte_carlo_detail`` (this skips the bounds, so no per-sample Gram is formed).
  """
  mc = monte_carlo_detail(key, alpha, n, dim, M, samples, chunk, devices=devices, rule=rule,
                          with_bounds=False)
  return mc.mean, mc.stderr
