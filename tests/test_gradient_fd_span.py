"""g(T, ε) (Algorithm 5, ``sensitivity.fd_rows``) with rows cut to a finer span step gives the
same bits as the step the gradient step used before (256), and the step really is finer."""

import jax
import numpy as np

from limits import normalizers
from limits.gradient import sensitivity


def _rows(rng, L=300):
  """Causal rows whose spans straddle every multiple of 64 and 128 up to L (a span equal to a
  multiple, one key more, one less), plus a one-key row and a full row."""
  ends = sorted({0, L - 1} | {m + d for m in range(64, L, 64) for d in (-1, 0, 1) if m + d < L})
  last = np.asarray(ends)
  l = (rng.normal(size=(last.size, L)) * 4).astype(np.float32)
  return l, np.arange(L)[None] <= last[:, None]


def _g(l, m, span_step, block_elems=1 << 18):
  Ts, eps = np.array([1e-3, 0.05, 1.0, 30.0]), np.array([1e-3, 0.1, 10.0])
  rows, mask = jax.device_put((l, m))
  return sensitivity.fd_rows(normalizers.get("softmax"), rows, mask, m, np.arange(l.shape[0]),
                             Ts, eps, jax.random.key(5), dtype=np.float64,
                             block_elems=block_elems, span_step=span_step)


def test_fd_rows_span_step_changes_no_bit():
  """Steps 64 and 128 (and smaller chunks) against 256: bit for bit on causal rows (float64)."""
  with jax.enable_x64(True):
    l, m = _rows(np.random.default_rng(2))
    want = _g(l, m, 256)
    assert np.isfinite(want).all() and (want > 0).any()
    for step, be in ((128, 1 << 18), (64, 1 << 18), (128, 1 << 16)):
      np.testing.assert_array_equal(_g(l, m, step, be), want, err_msg=f"step {step}")


def test_fd_rows_comparison_can_fail():
  """The bit-for-bit comparison above sees a one-ulp change in one logit (so it is not
  comparing a value with itself), and a different key changes every row."""
  with jax.enable_x64(True):
    l, m = _rows(np.random.default_rng(2))
    want = _g(l, m, 256)
    l2 = l.copy()
    l2[5, 3] = np.nextafter(l2[5, 3], np.float32(np.inf))
    got = _g(l2, m, 128)
    assert not np.array_equal(got[5], want[5])
    np.testing.assert_array_equal(np.delete(got, 5, 0), np.delete(want, 5, 0))


def test_fd_span_groups_are_finer_than_the_screens():
  """The default step of fd_rows cuts a causal row at position t to t + 1 rounded up to 128
  (a row of span 129 gets 256 keys, not the screen's 256 for span 257): both sides of 128."""
  assert sensitivity.FD_SPAN_STEP == 128 < sensitivity.SPAN_STEP
  m = np.arange(300)[None] <= np.array([127, 128, 255, 256])[:, None]
  widths = {w: p.tolist() for p, w in sensitivity.span_groups(m, step=sensitivity.FD_SPAN_STEP)}
  assert widths == {128: [0], 256: [1, 2], 300: [3]}
