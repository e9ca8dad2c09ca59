"""The fast per-layer path of Theorem 1 (limits.distance.layer_stats: rows sorted once,
thresholds per N, matrix products) against the per-row path (head_stats, itself checked against
a NumPy loop in test_distance.py), including ties at the N-th place (lower index first) and
tied zero weights; and float32 vs float64 on the embedded model (Algorithm 3's decisions)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import distance, selection


def _causal_weights(rng, B, H, L, sharp=2.0):
  logits = rng.normal(size=(B, H, L, L)) * sharp
  logits = np.where(np.tri(L, dtype=bool), logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  return w / w.sum(-1, keepdims=True)


def _assert_same(ref, new, rtol):
  for name in distance.HeadStats._fields:
    r, n = np.asarray(getattr(ref, name)), np.asarray(getattr(new, name))
    if r.dtype.kind in "iub":
      np.testing.assert_array_equal(n, r, err_msg=name)
    else:
      np.testing.assert_allclose(n, r, rtol=rtol, atol=1e-300, err_msg=name)


@pytest.mark.parametrize("shared_x, blocks", [(False, 4), (True, None)])
def test_layer_stats_equals_row_path_with_ties(shared_x, blocks):
  """float64, tolerance 1e-12 relative: both are Gram-identity sums of the same terms in a
  different order (differences ~1e-16 measured). With 4 causal query blocks and with the
  default for L = 33 (one block): the values do not depend on the partition."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    B, H, L, d = 2, 3, 33, 5
    w = _causal_weights(rng, B, H, L)
    w[0, 0, 20, 3:8] = w[0, 0, 20, 2]      # a tie straddling N = 3 and N = 5
    w[1, 2, 30, :12] = 0.0                  # tied zeros: the N-th place falls among them
    w[1, 2, 30] /= w[1, 2, 30].sum()
    w[0, 1, 10, :11] = 1.0 / 11             # a uniform row: every N is a tie
    x = rng.normal(size=(B, L, d) if shared_x else (B, H, L, d))
    ns = [1, 3, 5, 7, 25]
    ref = distance.head_stats(jnp.asarray(w), jnp.asarray(x), jnp.array(ns), n_cap=25)
    assert distance.default_blocks(L) == 1
    new = distance.layer_stats(w, x, ns, blocks=blocks)
    _assert_same(ref, new, rtol=1e-12)


@pytest.mark.parametrize("direct_k, L", [(0, 33), (10**6, 34)])
def test_d1_direct_and_prefix_paths_equal_the_row_path(monkeypatch, direct_k, L):
  """Both sides of kernels.D1_DIRECT_K (d_1 from the selected keys' distance rows,
  farthest.d1_sq_top, or from the per-key prefix maxima): every HeadStats field equals the
  per-row reference (head_stats: d_1 from its own gather) to 1e-12 relative (float64; d_1 is
  a maximum of the same Gram-identity entries, the sums differ in order), with ties at the
  N-th place and a uniform row. The path taken is counted while tracing (two lengths: two
  traces, so the patched threshold is read)."""
  from limits.distance import farthest
  from limits.distance import kernels as df

  calls = {"top": 0, "prefix": 0}
  top, prefix = farthest.d1_sq_top, farthest.prefix_maxima
  monkeypatch.setattr(farthest, "d1_sq_top",
                      lambda *a, **k: calls.__setitem__("top", calls["top"] + 1) or top(*a, **k))
  monkeypatch.setattr(farthest, "prefix_maxima", lambda *a, **k: calls.__setitem__(
      "prefix", calls["prefix"] + 1) or prefix(*a, **k))
  monkeypatch.setattr(df, "D1_DIRECT_K", direct_k)
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    B, H, d = 1, 3, 5
    w = _causal_weights(rng, B, H, L)
    w[0, 0, 20, 3:8] = w[0, 0, 20, 2]      # a tie straddling N = 3 and N = 5
    w[0, 1, 10, :11] = 1.0 / 11             # a uniform row: every N is a tie
    x = rng.normal(size=(B, H, L, d))
    ns = [1, 3]
    ref = distance.head_stats(jnp.asarray(w), jnp.asarray(x), jnp.array(ns), n_cap=3)
    new = distance.layer_stats(w, x, ns, blocks=2)
  _assert_same(ref, new, rtol=1e-12)
  assert np.asarray(new.dmax_sum).min() > 0  # the bound was computed
  assert (calls["top"] > 0) == (direct_k > 0) and (calls["prefix"] > 0) == (direct_k == 0)


