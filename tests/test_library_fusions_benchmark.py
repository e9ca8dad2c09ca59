"""benchmarks/library_fusions.py: the option takes effect, both programs compute the same
numbers (against NumPy), and its difference measures are right on both sides of their cases."""

import math

import jax
import numpy as np
import pytest

from benchmarks import library_fusions as lf


def test_own_loops_leave_no_library_fusion_and_both_sides_equal_numpy():
  with jax.enable_x64(True):
    fn, args = lf.exp_sum(np.float64)
    r = lf.compare(fn, args, pairs=1)
    x = np.asarray(args[0])
    want = np.sum(np.exp(x), axis=-1)
    lib = np.asarray(jax.jit(fn)(*args))
    own = np.asarray(jax.jit(fn, compiler_options=lf.OWN_LOOPS)(*args))
  # XLA's default hands the reduction to the library; the option keeps it in XLA's loops
  # (a renamed option would fail the compile, a no-op option would leave True here)
  assert r["library_fusion"] == [True, False]
  # float64 sums of 16,384 terms in [e^-5·…, 1]: any summation order is within 1e-13 relative
  np.testing.assert_allclose(lib, want, rtol=1e-13)
  np.testing.assert_allclose(own, want, rtol=1e-13)
  assert r["diff"] <= 1e-13
  assert r["library_ms"] > 0 and r["own_ms"] > 0 and r["ratio_min"] <= r["ratio"] <= r["ratio_max"]


def test_max_rel_diff_on_both_sides():
  a = [np.array([1.0, 2.0, np.inf]), np.array([4.0])]
  assert lf._max_rel_diff(a, [np.array([1.0, 2.0, np.inf]), np.array([4.0])]) == 0.0
  got = lf._max_rel_diff(a, [np.array([1.0, 2.2, np.inf]), np.array([4.0])])
  assert got == pytest.approx(0.1)  # relative to the library's value, not the other's
  assert lf._max_rel_diff(a, [np.array([1.0, 2.0, 5.0]), np.array([4.0])]) == math.inf
  assert lf._max_rel_diff([np.array([np.nan])], [np.array([np.nan])]) == 0.0


def test_g_difference_is_in_delta_alpha_units():
  eps = np.asarray(lf.EPSILONS)  # (E,) = 1e-3, 0.1, 10
  a = np.zeros((2, 3, eps.size))
  b = a.copy()
  b[1, 2, 0] = 1e-11  # g at rounding level for ε = 1e-3: 1e-14 in ‖Δα‖ units
  assert lf._g_diff([a], [b]) == pytest.approx(1e-14)
  b[0, 0, 2] = 1e-3  # 1e-2 in ‖Δα‖ units for ε = 10
  assert lf._g_diff([a], [b]) == pytest.approx(1e-2)


def test_bad_flags_are_one_line():
  with pytest.raises(SystemExit, match="kernels from exp_sum_f32"):
    lf.main(["--kernels=screen,nope"])
  with pytest.raises(SystemExit, match="pairs and fd_rows >= 1"):
    lf.main(["--pairs=0", "--kernels=exp_sum_f32"])


def test_layer_kernels_run_on_the_embedded_model_and_agree():
  """The screen, g(T, ε) and the causal check on a layer of the embedded model: each compiled
  both ways, with a library fusion only under XLA's defaults, and the two outputs within their
  rounding (float32 exps for the screen; float64 for g, in ‖Δα‖ units, and the check)."""
  with jax.enable_x64(True):  # not the process's setting: later tests in this worker keep theirs
    out = lf.run("tiny", 64, 1, pairs=1, fd_rows=16, kernels=("screen", "g", "check"))
  assert not jax.config.jax_enable_x64
  for name, r in out.items():
    assert r["library_fusion"] == [True, False], name
  assert out["screen"]["diff"] <= 1e-5  # float32 sums of ≤ 64 terms, then float64
  assert out["g"]["diff"] <= 1e-13
  assert out["check"]["diff"] <= 1e-12
