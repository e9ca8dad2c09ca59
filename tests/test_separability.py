"""Tests for limits.separability (Theorem 2, Algorithm 4).

References are independent of the code under test: plain NumPy loops over tokens, hand-expanded
xi formulas, scipy's pdist, Pearson's random-walk closed form, and an independent NumPy Monte
Carlo. Float64 (``jax.enable_x64``) wherever counts are compared exactly.
"""

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import pdist

from limits import selection
from limits import separability as sp
from limits.errors import LimitsError
from tests.cli_helpers import simulated_devices_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------
# NumPy references.

def np_count(alpha, x, n, mask=None, rule="strict"):
  """Plain loop: N_s and r exactly as §2.2 / Algorithm 4 define them."""
  L = len(alpha)
  mask = np.ones(L, bool) if mask is None else np.asarray(mask)
  vis = [i for i in range(L) if mask[i]]
  order = sorted(vis, key=lambda i: (-alpha[i], i))     # largest weight first, ties by index
  sel = order[:n]
  non = order[n:]
  s = np.zeros(x.shape[1])
  for i in sel:
    s = s + alpha[i] * x[i]
  dist = {i: float(np.linalg.norm(alpha[i] * x[i] - s)) for i in vis}
  r = min((dist[j] for j in non), default=math.inf)
  if rule == "strict":
    n_s = sum(1 for i in sel if dist[i] < r)
  else:
    n_s = sum(1 for i in sel if dist[i] <= r and all(dist[j] > r for j in non))
  return n_s, r, sel


def np_xi(alpha, sel, M, delta):
  """xi_i by the theorem's first form: M^2 sum a_j^2 + (M^2 - delta^2/2) sum_{j != k} a_j a_k."""
  out = {}
  for i in sel:
    others = [j for j in sel if j != i]
    t1 = sum(M * M * alpha[j] ** 2 for j in others)
    t2 = sum((M * M - delta * delta / 2) * alpha[j] * alpha[k]
             for j in others for k in others if j != k)
    out[i] = math.sqrt(max(t1 + t2, 0.0))
  return out


