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


def test_model_run_holds_no_row_matrix(model, tmp_path, monkeypatch):
  """A streamed model run (rows re-read from the records store every pass): its largest
  NumPy allocation and its largest transfer to the device stay below R·L bytes, the size of
  the (R, L) bool mask (the float32 rows are 4·R·L, a float64 copy 8·R·L). The same
  measurement of ``model_logit_rows`` (the whole matrix and mask) is above the bound, so the
  bound can fail."""
  monkeypatch.setenv("LIMITS_RECORDS_DIR", str(tmp_path / "records"))
  monkeypatch.setattr(gradient_blocks, "MEMORY_BYTES", 0)  # stream, never keep
  R = WINDOWS * model.config.n_layer * model.config.n_head * L
  bound = R * L
  config = gradient.GradientConfig(source="model", model="tiny", length=L, windows=WINDOWS,
                                   temperatures="0.05,2", rows=8, check_rows=1, fd_rows=2,
                                   x64=True)
  run = lambda: gradient.run(gradient.plan(config), log=lambda msg: None)
  with jax.enable_x64(True):
    run()  # compiles, and the forward's records reach the store
    puts = []
    real_put = jax.device_put

    def put(x, *a, **k):
      puts.append(sum(np.asarray(leaf).nbytes for leaf in jax.tree_util.tree_leaves(x)
                      if isinstance(leaf, np.ndarray)))
      return real_put(x, *a, **k)

    monkeypatch.setattr(jax, "device_put", put)
    result, peak = _peak(run)
    monkeypatch.setattr(jax, "device_put", real_put)
    assert result.results["n_rows"] == R and result.results["complete"]
    assert result.summaries[0]["all_rows"] == R
    assert peak < bound, f"peak NumPy allocation {peak} B >= R·L = {bound} B"
    assert 0 < max(puts) < bound, f"largest device_put {max(puts)} B >= R·L = {bound} B"
    (rows, mask, _), whole = _peak(lambda: sources.model_logit_rows(model, L, WINDOWS))
    assert rows.shape == (R, L) and whole >= 5 * bound > peak


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
