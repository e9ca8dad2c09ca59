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


def _device_top(w, vis, n_max, ns):
  """top_k_rows + ranks_from_top as the kernels call them: selection masks per N."""
  import jax.numpy as jnp

  C = w.shape[-1]
  k = min(n_max + 1, C)
  idx = selection.top_k_rows(jnp.asarray(w), jnp.asarray(vis), k, jnp.asarray(ns))
  rank = np.asarray(selection.ranks_from_top(idx, C))
  return {n: vis & (rank < n) for n in ns}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_top_k_matches_a_python_sort_on_tied_rows(dtype):
  """lax.top_k on the device (float32 keys) under the one tie rule, causal rows full of ties,
  float32 and float64 weights (exactly representable in float32: the model records' case)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    L = 20
    w = np.tril(tied_rows(rng, L, L)).astype(dtype)
    vis = np.tri(L, dtype=bool)
    ns = [1, 2, 3, 5, 8, 11]
    got = _device_top(w, vis, max(ns), ns)
    for n in ns:
      for q in range(L):
        np.testing.assert_array_equal(got[n][q], python_top_n(w[q], n, vis[q]),
                                      err_msg=f"n={n} q={q}")


def test_device_top_k_rechecks_float32_ties_in_float64():
  """Weights that differ in float64 but round to the same float32 value, at the N-th place:
  the float32 top-k alone would keep the lower index (wrong); the float64 recheck must pick
  the larger weight. A row whose float32 values are distinct needs no recheck and is right."""
  with jax.enable_x64(True):
    L = 8
    w = np.full((2, L), 0.01)
    w[0, 2], w[0, 5] = 0.1, 0.1 + 1e-12       # float32 tie, float64 order: key 5 first
    w[1, 2], w[1, 5] = 0.1, 0.2
    assert np.float32(w[0, 2]) == np.float32(w[0, 5])
    vis = np.ones((2, L), bool)
    for ns in ([1], [1, 2, 3]):
      got = _device_top(w, vis, max(ns), ns)
      for n in ns:
        for q in range(2):
          np.testing.assert_array_equal(got[n][q], python_top_n(w[q], n, vis[q]),
                                        err_msg=f"n={n} row={q}")
    # The float32 order alone selects key 2 at N = 1 in row 0: the case the recheck exists for.
    import jax.numpy as jnp
    _, idx32 = jax.lax.top_k(jnp.asarray(w[0], jnp.float32), 1)
    assert int(idx32[0]) == 2


def test_device_selection_equals_float64_on_the_embedded_model():
  """Every causal row of every layer of the embedded model at L = 256: the device top-k
  selection (float32 keys, float64 recheck) selects exactly the float64 I_N of a stable NumPy
  sort for every N of Algorithms 1, 2 and 4."""
  from limits import models
  from limits.records import sources

  model = sources.load_model("tiny")
  rng = np.random.default_rng(0)
  tok = rng.integers(0, model.config.vocab_size, size=(1, 256)).astype(np.int32)
  ns = [1, 2, 4, 5, 8, 10, 16, 20, 32, 64, 100, 128]
  with jax.enable_x64(True):
    L = tok.shape[1]
    vis = np.tri(L, dtype=bool)
    for _, rec in models.iter_layers(model.params, tok, model.config):
      w = np.asarray(rec.weights[0], np.float64)               # (H, L, L) as the steps cast
      for h in range(w.shape[0]):
        got = _device_top(w[h], vis, max(ns), ns)
        order = np.argsort(np.where(vis, -w[h], np.inf), axis=-1, kind="stable")
        rank = np.argsort(order, axis=-1, kind="stable")
        for n in ns:
          np.testing.assert_array_equal(got[n], vis & (rank < n), err_msg=f"h={h} n={n}")


# Mutants of tools/mutation_run.py's "selection" group the tests above let through
# (docs/mutation_survivors.md).

def test_top_n_mask_selects_every_visible_key_when_n_exceeds_the_row():
  """N >= L (and N > L): every visible key, none masked (the N-th-largest index is clipped to
  the row, not read past its end)."""
  rng = np.random.default_rng(5)
  L = 6
  alpha = tied_rows(rng, 4, L)
  mask = rng.random((4, L)) < 0.6
  mask[:, 0] = True
  for n in (L - 1, L, L + 1, L + 3):
    got = np.asarray(selection.top_n_mask(alpha, n, mask))
    for r in range(4):
      np.testing.assert_array_equal(got[r], python_top_n(alpha[r], n, mask[r]),
                                    err_msg=f"n={n} row={r}")
    if n >= L:
      np.testing.assert_array_equal(got, mask)


def test_top_n_mask_on_a_batch_of_row_blocks():
  """(B, R, L) weights: the tie count runs along the key axis of each row, not across rows."""
  rng = np.random.default_rng(6)
  B, R, L = 2, 5, 7
  alpha = tied_rows(rng, B * R, L).reshape(B, R, L)
  mask = rng.random((B, R, L)) < 0.8
  for n in range(1, L + 1):
    got = np.asarray(selection.top_n_mask(alpha, n, mask))
    for b in range(B):
      for r in range(R):
        np.testing.assert_array_equal(got[b, r], python_top_n(alpha[b, r], n, mask[b, r]),
                                      err_msg=f"n={n} b={b} r={r}")


def test_device_top_k_rechecks_the_boundary_of_n_not_of_k():
  """k = 5 > N + 1 = 3: the float32 tie sits at the N = 2 boundary (keys 1 and 2 round to the
  same float32; in float64 key 2 is larger) while the values at the k-th place are distinct.
  The recheck must look at the N-th | (N+1)-th values: I_2 = {0, 2}, not float32's {0, 1}."""
  with jax.enable_x64(True):
    w = np.array([[0.5, 0.3, 0.3 + 1e-12, 0.1, 0.05, 0.01]])
    assert np.float32(w[0, 1]) == np.float32(w[0, 2])
    vis = np.ones_like(w, bool)
    import jax.numpy as jnp

    idx = selection.top_k_rows(jnp.asarray(w), jnp.asarray(vis), 5, jnp.asarray([2]))
    rank = np.asarray(selection.ranks_from_top(idx, w.shape[-1]))
    np.testing.assert_array_equal(rank[0] < 2, python_top_n(w[0], 2, vis[0]))
    assert sorted(np.nonzero(rank[0] < 2)[0].tolist()) == [0, 2]