def sphere(rng, L, d, M=1.0):
  g = rng.standard_normal((L, d))
  return M * g / np.linalg.norm(g, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------
# count_distinguishable.

@pytest.mark.parametrize("L,d,seed", [(7, 3, 0), (20, 5, 1), (33, 2, 2)])
@pytest.mark.parametrize("rule", ["strict", "literal"])
def test_count_matches_numpy_loop(L, d, seed, rule):
  rng = np.random.default_rng(seed)
  with jax.enable_x64(True):
    for trial in range(4):
      alpha = rng.dirichlet(np.full(L, 0.5))
      x = sphere(rng, L, d, M=1.5) if trial % 2 else rng.standard_normal((L, d))
      mask = rng.random(L) < 0.8 if trial == 3 else None
      for n in (1, 2, L // 2, L - 1, L, L + 3):
        ref_ns, ref_r, _ = np_count(alpha, x, n, mask, rule)
        n_s, r = sp.count_distinguishable(jnp.asarray(alpha), jnp.asarray(x), n,
                                          None if mask is None else jnp.asarray(mask), rule=rule)
        assert int(n_s) == ref_ns, (trial, n)
        if math.isinf(ref_r):
          assert math.isinf(float(r))
        else:
          # Same float64 operations in a different order: agreement to a few ulps.
          np.testing.assert_allclose(float(r), ref_r, rtol=1e-12)


def test_tie_breaking_by_position():
  # Uniform weights: the first n positions are selected (stable sort).
  with jax.enable_x64(True):
    sel = selection.top_n_mask(jnp.full((6,), 1 / 6), 2)
  assert sel.tolist() == [True, True, False, False, False, False]


def test_selection_with_ties_matches_stable_sort():
  """One-sort threshold selection vs NumPy's stable argsort, with many tied weights and masks."""
  rng = np.random.default_rng(12)
  alpha = np.round(rng.random((6, 17)) * 4) / 4                  # values in {0, .25, .5, .75, 1}
  mask = rng.random((6, 17)) < 0.7
  for n in (1, 2, 5, 12, 17, 20):
    got = np.asarray(selection.top_n_mask(jnp.asarray(alpha), n, jnp.asarray(mask)))
    via_ranks = np.asarray(selection.ranks(jnp.asarray(alpha), jnp.asarray(mask))) < n
    for i in range(6):
      vis = np.flatnonzero(mask[i])
      order = vis[np.argsort(-alpha[i, vis], kind="stable")][:n]
      ref = np.zeros(17, bool)
      ref[order] = True
      assert got[i].tolist() == ref.tolist(), (i, n)
      assert (via_ranks[i] & mask[i]).tolist() == ref.tolist(), (i, n)


def test_literal_reading_gives_zero_when_a_token_is_left_out():
  rng = np.random.default_rng(3)
  with jax.enable_x64(True):
    for _ in range(5):
      alpha = jnp.asarray(rng.dirichlet(np.ones(10)))
      x = jnp.asarray(sphere(rng, 10, 4))
      strict, _ = sp.count_distinguishable(alpha, x, 3, rule="strict")
      literal, _ = sp.count_distinguishable(alpha, x, 3, rule="literal")
      assert int(literal) == 0
      # With every token selected both readings count all of them.
      assert int(sp.count_distinguishable(alpha, x, 10, rule="literal")[0]) == 10
    assert int(strict) >= 0
  with pytest.raises(LimitsError):
    sp.count_distinguishable(alpha, x, 3, rule="closed")


@pytest.mark.parametrize("method", ["gram", "direct"])
def test_row_stats_equals_single_row_functions(method):
  """Batched rows (Gram identity or direct) vs count_distinguishable and theorem2_bounds."""
  rng = np.random.default_rng(4)
  R, L, d, M = 6, 15, 8, 1.3
  with jax.enable_x64(True):
    alpha = jnp.asarray(rng.dirichlet(np.ones(L), size=R))
    mask = jnp.asarray(np.tril(np.ones((R, L), bool), k=L - R))     # rows of varying length
    x = jnp.asarray(sphere(rng, L, d, M))
    delta = jnp.asarray(rng.uniform(0.1, 1.0, R))
    for n in (1, 3, 9, 15):
      st = sp.row_stats(alpha, selection.sort_desc(alpha, mask), mask, x, n, M, delta,
                        method=method)
      for i in range(R):
        n_s, r = sp.count_distinguishable(alpha[i], x, n, mask[i])
        lo, up = sp.theorem2_bounds(alpha[i], n, M, delta[i], r, mask[i], clip=False)
        assert int(st.n_s[i]) == int(n_s)
        # Gram identity in float64: the absolute error of d^2 is ~eps |s|^2, i.e. a relative
        # error of r of eps |s|^2 / r^2 (up to ~1e-9 here); 1e-7 leaves margin. The bounds are
        # O(1) and inherit it through sum(xi) / (N r): atol 1e-7.
        np.testing.assert_allclose(float(st.r[i]), float(r), rtol=1e-7)
        np.testing.assert_allclose(float(st.lower_raw[i]), float(lo), rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(float(st.upper[i]), float(up), rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(float(st.frac[i]),
                                   float(n_s) / min(n, int(mask[i].sum())), rtol=1e-12)


# ------------------------------------------------------------------------------------------
# delta.

def test_min_pairwise_distance_matches_scipy_and_excludes_duplicates():
  rng = np.random.default_rng(5)
  with jax.enable_x64(True):
    x = sphere(rng, 40, 6)
    ref = pdist(x).min()
    # Gram identity in float64: sqrt of an O(eps) absolute error on d^2 ~ 1 -> 1e-7 relative.
    np.testing.assert_allclose(float(sp.min_pairwise_distance(jnp.asarray(x))), ref, rtol=1e-7)
    xd = np.concatenate([x, x[:3]])                        # exact duplicates are excluded
    np.testing.assert_allclose(float(sp.min_pairwise_distance(jnp.asarray(xd))), ref, rtol=1e-7)
    mask = np.zeros(43, bool)
    mask[[0, 5, 9]] = True
    np.testing.assert_allclose(float(sp.min_pairwise_distance(jnp.asarray(xd), jnp.asarray(mask))),
                               pdist(xd[mask]).min(), rtol=1e-7)
    pre = np.asarray(sp.prefix_min_pairwise_distance(jnp.asarray(xd)))
    assert math.isinf(pre[0])
    for t in range(1, 43):
      d = pdist(xd[:t + 1])
      d = d[d > 1e-6]                                      # duplicates removed in the reference
      np.testing.assert_allclose(pre[t], d.min(), rtol=1e-7)
    # A single token or only duplicates: no pair -> +inf, and xi/bounds stay finite.
    assert math.isinf(float(sp.min_pairwise_distance(jnp.asarray(x[:1]))))
    assert math.isinf(float(sp.min_pairwise_distance(jnp.asarray(np.repeat(x[:1], 3, 0)))))


# ------------------------------------------------------------------------------------------
# Theorem 2.

@pytest.mark.parametrize("M,delta", [(1.0, 1.0), (2.0, 0.5), (1.0, 0.0), (1.0, 1.9)])
def test_xi_and_bounds_on_hand_computable_case(M, delta):
  alpha = [0.4, 0.3, 0.2, 0.1]
  with jax.enable_x64(True):
    got = np.asarray(sp.xi(jnp.asarray(alpha), 3, M, delta))
    ref = np_xi(alpha, [0, 1, 2], M, delta)
    np.testing.assert_allclose(got[:3], [ref[0], ref[1], ref[2]], rtol=1e-12)
    assert got[3] == 0                                     # not selected
    if (M, delta) == (1.0, 1.0):
      # By hand: xi_0^2 = 0.3^2 + 0.2^2 + (1 - 1/2) * 2 * 0.3 * 0.2 = 0.19.
      np.testing.assert_allclose(got[0], math.sqrt(0.19), rtol=1e-12)
    r = 0.25
    lo, up = sp.theorem2_bounds(jnp.asarray(alpha), 3, M, delta, r, clip=False)
    xs = [ref[0], ref[1], ref[2]]
    np.testing.assert_allclose(float(lo), 1 - sum(xs) / (3 * r), rtol=1e-12)
    np.testing.assert_allclose(
        float(up), sum(math.exp(-max(v - r, 0) ** 2 / (2 * M * M)) for v in xs) / 3, rtol=1e-12)
    lo_c, _ = sp.theorem2_bounds(jnp.asarray(alpha), 3, M, delta, r)
    assert float(lo_c) == max(float(lo), 0.0)


def test_no_nan_at_r_zero_all_selected_and_extreme_weights():
  with jax.enable_x64(False):
    alpha = jnp.asarray([0.4, 0.3, 0.2, 0.1], jnp.float32)
    lo, up = sp.theorem2_bounds(alpha, 2, 1.0, 0.5, 0.0, clip=False)
    assert float(lo) == -math.inf and math.isfinite(float(up))
    lo, up = sp.theorem2_bounds(alpha, 2, 1.0, 0.5, 0.0)
    assert float(lo) == 0.0
    # N = 1 has xi = 0: 0/0 would be NaN; at r = 0 the bound is vacuous (0 clipped).
    lo, up = sp.theorem2_bounds(alpha, 1, 1.0, 0.5, 0.0)
    assert float(lo) == 0.0 and float(up) == 1.0
    # r = 0 from data: the non-selected token coincides with s.
    x = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], jnp.float32)
    n_s, r = sp.count_distinguishable(jnp.asarray([0.5, 0.25, 0.25]), x * jnp.asarray(
        [[1.0], [1.0], [2.0]]), 1)
    assert float(r) == 0.0 and int(n_s) == 0
    # All tokens selected: r = +inf, everything counts, both bounds 1.
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 3)), jnp.float32)
    n_s, r = sp.count_distinguishable(alpha, x, 4)
    assert math.isinf(float(r)) and int(n_s) == 4
    lo, up = sp.theorem2_bounds(alpha, 4, 1.0, 0.5, r)
    assert float(lo) == 1.0 and float(up) == 1.0
    # delta = +inf (no pair) and a fully masked row: finite, vacuous 1.
    lo, up = sp.theorem2_bounds(alpha, 2, 1.0, jnp.inf, 0.1)
    assert np.isfinite([float(lo), float(up)]).all()
    none = jnp.zeros(4, bool)
    assert float(sp.separable_fraction(alpha, x, 2, none)) == 1.0
    lo, up = sp.theorem2_bounds(alpha, 2, 1.0, 0.5, jnp.inf, none)
    assert float(lo) == 1.0 and float(up) == 1.0
    # Extreme weights from logits +-1e4 (one-hot in float32) and T = 1e-4.
    logits = jnp.asarray([1e4, -1e4, 3.0, -2.0, 1e4 - 1], jnp.float32)
    a = jax.nn.softmax(logits / 1e-4)
    xs = jnp.asarray(np.random.default_rng(1).standard_normal((5, 3)), jnp.float32)
    for n in (1, 2, 5):
      n_s, r = sp.count_distinguishable(a, xs, n)
      lo, up = sp.theorem2_bounds(a, n, 1.0, 0.3, r)
      assert np.isfinite([float(n_s), float(lo), float(up)]).all()
    mc = sp.monte_carlo_detail(jax.random.key(0), a, [1, 2, 4], 3, 1.0, 4)
    assert np.isfinite([mc.mean, mc.stderr, mc.mean_lower, mc.mean_upper]).all()