def test_thresholds_follow_top_k_rule():
  rng = np.random.default_rng(1)
  L = 12
  w = _causal_weights(rng, 1, 1, L)[0, 0]
  w[9, [1, 4, 6, 8]] = w[9, 0]               # five keys tied with key 0
  th = selection.thresholds(w, [2, 4])
  for q in range(L):
    for k, n in enumerate([2, 4]):
      if q + 1 <= n:
        continue
      sel = (w[q] > th.thr[q, k]) | ((w[q] == th.thr[q, k]) & (np.arange(L) <= th.cut[q, k]))
      sel &= np.arange(L) <= q
      order = sorted(range(q + 1), key=lambda i: (-w[q, i], i))  # lax.top_k's tie rule
      assert set(np.nonzero(sel)[0]) == set(order[:n]), (q, n)


def test_float32_and_float64_agree_on_embedded_model():
  """Algorithm 3 on the embedded model (L = 127, 1 window; one causal block, the 4-block
  partition is checked above): float32 (the KS default) and float64 give the same critical N
  and KS decisions; head-mean d̃ and E agree to 1e-4 relative (float32 Gram sums over 127
  terms: ~1e-6 measured) and p-values to 1e-6 absolute."""
  from limits.records import sources

  model = sources.load_model("tiny")
  text = ("Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. "
          "But I warn you, if you don't tell me that this means war, if you still try to defend "
          "the infamies and horrors perpetrated by that Antichrist, I really believe he is "
          "Antichrist. ") * 10
  tok = np.asarray(model.tokenizer.encode(text)[:127], np.int32)[None]
  with jax.enable_x64(True):
    res = {}
    for dt in (np.float32, np.float64):
      ev = distance.ModelEvaluator(model.params, model.config, dtype=dt, ks_dtype=dt)
      ns = [1, 2, 4, 8, 16, 32, 64, 100]
      st = ev.head_stats(tok, ns, bound=False)
      p = ev.ks_pvalues(tok, ns)
      c = ev.critical_n(tok, 126, alpha=0.01)
      res[dt] = (distance.token_means(st), p, c)
  m32, p32, c32 = res[np.float32]
  m64, p64, c64 = res[np.float64]
  for key in ("d_sum", "expected"):
    np.testing.assert_allclose(m32[key], m64[key], rtol=1e-4)
  np.testing.assert_allclose(p32, p64, atol=1e-6)
  assert [p > 0.01 for p in p32] == [p > 0.01 for p in p64]
  assert c32.n == c64.n and c32.evaluated.keys() == c64.evaluated.keys()


