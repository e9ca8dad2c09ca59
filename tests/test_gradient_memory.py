"""The gradient step's memory: the model's rows one (window, layer) block at a time.

At SmolLM2 paper settings the rows are R = 4 windows · 30 layers · 9 heads · 1,024 queries
= 1.1M rows of L = 1,024 (4.5 GB float32); an (R, L) mask (1.1 GB), a device copy of the
matrix or a float64 copy (9 GB) took the step to 12.3 GB. These tests bound the largest NumPy
allocation (tracemalloc) and the largest host-to-device transfer of a run on the embedded
model, and check that the blocks give the same numbers, bit for bit, as one (R, L) array.
"""

from __future__ import annotations

import tracemalloc

import jax
import numpy as np
import pytest

from limits.gradient import blocks as gradient_blocks
from limits.gradient import screen as gradient_screen
from limits.gradient import task as gradient
from limits.records import sources

L, WINDOWS = 256, 4  # the embedded model: 4 layers x 4 heads -> R = 16,384 rows of 256


@pytest.fixture(scope="module")
def model():
  return sources.load_model("tiny")


def _peak(fn):
  """(fn(), peak bytes traced by tracemalloc above the start: NumPy's buffers included)."""
  tracemalloc.start()
  try:
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    out = fn()
    return out, tracemalloc.get_traced_memory()[1] - base
  finally:
    tracemalloc.stop()


def _config(length, windows, temperatures="2"):
  return gradient.GradientConfig(source="model", model="tiny", length=length, windows=windows,
                                 temperatures=temperatures, rows=4, check_rows=1, fd_rows=1,
                                 x64=True)


def _run(config):
  return gradient.run(gradient.plan(config), log=lambda msg: None)


def test_model_run_reads_blocks_not_the_matrix(model, tmp_path, monkeypatch):
  """A streamed model run (rows re-read from the records store every pass) never builds the
  (R, L) matrix (``model_logit_rows`` is not called), every block it reads is one
  (window, layer): H·L rows, and its largest transfer to the device is below R·L bytes, the
  size of the (R, L) bool mask (the float32 rows are 4·R·L). Bound checked on both sides:
  the whole mask would be above it (and is: its bytes are R·L)."""
  monkeypatch.setenv("LIMITS_RECORDS_DIR", str(tmp_path / "records"))
  monkeypatch.setattr(gradient_blocks, "MEMORY_BYTES", 0)  # stream, never keep
  length, windows = 256, 2  # R·L = 2 MB; a Newton call is <= 2^18 (row, key) pairs, 1.3 MB
  H = model.config.n_head
  R = windows * model.config.n_layer * H * length
  monkeypatch.setattr(sources, "model_logit_rows", lambda *a, **k: pytest.fail("whole matrix"))
  seen = []
  real_iter = sources.iter_logit_blocks

  def iter_blocks(*a, **k):
    for start, block, vis in real_iter(*a, **k):
      seen.append((start, block.shape))
      yield start, block, vis

  monkeypatch.setattr(sources, "iter_logit_blocks", iter_blocks)
  puts = []
  real_put = jax.device_put

  def put(x, *a, **k):
    puts.append(sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(x)
                    if isinstance(leaf, np.ndarray)))
    return real_put(x, *a, **k)

  monkeypatch.setattr(jax, "device_put", put)
  with jax.enable_x64(True):
    result = _run(_config(length, windows))
  assert result.results["n_rows"] == R and result.summaries[0]["all_rows"] == R
  n_blocks = windows * model.config.n_layer
  assert {shape for _, shape in seen} == {(H * length, length)}
  assert len(seen) >= 2 * n_blocks  # the gather pass, then the screen's bracket pass
  assert sorted({s for s, _ in seen}) == list(range(0, R, H * length))
  assert 0 < max(puts) < R * length <= np.zeros((R, length), bool).nbytes


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_rows(model, tmp_path, monkeypatch):
  """The largest NumPy allocation of a streamed run (tracemalloc: NumPy's buffers are traced)
  with 4 windows is within R₁·L/2 bytes of the run with 1 window (ΔR = 3·R₁ more rows): a
  per-row state of < 1/6 byte per logit. An (R, L) bool mask adds L bytes per row (6× the
  allowance), the float32 rows 4L, a float64 copy 8L. Each run once before it is measured,
  so compilation is not measured. ~80 s on 2 busy cores."""
  monkeypatch.setenv("LIMITS_RECORDS_DIR", str(tmp_path / "records"))
  monkeypatch.setattr(gradient_blocks, "MEMORY_BYTES", 0)
  length = 128
  R1 = model.config.n_layer * model.config.n_head * length
  peaks = {}
  with jax.enable_x64(True):
    for windows in (1, 4):
      _run(_config(length, windows))
      result, peaks[windows] = _peak(lambda: _run(_config(length, windows)))
      assert result.results["n_rows"] == windows * R1
  grow = peaks[4] - peaks[1]
  assert grow < R1 * length // 2, f"peak grew by {grow} B from 1 to 4 windows: {peaks}"
  (rows, mask, _), whole = _peak(lambda: sources.model_logit_rows(model, length, 4))
  assert whole - 0 >= 3 * R1 * length * 5 > R1 * length // 2  # what the old path added


def test_blocks_give_the_numbers_of_one_array(model, tmp_path, monkeypatch):
  """Screen.stats over the streamed (window, layer) blocks equals Screen.stats over the
  whole (R, L) rows and mask of ``model_logit_rows``, bit for bit, with small chunks (many
  Newton calls per span group, so pairs cross blocks and calls); the gathered rows equal
  the matrix's."""
  monkeypatch.setenv("LIMITS_RECORDS_DIR", str(tmp_path / "records"))
  length = 128
  rows, mask, _ = sources.model_logit_rows(model, length, 2)
  tokens = sources.corpus_windows(model, length, 2)
  Ts = np.array([0.02, 0.3, 1.0, 5.0])
  with jax.enable_x64(True):
    want = gradient_screen.Screen(rows, mask, np.float64, 1e-14, block_elems=4096).stats(Ts)
    with gradient_blocks.RowBlocks.from_model(model, tokens, memory_bytes=0) as blk:
      got = gradient_screen.Screen(blk, None, np.float64, 1e-14, block_elems=4096).stats(Ts)
      idx = np.array([0, 5, 700, rows.shape[0] - 1])
      big, ((r, m),) = blk.gather(idx)
  assert want["newton"].sum() > 3 * (4096 // length) * 8  # more than one call per group
  assert set(got) == set(want)
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  np.testing.assert_array_equal(r, rows[idx])
  np.testing.assert_array_equal(m, mask[idx])
  assert big == np.abs(np.where(mask, rows, 0)).max()
