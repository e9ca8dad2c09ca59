"""The gradient step's one-pass screen (limits.gradient.screen): the bracket against dense
eigvalsh, the decisions against the exact norm of every (row, T), the causal-span g(T, ε)
against the full-length one, and no implicit host transfer in the per-layer statistics."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import bounds, normalizers
from limits.gradient import rows as gradient_rows
from limits.gradient import screen as gradient_screen
from limits.gradient import sensitivity

TS = np.logspace(-3, 2, 26)


def _lambda_max(a):
  """λ_max(diag α − ααᵀ) by numpy eigvalsh (float64), rows (R, L) → (R,); the diagonal written
  α_i·Σ_{j≠i} α_j so a nearly one-hot row keeps its digits (α_i − α_i² cancels)."""
  L = a.shape[-1]
  off = np.einsum("rj,ij->ri", a, 1 - np.eye(L))  # Σ_{j≠i} α_j summed directly
  M = (a * off)[:, :, None] * np.eye(L) - a[:, :, None] * a[:, None, :] * (1 - np.eye(L))
  return np.linalg.eigvalsh(M)[:, -1]


def _top(a):
  """(α₁, α₂, ρ) as the screen defines them: α₂ over the keys other than one arg-max."""
  i1 = a.argmax(-1)
  others = np.arange(a.shape[-1])[None] != i1[:, None]
  ao = np.where(others, a, 0)
  return a.max(-1), ao.max(-1), ao.sum(-1)


def _adversarial_rows(rng, L=24):
  """Logit rows: random at many scales, tied top two / three, near one-hot, two visible keys,
  uniform, a single visible key. Returns (logits (R, L), mask (R, L))."""
  rows, masks = [], []
  full = np.ones(L, bool)
  for s in (0.01, 0.3, 1, 3, 10, 30):
    for _ in range(20):
      rows.append(rng.normal(size=L) * s)
      masks.append(full)
  for gap in (0.0, 1e-9, 1e-3):
    x = rng.normal(size=L)
    x[0] = x[5] = x.max() + 2
    x[5] -= gap
    rows.append(x)
    masks.append(full)
  x = rng.normal(size=L)
  x[1] = x[2] = x[3] = x.max() + 1  # three tied
  rows.append(x)
  masks.append(full)
  for drop in (20, 35, 45):  # nearly one-hot
    x = -drop - rng.uniform(size=L)
    x[0] = 0
    rows.append(x)
    masks.append(full)
  two = np.arange(L) < 2
  for d in (0.0, 0.3, 5.0):
    rows.append(np.r_[0.0, -d, np.zeros(L - 2)])
    masks.append(two)
  rows.append(np.zeros(L))  # uniform
  masks.append(full)
  rows.append(np.zeros(L))  # one visible key
  masks.append(np.arange(L) < 1)
  return np.asarray(rows), np.asarray(masks)


def test_bracket_contains_the_top_eigenvalue():
  """λ₀ ≤ λ_max ≤ λ¹ (float64, 1e-13·max(λ, 1e-300) slack for eigvalsh's own error ~eps·‖M‖)
  on every row × 26 temperatures; exact where the proof says so (two keys, tied top two,
  uniform), which a wrong constant (e.g. Gershgorin without its factor 2) would break."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    l, m = _adversarial_rows(rng)
    for T in TS:
      a = np.asarray(normalizers.softmax(jnp.asarray(l), T, jnp.asarray(m)))
      lam = _lambda_max(a)
      lo, hi = (np.asarray(v) for v in gradient_screen.bracket(*map(jnp.asarray, _top(a))))
      slack = 1e-13 * np.maximum(lam, 1e-17) + 1e-17
      assert np.all(lo <= lam + slack), T
      assert np.all(hi >= lam - slack), T
      assert np.all(lo <= hi + slack)
    a = np.full((1, 7), 1 / 7)  # uniform over n: λ = 1/n = α₁ (Gershgorin 2(1/n)(1 − 1/n) ≥ 1/n)
    lo, hi = gradient_screen.bracket(*map(jnp.asarray, _top(a)))
    assert float(hi[0]) == pytest.approx(1 / 7, rel=1e-15)
    assert _lambda_max(a)[0] == pytest.approx(1 / 7, rel=1e-12)
    for a in (np.array([[0.5, 0.5, 0.0]]), np.array([[0.9, 0.1, 0.0]])):  # two keys: exact
      lo, hi = gradient_screen.bracket(*map(jnp.asarray, _top(a)))
      want = 2 * a[0, 0] * a[0, 1]
      assert float(lo[0]) == pytest.approx(want, rel=1e-14)
      assert float(hi[0]) == pytest.approx(want, rel=1e-14)


def test_float32_bracket_with_margin_brackets_the_float64_eigenvalue():
  """The screen's float32 bracket widened by its stated margin δ = 4(w + 270)·2⁻²⁴ (and 2⁻¹⁰⁰)
  contains the float64 eigvalsh value; without the margin it does not always (the margin is
  needed: float32 rounding alone moves the bracket past λ on the tied and two-key rows)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    l, m = _adversarial_rows(rng)
    T = jnp.asarray(TS)
    lo, hi, _, _ = gradient_screen._screen_chunk(jnp.asarray(l), jnp.asarray(m), T,
                                                 dtype=jnp.float64)
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    d = gradient_screen.margin(l.shape[1])
    bare_misses = 0
    for k, t in enumerate(TS):
      a = np.asarray(normalizers.softmax(jnp.asarray(l), t, jnp.asarray(m)))
      lam = _lambda_max(a)
      slack = 1e-13 * lam + 1e-30
      assert np.all(lo[:, k] * (1 - d) - 2.0 ** -100 <= lam + slack), t
      assert np.all(hi[:, k] * (1 + d) + 2.0 ** -100 >= lam - slack), t
      bare_misses += int(np.sum((lo[:, k] > lam + slack) | (hi[:, k] < lam - slack)))
    assert bare_misses > 0


def test_float32_rows_give_the_bracket_and_range_of_their_float64_cast():
  """A model's float32 rows go into the screen as they are (row facts in float32): the
  bracket, the secular test's inputs and Lemma 2's range r are bit for bit those of the same
  rows cast to float64 first. The rows span 1e-3 to 1e5, so a range r = top − smallest taken
  in float32 would round (red when r is not taken in float64)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    scale = 10.0 ** rng.uniform(-3, 5, (64, 1))
    l32 = (rng.standard_normal((64, 96)) * scale).astype(np.float32)
    m = rng.random((64, 96)) < 0.8
    m[:, 0] = True
    m[5], m[6, 1:] = False, False  # a row with nothing visible, one with a single key
    T = jnp.asarray(TS)
    got = gradient_screen._screen_chunk(jnp.asarray(l32), jnp.asarray(m), T, dtype=jnp.float64)
    want = gradient_screen._screen_chunk(jnp.asarray(l32.astype(np.float64)), jnp.asarray(m),
                                         T, dtype=jnp.float64)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
      assert g.dtype == w.dtype
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    r = np.asarray(got[3][0])
    assert r.dtype == np.float64
    assert np.any(r != r.astype(np.float32))  # r needs float64 here


def _secular(a, b, q, theta, delta):
  with jax.enable_x64(True):
    below, above = gradient_screen.secular_decide(*(jnp.asarray(np.asarray(x, np.float64))
                                                    for x in (a, b, q, theta)), delta)
    return np.asarray(below), np.asarray(above)


def test_secular_test_against_eigvalsh_on_both_sides_of_each_threshold():
  """The secular test (screen.secular_decide) from the screen's own float32 α₁, α₂, q with its
  margin δ: at thresholds θ = λ(1 ± r) around the float64 eigvalsh λ of every adversarial row
  × 26 temperatures it never decides the wrong side (r down to 1e-12, inside η = 1e-9, where
  it must decide nothing), and it decides more than half of the pairs at r = 1e-2 (both
  sides together), where the bracket alone is up to 2× wide."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(5)
    l, m = _adversarial_rows(rng)
    _, _, abq, _ = gradient_screen._screen_chunk(jnp.asarray(l), jnp.asarray(m),
                                                 jnp.asarray(TS), dtype=jnp.float64)
    a, b, q = (np.asarray(x, np.float64) for x in abq)  # (R, K) each
    d = gradient_screen.margin(l.shape[1])
    decided = {1e-2: 0, 1e-12: 0}
    n_pairs = 0
    for k, t in enumerate(TS):
      lam = _lambda_max(np.asarray(normalizers.softmax(jnp.asarray(l), t, jnp.asarray(m))))
      live = lam > 1e-30  # one-hot rows (λ = 0 in float64) have no threshold around them
      n_pairs += int(live.sum())
      for r in (1e-2, 1e-4, 1e-6, 1e-9 * 2, 1e-12):
        below, _ = _secular(a[:, k], b[:, k], q[:, k], lam * (1 + r), d)
        _, above = _secular(a[:, k], b[:, k], q[:, k], lam * (1 - r), d)
        _, wrong_above = _secular(a[:, k], b[:, k], q[:, k], lam * (1 + r), d)
        wrong_below, _ = _secular(a[:, k], b[:, k], q[:, k], lam * (1 - r), d)
        assert not (wrong_above & live).any(), (t, r)
        assert not (wrong_below & live).any(), (t, r)
        if r in decided:
          decided[r] += int((below & live).sum() + (above & live).sum())
    assert decided[1e-12] == 0  # inside η nothing is decided: those pairs go to Newton
    assert decided[1e-2] > n_pairs  # more than half of the pairs, on both sides


def test_secular_test_closed_forms_on_two_and_three_key_rows():
  """Two visible keys (α₁ = p, α₂ = 1 − p, q = α₂²: λ = 2p(1 − p) exactly, both bounds of F
  are F) and tied lower keys (α = (a, c, c, …): ψ = q/(λ − c) exactly): decided on the right
  side 1e-6 from λ with exact inputs, undecided within η; a one-line slip in either bound of
  F (q for α₂², the wrong interval end) decides a wrong side here."""
  for p in (0.6, 0.75, 0.9, 0.99):
    a, b = p, 1 - p
    lam = 2 * p * (1 - p)
    for sign, side in ((1, 0), (-1, 1)):  # θ above λ: below; θ under λ: above
      got = _secular(a, b, b * b, lam * (1 + sign * 1e-6), 1e-15)
      assert got[side] and not got[1 - side], (p, sign)
    assert not any(_secular(a, b, b * b, lam * (1 + 1e-10), 1e-15))
  # α = (0.5, 0.1 × 5): λ solves 0.25/(0.5 − λ) = 1 + 0.05/(λ − 0.1)
  a, c, n = 0.5, 0.1, 5
  w = np.r_[a, np.full(n, c)]
  lam = _lambda_max(w[None])[0]
  q = n * c * c
  assert _secular(a, c, q, lam * (1 + 1e-6), 1e-15)[0]        # F's lower bound is exact here
  assert not _secular(a, c, q, lam * (1 - 1e-6), 1e-15)[0]
  # thresholds outside (α₂, α₁): decided by λ ≤ α₁ and λ ≥ α₂ alone
  assert _secular(a, c, q, 0.6, 1e-15)[0] and _secular(a, c, q, 0.05, 1e-15)[1]
  assert not any(_secular(np.nan, c, q, 0.3, 1e-15))        # NaN inputs decide nothing


def _reference_stats(l, m, Ts, rtol):
  """Every (row, T) by Newton (sensitivity.softmax_norms, the pre-screen path) and Lemma 2's
  bound (bounds.softmax_lemma2_bound): the decisions the screen must reproduce."""
  norms = sensitivity.softmax_norms(l, Ts, m)  # (R, K)
  out = {k: [] for k in ("n_exceed_paper", "n_exceed_tight", "n_exceed_lemma2", "lemma2_finite",
                         "max_norm")}
  for k, T in enumerate(Ts):
    paper = float(bounds.softmax_jacobian_bound(T, "paper"))
    tight = float(bounds.softmax_jacobian_bound(T, "tight"))
    l2 = np.asarray(bounds.softmax_lemma2_bound(jnp.asarray(l), T, jnp.asarray(m)))
    fin = np.isfinite(l2)
    out["n_exceed_paper"].append(int(np.sum(norms[:, k] > paper * (1 + rtol))))
    out["n_exceed_tight"].append(int(np.sum(norms[:, k] > tight * (1 + rtol))))
    out["n_exceed_lemma2"].append(int(np.sum(fin & (norms[:, k] > l2 * (1 + rtol)))))
    out["lemma2_finite"].append(int(fin.sum()))
    out["max_norm"].append(float(norms[:, k].max()))
  return out


def _assert_same_decisions(got, want, n_rows):
  for key in ("n_exceed_paper", "n_exceed_tight", "n_exceed_lemma2", "lemma2_finite"):
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)
  np.testing.assert_allclose(got["max_norm"], want["max_norm"], rtol=1e-14)
  np.testing.assert_array_equal(got["rows"], n_rows)
  np.testing.assert_array_equal(got["nonfinite"], 0)


def test_screen_decisions_equal_all_newton_on_adversarial_and_threshold_rows():
  """Random and adversarial rows plus two-key rows placed 1e-7 relative above and below
  Corollary 3's printed threshold 1/(4T) (λ = 2p(1 − p) = ¼(1 ± 1e-7)): the float32 screen
  cannot tell those apart, so they must reach Newton in float64 and land on both sides."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    l, m = _adversarial_rows(rng)
    T = 1.0
    extra_l, extra_m = [], []
    for sign in (1, -1):
      lam = 0.25 * (1 + sign * 1e-7)
      p = (1 + np.sqrt(1 - 2 * lam)) / 2  # 2p(1 − p) = λ
      extra_l.append(np.r_[np.log(p), np.log(1 - p), np.zeros(l.shape[1] - 2)] * T)
      extra_m.append(np.arange(l.shape[1]) < 2)
    l, m = np.vstack([l, extra_l]), np.vstack([m, extra_m])
    Ts = np.r_[TS, T]
    rtol = 100 * np.finfo(np.float64).eps
    got = gradient_screen.Screen(l, m, np.float64, rtol).stats(Ts)
    want = _reference_stats(l, m, Ts, rtol)
    _assert_same_decisions(got, want, l.shape[0])
    two = sensitivity.softmax_norms(np.asarray(extra_l), [T], np.asarray(extra_m))[:, 0]
    assert two[0] > 0.25 / T * (1 + rtol) > two[1]  # the threshold rows straddle it
    assert got["newton"][-1] >= 2  # and both threshold rows were rechecked
    assert got["newton"].sum() < l.shape[0] * Ts.size  # the bracket decided the rest


def test_newton_from_rows_kept_by_the_bracket_pass_equals_a_second_pass(monkeypatch):
  """The rows pass 1 keeps for Newton (screen.KEEP_BYTES) give the numbers of a second pass
  over the blocks (KEEP_BYTES = 0), number for number, on rows streamed in 3 blocks with
  two-key rows on both sides of 1/(4T) (so Newton has pairs in several blocks); one pass over
  the blocks with the kept rows, two without; both equal to all-Newton's decisions."""
  from limits.gradient.blocks import RowBlocks

  with jax.enable_x64(True):
    rng = np.random.default_rng(6)
    l, m = _adversarial_rows(rng)
    extra = []
    for sign in (1, -1):
      lam = 0.25 * (1 + sign * 1e-7)
      p = (1 + np.sqrt(1 - 2 * lam)) / 2
      extra.append(np.r_[np.log(p), np.log(1 - p), np.zeros(l.shape[1] - 2)])
    l = np.vstack([extra[0], l[:60], extra[1], l[60:], extra])
    m = np.vstack([m[-4:-3], m[:60], m[-4:-3], m[60:], m[-4:-3], m[-4:-3]])
    m[[0, 61, -2, -1]] = np.arange(l.shape[1]) < 2
    cuts = [0, 50, 110, l.shape[0]]
    passes = []

    def blocks():
      passes.append(1)
      return iter([(a, l[a:b], m[a:b]) for a, b in zip(cuts[:-1], cuts[1:])])

    src = RowBlocks(l.shape[0], l.shape[1], l.dtype, blocks)
    rtol = 100 * np.finfo(np.float64).eps
    Ts = np.r_[TS, 1.0]
    kept = gradient_screen.Screen(src, None, np.float64, rtol).stats(Ts)
    assert len(passes) == 1
    monkeypatch.setattr(gradient_screen, "KEEP_BYTES", 0)
    again = gradient_screen.Screen(src, None, np.float64, rtol).stats(Ts)
    assert len(passes) == 3
    for key in kept:
      np.testing.assert_array_equal(kept[key], again[key], err_msg=key)
    assert kept["newton"].sum() >= 4  # Newton ran, on rows of more than one block
    _assert_same_decisions(kept, _reference_stats(l, m, Ts, rtol), l.shape[0])


@pytest.mark.slow  # ~25 s idle (93 s at load 20): the reference is Newton on every pair
def test_screen_decisions_equal_all_float64_on_the_embedded_model():
  """Every (layer, head, query) row of the embedded model at L = 64, 26 temperatures: the
  float32 screen + float64 Newton gives the counts of the all-float64 Newton path, and the
  max T‖J‖ to 1e-14 relative; the screen decides most pairs (the point of it)."""
  from limits.records import sources

  with jax.enable_x64(True):
    model = sources.load_model("tiny")
    rows, mask, _ = sources.model_logit_rows(model, 64, 1)
    rtol = 100 * np.finfo(np.float64).eps
    got = gradient_screen.Screen(rows, mask, np.float64, rtol).stats(TS)
    want = _reference_stats(rows.astype(np.float64), mask, TS, rtol)
    _assert_same_decisions(got, want, rows.shape[0])
    assert sum(want["n_exceed_paper"]) > 0  # the comparison is not vacuous
    assert got["newton"].sum() < 0.2 * rows.shape[0] * TS.size


def test_screen_statistics_make_no_implicit_host_transfer():
  """The per-layer statistics run under jax.transfer_guard("disallow") on device rows."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    l, m = _adversarial_rows(rng)
    rows, mask = jax.device_put(l), jax.device_put(m)
    screen = gradient_screen.Screen(rows, mask, np.float64, 1e-14)
    key = jax.random.key(0)
    with jax.transfer_guard("disallow"):
      got = screen.stats(TS[:8])
      g = sensitivity.fd_rows(normalizers.get("softmax"), rows, mask, m,
                              np.arange(l.shape[0]), TS[:8], [1e-3, 10.0], key,
                              dtype=np.float64)
    assert got["rows"][0] == l.shape[0] and g.shape == (l.shape[0], 8, 2)
    with pytest.raises(Exception, match="[Dd]isallowed"):  # the guard is really on
      with jax.transfer_guard("disallow"):
        jnp.sin(l)


def test_fd_rows_cut_to_span_equal_full_length():
  """g(T, ε) of causal rows cut to their span against gradient_rows.g_rows on the full padded
  rows with the same keys (1e-12 relative, plus 1e-14/ε for α's own rounding)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(4)
    L = 300
    l = rng.normal(size=(6, L)) * 4
    last = np.array([0, 5, 127, 128, 200, 299])
    m = np.arange(L)[None] <= last[:, None]
    Ts, eps = np.array([0.01, 1.0, 30.0]), np.array([1e-3, 0.1, 10.0])
    key = jax.random.key(9)
    got = sensitivity.fd_batch(normalizers.get("softmax"), l, m, Ts, eps, key)
    want = np.asarray(gradient_rows.g_rows(normalizers.get("softmax"), jnp.asarray(l),
                                           jnp.asarray(m), jnp.asarray(Ts), jnp.asarray(eps),
                                           jax.random.split(key, 6)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14 / eps.min())


def test_span_groups_round_the_span_up_to_the_step_or_a_power_of_two():
  """span_groups: last visible key + 1 rounded up to a multiple of ``step`` (at least
  min_width, at most L), or to a power of two; both sides of each boundary (a span equal to a
  multiple stays, one key more moves up), a fully masked row counts as span 1."""
  L = 700
  last = np.array([0, 127, 128, 255, 256, 257, 511, 512, 513, 699])  # last visible key
  m = np.arange(L)[None] <= last[:, None]
  m = np.vstack([m, np.zeros((1, L), bool)])  # and an empty row
  span = np.r_[last + 1, 1]

  def widths(groups):
    w = np.zeros(m.shape[0], int)
    for rows, width in groups:
      w[rows] = width
    return w

  want_step = np.minimum(L, np.maximum(128, -(-span // 256) * 256))
  np.testing.assert_array_equal(widths(sensitivity.span_groups(m, step=256)), want_step)
  np.testing.assert_array_equal(want_step[:10], [256, 256, 256, 256, 512, 512, 512, 700, 700,
                                                 700])  # spans 256 | 257 and 512 | 513
  want_pow2 = np.minimum(L, np.maximum(128, 2 ** np.ceil(np.log2(span)).astype(int)))
  np.testing.assert_array_equal(widths(sensitivity.span_groups(m)), want_pow2)
  assert sorted(w for _, w in sensitivity.span_groups(m, step=256)) == [256, 512, 700]


@pytest.mark.parametrize("L", [1, 7, 8, 9, 63, 700])
def test_last_visible_is_the_last_true_plus_one(L):
  """last_visible (packed bits) against the reversed-argmax rule on random masks of every
  density, with empty rows, rows whose only True is the first or the last key, and L not a
  multiple of 8."""
  rng = np.random.default_rng(L)
  m = np.vstack([rng.random((40, L)) < d for d in (0.02, 0.3, 0.9)])
  m[::9] = False
  first, last = np.zeros((2, L), bool), np.zeros((2, L), bool)
  first[:, 0], last[:, -1] = True, True
  m = np.vstack([m, first, last])
  want = np.where(m.any(-1), L - np.argmax(m[:, ::-1], axis=-1), 0)
  got = sensitivity.last_visible(m)
  np.testing.assert_array_equal(got, want)
  assert got[-1] == L and got[-3] == 1 and got[0] == 0


def test_counterexample_closed_form_and_its_numeric_check():
  with jax.enable_x64(True):
    for T in (1e-3, 0.3, 50.0):
      c = gradient_rows.counterexample(T, float(bounds.softmax_jacobian_bound(T, "paper")),
                                       1 / (2 * T), 1e-14, np.float64)
      assert c["T_norm"] == 0.5 and c["exceeds_paper"] and not c["exceeds_tight"]
      assert c["numeric_check"]["ok"]
      assert c["numeric_check"]["jacfwd_svd_norm"] == pytest.approx(1 / (2 * T), rel=1e-12)


# ----------------------------------------------------------------------------- gradient_rows
# In-process checks of limits/gradient/rows.py (the CLI tests run it in a subprocess, which a
# mutation run cannot see); references: numpy's SVD of (diag α − ααᵀ)/T and closed forms.


def _softmax_jacobian_norms(rows, mask, T):
  out = []
  for l, m in zip(rows, mask):
    z = np.where(m, l / T, -np.inf)
    a = np.exp(z - z.max())
    a /= a.sum()
    out.append(np.linalg.norm((np.diag(a) - np.outer(a, a)) / T, 2))
  return np.array(out)


def _lemma2_closed(rows, mask, T):
  r = np.array([l[m].max() - l[m].min() for l, m in zip(rows, mask)])
  n = mask.sum(-1)
  return (np.exp(r / T) + np.exp(2 * r / T)) / (T * n)


def test_row_norms_range_and_lemma2_against_closed_forms():
  T = 0.7
  rows = np.array([[0.0, 0.0, -9.0, 1.0], [2.0, -1.0, 0.5, 30.0], [0.3, 0.1, -0.2, 0.0]])
  mask = np.array([[True, True, True, False], [True, True, True, False], [True] * 4])
  with jax.enable_x64(True):
    want = _softmax_jacobian_norms(rows, mask, T)
    for how in ("jacfwd", "closed", "secular"):
      got = np.asarray(gradient_rows.row_norms("softmax", {}, jnp.asarray(rows), T,
                                               jnp.asarray(mask), how=how))
      np.testing.assert_allclose(got, want, rtol=1e-10, err_msg=how)
  r, n = gradient_rows.row_range_and_count(rows, mask, chunk=2)   # chunks of 2 rows
  np.testing.assert_allclose(r[:, 0], [9.0, 3.0, 0.5], rtol=1e-15)
  np.testing.assert_array_equal(n[:, 0], [3, 3, 4])
  with np.errstate(over="ignore"):   # max − min of the ±max-float fill of an empty row
    empty = gradient_rows.row_range_and_count(rows[:1], np.zeros((1, 4), bool))
  assert (empty[0][0, 0], empty[1][0, 0]) == (0.0, 1.0)       # no visible key: r = 0, n = 1
  temps = [0.7, 3.0]
  got = gradient_rows.lemma2_all_rows(rows, mask, temps)
  for k, t in enumerate(temps):
    np.testing.assert_allclose(got[:, k], _lemma2_closed(rows, mask, t), rtol=1e-12)


def test_run_temperature_summary_and_rows():
  """One temperature on 3 rows (float64): every number of the summary and of the per-row
  records against numpy (norms), closed forms (bounds: 1/(4T) paper, 1/(2T) tight, Lemma 2)
  and the inputs it only passes on (g statistics, the all-row screen counts)."""
  T = 0.25                      # paper bound min(1, √2) = 1, tight 2
  rows = np.array([[0.0, 0.0, -40.0, -40.0],     # tied top two: norm → 1/(2T) = 2 > paper
                   [1.0, -2.0, 0.5, 0.0],
                   [3.0, 0.1, -0.3, 9.0]])
  mask = np.array([[True] * 4, [True] * 4, [True, True, True, False]])
  eps = [0.1, 1.0]
  fd_idx = np.array([1, 2])
  g_vals = np.array([[3.0, 0.5], [20.0, 1.5]])  # (S, E): 20 > √2/0.1 = 14.1; 1.5 > √2/1
  stats_in = {"n_exceed_lemma2": 0, "lemma2_finite": 3, "nonfinite": 0, "rows": 3,
              "n_exceed_paper": 1, "n_exceed_tight": 0, "max_norm": 2.0, "newton": 2}
  tol = {"exact": {"atol": 1e-12, "rtol": 1e-9}, "matfree": {"atol": 1e-8, "rtol": 1e-6},
         "violation_rtol": 1e-9}
  with jax.enable_x64(True):
    summary, per_row = gradient_rows.run_temperature(
        T, rows, mask, np.arange(3), np.array([0]), eps, "softmax", {}, g_vals=g_vals,
        fd_idx=fd_idx, all_stats=stats_in, dense=True, groups=np.array([0, 1, 1]),
        n_groups=2, dtype_tol=tol)
  norms = _softmax_jacobian_norms(rows, mask, T)
  l2 = _lemma2_closed(rows, mask, T)
  assert norms[0] > 1.0 * (1 + 1e-6) and (norms[1:] < 1.0).all()   # row 0 only over paper
  assert (summary["T"], summary["paper_bound"], summary["tight_bound"]) == (T, 1.0, 2.0)
  assert summary["exact_rows"] == 3 and summary["exact_method"] == "jacfwd+svd"
  assert summary["max_norm"] == pytest.approx(norms.max(), rel=1e-10)
  assert summary["mean_norm"] == pytest.approx(norms.mean(), rel=1e-10)
  assert summary["max_T_norm"] == pytest.approx(T * norms.max(), rel=1e-10)
  assert (summary["n_exceed_paper"], summary["n_exceed_tight"],
          summary["n_exceed_lemma2"]) == (1, 0, 0)
  assert {k: summary[k] for k in summary if k.startswith("all_rows")} == {
      "all_rows_n_exceed_lemma2": 0, "all_rows_lemma2_finite": 3, "all_rows_nonfinite_norm": 0,
      "all_rows": 3, "all_rows_n_exceed_paper": 1, "all_rows_n_exceed_tight": 0,
      "all_rows_max_T_norm": 0.5, "all_rows_newton": 2}
  cf = summary["closed_form"]
  assert cf["ok"] and cf["max_abs"] <= 1e-12 and cf["what"] == "dense closed-form J"
  # max_rel = max|J − J_closed| / max|J_closed| (read by limits/gradient/report.py): at most
  # max_abs over the largest closed-form entry, which is ≥ 1/(4T)·½ here (α_i(1 − α_i)/T).
  assert 0 <= cf["max_rel"] <= cf["max_abs"] / (0.5 / (4 * T))
  assert summary["checks"]["rows"] == 1 and summary["checks"]["fd_eps"] == pytest.approx(
      1e-5 * T)
  assert set(summary["checks"]) == {"rows", "fd_eps", "jacrev", "fd"}
  assert summary["checks"]["jacrev"] is not None and summary["checks"]["fd"] is not None
  g = summary["g"]
  assert set(g) == {"0.1", "1"}
  assert (g["0.1"]["mean"], g["0.1"]["max"], g["0.1"]["n_rows"]) == (11.5, 20.0, 2)
  assert g["0.1"]["n_above_paper_bound"] == 2 and g["1"]["n_above_paper_bound"] == 1
  assert g["0.1"]["n_above_sqrt2_over_eps"] == 1 and g["1"]["n_above_sqrt2_over_eps"] == 1
  # groups: fd rows 1, 2 are both in group 1 (group 0 has none): max of the averages.
  assert (g["0.1"]["paper_stat"], g["0.1"]["paper_stat_head"]) == (11.5, 1)
  cex = summary["counterexample"]
  assert cex["norm"] == 2.0 and cex["exceeds_paper"] and not cex["exceeds_tight"]
  assert "two tied visible logits (alpha = 1/2, 1/2)" in cex["row"]  # the row the report names
  assert [r["row"] for r in per_row] == [0, 1, 2]
  for j, r in enumerate(per_row):
    assert r["T"] == T and r["norm"] == pytest.approx(norms[j], rel=1e-10)
    assert r["T_norm"] == pytest.approx(T * norms[j], rel=1e-10)
    assert r["closed_norm"] == pytest.approx(norms[j], rel=1e-10)
    assert (r["paper_bound"], r["tight_bound"]) == (1.0, 2.0)
    assert r["lemma2_bound"] == pytest.approx(l2[j], rel=1e-12)
    assert (r["exceeds_paper"], r["exceeds_tight"], r["exceeds_lemma2"]) == (j == 0, False,
                                                                              False)
  assert math.isnan(per_row[0]["g_eps_0.1"])                  # row 0 is not an fd row
  assert (per_row[1]["g_eps_0.1"], per_row[2]["g_eps_0.1"]) == (3.0, 20.0)


def test_run_temperature_closed_form_tolerance_is_relative_to_the_scale():
  """The closed-form check's ``ok`` is max|err| <= atol + rtol·scale, the scale being the
  closed-form norm (here > 3, far from 1, so rtol·scale and rtol/scale differ by > 9×). Two
  power-iteration steps (matfree path) leave a real error against the secular closed form;
  the secular norm is checked against numpy's SVD of (diag α − ααᵀ)/T. ``ok`` is then
  tested on both sides of each tolerance: rtol = 2·max_rel holds and max_rel/2 fails (atol 0),
  atol = 2·max_abs and atol = max_abs exactly hold, max_abs/2 fails (rtol 0: the comparison is
  ``<=``). Kills ``atol + rtol / cscale``. With no (layer, head) groups the g statistic the
  paper reads is the sample mean."""
  T = 0.05
  rows = T * np.array([[1.0, -2.0, 0.5, 0.0, 0.7, -0.4]])  # (1, 6): l/T of order 1
  mask = np.ones_like(rows, bool)
  stats_in = {"n_exceed_lemma2": 0, "lemma2_finite": 1, "nonfinite": 0, "rows": 1,
              "n_exceed_paper": 0, "n_exceed_tight": 0, "max_norm": 1.0, "newton": 0}

  def run(atol, rtol):
    tol = {"matfree": {"atol": atol, "rtol": rtol}, "violation_rtol": 1e-9}
    with jax.enable_x64(True):
      summary, per_row = gradient_rows.run_temperature(
          T, rows, mask, np.arange(1), np.array([], int), [0.1], "softmax", {},
          g_vals=np.array([[1.5]]), fd_idx=np.array([0]), all_stats=stats_in, dense=False,
          dtype_tol=tol, power_iters=2)
    return summary["closed_form"], per_row[0], summary

  cf, row, summary = run(0.0, 1.0)
  # No groups (synthetic rows): the paper's statistic is the plain mean of g over the sample.
  assert summary["g"]["0.1"]["paper_stat"] == 1.5 == summary["g"]["0.1"]["mean"]
  exact = _softmax_jacobian_norms(rows, mask, T)[0]
  assert exact > 3                                           # the scale is far from 1
  assert row["closed_norm"] == pytest.approx(exact, rel=1e-10)
  assert cf["max_abs"] == pytest.approx(abs(row["norm"] - exact), rel=1e-6)
  assert cf["max_rel"] == pytest.approx(cf["max_abs"] / exact, rel=1e-6)
  assert 1e-6 < cf["max_rel"] < 0.5                          # two steps: a real error
  assert cf["what"] == "O(L) secular closed-form norm" and cf["ok"]
  assert run(0.0, 2 * cf["max_rel"])[0]["ok"]
  assert not run(0.0, 0.5 * cf["max_rel"])[0]["ok"]
  assert run(2 * cf["max_abs"], 0.0)[0]["ok"]
  assert run(cf["max_abs"], 0.0)[0]["ok"]                    # exactly at the tolerance: ok
  assert not run(0.5 * cf["max_abs"], 0.0)[0]["ok"]


def test_one_screen_pass_for_all_batches_equals_one_per_batch(monkeypatch):
  """The task screens every pending temperature in one pass over the rows (task.SCREEN_PAIR_BYTES
  large) and hands each batch its own temperatures' numbers: equal, number for number, to a
  screen pass per batch (SCREEN_PAIR_BYTES 0: one pass per t_batch), with batches of 2 over
  5 temperatures (a short last batch), so a slicing or ordering slip shows as a swapped T."""
  from limits.gradient import task

  calls = []
  real = gradient_screen.Screen.stats

  def stats(self, temperatures, tap=None):
    calls.append(len(temperatures))
    return real(self, temperatures, tap)

  monkeypatch.setattr(gradient_screen.Screen, "stats", stats)
  config = task.GradientConfig(temperatures="0.01,0.3,1,4,30", t_batch=2, rows=48, length=40,
                               check_rows=0, fd_rows=8, logit_scale=3.0)
  keys = ("all_rows_n_exceed_paper", "all_rows_n_exceed_tight", "all_rows_n_exceed_lemma2",
          "all_rows_lemma2_finite", "all_rows_max_T_norm", "all_rows_newton", "all_rows")
  out = {}
  with jax.enable_x64(True):
    for budget in (1 << 30, 0):
      monkeypatch.setattr(task, "SCREEN_PAIR_BYTES", budget)
      res = task.run(task.plan(config), log=lambda s: None).results
      out[budget] = [[s[k] for k in keys] + [s["T"]] for s in res["per_temperature"]]
  assert calls == [5, 2, 2, 1]  # one pass for all five T, then one per batch
  assert out[1 << 30] == out[0]
  assert [row[-1] for row in out[0]] == [0.01, 0.3, 1.0, 4.0, 30.0]
  assert len({tuple(row[:3]) for row in out[0]}) > 1  # the counts differ between T


def _abs_max_rows(seed=11, R=300, L=70):
  """float32 rows streamed in 3 blocks: random masks (causal-like spans and holes), a row with
  nothing visible, and the largest |visible entry| a negative one (−lmin wins over l₁) hidden
  behind a larger masked entry."""
  rng = np.random.default_rng(seed)
  l = (rng.normal(size=(R, L)) * 5).astype(np.float32)
  m = rng.random((R, L)) < 0.7
  m[:, 0] = m[:, -1] = True  # one span group: the NaN row below shares its group and chunk
  m[7] = False                                              # nothing visible
  l[123, 5], m[123, 5] = np.float32(-77.25), True           # the answer: |−77.25|
  l[123, 6], m[123, 6] = np.float32(500.0), False           # larger, but masked
  return l, m


def _stream(l, m, cuts):
  from limits.gradient.blocks import RowBlocks

  return RowBlocks(l.shape[0], l.shape[1], l.dtype,
                   lambda: iter([(a, l[a:b], m[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]))


def test_screen_pass_takes_the_gatherers_largest_visible_logit():
  """The screen's pass gives the largest |visible logit| (``Screen.big``, what the task's
  check_temperature_range reads when the screen feeds the gatherer) equal to the gatherer's own
  host rule (blocks._chunk_big) on finite rows, bit for bit; +inf or −inf visible gives inf (so
  the check still fails); a visible NaN is left out alone by both (the host rule skipped its
  whole chunk of 8,192 rows, and with it the other entries' maximum, until the twenty-ninth
  session)."""
  l, m = _abs_max_rows()
  cuts = [0, 100, 230, l.shape[0]]
  with jax.enable_x64(True):
    def screen_big(l, m):
      s = gradient_screen.Screen(_stream(l, m, cuts), None, np.float64, 1e-14)
      s.stats(np.asarray([0.1, 1.0]))
      return s.big

    def host_big(l, m):
      g = _stream(l, m, cuts).gatherer(np.arange(3), big=True)
      for a, b in zip(cuts[:-1], cuts[1:]):
        g.add(a, l[a:b], m[a:b])
      return g.result()[0]

    assert host_big(l, m) == 77.25
    assert screen_big(l, m) == 77.25
    for value in (np.inf, -np.inf):
      li = l.copy()
      li[200, 3], m[200, 3] = value, True
      assert host_big(li, m) == screen_big(li, m) == np.inf
    ln = l.copy()
    ln[40, 2], m[40, 2] = np.nan, True
    ln[40, 4], m[40, 4] = np.float32(-90.5), True  # in the NaN's row (block rows 0-99)
    assert screen_big(ln, m) == 90.5    # the NaN alone left out
    assert host_big(ln, m) == 90.5      # (the host rule gave 77.25: the NaN's whole chunk)
    ln[41, :], m[41, :] = np.nan, True  # a row of NaN only: left out, the rest counts
    assert host_big(ln, m) == screen_big(ln, m) == 90.5


def test_gatherer_without_big_leaves_it_nan_and_gathers_the_same_rows():
  l, m = _abs_max_rows()
  cuts = [0, 100, 230, l.shape[0]]
  idx = np.array([3, 7, 123, 299])
  out = []
  for big in (True, False):
    g = _stream(l, m, cuts).gatherer(idx, big=big)
    for a, b in zip(cuts[:-1], cuts[1:]):
      g.add(a, l[a:b], m[a:b])
    out.append(g.result())
  assert out[0][0] == 77.25 and math.isnan(out[1][0])
  for (r0, m0), (r1, m1) in zip(out[0][1], out[1][1]):
    np.testing.assert_array_equal(r0, r1)
    np.testing.assert_array_equal(m0, m1)


def test_screen_chunk_is_the_element_budget_in_rows():
  K, w = 26, 1024
  assert gradient_screen.screen_chunk(K, w) == (1 << 21) // (K * w) == 78
  assert gradient_screen.screen_chunk(K, w, elems=K * w * 5) == 5  # exactly five rows
  assert gradient_screen.screen_chunk(K, w, elems=K * w * 5 - 1) == 4  # rounds down
  assert gradient_screen.screen_chunk(K, w, elems=1) == 1  # at least one row
  cap = gradient_screen.SCREEN_MAX_ROWS
  assert gradient_screen.screen_chunk(1, 1024) == cap  # few temperatures: the row cap
  assert gradient_screen.screen_chunk(1, 1024, elems=1024 * (cap - 1)) == cap - 1  # just under


def test_screen_decisions_do_not_depend_on_the_chunk():
  """The bracket pass in one chunk per group and in chunks of 3 rows with a padded last one:
  the same decisions and statistics (every count, the rows, the maximum to 1e-12). A chunk's
  shape may move a float32 sum by a rounding (seen here under the suite's XLA flags: 3e-7
  relative), which the bracket's margin absorbs, so only which pairs go to Newton may differ;
  a chunking slip that drops or misplaces rows changes the counts (padding repeats a group's
  first row and is masked out of every count and maximum by construction)."""
  rng = np.random.default_rng(5)
  l, m = _adversarial_rows(rng, L=40)
  l = np.concatenate([l, rng.normal(0, 6, (90, 40))])
  m = np.concatenate([m, np.tril(np.ones((40, 40), bool))[rng.integers(0, 40, 90)]])
  Ts = np.asarray(TS[::3])
  K = Ts.size
  with jax.enable_x64(True):
    one, small = (gradient_screen.Screen(l, m, np.float64, 1e-14, screen_elems=e).stats(Ts)
                  for e in (1 << 30, K * 40 * 3))
    want = _reference_stats(l, m, Ts, 1e-14)
  assert gradient_screen.screen_chunk(K, 40, K * 40 * 3) == 3
  for key in ("n_exceed_paper", "n_exceed_tight", "n_exceed_lemma2", "lemma2_finite", "rows",
              "nonfinite"):
    np.testing.assert_array_equal(small[key], one[key], err_msg=key)
  np.testing.assert_allclose(small["max_norm"], one["max_norm"], rtol=1e-12)
  _assert_same_decisions(small, want, l.shape[0])