def test_d1_from_prefix_maxima_equals_the_gather_with_and_without_fallback():
  """d_1² from the per-key prefix maxima (exact check, gather fallback) equals the gather of
  every row, float64 bitwise; rows are built so that for some the farthest visible pair lies
  inside I_N (the prefix maximum alone would be too large there: checked, so the fallback is
  exercised) and for others it does not."""
  from limits.distance import farthest
  from limits import selection

  with jax.enable_x64(True):
    rng = np.random.default_rng(5)
    L, d, n = 40, 3, 4
    x = rng.normal(size=(L, d))
    x[0], x[1] = 20.0, -20.0                  # the farthest pair: keys 0 and 1
    w = _causal_weights(rng, 1, 1, L)[0, 0]
    w[::2, :2] = 5.0                          # even rows select keys 0 and 1 first
    w = np.tril(w)
    w /= w.sum(-1, keepdims=True)
    xj = jnp.asarray(x)
    n2 = jnp.sum(xj * xj, -1)
    dist2 = n2[:, None] + n2[None, :] - 2.0 * (xj @ xj.T)
    vis = jnp.asarray(np.tri(L, dtype=bool))
    idx = selection.top_k_rows(jnp.asarray(w), vis, n + 1, jnp.asarray([n]))
    sel = vis & (selection.ranks_from_top(idx, L) < n)
    rest = vis & ~sel
    P, I = farthest.prefix_maxima(dist2)
    got = np.asarray(farthest.d1_sq_prefix(sel, rest, dist2, idx, P, I))
    want = np.asarray(farthest.d1_sq_gather(sel, rest, dist2, cap=n, row_block=8))
    np.testing.assert_array_equal(got, want)
    upper = np.asarray(jnp.max(jnp.where(sel, P, -jnp.inf), axis=-1))
    rows = np.arange(n, L)                    # rows with a non-selected key
    assert (upper[rows] > want[rows]).any()   # fallback rows exist
    assert (upper[rows] == want[rows]).any()  # and rows decided by the prefix maxima


def test_prefix_maxima_against_a_numpy_loop_with_ties():
  """prefix_maxima (a scan over the columns): P[q, j] = max_{i <= q} dist2[j, i] and I[q, j]
  the FIRST i attaining it, against a plain loop, bitwise, on an integer matrix full of ties
  (a `>=` in the scan would return the last tied index; a row-wise scan the transpose's
  maxima: the matrix is not symmetric, so both would fail)."""
  from limits.distance import farthest

  rng = np.random.default_rng(11)
  C = 23
  d = rng.integers(0, 4, size=(C, C)).astype(np.float64)  # many ties, not symmetric
  P, I = (np.asarray(v) for v in farthest.prefix_maxima(jnp.asarray(d)))
  for q in range(C):
    for j in range(C):
      row = d[j, :q + 1]
      assert P[q, j] == row.max() and I[q, j] == int(np.argmax(row)), (q, j)


@pytest.mark.parametrize("blocks", [1, 4])
def test_printed_expectations_folded_into_layer_stats(blocks):
  """layer_stats_printed: the printed E (both x̄ readings) and E with p = N/L from the layer
  kernel equal limits.distance.printed.layer_expectation_means (the reference, full L² per head) to
  1e-12 relative (float64, same terms summed in another order), and its HeadStats equal the
  host-threshold path's bitwise (selection on the device vs on the host, d_1 from prefix
  maxima vs the gather), with ties at the N-th place; except d_max (sum form) to 1e-14
  relative: the device path sums the spread Σ_{i∉I_N}|ᾱ_N − α_i| in closed form
  (ᾱ_N·|rest| − (m − ᾱ_N), weights >= 0), the host path term by term (1 ulp measured)."""
  from limits.distance import kernels as df
  from limits.distance import printed

  with jax.enable_x64(True):
    rng = np.random.default_rng(7)
    B, H, L, d = 1, 2, 140, 4
    w = _causal_weights(rng, B, H, L)
    w[0, 0, 100, 3:40] = w[0, 0, 100, 2]
    x = rng.normal(size=(B, H, L, d))
    ns = [1, 5, 10, 20, 100]
    st, means = df.layer_stats_printed(w, x, ns, blocks=blocks)
    ref = printed.layer_expectation_means(w[0], x[0], ns)
    for key in df.PRINTED:
      np.testing.assert_allclose(means[key][0], ref[key], rtol=1e-12, err_msg=key)
    host = df.layer_stats(w, x, ns, sorted_rows=selection.sort_rows(w), blocks=blocks)
    for name in st._fields:
      if name in ("dmax_sum", "max_ratio_sum"):
        np.testing.assert_allclose(getattr(st, name), getattr(host, name), rtol=1e-14,
                                   err_msg=name)
      else:
        np.testing.assert_array_equal(getattr(st, name), getattr(host, name), err_msg=name)