# Survivors of the full mutation run of limits/selection.py (tenth session, 426 mutants;
# docs/mutation_survivors.md lists the equivalent ones).

def python_window(L, W):
  """Reference visibility: query q sees key i iff i <= q and (W == 0 or i > q - W)."""
  return np.array([[i <= q and (W == 0 or i > q - W) for i in range(L)] for q in range(L)])


def test_visible_window_is_the_causal_band():
  """visible_window(L) is the causal triangle (default W = 0), visible_window(L, W) the band of
  the last W keys (every `np.tri(L, k=-W)` variant: sign, operator, dtype, argument)."""
  for L in (1, 5, 9):
    np.testing.assert_array_equal(selection.visible_window(L), python_window(L, 0))
    for W in (1, 2, 4, L, L + 3):
      got = selection.visible_window(L, W)
      assert got.dtype == bool
      np.testing.assert_array_equal(got, python_window(L, W), err_msg=f"L={L} W={W}")


@pytest.mark.parametrize("window", [0, 3, 5])
def test_windowed_thresholds_on_4d_records_match_a_python_sort(window):
  """thresholds / thresholds_from_sorted(sort_rows(...)) on (B, H, L, L) weights with H != L
  (`w.shape[-1]` -> `[+1]` reads H), a sliding window W (the `window` argument passed through
  every call), N up to and beyond L (the −inf padding of the (N+1)-th value; `n < L` ->
  `n <= L` reads past the row) and every row, also those with t <= N visible keys (all
  selected). cut is int32 as documented."""
  rng = np.random.default_rng(11)
  B, H, L = 1, 2, 7
  w = tied_rows(rng, B * H * L, L).reshape(B, H, L, L)
  ns = [1, 2, 3, L - 1, L, L + 2]
  th = selection.thresholds(w, ns, window)
  th_sorted = selection.thresholds_from_sorted(w, selection.sort_rows(w, window), ns, window)
  np.testing.assert_array_equal(th.thr, th_sorted.thr)
  np.testing.assert_array_equal(th.cut, th_sorted.cut)
  assert th.thr.shape == th.cut.shape == (B, H, L, len(ns)) and th.cut.dtype == np.int32
  vis = python_window(L, window)
  kpos = np.arange(L)
  for h in range(H):
    for k, n in enumerate(ns):
      got = np.asarray(selection.select_thresholds(w[0, h], th.thr[0, h, :, k],
                                                   th.cut[0, h, :, k], vis, kpos))
      for q in range(L):
        np.testing.assert_array_equal(got[q], python_top_n(w[0, h, q], n, vis[q]),
                                      err_msg=f"W={window} h={h} n={n} q={q}")


