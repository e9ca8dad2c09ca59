"""g(T, ε) (Algorithm 5, ``sensitivity.fd_rows``) with its random normals drawn into a buffer
first (one draw per call, then g by a ``lax.map`` over chunks; several calls per span group
when the buffer would pass ``NORMALS_BYTES``) gives the same bits as the path before (the draw
inside g's loop, ``gradient_rows.g_rows`` per chunk), and its directions are
``jacobians.random_directions``'s."""

import functools
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from limits import jacobians, normalizers
from limits.gradient import rows as gradient_rows
from limits.gradient import sensitivity

TS, EPS = np.array([1e-3, 0.05, 1.0, 30.0]), np.array([1e-3, 0.1, 10.0])


@functools.lru_cache(maxsize=None)
def _previous_group_fn(norm_fn, width, chunk):
  """The g loop of 2e7262d: the directions drawn inside each chunk by ``g_rows``."""

  def fn(rows, mask, idx, pos, keys, T, eps):
    keys = keys[pos]

    def one(args):
      ix, kb = args
      return gradient_rows.g_rows(norm_fn, rows[ix, :width].astype(jnp.float64),
                                  mask[ix, :width], T, eps, kb)

    g = lax.map(one, (idx.reshape(-1, chunk), keys.reshape((-1, chunk) + keys.shape[1:])))
    return g.reshape((-1,) + g.shape[2:])

  return jax.jit(fn)


