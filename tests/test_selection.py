"""Top-N selection (limits/selection.py): every path selects the same keys under the one tie
rule (equal weights: the lower index first; masked keys never), checked against a plain Python
sort on rows full of ties. Exact comparisons: selection is discrete."""

import functools

import jax
import numpy as np
import pytest

from limits import selection


def python_top_n(alpha, n, visible):
  """Reference I_N: visible keys sorted by (−weight, index), the first n."""
  order = sorted((i for i in range(len(alpha)) if visible[i]), key=lambda i: (-alpha[i], i))
  sel = np.zeros(len(alpha), bool)
  sel[order[:n]] = True
  return sel


def tied_rows(rng, rows, L):
  """Weights drawn from 4 levels, so most rows have ties at the N-th place."""
  return rng.choice(np.array([0.05, 0.1, 0.2, 0.4]), size=(rows, L))


@pytest.mark.parametrize("L", [7, 16])
def test_row_paths_match_a_python_sort_on_tied_rows(L):
  rng = np.random.default_rng(0)
  alpha = tied_rows(rng, 24, L)
  mask = rng.random((24, L)) < 0.7
  mask[:, 0] = True
  rank_all = np.asarray(selection.ranks(alpha, mask))

  @functools.partial(jax.jit, static_argnums=2)
  def top_n_rank_rows(a, m, n):  # the per-row path, vmapped over the rows
    return jax.vmap(lambda a, m: selection.top_n_rank(a, n, m)[0])(a, m)

  for n in range(1, L + 1):
    mask_sel = np.asarray(selection.top_n_mask(alpha, n, mask))
    rank_n = np.asarray(top_n_rank_rows(alpha, mask, n))
    for r in range(alpha.shape[0]):
      want = python_top_n(alpha[r], n, mask[r])
      np.testing.assert_array_equal(mask_sel[r], want, err_msg=f"top_n_mask n={n} row={r}")
      np.testing.assert_array_equal((rank_all[r] < n) & mask[r], want)
      np.testing.assert_array_equal(rank_n[r] < n, want, err_msg=f"top_n_rank n={n} row={r}")


def test_causal_thresholds_match_a_python_sort_on_tied_rows():
  rng = np.random.default_rng(1)
  L = 12
  w = np.tril(tied_rows(rng, L, L))  # (L, L) causal rows: row q sees keys 0..q
  ns = [1, 2, 3, 5, 8, 11]
  th = selection.thresholds(w[None], ns)  # (1, L, K)
  th_sorted = selection.thresholds_from_sorted(w[None], selection.sort_rows(w[None]), ns)
  np.testing.assert_array_equal(th.thr, th_sorted.thr)
  np.testing.assert_array_equal(th.cut, th_sorted.cut)
  kpos = np.arange(L)
  vis = kpos[None, :] <= np.arange(L)[:, None]
  for k, n in enumerate(ns):
    got = np.asarray(selection.select_thresholds(w, th.thr[0, :, k], th.cut[0, :, k], vis, kpos))
    for q in range(n, L):  # rows with t = q + 1 > N (the ones the statistics count)
      want = python_top_n(w[q], n, vis[q])
      np.testing.assert_array_equal(got[q], want, err_msg=f"n={n} q={q}")