# ------------------------------------------------------------------------------------------
# Monte Carlo.

def test_chunked_sharded_layout_does_not_change_the_estimate():
  key = jax.random.key(7)
  alpha = sp.synthetic_alpha("softmax", 50, jax.random.key(1))
  ref = sp.monte_carlo_detail(key, alpha, [1, 3, 10], 5, 1.0, 37, chunk=37)
  for chunk in (5,):                     # 37 = 7 * 5 + 2: exercises the padded last chunk
    got = sp.monte_carlo_detail(key, alpha, [1, 3, 10], 5, 1.0, 37, chunk=chunk)
    # N_s/N per sample is an exact ratio, so mean and stderr agree up to the float64 summation
    # order (1e-12). r, delta and the bounds are float32 reductions whose rounding may depend on
    # the batch layout XLA picks: 1e-6 relative (and absolute for the O(1) bounds).
    for a, b, tol in zip(got[:-1], ref[:-1], [1e-12, 1e-12] + [1e-6] * 5):
      np.testing.assert_allclose(a, b, rtol=tol, atol=0 if tol < 1e-9 else 1e-6)
  mean, stderr = sp.monte_carlo(key, alpha, [1, 3, 10], 5, 1.0, 37, chunk=8)
  np.testing.assert_allclose(mean, ref.mean, rtol=1e-12)
  np.testing.assert_allclose(stderr, ref.stderr, rtol=1e-12)
  # The vmapped chunk equals a plain per-sample loop of the single-row reference.
  points = jax.jit(lambda i: sp.sphere_points(jax.random.fold_in(key, i), 50, 5, 1.0))
  fr = [float(sp.separable_fraction(alpha, points(i), 3)) for i in range(37)]
  np.testing.assert_allclose(ref.mean[1], np.mean(fr), rtol=1e-6)
  np.testing.assert_allclose(ref.stderr[1], np.std(fr, ddof=1) / math.sqrt(37), rtol=1e-5)


