"""float32 for the averaged-only passes of Algorithms 1-2 (limits.distance.kernels.AVERAGED,
``avg_dtype``, issue 27) against the float64 reference: the averages within
kernels.AVG32_RTOL, every field a decision reads (d̃ in both forms, d_max, the violation
counts and max ratios of Theorem 1's bound) the float64 values, also on rows where d̃ equals
d_max up to rounding (the bound is tight: both sides of the decision are hit by rounding)."""

import jax
import numpy as np
import pytest

from limits.distance import kernels as df

DECIDING = ("count", "d_sum", "d_norm", "dmax_sum", "dmax_norm", "viol_sum", "viol_norm",
            "max_ratio_sum", "max_ratio_norm")


def _records(rng, H, L, d, sharp=3.0):
  """float32 causal weights and vectors, as the model's records are (exact in float64)."""
  logits = np.where(np.tri(L, dtype=bool), rng.normal(size=(1, H, L, L)) * sharp, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
  return w, rng.normal(size=(1, H, L, d)).astype(np.float32)


def _both(w, x, ns, **kw):
  with jax.enable_x64(True):
    ref = df.layer_stats_printed(w, x.astype(np.float64), ns, dtype=np.float64, **kw)
    f32 = df.layer_stats_printed(w, x.astype(np.float64), ns, dtype=np.float64,
                                 avg_dtype=np.float32, **kw)
  return ref, f32


@pytest.mark.parametrize("ns, L, blocks", [([5], 96, 4), ([1, 5, 10, 20, 40], 130, 4),
                                           ([1, 3], 40, 1)])
def test_averages_float32_within_tolerance_decisions_float64(ns, L, blocks):
  """The averaged fields (E, the three printed E; ε's sum is float64) agree with float64 to
  AVG32_RTOL relative, and do differ (the float32 path is taken: > 1e-12 somewhere); every deciding
  field equals the float64 reference (d̃ and d_max to 1e-14: the same float64 terms, summed
  from the selection order at small N; counts exactly)."""
  rng = np.random.default_rng(11)
  w, x = _records(rng, 3, L, 16)
  (st, means), (st32, means32) = _both(w, x, ns, blocks=blocks)
  worst = 0.0
  for name in ("expected", "gap"):
    a, b = np.asarray(getattr(st, name)), np.asarray(getattr(st32, name))
    np.testing.assert_allclose(b, a, rtol=df.AVG32_RTOL, err_msg=name)
    worst = max(worst, float(np.max(np.abs(b - a) / np.abs(a))))
  for name in df.PRINTED:
    np.testing.assert_allclose(means32[name], means[name], rtol=df.AVG32_RTOL, err_msg=name)
    ok = np.isfinite(means[name])
    worst = max(worst, float(np.max(np.abs(means32[name] - means[name])[ok]
                                    / np.abs(means[name][ok]))))
  assert worst > 1e-12, "the float32 passes were not used"
  for name in DECIDING:
    a, b = np.asarray(getattr(st, name)), np.asarray(getattr(st32, name))
    if a.dtype.kind in "iub":
      np.testing.assert_array_equal(b, a, err_msg=name)
    else:
      np.testing.assert_allclose(b, a, rtol=1e-14, atol=0, err_msg=name)


def test_tight_bound_decisions_identical_to_float64():
  """Every key vector equal (x_i = v): d_1 = 0, R_N = ‖v‖ and d̃ = ‖v‖·Σ_{i∉I_N}|ᾱ_N − α_i|
  = d_max exactly (sum form), so d̃/d_max sits within float64 rounding of 1 on both sides and a
  float32 d̃ would decide differently (checked: the float32 rounding of the ratios crosses 1
  where float64's does not, or the reverse). The violation counts and max ratios with float32
  averages are the float64 ones, bit for bit."""
  rng = np.random.default_rng(3)
  H, L, d = 2, 64, 8
  w, _ = _records(rng, H, L, d, sharp=1.0)
  v = rng.normal(size=(d,)).astype(np.float32)
  x = np.broadcast_to(v, (1, H, L, d)).copy()
  ns = [1, 2, 5]
  (st, _), (st32, _) = _both(w, x, ns, blocks=1)
  r = np.asarray(st.max_ratio_sum)
  assert np.all(np.abs(r - 1.0) < 1e-12), r  # the margin is far below float32's resolution
  with jax.enable_x64(True):
    full32, _ = df.layer_stats_printed(w, x, ns, dtype=np.float32, blocks=1)
  assert not (np.array_equal(np.asarray(full32.viol_sum), np.asarray(st.viol_sum))
              and np.array_equal(np.asarray(full32.max_ratio_sum), r)), \
      "float32 throughout decides as float64 here: the test would not see a difference"
  for name in DECIDING:
    np.testing.assert_array_equal(np.asarray(getattr(st32, name)),
                                  np.asarray(getattr(st, name)), err_msg=name)


def test_avg_dtype_not_narrower_is_the_compute_dtype():
  """avg_dtype float64 (not narrower than the compute dtype) and float32 at a float32 compute
  dtype take the one-dtype kernel: the same numbers as without it, bit for bit."""
  rng = np.random.default_rng(5)
  w, x = _records(rng, 2, 40, 8)
  with jax.enable_x64(True):
    for dt, avg in ((np.float64, np.float64), (np.float32, np.float32)):
      a = df.layer_stats_printed(w, x.astype(dt), [1, 5], dtype=dt, blocks=1)
      b = df.layer_stats_printed(w, x.astype(dt), [1, 5], dtype=dt, avg_dtype=avg, blocks=1)
      for p, q in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(q), np.asarray(p))


