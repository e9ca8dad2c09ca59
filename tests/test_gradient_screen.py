"""The gradient step's one-pass screen (limits.gradient.screen): the bracket against dense
eigvalsh, the decisions against the exact norm of every (row, T), the causal-span g(T, ε)
against the full-length one, and no implicit host transfer in the per-layer statistics."""

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
    lo, hi, _ = gradient_screen._screen_chunk(jnp.asarray(l), jnp.asarray(m), T,
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


def test_counterexample_closed_form_and_its_numeric_check():
  with jax.enable_x64(True):
    for T in (1e-3, 0.3, 50.0):
      c = gradient_rows.counterexample(T, float(bounds.softmax_jacobian_bound(T, "paper")),
                                       1 / (2 * T), 1e-14, np.float64)
      assert c["T_norm"] == 0.5 and c["exceeds_paper"] and not c["exceeds_tight"]
      assert c["numeric_check"]["ok"]
      assert c["numeric_check"]["jacfwd_svd_norm"] == pytest.approx(1 / (2 * T), rel=1e-12)