def test_monte_carlo_blocks_every_n_at_once_equals_one_n_at_a_time():
  """The sphere step's path (every N from one draw and one Gram per sample, in blocks a rerun
  may restore) against monte_carlo_detail called once per N (the path it replaced)."""
  with jax.enable_x64(True):
    key = jax.random.key(3)
    alpha = jnp.stack([sp.synthetic_alpha("softmax", 40, jax.random.key(h), dtype=jnp.float64)
                       for h in range(2)])
    ns = [1, 4, 16]
    per_n = [sp.monte_carlo_detail(key, alpha, n, 6, 1.0, 23, chunk=4) for n in ns]
    kept = {}
    got = sp.monte_carlo_blocks(key, alpha, ns, 6, 1.0, 23, chunk=4, blocks=3,
                                finished=lambda a, b, m, t: kept.__setitem__((a, b), m))
    assert sorted(kept) == [(0, 8), (8, 16), (16, 23)]   # 6 chunks in 3 blocks of 2 chunks
    assert got.samples == 23
    for k in range(len(ns)):   # float64: summation order only (blocks merged pairwise)
      for field in range(7):
        np.testing.assert_allclose(got[field][:, k], per_n[k][field], rtol=1e-13, atol=0)
    # Restored blocks are not recomputed and give the same bits as computing them.
    computed = []
    again = sp.monte_carlo_blocks(
        key, alpha, ns, 6, 1.0, 23, chunk=4, blocks=3,
        done=lambda a, b: kept.get((a, b)) if a < 16 else None,
        finished=lambda a, b, m, t: computed.append((a, b)))
    assert computed == [(16, 23)]
    for a, b in zip(again[:-1], got[:-1]):
      np.testing.assert_array_equal(a, b)
    # A wrong restored block changes the estimate (the restored moments are used).
    bad = kept[(0, 8)]._replace(total=kept[(0, 8)].total * 0)
    off = sp.monte_carlo_blocks(key, alpha, ns, 6, 1.0, 23, chunk=4, blocks=3,
                                done=lambda a, b: bad if a == 0 else None)
    assert not np.allclose(off.mean, got.mean)


def test_monte_carlo_converges_to_pearson_closed_form():
  """L = 3, N = 2, uniform weights, circle (d = 2).

  Both selected tokens have X_i = M/3 and r = |x_3 - x_1 - x_2| M/3, so N_s/N = 1[|x_3 - x_1 -
  x_2| > M], and -x_1, -x_2, x_3 are independent uniform unit steps: by Pearson's planar random
  walk P(R_3 <= 1) = 1/(3 + 1), so E[N_s/N] = 3/4 exactly.
  """
  mean, stderr = sp.monte_carlo(jax.random.key(0), sp.synthetic_alpha("uniform", 3), 2, 2,
                                1.0, 4000)
  # A 4-sigma interval: false-failure rate ~6e-5 for a random seed (this seed is fixed).
  assert abs(float(mean) - 0.75) < 4 * float(stderr), (mean, stderr)
  assert 0.005 < float(stderr) < 0.01        # sqrt(3/16 / 4000) = 0.0068


def test_monte_carlo_agrees_with_independent_numpy_estimate():
  """alpha = (0.5, 0.3, 0.2), N = 2, d = 3: X = (0.3, 0.5) M, r = |0.2 x3 - 0.5 x1 - 0.3 x2|."""
  rng = np.random.default_rng(11)
  S = 200_000
  x1, x2, x3 = (sphere(rng, S, 3) for _ in range(3))
  r = np.linalg.norm(0.2 * x3 - 0.5 * x1 - 0.3 * x2, axis=1)
  f = ((0.3 < r).astype(float) + (0.5 < r)) / 2
  ref, ref_se = f.mean(), f.std(ddof=1) / math.sqrt(S)
  mean, se = sp.monte_carlo(jax.random.key(3), jnp.asarray([0.5, 0.3, 0.2]), 2, 3, 1.0, 4000)
  # 4 sigma of the difference of two independent estimates: false-failure rate ~6e-5.
  assert abs(float(mean) - ref) < 4 * math.hypot(float(se), ref_se), (mean, ref)