def _previous(norm_fn, l, m, key, block_elems=1 << 18):
  """``sensitivity.fd_rows`` of 2e7262d (one call per span group)."""
  rows, mask = jax.device_put((l, m))
  S, K, E = l.shape[0], TS.size, EPS.size
  out = np.zeros((S, K, E))
  keys = jax.random.split(key, S)
  for pos, w in sensitivity.span_groups(m, step=sensitivity.FD_SPAN_STEP):
    chunk = max(1, block_elems // (w * K * (E + 1)))
    p = np.concatenate([pos, np.full((-pos.size) % chunk, pos[0], pos.dtype)])
    g = _previous_group_fn(norm_fn, w, chunk)(rows, mask, p, p, keys, TS, EPS)
    out[pos] = np.asarray(g)[:pos.size]
  return out


def _ours(norm_fn, l, m, key, block_elems=1 << 18):
  rows, mask = jax.device_put((l, m))
  return sensitivity.fd_rows(norm_fn, rows, mask, m, np.arange(l.shape[0]), TS, EPS, key,
                             dtype=np.float64, block_elems=block_elems)


def _rows(seed=3, L=400, n=70):
  """Causal rows at spread positions (spans across several multiples of 128), N(0, 4²)."""
  rng = np.random.default_rng(seed)
  last = np.sort(np.concatenate([rng.integers(0, L, n - 2), [0, L - 1]]))
  l = (rng.normal(size=(n, L)) * 4).astype(np.float32)
  return l, np.arange(L)[None] <= last[:, None]


CASES = ((1 << 26, 1 << 18), (20_000, 1 << 12), (1, 1 << 14))  # (NORMALS_BYTES, block_elems)


def _softmax_case(normals_bytes, block_elems):
  """(ours, previous, jitted calls, span groups) on causal rows, NORMALS_BYTES set."""
  l, m = _rows()
  key = jax.random.key(11)
  want = _previous(normalizers.get("softmax"), l, m, key, block_elems)
  real_bytes, real_fn = sensitivity.NORMALS_BYTES, sensitivity._fd_group_fn
  calls = []

  def counted(*a):
    f = real_fn(*a)
    return lambda *x: (calls.append(a[1]), f(*x))[1]

  sensitivity.NORMALS_BYTES, sensitivity._fd_group_fn = normals_bytes, counted
  try:
    got = _ours(normalizers.get("softmax"), l, m, key, block_elems)
  finally:
    sensitivity.NORMALS_BYTES, sensitivity._fd_group_fn = real_bytes, real_fn
  return got, want, len(calls), len(sensitivity.span_groups(m, step=sensitivity.FD_SPAN_STEP))


def _bitwise_checks():
  """Every bit-for-bit claim of this file; run under XLA's default flags, the real runs'
  (:func:`test_bit_for_bit_under_xla_defaults`)."""
  with jax.enable_x64(True):
    for nb, be in CASES:  # one call per span group (64 MB) and several (the last padded)
      got, want, n_calls, n_groups = _softmax_case(nb, be)
      assert np.isfinite(want).all() and (want > 0).any()
      np.testing.assert_array_equal(got, want, err_msg=f"NORMALS_BYTES={nb} block={be}")
      assert (n_calls == n_groups) if nb == 1 << 26 else (n_calls > n_groups), (nb, n_calls)
    # the generic path (a normalizer other than plain softmax: ssmax)
    l, m = _rows(n=20)
    norm, key = normalizers.get("ssmax", s=1.0), jax.random.key(4)
    np.testing.assert_array_equal(_ours(norm, l, m, key), _previous(norm, l, m, key))
    # it can fail: a one-ulp change of one logit changes its row and no other; a new key
    # changes every row with two visible keys or more
    key = jax.random.key(11)
    want = _previous(normalizers.get("softmax"), l, m, key)
    l2 = l.copy()
    l2[7, 0] = np.nextafter(l2[7, 0], np.float32(np.inf))
    got = _ours(normalizers.get("softmax"), l2, m, key)
    assert not np.array_equal(got[7], want[7])
    np.testing.assert_array_equal(np.delete(got, 7, 0), np.delete(want, 7, 0))
    other = _ours(normalizers.get("softmax"), l, m, jax.random.key(12))
    moving = (want > 0).any(axis=(1, 2))  # every row but the one-key row (g = 0 for any v)
    assert moving.sum() == want.shape[0] - 1
    assert not np.any(np.all(other == want, axis=(1, 2))[moving])


@pytest.mark.slow
def test_bit_for_bit_under_xla_defaults():
  """:func:`_bitwise_checks` in a subprocess with XLA's default flags (those of real runs;
  tests/conftest.py compiles at LLVM -O0 with the older fusion emitters, under which the two
  paths differ in the last bit of a few values: 11 of 840 at 4e-17 absolute, block 2¹²).
  In ``-m slow``: compiling every case at XLA's default optimisation took 60 s of the default
  run (the slowest test there, 2026-12-06); the default run keeps the in-process comparison
  (:func:`test_fd_rows_equals_the_previous_path`)."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["LIMITS_TEST_XLA_DEFAULT"] = "1"
  r = subprocess.run([sys.executable, "-c", "import tests.test_gradient_fd_normals as t; "
                      "t._bitwise_checks(); print('bitwise ok')"],
                     cwd=pathlib.Path(__file__).resolve().parents[1], env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0 and "bitwise ok" in r.stdout, r.stderr[-3000:]


@pytest.mark.parametrize("normals_bytes,block_elems", CASES)
def test_fd_rows_equals_the_previous_path(normals_bytes, block_elems):
  """Under the tests' XLA flags: equal to float64 rounding (≤ 1e-13 relative), and the
  buffer of normals really splits a span group into several calls when it is small."""
  with jax.enable_x64(True):
    got, want, n_calls, n_groups = _softmax_case(normals_bytes, block_elems)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert (n_calls == n_groups) if normals_bytes == 1 << 26 else (n_calls > n_groups)


def test_row_normals_give_random_directions():
  """row_normals + unit_directions are ``jacobians.random_directions(split(k, E)[e], (L,),
  mask)`` bit for bit, float64 and float32, a row with nothing visible giving 0."""
  for dtype in (np.float32, np.float64):
    with jax.enable_x64(dtype == np.float64):
      keys = jax.random.split(jax.random.key(2), 3)
      m = np.arange(50)[None] <= np.array([[10], [49], [-1]])
      got = np.asarray(jacobians.unit_directions(gradient_rows.row_normals(keys, 3, 50, dtype),
                                                 m[:, None, :]))
      for r in range(3):
        for e, ke in enumerate(jax.random.split(keys[r], 3)):
          want = np.asarray(jacobians.random_directions(ke, (50,), m[r], dtype))
          np.testing.assert_array_equal(got[r, e], want)
      assert got.dtype == dtype and not got[2].any() and got[0, :, 11:].sum() == 0