def test_top_n_mask_keeps_the_smallest_key_when_n_covers_the_row():
  """Distinct weights, every key visible: N = L and N > L select all L keys (the N-th place is
  clipped to L − 1, not L − 2, which would drop the smallest key)."""
  alpha = np.array([[0.4, 0.1, 0.3, 0.2], [0.05, 0.6, 0.15, 0.2]])
  for n in (3, 4, 6):
    got = np.asarray(selection.top_n_mask(alpha, n))
    for r in range(2):
      np.testing.assert_array_equal(got[r], python_top_n(alpha[r], n, [True] * 4))


def test_top_n_rank_cap_error_and_int32_ranks():
  """top_n_rank: an n_cap outside [1, L] is named in one line; the ranks are int32 as
  documented, also with x64 on (`jnp.full(..., dtype=jnp.int32)` without the dtype is int64)."""
  a = np.array([0.1, 0.4, 0.2, 0.3, 0.0])
  for bad in (0, 6):
    with pytest.raises(selection.LimitsError, match=rf"^top-N cap n_cap={bad} must be in "
                                                     r"\[1, L=5\]$"):
      selection.top_n_rank(a, bad)
  with jax.enable_x64(True):
    rank, idx, ok = selection.top_n_rank(a, 3)
    assert rank.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(rank), [3, 0, 2, 1, 3])
    assert np.asarray(ok).all() and np.asarray(idx).tolist() == [1, 3, 2]


@pytest.mark.parametrize("ns, rows", [([1, 2], [0, 1]), ([2], [0, 2]), ([1, 2], [3, 1])])
def test_device_top_k_rechecks_each_row_at_k_equal_to_max_n_plus_one(ns, rows):
  """top_k_rows as the kernels call it (k = max N + 1): a float32 tie (float64: the later key is
  larger) at the N = 1 place (row 1) or at the N = 2 place (row 2), next to a row with distinct
  values (row 0, large; row 3, small); any row flagged sends the whole block to the float64
  sort, so each block holds one tied row. The check must compare each row's own N-th and
  (N+1)-th values: reading them from the first row only (`take(..., axis=None)`, above or
  below), at the 2nd | 3rd place for N = 1 (`clip(ns, 2, ...)`) or at the (k−2)-th place for
  N = k − 1 (`clip(..., k - 2)`) keeps float32's lower index."""
  with jax.enable_x64(True):
    w = np.array([[0.9, 0.8, 0.05, 0.01, 0.02],
                  [0.3, 0.3 + 1e-12, 0.1, 0.05, 0.01],
                  [0.5, 0.3, 0.3 + 1e-12, 0.1, 0.01],
                  [0.02, 0.01, 0.005, 0.002, 0.001]])[rows]
    assert np.float32(w[1, 0]) == np.float32(w[1, 1]) or np.float32(w[1, 1]) == np.float32(
        w[1, 2])
    vis = np.ones_like(w, bool)
    got = _device_top(w, vis, max(ns), ns)
    for n in ns:
      for q in range(2):
        np.testing.assert_array_equal(got[n][q], python_top_n(w[q], n, vis[q]),
                                      err_msg=f"n={n} row={rows[q]}")