def test_monte_carlo_bounds_match_per_sample_recomputation():
  key = jax.random.key(2)
  alpha = sp.synthetic_alpha("zipf", 30, jax.random.key(5))
  mc = sp.monte_carlo_detail(key, alpha, 4, 6, 2.0, 9)
  lows, ups, ds = [], [], []
  with jax.enable_x64(False):
    points = jax.jit(lambda i: sp.sphere_points(jax.random.fold_in(key, i), 30, 6, 2.0))
    for i in range(9):
      x = points(i)
      _, r = sp.count_distinguishable(alpha, x, 4)
      d = sp.min_pairwise_distance(x)
      lo, up = sp.theorem2_bounds(alpha, 4, 2.0, d, r)
      lows.append(float(lo)); ups.append(float(up)); ds.append(float(d))
  # float32 per-sample values; averages agree to float32 rounding (1e-5).
  np.testing.assert_allclose(mc.mean_lower, np.mean(lows), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(mc.mean_upper, np.mean(ups), rtol=1e-5)
  np.testing.assert_allclose(mc.mean_delta, np.mean(ds), rtol=1e-5)


def test_monte_carlo_rejects_bad_arguments():
  a = sp.synthetic_alpha("uniform", 8)
  for kwargs in ({"n": 9}, {"n": 0}, {"samples": 0}, {"M": 0.0}, {"M": -1.0}):
    args = dict(n=2, dim=3, M=1.0, samples=4)
    args.update(kwargs)
    with pytest.raises(LimitsError):
      sp.monte_carlo(jax.random.key(0), a, args["n"], args["dim"], args["M"], args["samples"])


_DEVICES_SCRIPT = r"""
import json, jax, numpy as np
from limits import separability as sp
assert jax.device_count() == 8, jax.devices()
alpha = jax.numpy.stack([sp.synthetic_alpha("softmax", 40, jax.random.key(h)) for h in range(3)])
args = (jax.random.key(9), alpha, [1, 4, 12], 6, 1.0, 45)
one = sp.monte_carlo_detail(*args, chunk=45)
eight = sp.monte_carlo_detail(*args, chunk=10, devices=8)
print(json.dumps({"one": [np.asarray(a).tolist() for a in one[:-1]],
                  "eight": [np.asarray(a).tolist() for a in eight[:-1]]}))
"""


def test_one_vs_eight_simulated_devices():
  env = simulated_devices_env(8)
  out = subprocess.run([sys.executable, "-c", _DEVICES_SCRIPT], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  res = json.loads(out.stdout.strip().splitlines()[-1])
  # Same per-sample keys (fold_in): N_s/N (exact ratios) agree up to the float64 summation
  # order (1e-12); r, delta and the bounds are float32 reductions whose rounding may depend on
  # the per-device batch layout (1e-6 relative, and 1e-6 absolute for the O(1) bounds, whose
  # lower one is a difference 1 - sum(xi)/(N r) that can cancel to ~0).
  for a, b, tol in zip(res["one"], res["eight"], [1e-12, 1e-12] + [1e-6] * 5):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=tol,
                               atol=0 if tol < 1e-9 else 1e-6)


# ------------------------------------------------------------------------------------------
# Model path.

def test_layer_sums_equal_per_query_loop():
  rng = np.random.default_rng(8)
  H, L, d, M = 2, 11, 4, 1.0
  with jax.enable_x64(True):
    logits = rng.standard_normal((H, L, L)) * 2
    causal = np.tril(np.ones((L, L), bool))
    w = np.where(causal, np.exp(logits), 0)
    w = w / w.sum(-1, keepdims=True)                          # causal attention rows
    v = rng.standard_normal((H, L, d))
    all_n = (1, 3, 6)
    got_all = np.asarray(sp.layer_sums(jnp.asarray(w), jnp.asarray(v), jnp.asarray(all_n), M))
    assert got_all.shape == (H, 3, len(sp.LAYER_FIELDS))
    for k, n in enumerate(all_n):
      got = got_all[:, k]
      for h in range(H):
        x = v[h] / np.linalg.norm(v[h], axis=1, keepdims=True) * M
        ref = np.zeros(len(sp.LAYER_FIELDS))
        for q in range(L):
          t = q + 1
          if t <= n:
            continue                                          # AMBIG-8: t <= N skipped
          a = w[h, q, :t]
          n_s, r, sel = np_count(a, x[:t], n)
          delta = pdist(x[:t]).min()
          xs = np_xi(a, sel, M, delta)
          lo = 1 - sum(xs.values()) / (n * r)
          up = sum(math.exp(-max(xs[i] - r, 0) ** 2 / (2 * M * M)) for i in sel) / n
          up_printed = sum(math.exp(-(r - xs[i]) ** 2 / (16 * M * M)) for i in sel) / n
          ref += [n_s / n, max(lo, 0), lo, up, r, delta, up_printed, 1]
        # Gram identity in float64 vs direct differences: 1e-8 relative.
        np.testing.assert_allclose(got[h], ref, rtol=1e-8, err_msg=f"head {h} n {n}")


# ------------------------------------------------------------------------------------------
# Small helpers and the verdict logic.

def test_synthetic_alpha():
  with jax.enable_x64(True):
    u = sp.synthetic_alpha("uniform", 5)
    np.testing.assert_allclose(u, 0.2, rtol=1e-15)
    z = np.sort(np.asarray(sp.synthetic_alpha("zipf", 4, zipf_s=2.0)))[::-1]
    h = 1 + 1 / 4 + 1 / 9 + 1 / 16
    np.testing.assert_allclose(z, [1 / h, 1 / 4 / h, 1 / 9 / h, 1 / 16 / h], rtol=1e-12)
    key = jax.random.key(3)
    s = np.asarray(sp.synthetic_alpha("softmax", 6, key, temperature=0.5))
    g = np.asarray(jax.random.normal(key, (6,), jnp.float64)) / 0.5
    np.testing.assert_allclose(s, np.exp(g) / np.exp(g).sum(), rtol=1e-12)
  with pytest.raises(LimitsError):
    sp.synthetic_alpha("gauss", 4)
  with pytest.raises(LimitsError):
    sp.synthetic_alpha("softmax", 4)               # needs a key


def test_sphere_points_have_radius_m():
  x = np.asarray(sp.sphere_points(jax.random.key(0), 100, 7, 2.5))
  np.testing.assert_allclose(np.linalg.norm(x, axis=1), 2.5, rtol=1e-6)   # float32 rounding


def test_multi_head_coverage_closed_form():
  np.testing.assert_allclose(sp.multi_head_coverage(0.8, 3), 1 - 0.2 ** 3, rtol=1e-15)
  np.testing.assert_allclose(sp.multi_head_coverage(0.5, 1), 0.5, rtol=1e-15)


def test_figure3_summary_over_heads():
  # Hand-made (N, head) table: the summary is its per-N median, max and the bound of the
  # head with the largest N_s/N (numpy on the same table is the reference).
  ns = [1, 2, 4]
  frac = np.array([[1.0, 1.0, 1.0], [0.5, 0.9, 0.7], [0.2, 0.4, 0.8]])
  lower = frac - 0.1
  upper = frac + np.array([0.01, 0.02, 0.03])
  s = sp.figure3_summary(ns, frac, lower, upper)
  assert s["n"] == ns
  np.testing.assert_allclose(s["median"], [1.0, 0.7, 0.4])
  np.testing.assert_allclose(s["max"], [1.0, 0.9, 0.8])
  np.testing.assert_allclose(s["upper_at_max_head"], [1.01, 0.92, 0.83])
  np.testing.assert_allclose(s["lower_max"], [0.9, 0.8, 0.7])


def _causal_softmax_rows(rng, H, L):
  """(H, L, L) causal softmax rows of N(0, 4) logits, with five tied weights in head 0's row 10."""
  logits = np.where(np.tri(L, dtype=bool), rng.normal(size=(H, L, L)) * 2, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  w[0, 10, :5] = w[0, 10, 5]  # ties
  return w


def test_host_sorted_rows_give_the_same_layer_sums():
  """The host sort (NumPy) equals the in-graph sort_desc on causal rows (ties and masked keys
  included), and layer_sums with it is bitwise the same computation (float64)."""
  import jax

  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    H, L, d = 2, 24, 6
    w = _causal_softmax_rows(rng, H, L)
    v = rng.normal(size=(H, L, d))
    host = sp.sort_rows_host(w)
    dev = np.asarray(selection.sort_desc(jnp.asarray(w), jnp.tril(jnp.ones((L, L), bool))))
    np.testing.assert_array_equal(host, dev)
    ns = jnp.asarray([1, 2, 4, 8], jnp.int32)
    a = sp.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, 1.0)
    b = sp.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, 1.0, sorted_rows=jnp.asarray(host))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("blocks", [1, 4])
