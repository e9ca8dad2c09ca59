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


def _compacted_loop(rows, mask, grps, temperatures, K, block_elems):
  comp = full = 0
  for idx, w in grps:
    chunk = max(1, block_elems // (K * w))
    for t in temperatures:
      for a in range(0, idx.size, chunk):
        counts = []
        for r in idx[a:a + chunk]:
          vis = np.flatnonzero(mask[r])
          n = 0
          if vis.size:
            top = vis[np.argmax(rows[r, vis])]
            for j in vis:
              d = np.float32(rows[r, j] - rows[r, top])
              n += j != top and float(np.float32(d * np.float32(1 / t))) >= -150 * np.log(2)
          counts.append(n)
        comp += len(counts) * max(screen_kernel.MIN_KEYS, max(counts))
        full += len(counts) * w
  return comp, full


def test_compacted_elements_equal_a_plain_loop():
  """The low-T compaction count (WORKSPACE's twenty-ninth section) against a per-entry loop,
  with chunks of several rows, a row with nothing visible and the padding to 8 keys."""
  rows, mask = _rows(R=60, L=40)
  temps = [0.02, 0.4, 5.0]
  grps = screen_kernel.groups(mask)
  got = screen_kernel.compacted_elements(rows, mask, grps, temps, K=3, block_elems=3 * 40 * 5)
  want = _compacted_loop(rows, mask, grps, temps, 3, 3 * 40 * 5)
  assert got == want
  low = screen_kernel.compacted_elements(rows, mask, grps, temps[:1], 3, 3 * 40 * 5)[0]
  high = screen_kernel.compacted_elements(rows, mask, grps, temps[2:], 3, 3 * 40 * 5)[0]
  assert low < high  # fewer keys survive at the lower T: both sides of the threshold


def test_compacted_elements_count_keys_down_to_the_float32_zero():
  """exp(x) rounds to a non-zero float32 for x >= -150·ln 2 = -103.97 (half the smallest
  subnormal, e^-103.28): keys at d = -103.5 count, at -104.5 they do not."""
  row = np.array([[0.0] + [-103.5] * 10 + [-104.5] * 9], np.float32)
  mask = np.ones(row.shape, bool)
  grps = [(np.array([0]), row.shape[1])]
  assert screen_kernel.compacted_elements(row, mask, grps, [1.0], 1, 1 << 18) == (10, 20)
