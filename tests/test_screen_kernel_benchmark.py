"""benchmarks.screen_kernel: its count of the screen's elements whose float32 exp is normal
(the work a kernel skipping underflowing keys could save, quoted in WORKSPACE) against a plain
per-entry loop, on rows with ties at the top, empty rows and spans of every length."""

import numpy as np

from benchmarks import screen_kernel


def _rows(R=40, L=48, seed=2):
  rng = np.random.default_rng(seed)
  rows = (rng.normal(size=(R, L)) * 30).astype(np.float32)
  ends = rng.integers(0, L + 1, size=R)                       # visible span: keys < end
  mask = np.arange(L)[None, :] < ends[:, None]
  mask[5] = False                                             # nothing visible
  rows[6, :3] = rows[6, :3].max()                             # a tie at the top: one arg-max
  mask[6, :3] = True
  return rows, mask


def _loop(rows, mask, temperatures):
  out = np.zeros(len(temperatures), np.int64)
  for r in range(rows.shape[0]):
    vis = np.flatnonzero(mask[r])
    if vis.size == 0:
      continue
    top = vis[np.argmax(rows[r, vis])]                        # the first arg-max
    for j in vis:
      if j == top:
        continue
      d = np.float32(rows[r, j] - rows[r, top])
      for k, t in enumerate(temperatures):
        out[k] += float(np.float32(d * np.float32(1 / t))) >= screen_kernel.LOG_FLT_MIN
  return out


def test_normal_exp_counts_equal_a_plain_loop():
  rows, mask = _rows()
  temps = [0.05, 0.3, 1.0, 7.0]
  grps = screen_kernel.groups(mask)
  got = screen_kernel.normal_exp_counts(rows, mask, grps, temps)
  want = _loop(rows, mask, temps)
  np.testing.assert_array_equal(got, want)
  assert 0 < want[0] < want[-1]       # the band moves with T: both sides of the threshold
  # every row in exactly one group, every visible key inside its group's span
  seen = np.sort(np.concatenate([idx for idx, _ in grps]))
  np.testing.assert_array_equal(seen, np.arange(rows.shape[0]))
  assert all(not mask[idx, w:].any() for idx, w in grps)
  assert screen_kernel.elements(grps, len(temps)) >= mask.sum() * len(temps)