def test_device_top_k_float64_fallback_keeps_ties_in_index_order():
  """The float64 fallback of top_k_rows on long rows (C = 64) full of exact float64 ties, each
  row made inexact in float32 by one key (0.05 + 1e-12) so that the float32 tie at the N-th
  place sends the block to the float64 sort, which must select the lower indices first
  (`lax.sort(..., is_stable=False)` reorders equal keys at this length on XLA CPU: red);
  the ranks are int32 with x64 on (ranks_from_top's `jnp.full(..., jnp.int32)` without the
  dtype is int64)."""
  import jax.numpy as jnp

  with jax.enable_x64(True):
    rng = np.random.default_rng(12)
    C = 64
    w = rng.choice(np.array([0.1, 0.2, 0.3]), size=(3, C))
    w[:, 7] = 0.05 + 1e-12
    vis = np.ones_like(w, bool)
    ns = [5, 9]
    got = _device_top(w, vis, max(ns), ns)
    for n in ns:
      for q in range(3):
        np.testing.assert_array_equal(got[n][q], python_top_n(w[q], n, vis[q]),
                                      err_msg=f"n={n} row={q}")
    idx = selection.top_k_rows(jnp.asarray(w), jnp.asarray(vis), 10, jnp.asarray(ns))
    assert selection.ranks_from_top(idx, C).dtype == jnp.int32


def test_device_top_k_runs_the_float64_fallback_only_where_its_docstring_says(monkeypatch):
  """top_k_rows recomputes a float64 block by a full sort only where a float32 tie straddles
  the N-th place of a row that is not exact in float32 and has more than N visible keys (its
  docstring: "the rare path costs nothing otherwise"). The fallback's runs are counted by a
  ``jax.debug.callback`` in ``lax.sort`` (only the fallback sorts; a ``lax.cond`` branch runs
  its callback only when taken). No fallback for (a) a float32-exact row with a tie at N,
  (b) an inexact row with a float32 gap at N, (c) an inexact row with <= N visible keys, (d)
  N = C; one for (e) an inexact float32 tie at N; the indices always equal a Python sort.
  Kills the mutants that only make the check fail more often (or never), which no
  selection result can show."""
  import jax.numpy as jnp
  from jax import lax

  runs = []
  real_sort = lax.sort

  def counting_sort(*args, **kwargs):
    jax.debug.callback(lambda: runs.append(1))
    return real_sort(*args, **kwargs)

  monkeypatch.setattr(lax, "sort", counting_sort)
  t = 1e-12  # below float32's resolution at 0.1–0.4: makes a row inexact in float32
  cases = {  # name: (weights, visible, k, N, fallback runs)
      "a exact row, tie at N": ([0.5, 0.25, 0.25, 0.0], [1, 1, 1, 1], 3, 2, 0),
      "b inexact, gap at N": ([0.1 + t, 0.4, 0.2, 0.05], [1, 1, 1, 1], 3, 2, 0),
      "c inexact, <= N visible": ([0.2 + t, 0.2, 0.3, 0.1], [1, 1, 0, 0], 4, 3, 0),
      "d inexact, N = C": ([0.2 + t, 0.2, 0.3, 0.2], [1, 1, 1, 1], 4, 4, 0),
      "e inexact tie at N": ([0.3, 0.2, 0.2 + t, 0.1], [1, 1, 1, 1], 3, 2, 1),
  }
  with jax.enable_x64(True):
    for name, (w, vis, k, n, want) in cases.items():
      w, vis = np.array([w]), np.array([vis], bool)
      runs.clear()
      idx = selection.top_k_rows(jnp.asarray(w), jnp.asarray(vis), k, jnp.asarray([n]))
      jax.effects_barrier()
      assert len(runs) == want, name
      order = sorted((i for i in range(w.shape[1]) if vis[0, i]), key=lambda i: (-w[0, i], i))
      assert np.asarray(idx)[0, :min(n, len(order))].tolist() == order[:n], name