def test_device_layer_sums_equal_the_reference_path(blocks):
  """layer_sums (device top-k, bounds over the <= N selected weights, causal blocks) equals
  layer_sums_reference (every row sorted, whole-row cumsums) to 1e-12 relative, float64, with
  ties at the N-th place; weights not representable in float32 (the float64 recheck path) and
  rounded to float32 (the records' case). Every field, the counts included."""
  from limits.separability import model as sm

  with jax.enable_x64(True):
    rng = np.random.default_rng(4)
    H, L, d = 2, 150, 5
    w = _causal_softmax_rows(rng, H, L)
    w[1, 100:, 3:9] = 0.01
    v = rng.normal(size=(H, L, d))
    ns = [1, 2, 4, 8, 16, 32]
    for ww in (w, w.astype(np.float32).astype(np.float64)):
      ref = np.asarray(sm.layer_sums_reference(jnp.asarray(ww), jnp.asarray(v),
                                               jnp.asarray(ns), 1.0))
      got = np.asarray(sm.layer_sums(jnp.asarray(ww), jnp.asarray(v), ns, 1.0, blocks=blocks))
      np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_float32_records_cast_inside_the_kernel_give_the_float64_sums():
  """layer_sums on float32 records with dtype=float64 (selection on the float32 values, the
  cast inside the kernel: the reproduction's path) equals layer_sums_reference on the same
  values cast to float64 on the host, with float32 ties at the N-th place (rows 100+ of head 1
  hold six equal weights); and it is not the float32 computation (which differs by > 1e-9)."""
  from limits.separability import model as sm

  with jax.enable_x64(True):
    rng = np.random.default_rng(5)
    H, L, d = 2, 150, 5
    w = _causal_softmax_rows(rng, H, L)
    w[1, 100:, 3:9] = 0.01
    w32 = w.astype(np.float32)
    v32 = rng.normal(size=(H, L, d)).astype(np.float32)
    ns = [1, 2, 4, 8, 16, 32]
    ref = np.asarray(sm.layer_sums_reference(jnp.asarray(w32, jnp.float64),
                                             jnp.asarray(v32, jnp.float64), jnp.asarray(ns),
                                             1.0))
    got = np.asarray(sm.layer_sums(jnp.asarray(w32), jnp.asarray(v32), ns, 1.0,
                                   dtype=jnp.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    f32 = np.asarray(sm.layer_sums(jnp.asarray(w32), jnp.asarray(v32), ns, 1.0))
    assert np.max(np.abs(f32 - ref) / np.maximum(np.abs(ref), 1e-300)) > 1e-9


def test_leave_one_out_product_equals_prefix_suffix_sums_and_keeps_exact_zeros():
  """The J − I product (short rows) equals the exclusive prefix + suffix sums to 1e-15, and a
  row with one non-zero entry gives exactly 0 there (where sum(v) − v_i need not)."""
  from limits.separability.rows import _leave_one_out_sum

  with jax.enable_x64(True):
    v = jnp.asarray(np.random.default_rng(6).random((3, 4, 129)))
    np.testing.assert_allclose(np.asarray(_leave_one_out_sum(v, product=True)),
                               np.asarray(_leave_one_out_sum(v)), rtol=1e-15)
    one = jnp.zeros((1, 129)).at[0, 7].set(0.3 ** 2)
    got = np.asarray(_leave_one_out_sum(one, product=True))
    assert got[0, 7] == 0.0 and np.all(got[0, np.arange(129) != 7] == 0.3 ** 2)


def _brute_layer_sums(w, v, ns, M, rule):
  """(H, K, F) by the plain loop of §2.2 (direct differences), t <= N skipped (AMBIG-8)."""
  H, L, _ = w.shape
  out = np.zeros((H, len(ns), len(sp.LAYER_FIELDS)))
  ties = 0
  for h in range(H):
    x = v[h] / np.linalg.norm(v[h], axis=1, keepdims=True) * M
    for k, n in enumerate(ns):
      for q in range(L):
        t = q + 1
        if t <= n:
          continue
        a = w[h, q, :t]
        n_s, r, sel = np_count(a, x[:t], n, rule=rule)
        s = sum(a[i] * x[i] for i in sel)
        ties += sum(1 for i in sel if np.linalg.norm(a[i] * x[i] - s) == r)
        d = pdist(x[:t])
        delta = d[d > 1e-12].min() if np.any(d > 1e-12) else 0.0
        xs = np_xi(a, sel, M, min(delta, 2 * M))
        lo = 1 - sum(xs.values()) / (n * r) if r > 0 else -math.inf
        up = sum(math.exp(-max(xs[i] - r, 0) ** 2 / (2 * M * M)) for i in sel) / n
        up_p = sum(math.exp(-(r - xs[i]) ** 2 / (16 * M * M)) for i in sel) / n
        out[h, k] += [n_s / n, max(lo, 0), lo, up, r, delta, up_p, 1]
  return out, ties


@pytest.mark.parametrize("rule", ["strict", "literal"])
@pytest.mark.parametrize("L,chunk", [(64, 16), (70, 16), (70, 1000)])
def test_layer_sums_row_chunks_equal_the_plain_loop(monkeypatch, rule, L, chunk):
  """layer_sums (thresholds for I_N, bounds over the selected places, rows in chunks of
  ROW_CHUNK with the last chunk padded) equals the plain §2.2 loop with direct differences
  (1e-8 relative: Gram identity vs differences), both rules, float32 records cast in the
  kernel. Row chunks that divide the block (L = 64, 4 blocks of 16) and that do not (L = 70:
  blocks of 17-18 rows, padded); N >= a block's keys (N = 32 > C = 18 in the first block).
  Ties: head 0's row 40 holds seven equal weights across the N = 4 and N = 8 places, and row
  50 is uniform over keys with one shared vector, so every distance equals r there (strict
  and literal both count 0; a selected key's distance rounded apart from r's would count)."""
  from limits.separability import model as sm

  monkeypatch.setattr(sm, "ROW_CHUNK", chunk)
  sm._layer_kernel.clear_cache()
  try:
    with jax.enable_x64(True):
      rng = np.random.default_rng(11)
      H, d, M = 2, 5, 1.0
      w = _causal_softmax_rows(rng, H, L).astype(np.float32)
      w[0, 40, 1:8] = w[0, 40, 0]
      w[0, 50, :51] = np.float32(1 / 51)
      v = rng.normal(size=(H, L, d)).astype(np.float32)
      v[0, :51] = v[0, 0]
      ns = [1, 4, 8, 32]
      got = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, M, rule=rule,
                                     dtype=jnp.float64))
      ref, ties = _brute_layer_sums(w.astype(np.float64), v.astype(np.float64), ns, M, rule)
      assert ties > 0                      # the data holds selected keys at distance exactly r
      np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-12)
  finally:
    sm._layer_kernel.clear_cache()