def test_layer_kernels_make_no_implicit_host_transfer():
  """The per-layer statistics of Algorithms 1, 2 (limits.distance.kernels.layer_kernel, printed E
  included) and 4 (limits.separability.model.layer_sums, per-head and shared vectors) run under
  jax.transfer_guard("disallow"): inputs placed explicitly, results fetched explicitly, no
  implicit transfer inside. The same calls with a NumPy input are refused (the guard works)."""
  from limits.distance import kernels as df
  from limits.separability import model as sm

  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    H, L, d = 2, 24, 3
    w = _causal_weights(rng, 1, H, L)[0]
    x = rng.normal(size=(H, L, d))
    wj, xj = jax.device_put(w), jax.device_put(x)
    ns1, ns2 = jax.device_put(np.array([5], np.int32)), jax.device_put(np.array([1, 5, 10],
                                                                                np.int32))
    one = jax.device_put(np.float64(1.0))
    for ns in (ns1, ns2):  # compile outside the guard
      df.layer_kernel(wj, xj, ns, kmax=10, printed=True, blocks=1)
    sm.layer_sums(wj, xj, [1, 2, 4, 8], one)
    shared = jax.device_put(x[0])  # (L, d) for every head: the residual-stream reading
    sm.layer_sums(wj, shared, [1, 2, 4, 8], one)
    with jax.transfer_guard("disallow"):
      for ns in (ns1, ns2):  # Algorithms 1 and 2
        st, extra = jax.device_get(df.layer_kernel(wj, xj, ns, kmax=10, printed=True,
                                                   blocks=1))
        assert np.isfinite(extra).all() and st.count.shape == (H, ns.shape[0])
      sums = jax.device_get(sm.layer_sums(wj, xj, [1, 2, 4, 8], one))  # Algorithm 4
      assert sums.shape == (H, 4, len(sm.LAYER_FIELDS))
      sums = jax.device_get(sm.layer_sums(wj, shared, [1, 2, 4, 8], one))
      assert sums.shape == (H, 4, len(sm.LAYER_FIELDS))
      with pytest.raises(Exception, match="[Dd]isallowed"):
        df.layer_kernel(w, xj, ns1, kmax=10, printed=True, blocks=1)


def test_top_k_size_buckets_and_does_not_change_values():
  """The device path's static k is a power-of-two bucket (Algorithm 3's scan compiles a few
  kernels, not one per batch of N); a larger k gives the same bits as k = max N (float64,
  ties straddling the N-th place)."""
  from limits.distance.kernels import layer_kernel, top_k_size

  assert [top_k_size(n, 256) for n in (1, 8, 9, 16, 17, 128)] == [8, 8, 16, 16, 32, 128]
  assert top_k_size(100, 64) == 64 and top_k_size(3, 4) == 4
  with jax.enable_x64(True):
    rng = np.random.default_rng(5)
    w = _causal_weights(rng, 1, 2, 40)
    w[0, 0, 30, 4:9] = w[0, 0, 30, 3]  # a tie across N = 3 and 5
    x = rng.normal(size=(1, 2, 40, 3))
    ns = jnp.array([3, 5, 9], jnp.int32)
    args = (jnp.asarray(w[0]), jnp.asarray(x[0]), ns)
    exact, _ = layer_kernel(*args, kmax=9, printed=False)
    bucket, _ = layer_kernel(*args, kmax=top_k_size(9, 40), printed=False)
    assert top_k_size(9, 40) == 16
    for f in distance.HeadStats._fields:
      np.testing.assert_array_equal(np.asarray(getattr(bucket, f)),
                                    np.asarray(getattr(exact, f)), err_msg=f)


