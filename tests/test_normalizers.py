"""limits.normalizers against independent references: the ``entmax`` PyTorch package, optax's
simplex projection, scipy's softmax, NumPy re-derivations, and the exact sort-based forms."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import entmax as entmax_ref
import optax

from limits import normalizers as N
from limits.errors import LimitsError

# float64 references are exact up to rounding: 1e-12 absolute on weights in [0, 1] leaves room
# for the sort/cumsum (sparsemax, entmax15) and the 64-step bisection (entmax: bracket 2^-64).
TOL64 = 1e-12


_JIT = {}


def jit(f, **static):
  """jax.jit(f) with keyword parameters bound, cached: one compile per function and shape
  instead of one per primitive (eager mode), which keeps this file fast."""
  key = (f, tuple(sorted(static.items())))
  if key not in _JIT:
    _JIT[key] = jax.jit(functools.partial(f, **static))
  return _JIT[key]


def _rows(seed, shape, scale=2.0):
  return np.random.default_rng(seed).normal(size=shape) * scale


def _torch(x):
  return torch.tensor(np.asarray(x), dtype=torch.float64)


def _ragged_mask(shape, seed):
  """Rows with a random number (0..L) of visible keys at random positions."""
  rng = np.random.default_rng(seed)
  m = np.zeros(shape, bool)
  for i in range(shape[0]):
    k = rng.integers(0, shape[1] + 1)
    m[i, rng.choice(shape[1], k, replace=False)] = True
  return m


def _per_row_reference(ref, x, m):
  """Apply a reference normalizer to the visible entries of each row only."""
  out = np.zeros_like(x)
  for i in range(x.shape[0]):
    if m[i].any():
      out[i, m[i]] = ref(x[i, m[i]][None])[0]
  return out


# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize("shape", [(6, 7), (3, 33)])
def test_sparsemax_matches_entmax_package_and_optax(shape):
  with jax.enable_x64(True):
    x = _rows(0, shape)
    got = np.asarray(jit(N.sparsemax)(x))
    ref_torch = entmax_ref.sparsemax(_torch(x), dim=-1).numpy()
    ref_optax = np.asarray(jax.vmap(optax.projections.projection_simplex)(jnp.asarray(x)))
    np.testing.assert_allclose(got, ref_torch, atol=TOL64)
    np.testing.assert_allclose(got, ref_optax, atol=TOL64)


@pytest.mark.parametrize("alpha", [1.25, 1.5, 2.0, 3.0])
def test_entmax_bisection_matches_entmax_package(alpha):
  with jax.enable_x64(True):
    x = _rows(1, (6, 9))
    got = np.asarray(jit(N.entmax, alpha=alpha)(x))
    ref = entmax_ref.entmax_bisect(_torch(x), alpha=alpha, dim=-1, n_iter=200).numpy()
    np.testing.assert_allclose(got, ref, atol=TOL64)


def test_entmax_exact_forms_agree():
  with jax.enable_x64(True):
    x = _rows(2, (8, 11), scale=3.0)
    e15 = np.asarray(jit(N.entmax15_exact)(x))
    np.testing.assert_allclose(e15, entmax_ref.entmax15(_torch(x), dim=-1).numpy(), atol=TOL64)
    np.testing.assert_allclose(np.asarray(jit(N.entmax, alpha=1.5)(x)), e15, atol=TOL64)
    np.testing.assert_allclose(np.asarray(jit(N.entmax, alpha=2.0)(x)), np.asarray(jit(N.sparsemax)(x)),
                               atol=TOL64)


def test_entmax_near_one_approaches_softmax():
  # entmax_α → softmax as α → 1; at α = 1.001 the weights differ by O(α − 1) (observed ~1e-3 on
  # unit-scale logits), so 1e-2 is loose enough yet fails for α = 1.5 (differences ~0.1).
  with jax.enable_x64(True):
    x = _rows(3, (4, 6), scale=1.0)
    np.testing.assert_allclose(np.asarray(jit(N.entmax, alpha=1.001)(x)), scipy.special.softmax(x, -1),
                               atol=1e-2)
    assert np.abs(np.asarray(jit(N.entmax, alpha=1.5)(x)) - scipy.special.softmax(x, -1)).max() > 5e-2


@pytest.mark.parametrize("T", [1e-2, 0.7, 8.0])
def test_softmax_with_temperature_matches_scipy_and_general(T):
  with jax.enable_x64(True):
    x = _rows(4, (5, 10), scale=3.0)
    ref = scipy.special.softmax(x / T, axis=-1)
    np.testing.assert_allclose(np.asarray(jit(N.softmax)(x, T)), ref, atol=TOL64)
    # Eq. 3 with F = exp(l/T) after a row shift (F is positive and L-independent).
    shift = x.max(-1, keepdims=True)
    got = np.asarray(N.general(x - shift, lambda l: jnp.exp(l / T)))
    np.testing.assert_allclose(got, ref, atol=TOL64)


def test_general_with_polynomial_F():
  with jax.enable_x64(True):
    x = _rows(5, (3, 8))
    F = lambda l: 1 + l**2
    ref = (1 + x**2) / (1 + x**2).sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(N.general(x, F)), ref, atol=TOL64)


def test_ssmax_uses_visible_count_not_row_length():
  with jax.enable_x64(True):
    x = _rows(6, (4, 12))
    m = np.zeros((4, 12), bool)
    for i, t in enumerate([1, 3, 7, 12]):
      m[i, :t] = True
    s = 0.8
    got = np.asarray(jit(N.ssmax)(x, s, m))
    for i, t in enumerate([1, 3, 7, 12]):
      ref = scipy.special.softmax(s * np.log(t) * x[i, :t])
      np.testing.assert_allclose(got[i, :t], ref, atol=TOL64)
      np.testing.assert_array_equal(got[i, t:], 0)
      # The same prefix without padding gives the same weights.
      np.testing.assert_allclose(np.asarray(N.ssmax(x[i, :t], s)), ref, atol=TOL64)


def test_sa_softmax_is_z_times_softmax_and_not_a_distribution():
  with jax.enable_x64(True):
    x = _rows(7, (3, 5))
    T = 0.5
    ref = (x / T) * scipy.special.softmax(x / T, axis=-1)
    got = np.asarray(jit(N.sa_softmax)(x, T))
    np.testing.assert_allclose(got, ref, atol=TOL64)
    assert np.abs(got.sum(-1) - 1).max() > 1e-3  # documented: not a probability vector


# ----------------------------------------------------------------------------- masks


@pytest.mark.parametrize("name,ref", [
    ("softmax", lambda z: scipy.special.softmax(z, axis=-1)),
    ("sparsemax", lambda z: entmax_ref.sparsemax(_torch(z), dim=-1).numpy()),
    ("entmax", lambda z: entmax_ref.entmax15(_torch(z), dim=-1).numpy()),
    ("entmax15_exact", lambda z: entmax_ref.entmax15(_torch(z), dim=-1).numpy()),
])
def test_masked_rows_equal_reference_on_visible_subset(name, ref):
  with jax.enable_x64(True):
    x = _rows(8, (10, 9))
    m = _ragged_mask(x.shape, 9)
    got = np.asarray(jax.jit(N.get(name))(x, m))
    np.testing.assert_allclose(got, _per_row_reference(ref, x, m), atol=TOL64)
    assert np.all(got[~m] == 0)


@pytest.mark.parametrize("name", N.NAMES)
def test_fully_masked_row_is_zero_with_zero_gradient(name):
  with jax.enable_x64(True):
    x = _rows(10, (2, 5))
    m = np.array([[False] * 5, [True, True, False, True, False]])
    fn = N.get(name)
    w = jnp.asarray(_rows(11, (2, 5)))
    y, g = jax.jit(lambda l: (fn(l, m), jax.grad(lambda l: jnp.sum(fn(l, m) * w))(l)))(x)
    y, g = np.asarray(y), np.asarray(g)
    np.testing.assert_array_equal(y[0], 0)
    assert np.all(np.isfinite(g))
    np.testing.assert_array_equal(g[0], 0)
    np.testing.assert_array_equal(g[1][~m[1]], 0)


# ----------------------------------------------------------------------------- extremes


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("name", N.NAMES)
def test_no_nan_or_inf_at_extremes(name, dtype):
  with jax.enable_x64(dtype == jnp.float64):
    x = jnp.asarray([[1e4, -1e4, 0.0, 1e4, 3.0],
                     [-1e4, -1e4, -1e4, -1e4, -1e4],
                     [1e4, 1e4 - 1e-3, -1e4, 2.0, -2.0],
                     [0.0, 0.0, 0.0, 0.0, 0.0]], dtype)
    m = jnp.asarray([[True] * 5, [True] * 5, [True, True, True, False, True], [False] * 5])
    params = {"temperature": 1e-4} if name in ("softmax", "sa_softmax") else {}
    fn = N.get(name, **params)
    w = jnp.arange(5.0, dtype=dtype)

    @jax.jit
    def everything(x, scale):  # scale 1e4 = logits / T at T = 1e-4 for parameter-free ones
      y = fn(x * scale, m)
      g = jax.grad(lambda l: jnp.sum(fn(l * scale, m) * w))(x)
      jf = jax.vmap(jax.jacfwd(lambda l, mm: fn(l * scale, mm)))(x, m)
      return y, g, jf

    for scale in (1.0, 1e4):
      chex.assert_tree_all_finite(everything(x, jnp.asarray(scale, dtype)))


# ----------------------------------------------------------------------------- properties

_JITTED = {}


@settings(max_examples=25, deadline=None)
@given(x=hnp.arrays(np.float64, (3, 7), elements=st.floats(-50, 50)),
       name=st.sampled_from(sorted(N.SIMPLEX)))
def test_simplex_normalizers_give_distributions(x, name):
  with jax.enable_x64(True):
    y = np.asarray(_JITTED.setdefault(name, jax.jit(N.get(name)))(x))
    assert np.all(y >= 0)
    np.testing.assert_allclose(y.sum(-1), 1, atol=1e-12)  # renormalised in float64


@pytest.mark.parametrize("name", N.NAMES)
def test_jit_matches_eager(name):
  with jax.enable_x64(True):
    x = _rows(12, (3, 6))
    m = _ragged_mask(x.shape, 13)
    fn = N.get(name)
    chex.assert_trees_all_close(jax.jit(fn)(x, m), fn(x, m), atol=1e-14, rtol=0)


# ----------------------------------------------------------------------------- registry


def test_registry_and_errors():
  assert set(N.NAMES) >= {"softmax", "sparsemax", "entmax", "ssmax"}
  with pytest.raises(LimitsError, match="unknown normalizer"):
    N.get("nope")
  with pytest.raises(LimitsError, match="alpha"):
    N.get("entmax", alpha=1.0)
  with pytest.raises(LimitsError, match="alpha"):
    N.entmax(np.zeros(3), alpha=0.5)
  with pytest.raises(LimitsError, match="temperature"):
    N.get("softmax", temperature=0.0)
  with pytest.raises(LimitsError, match="temperature"):
    N.softmax(np.zeros(3), temperature=-1.0)
  with pytest.raises(LimitsError, match="s="):
    N.ssmax(np.zeros(3), s=0)
  with pytest.raises(LimitsError, match="no parameter"):
    N.get("sparsemax", alpha=2.0)
  # None parameters are ignored so a CLI can pass every flag.
  assert N.get("sparsemax", alpha=None)(np.zeros(2)).shape == (2,)


# ----------------------------------------------------------------------------- bad input edges


@pytest.mark.parametrize("name", N.NAMES)
def test_nan_logit_gives_nan_row_never_a_plausible_one(name):
  # Before: softmax of a row with a NaN returned all zeros (what a fully masked row gives) and
  # sparsemax a row that looked fine. Now the row is NaN (as scipy's softmax makes it), and
  # other rows of the batch are untouched.
  x = np.array([[1.0, np.nan, 0.5, -2.0], [0.3, 0.1, -0.4, 2.0]])
  out = np.asarray(jit(N.get(name))(jnp.asarray(x)))
  assert np.isnan(scipy.special.softmax(x[0])).all()  # the reference propagates NaN too
  assert np.isnan(out[0]).all(), out[0]
  assert np.isfinite(out[1]).all()
  # A NaN in a masked-out position does not matter.
  mask = np.array([True, False, True, True])
  out_m = np.asarray(N.get(name)(jnp.asarray(x[0]), mask))
  ref = np.asarray(N.get(name)(jnp.asarray(x[0, mask])))
  np.testing.assert_allclose(out_m[mask], ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("T", [0.0, -1.0, np.nan])
def test_traced_nonpositive_temperature_gives_nan_not_zeros(T):
  # Under jit the temperature is traced, so it cannot be refused: the rows become NaN (before:
  # T = 0 gave all zeros, T < 0 a reversed but valid-looking distribution).
  out = jax.jit(lambda l, t: N.softmax(l, t))(jnp.array([1.0, 2.0, 3.0]), T)
  assert np.isnan(np.asarray(out)).all(), out
  out = jax.jit(lambda l, t: N.sa_softmax(l, t))(jnp.array([1.0, 2.0, 3.0]), T)
  assert np.isnan(np.asarray(out)).all(), out
  out = jax.jit(lambda l, s: N.ssmax(l, s))(jnp.array([1.0, 2.0, 3.0]), T)
  assert np.isnan(np.asarray(out)).all(), out
  with pytest.raises(LimitsError, match="temperature"):
    N.softmax(jnp.array([1.0, 2.0]), T)  # concrete: refused with one line


@pytest.mark.parametrize("name", N.NAMES)
@pytest.mark.parametrize("logits, mask, needle", [
    (np.float32(1.0), None, "scalar"),
    (np.zeros((0,)), None, "L = 0"),
    (np.zeros((3, 0)), None, "L = 0"),
    (np.zeros((2, 3)), np.ones((4,), bool), "mask of shape (4,)"),
    (np.zeros((2, 3)), np.ones((3, 3), bool), "mask of shape (3, 3)"),
])
def test_bad_shapes_are_one_line_errors(name, logits, mask, needle):
  # Before: raw ValueErrors from broadcast_to / reshape (or an empty result) instead of a
  # message naming the shape.
  with pytest.raises(LimitsError) as e:
    N.get(name)(jnp.asarray(logits), None if mask is None else jnp.asarray(mask))
  assert needle in str(e.value) and "\n" not in str(e.value)


def test_broadcastable_masks_still_work():
  x = _rows(1, (2, 3))
  row_mask = np.array([True, False, True])
  out = np.asarray(N.softmax(jnp.asarray(x), 1.0, jnp.asarray(row_mask)))
  for r in range(2):
    np.testing.assert_allclose(out[r, row_mask], scipy.special.softmax(x[r, row_mask]),
                               rtol=1e-6)


def test_get_is_equal_by_name_and_params_so_compiled_kernels_are_shared():
  """Two ``get`` of the same normalizer are equal with equal hashes (the library's kernels are
  cached by their normalizer: jit static arguments, lru_cache), different parameters are not,
  and an unhashable parameter makes it equal only to itself. The behaviour that needs it: a
  second g(T, ε) call with a fresh ``get`` reuses the first call's compiled program (a fresh
  closure per ``get`` compiled it again: 5 s a call at 1,024 rows × 26 T)."""
  import jax

  from limits.gradient import sensitivity

  a, b = N.get("softmax"), N.get("softmax")
  assert a == b and hash(a) == hash(b) and a is not b
  assert N.get("entmax", alpha=1.5) == N.get("entmax", alpha=1.5)
  assert N.get("entmax", alpha=1.5) != N.get("entmax", alpha=2.0)
  assert N.get("softmax") != N.get("sparsemax")
  t = np.array([1.0, 2.0])
  c, d = N.get("softmax", temperature=t), N.get("softmax", temperature=t)
  assert c == c and c != d
  rows = np.random.default_rng(0).standard_normal((3, 37))  # shapes and s no other test uses
  mask = np.ones(rows.shape, bool)
  with jax.enable_x64(True):  # the rows are float64
    before = sensitivity._fd_group_fn.cache_info()
    g1 = sensitivity.fd_batch(N.get("ssmax", s=0.6180339), rows, mask, [0.5], [0.1],
                              jax.random.key(0))
    mid = sensitivity._fd_group_fn.cache_info()
    g2 = sensitivity.fd_batch(N.get("ssmax", s=0.6180339), rows, mask, [0.5], [0.1],
                              jax.random.key(0))
    after = sensitivity._fd_group_fn.cache_info()
  assert mid.misses > before.misses  # the first call built its program
  assert after.misses == mid.misses and after.hits > mid.hits  # the second reused it
  np.testing.assert_array_equal(g1, g2)