def test_ragged_places_and_leave_one_out_matrix():
  """_ragged: the places of every N in selection order, and loo[j, p] = 1 exactly for the
  other selected keys of place p (NumPy brute force), N capped at k."""
  from limits.separability.model import _ragged

  ns, k = (1, 3, 6), 5
  m, i, seg, loo = _ragged(ns, k)
  want = [(0, 0), (1, 0), (1, 1), (1, 2)] + [(2, r) for r in range(5)]
  assert list(zip(m.tolist(), i.tolist())) == want
  assert seg.sum(axis=0).tolist() == [1, 3, 5]
  for p, (mm, ii) in enumerate(want):
    n = min(ns[mm], k)
    assert loo[:, p].tolist() == [int(j < n and j != ii) for j in range(k)]


def test_layer_sums_decides_tiny_weights_exactly():
  """A head with one weight near 1 and the others ≈ 1e-15 (the embedded model's layer 1):
  the keys' distances to s differ by ≈ 1e-15·r, below the rounding of ‖s‖² (≈ 1e-16·r²)
  that the Gram form d² = α²M² − 2α⟨x, s⟩ + ‖s‖² carries. layer_sums decides
  ‖α_i x_i − s‖ < r on d² − ‖s‖² and matches exact rational arithmetic (fractions) on the
  kernel's own vectors; the previous reference path (layer_sums_reference, the Gram form
  with ‖s‖²) does not, so this data can tell the two apart."""
  from fractions import Fraction

  from limits.separability import model as sm

  with jax.enable_x64(True):
    rng = np.random.default_rng(12)
    L, d, ns = 32, 4, (2, 4, 8)
    w = np.zeros((1, L, L), np.float32)
    for q in range(L):
      tiny = rng.uniform(0.1, 10, q).astype(np.float32) * np.float32(1e-15)
      w[0, q, 1:q + 1] = tiny
      w[0, q, 0] = np.float32(1) - tiny.sum(dtype=np.float32)
    v = rng.normal(size=(1, L, d))
    x = np.asarray(sm.normalize_to_sphere(jnp.asarray(v[0]), 1.0))       # the kernel's x
    got = np.asarray(sm.layer_sums(jnp.asarray(w), jnp.asarray(v), ns, 1.0,
                                   dtype=jnp.float64))[0, :, 0]
    old = np.asarray(sm.layer_sums_reference(jnp.asarray(w, jnp.float64), jnp.asarray(v),
                                             jnp.asarray(ns), 1.0))[0, :, 0]
    X = [[Fraction(float(c)) for c in row] for row in x]
    want = []
    for n in ns:
      tot = Fraction(0)
      for q in range(n, L):
        a = [Fraction(float(c)) for c in w[0, q, :q + 1]]
        order = sorted(range(q + 1), key=lambda i: (-a[i], i))
        sel, non = order[:n], order[n:]
        s = [sum(a[i] * X[i][c] for i in sel) for c in range(d)]
        t = [a[j] * a[j] * sum(c * c for c in X[j]) - 2 * a[j] * sum(X[j][c] * s[c]
                                                                     for c in range(d))
             for j in range(q + 1)]
        tmin = min(t[j] for j in non)
        tot += Fraction(sum(1 for i in sel if t[i] < tmin), n)
      want.append(float(tot))
    np.testing.assert_array_equal(got, want)
    assert np.any(old != np.asarray(want))