def test_spread_closed_form_only_for_nonnegative_weights():
  """The device path's d_max spread Σ_{i∉I_N}|ᾱ_N − α_i| is ᾱ_N·|rest| − (m − ᾱ_N) when every
  visible weight is >= 0 (ᾱ_N >= each non-selected weight), else the pass term by term. Both
  sides against the row path (head_stats, 1e-12 relative, float64): non-negative rows, and
  rows of negative weights (ᾱ_N < α_i for some non-selected i: the closed form would be wrong,
  by more than 1e-3 relative here)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(11)
    B, H, L, d = 1, 2, 30, 4
    pos = _causal_weights(rng, B, H, L)
    x = rng.normal(size=(B, H, L, d))
    ns = [2, 5]
    neg = -pos
    neg[0, 0, L - 1] = -(1.0 + 0.01 * rng.random(L)) / L  # near-equal negative weights
    for w in (pos, neg):
      ref = distance.head_stats(jnp.asarray(w), jnp.asarray(x), jnp.array(ns), n_cap=5)
      new = distance.layer_stats(w, x, ns, blocks=1)
      _assert_same(ref, new, rtol=1e-12)
    # the closed form on the negative rows differs from the pass (the guard matters)
    a = neg[0, 0, L - 1]
    order = sorted(range(L), key=lambda i: (-a[i], i))
    sel, rest = order[:2], order[2:]
    ab = a[sel].sum()
    closed = ab * len(rest) - (a.sum() - ab)
    direct = np.abs(ab - a[rest]).sum()
    assert abs(closed - direct) > 1e-3 * direct


def test_lean_leaves_only_the_gap_out():
  """layer_stats(lean=True) (Algorithm 3's search: KS of d̃ vs E) gives the same d̃, E and
  counts bitwise, the Jensen gap 0; without lean the gap is positive."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(12)
    w = _causal_weights(rng, 1, 2, 40)
    x = rng.normal(size=(1, 2, 40, 4))
    ns = [3, 30, 37]
    srt = selection.sort_rows(w)
    full = distance.layer_stats(w, x, ns, bound=False, sorted_rows=srt)
    lean = distance.layer_stats(w, x, ns, bound=False, sorted_rows=srt, lean=True)
    for name in full._fields:
      if name != "gap":
        np.testing.assert_array_equal(getattr(lean, name), getattr(full, name), err_msg=name)
    assert (np.asarray(lean.gap) == 0).all() and (np.asarray(full.gap) > 0).all()


@pytest.mark.parametrize("ns, blocks", [([5], 1), ([1, 5, 10, 20, 100], 4)])
def test_a_reading_shared_by_the_heads_is_prepared_once_with_the_same_values(monkeypatch, ns,
                                                                             blocks):
  """x (1, L, d) shared by every head (the residual stream): the device kernel gets it as
  (L, d) and computes ‖x‖², the distance matrix, its prefix maxima and x's prefix sums once;
  the statistics equal those of the same vectors given per head (1, H, L, d), float64, to
  1e-13 relative (the same operations; XLA may order a product's sums differently outside
  the per-head loop; 0 measured). The kernel is checked to receive the (L, d) form."""
  from limits.distance import kernels as df

  seen = []
  real = df.layer_kernel
  monkeypatch.setattr(df, "layer_kernel",
                      lambda w, x, *a, **k: seen.append(x.shape) or real(w, x, *a, **k))
  with jax.enable_x64(True):
    rng = np.random.default_rng(11)
    B, H, L, d = 1, 3, 140, 20
    w = _causal_weights(rng, B, H, L)
    w[0, 1, 90, 4:30] = w[0, 1, 90, 3]  # ties at the N-th place
    x = rng.normal(size=(B, L, d))
    st_shared, m_shared = df.layer_stats_printed(w, x, ns, blocks=blocks)
    st_heads, m_heads = df.layer_stats_printed(
        w, np.ascontiguousarray(np.broadcast_to(x[:, None], (B, H, L, d))), ns, blocks=blocks)
  assert seen == [(L, d), (B * H, L, d)]
  _assert_same(st_heads, st_shared, rtol=1e-13)
  for key in df.PRINTED:
    np.testing.assert_allclose(m_shared[key], m_heads[key], rtol=1e-13, err_msg=key)
