"""benchmarks.host_ops: each case's two sides give the same array (the benchmark checks it before
timing); a side that changed its answer fails here, not silently in a timing someone reads."""

import numpy as np
import pytest

from benchmarks import host_ops


def test_cases_agree_on_a_small_layer():
  cases = host_ops.cases(L=64, heads=2, k=9)
  assert set(cases) == {"mask", "top", "select", "order"}


def test_packed_top_is_lax_top_k_order_with_ties():
  """Ties go to the lower index, value descending, −inf last: the order of lax.top_k."""
  key = np.array([[0.5, 0.25, 0.5, -np.inf, 0.25, 1.0]], np.float32)
  np.testing.assert_array_equal(host_ops.top_packed(key, 4), [[5, 0, 2, 1]])


def test_a_mask_that_changes_the_answer_is_caught(monkeypatch):
  monkeypatch.setattr(host_ops, "mask_copyto", lambda s, vis: np.zeros(s.shape, np.float32))
  with pytest.raises(AssertionError):
    host_ops.cases(L=32, heads=2, k=5)


def test_select_case_compares_whole_layers():
  """The ``select`` case runs both sides over every causal block (the first with rows that see
  fewer than k keys) and checks them equal; a side that drops the tie repair is caught."""
  cases = host_ops.cases(L=64, heads=2, k=20)
  ref, ours = cases["select"]
  assert len(ref()) == len(ours()) == 4
  import limits.distance.host_select as host_select
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(host_select, "top_k_ordered",   # ties to the higher index
               lambda s, k: np.lexsort((-np.arange(s.shape[-1]) + 0 * s, -s.astype(np.int64)),
                                       axis=-1)[:, :k].astype(np.int32))
    with pytest.raises(AssertionError):
      host_ops.cases(L=64, heads=2, k=20)