def test_ks_order_guard_both_sides_of_its_margin():
  """limits.distance.task.ks_order_safe: with float32 averages, a head's d̃ within
  2·AVG32_RTOL of some head's E (here 1.5·AVG32_RTOL) sends the L back to float64; at 3·AVG32_RTOL,
  or with float64 averages, it does not."""
  from types import SimpleNamespace

  from limits.distance.heads import HeadStats
  from limits.distance.task import ks_order_safe

  def stats(d):
    z = np.zeros((2, 1))
    return HeadStats(count=np.ones((2, 1), np.int32), d_sum=np.array([[d], [3.0]]),
                     d_norm=np.array([[0.5], [0.6]]), expected=np.array([[1.0], [7.0]]),
                     gap=z, dmax_sum=z + 9, dmax_norm=z + 9, viol_sum=z.astype(np.int32),
                     viol_norm=z.astype(np.int32), max_ratio_sum=z, max_ratio_norm=z)

  f32 = SimpleNamespace(avg_dtype=np.dtype(np.float32), dtype=np.dtype(np.float64))
  f64 = SimpleNamespace(avg_dtype=None, dtype=np.dtype(np.float64))
  near = 7.0 * (1 + 1.5 * df.AVG32_RTOL)  # head 0's d̃ (sum form) next to head 1's E
  far = 7.0 * (1 + 3 * df.AVG32_RTOL)
  assert not ks_order_safe(stats(near), f32)
  assert ks_order_safe(stats(far), f32)
  assert ks_order_safe(stats(near), f64)
  assert ks_order_safe(stats(near), f32, form="norm")  # the norm form's d̃ is far from E


def test_head_stats_per_call_avg_dtype_leaves_the_evaluator_alone():
  """ModelEvaluator.head_stats(avg_dtype=None): float64 averages for that call (the KS guard's
  recompute) equal to an evaluator built in float64, bitwise; the evaluator's own float32
  setting is untouched and its default call differs from float64 in E (so the argument is read,
  not ignored)."""
  from limits.distance import model as distance_model
  from limits.models import gpt2

  config = gpt2.Config(n_layer=2, n_head=3, n_embd=24, n_positions=64, vocab_size=50)
  with jax.enable_x64(True):
    params = gpt2.init_params(jax.random.key(5), config, dtype=np.float64)
    tok = np.random.default_rng(6).integers(0, 50, (2, 40)).astype(np.int32)
    f32 = distance_model.ModelEvaluator(params, config, avg_dtype=np.float32)
    f64 = distance_model.ModelEvaluator(params, config)
    per_call = f32.head_stats(tok, [1, 5], avg_dtype=None)
    ref = f64.head_stats(tok, [1, 5])
    default = f32.head_stats(tok, [1, 5])
  assert f32.avg_dtype == np.float32
  for name in ref._fields:
    np.testing.assert_array_equal(getattr(per_call, name), getattr(ref, name), err_msg=name)
  assert not np.array_equal(default.expected, ref.expected)
  np.testing.assert_allclose(default.expected, ref.expected, rtol=1e-6)
