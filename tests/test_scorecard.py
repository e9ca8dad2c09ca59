"""The normalizer scorecard (limits/scorecard/, experiments/scorecard.py).

Each metric is compared with something computed independently (the normalizers called
directly, closed forms, per-row reference functions), so a wrong swap, scale or reduction fails.
"""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import distance, jacobians, models, normalizers, separability
from limits import scorecard as sc
from limits.errors import LimitsError
from tests.cli_helpers import run_experiment

FAMILIES = ("softmax", "sparsemax", "entmax1.5", "entmax4/3", "ssmax", "softplus")


@pytest.fixture(scope="module")
def tiny():
  config, params = models.load("tiny")
  return config, params


def _text_tokens(n_windows, length):
  from limits.models.gpt2.testing import SAMPLE_TEXT

  tok = models.load_tokenizer("tiny").encode(SAMPLE_TEXT * 4)
  return np.asarray(tok[:n_windows * length], np.int32).reshape(n_windows, length)


def _reference_weights(family, logits, mask, length):
  """The family's weights from limits.normalizers called directly (sparsemax: the sort-based
  one, not the bisection the scorecard runs; softplus: by hand)."""
  if family == "softmax":
    return normalizers.softmax(logits, 1.0, mask)
  if family == "sparsemax":
    return normalizers.sparsemax(logits, mask)
  if family == "entmax1.5":
    return normalizers.entmax15_exact(logits, mask)
  if family == "entmax4/3":
    return normalizers.entmax(logits, 4 / 3, mask)
  if family == "ssmax":
    return normalizers.ssmax(logits, 1 / math.log(length), mask)
  f = jnp.where(mask, jnp.logaddexp(0.0, jnp.where(mask, logits, 0)), 0)
  return f / jnp.sum(f, axis=-1, keepdims=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_swap_reaches_every_layer(tiny, family):
  config, params = tiny
  L, c = 24, 1.7
  tok = _text_tokens(1, L)
  T = math.sqrt(config.d_head) / c
  out = models.forward(params, tok, config, normalizer=sc.normalizer(family, L), temperature=T)
  base = models.forward(params, tok, config)
  mask = jnp.asarray(np.tri(L, dtype=bool))
  assert out.attn.weights.shape[0] == config.n_layer
  for layer in range(config.n_layer):
    scores = out.attn.scores[layer]  # this model's own scores (upstream layers swapped too)
    want = _reference_weights(family, scores / T, mask, L)
    np.testing.assert_allclose(out.attn.weights[layer], want, atol=2e-5, err_msg=f"layer {layer}")
    # Not softmax at T0 in any layer: the swap (or the scale) changed every layer.
    soft = normalizers.softmax(scores, math.sqrt(config.d_head), mask)
    assert float(jnp.max(jnp.abs(out.attn.weights[layer] - soft))) > 1e-3, f"layer {layer}"
  if family in ("sparsemax", "entmax1.5"):
    assert float(jnp.mean(out.attn.weights[-1][..., -1, :] == 0)) > 0.2  # exact zeros appear
  assert float(jnp.max(jnp.abs(out.logits - base.logits))) > 1e-2


def test_calibration_search_recovers_a_known_scale():
  # A teacher-student loss whose minimum is at c = k by construction: cross-entropy of
  # softmax(c·z) against the target softmax(k·z).
  z = jax.random.normal(jax.random.key(0), (64, 40)) * 2
  k = 3.1
  p = jax.nn.softmax(k * z)
  loss = lambda c: float(-jnp.mean(jnp.sum(p * jax.nn.log_softmax(c * z), axis=-1)))
  res = sc.calibrate(loss, 1 / 64, 16, grid=5, iters=8)
  assert abs(res["multiplier"] / k - 1) < 0.02
  assert not res["at_edge"]
  cs = [c for c, _ in res["trace"]]
  assert len(cs) <= 5 + 1 + 8 and 1.0 in cs  # the grid always holds the model's own scale
  # A minimum beyond the bracket is reported at the edge.
  edge = sc.calibrate(lambda c: (math.log(c) - math.log(100)) ** 2, 1 / 64, 16, grid=5, iters=6)
  assert edge["at_edge"] and edge["multiplier"] > 10


def test_calibration_recovers_scale_of_a_model_with_halved_queries(tiny):
  # Halving W_q halves every q·k (exactly, a power of two): the best multiplier must double.
  config, params = tiny
  L = 48
  tok = _text_tokens(2, L)
  half = jax.tree.map(lambda a: a, params)
  D = config.n_embd
  ca = params["h"]["attn"]["c_attn"]
  half["h"]["attn"]["c_attn"] = {"weight": ca["weight"].at[..., :D].multiply(0.5),
                                 "bias": ca["bias"].at[..., :D].multiply(0.5)}
  fit = lambda p: sc.calibrate(
      lambda c: float(sc.token_nll(p, config, tok, "softmax", c, L).mean()),
      1 / 64, 16, grid=5, iters=12)["multiplier"]
  c0, c1 = fit(params), fit(half)
  # c0 is an interior minimum of the loss, checked by evaluating the loss directly: no worse
  # than the model's own scale c = 1 nor than 10 % either side of it, and off the search edges.
  loss = lambda c: float(sc.token_nll(params, config, tok, "softmax", c, L).mean())
  # Independent of the search: the loss on a 33-point log grid over the bracket has its
  # minimum inside (not at an end), and c0 lies within one grid step (ln 1024 / 32) of it.
  grid = np.exp(np.linspace(math.log(1 / 64), math.log(16), 33))
  best = int(np.argmin([loss(c) for c in grid]))
  assert 0 < best < len(grid) - 1, grid[best]
  assert abs(math.log(c0 / grid[best])) <= math.log(1024) / 32, (c0, grid[best])
  assert loss(c0) <= min(loss(1.0), loss(c0 * 1.1), loss(c0 / 1.1)) + 1e-6, c0
  assert abs(c1 / c0 / 2 - 1) < 0.03, (c0, c1)  # search tolerance 0.01 in ln c on each
  # The loss it minimises is the model's cross-entropy, computed here from the logits.
  logits = np.asarray(models.forward(params, tok, config, normalizer=sc.normalizer("softmax", L),
                                     layers=()).logits, np.float64)
  mx = logits.max(-1, keepdims=True)
  lp = logits - mx - np.log(np.sum(np.exp(logits - mx), -1, keepdims=True))
  want = -np.take_along_axis(lp[:, :-1], tok[:, 1:, None], -1)[..., 0]
  np.testing.assert_allclose(sc.token_nll(params, config, tok, "softmax", 1.0, L), want, rtol=1e-4)
  assert sc.paired_delta([2.0, 3.0, 4.0], [1.0, 1.0, 1.0]) == (2.0, pytest.approx(1 / math.sqrt(3)))


def test_split_windows_disjoint_and_seeded():
  ev, cal = sc.split_windows(10_000, 100, 3, 4, seed=0)
  assert ev.tolist() == [0, 1, 2] and len(set(cal.tolist())) == 4
  assert not set(ev.tolist()) & set(cal.tolist()) and cal.max() < 100
  assert sc.split_windows(10_000, 100, 3, 4, seed=0)[1].tolist() == cal.tolist()
  assert sc.split_windows(10_000, 100, 3, 4, seed=1)[1].tolist() != cal.tolist()
  with pytest.raises(LimitsError, match="do not fit"):
    sc.split_windows(500, 100, 3, 4, seed=0)


def test_lemma1_sparsemax_clear_winner_and_softmax_direct():
  L = 32
  logits = jnp.zeros((L, L)).at[:, 0].set(10.0)  # key 0 wins every row by a margin
  mask = jnp.asarray(np.tri(L, dtype=bool))
  w = normalizers.sparsemax(logits, mask)
  mx, zs = sc.lemma1_rows(w, [4, 32])
  np.testing.assert_array_equal(mx, [4.0, 32.0])  # α = one-hot: max α·t = t
  np.testing.assert_allclose(zs, [3 / 4, 31 / 32])  # every other weight exactly 0
  r = np.random.default_rng(0).normal(size=(3, L, L)) * 3
  s = np.asarray(normalizers.softmax(r, 1.0, mask))
  mx, zs = sc.lemma1_rows(s, [8, 32])
  np.testing.assert_allclose(mx[:, 0], s[:, 7, :8].max(-1) * 8)
  np.testing.assert_allclose(mx[:, 1], s[:, 31].max(-1) * 32)
  assert np.all(zs == 0)
  summ = sc.lemma1_summary(np.array([[1.0, 2.0]] * 3), np.zeros((3, 2)), [10, 100])
  assert summ["slope_loglog"] == pytest.approx(math.log10(2)) and summ["n_per_length"] == 3


def test_jacobian_sparsemax_known_answers():
  L, T = 16, 4.0
  mask = np.tri(L, dtype=bool)[[15, 15]]
  win = np.zeros(L)
  win[3] = 40.0  # clear winner: support {3}, J = 0
  tie = np.full(L, -40.0)
  tie[[2, 5]] = 8.0  # two-way tie: support {2, 5}, J = (diag 1_S − 1_S1_Sᵀ/2)/T, ‖J‖ = 1/T
  out = sc.jacobian_metrics("sparsemax", np.stack([win, tie]), mask, T, L, epsilon=0.1, seed=0)
  norms = sc.jacobian_norms("sparsemax", jnp.asarray(np.stack([win, tie])), mask, T, L)
  assert norms[0] == 0.0
  assert norms[1] == pytest.approx(1 / T, rel=1e-6)
  assert out["max_norm"] == pytest.approx(1 / T, rel=1e-6) and out["bound_violations"] == 0
  assert out["max_bound"] == pytest.approx(1 / T)
  # g: a step of 0.1 cannot move the clear winner's one-hot output, but it moves the tie.
  with jax.enable_x64(True):  # as jacobian_metrics: float64 rows, directions from key(seed)
    g = np.asarray(jacobians.fd_sensitivity(
        lambda x, m: sc.normalizer("sparsemax", L)(x / T, m), jnp.asarray(np.stack([win, tie])),
        0.1, jax.random.key(0), mask=jnp.asarray(mask)))
  assert g[0] == 0 and 0 < g[1] <= 1 / T * (1 + 1e-6) and out["g_max"] == pytest.approx(g.max())


def test_jacobian_softmax_equals_closed_form_and_softplus_lemma2():
  L, T = 40, 8.0
  rng = np.random.default_rng(1)
  rows = rng.normal(size=(12, L)) * 20
  q = rng.integers(1, L, size=12)
  mask = np.arange(L)[None, :] <= q[:, None]
  with jax.enable_x64(True):
    want = np.asarray(jacobians.softmax_closed_form_norm(jnp.asarray(rows), T, jnp.asarray(mask)))
    got = sc.jacobian_norms("softmax", jnp.asarray(rows), mask, T, L)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    tied = np.where(np.arange(L) < 2, 0.0, -1e3)[None]  # α = (½, ½, 0...): ‖J‖ = 1/(2T)
    m2 = np.ones((1, L), bool)
    norm = sc.jacobian_norms("softmax", jnp.asarray(tied), m2, T, L)
    bound, _ = sc.jacobian_bound("softmax", jnp.asarray(tied), m2, T, L)
    assert norm[0] == pytest.approx(1 / (2 * T), rel=1e-9) == float(bound[0])
    F = lambda x: jax.nn.softplus(x / T)
    dF = lambda x: jax.nn.sigmoid(x / T) / T
    J = jacobians.general_closed_form(F, dF, jnp.asarray(rows), jnp.asarray(mask))
    svd = np.linalg.svd(np.asarray(J), compute_uv=False)[:, 0]
    np.testing.assert_allclose(sc.jacobian_norms("softplus", jnp.asarray(rows), mask, T, L), svd,
                               rtol=1e-9)
    bound, name = sc.jacobian_bound("softplus", jnp.asarray(rows), jnp.asarray(mask), T, L)
    assert name == "Lemma 2" and np.all(svd <= np.asarray(bound))


def _causal_softmax(rng, W, H, L, d):
  mask = np.tri(L, dtype=bool)
  w = np.asarray(normalizers.softmax(rng.normal(size=(W, H, L, L)) * 2, 1.0, mask), np.float32)
  x = rng.normal(size=(W, H, L, d)).astype(np.float32)
  return w, x


def test_distance_metrics_equal_per_row_reference():
  rng = np.random.default_rng(2)
  L, H, d = 20, 3, 4
  layers = [_causal_softmax(rng, 2, H, L, d) for _ in range(2)]
  out = sc.distance_metrics(layers, (5, 100), L)
  assert set(out["d_sum_median"]) == {"5"}  # N = 100 >= L is not reported
  one = lambda a, xx, t: distance.cumulative_distance(a, xx, 5, mask=jnp.arange(L) <= t)
  rows = jax.jit(jax.vmap(jax.vmap(one, (0, None, 0)), (0, 0, None)))  # (heads·windows, queries)
  per_head = []
  for w, x in layers:
    for h in range(H):
      t = jnp.arange(5, L)  # queries with t + 1 > 5 keys
      vals = rows(jnp.asarray(w[:, h, 5:]), jnp.asarray(x[:, h]), t)
      per_head.append(float(np.mean(np.asarray(vals))))
  assert out["d_sum_median"]["5"] == pytest.approx(np.median(per_head), rel=1e-4)
  assert out["heads"] == 2 * H and out["windows"] == 2
  crit = out["critical_n"]
  assert crit is None or 1 <= crit <= L - 1


def test_critical_n_is_the_ascending_scan_against_the_printed_e():
  """The crit. N/L column follows Fig. 2c's primary reading (issue 28): the first N of the scan
  N = 1, 2, … where KS does not reject per-head d̄ against the printed E. Every p-value the scan
  evaluated is recomputed here from per-row references (limits.distance.cumulative_distance,
  limits.distance.printed.expected_printed_rows, one query at a time) and scipy's KS; float32 inputs,
  so p-values agree to 1e-6 (the statistic is exact unless two samples tie within rounding)."""
  from scipy import stats as sst

  from limits.distance import printed

  rng = np.random.default_rng(5)
  L, H, d = 12, 3, 4
  layers = [_causal_softmax(rng, 2, H, L, d) for _ in range(2)]
  out = sc.distance_metrics(layers, (5,), L)
  scan = out["critical_scan"]
  assert scan["method"] == "ascending scan" and scan["evaluated"]

  def per_head(n):
    d_h, e_h = [], []
    for w, x in layers:
      for h in range(H):
        dw, ew = [], []
        for win in range(w.shape[0]):
          a, xx = jnp.asarray(w[win, h], jnp.float64), jnp.asarray(x[win, h], jnp.float64)
          dw += [float(distance.cumulative_distance(a[t], xx, n, mask=jnp.arange(L) <= t))
                 for t in range(n, L)]  # queries with t + 1 > n keys
          ew.append(float(np.nanmean(np.asarray(printed.expected_printed_rows(a, xx, n)))))
        d_h.append(np.mean(dw))
        e_h.append(np.mean(ew))
    return np.array(d_h), np.array(e_h)

  with jax.enable_x64(True):
    ref = {n: sst.ks_2samp(*per_head(n)).pvalue for n in sorted(scan["evaluated"])}
  for n, p in scan["evaluated"].items():
    assert p == pytest.approx(ref[n], rel=1e-6, abs=1e-9), n
  first = next((n for n in sorted(ref) if ref[n] > 0.01), None)
  assert out["critical_n"] == first == scan["critical_n"]
  assert out["critical_n_over_L"] == (None if first is None else first / L)
  # The reconstructed E's bisection is kept beside it, under its own name.
  assert out["critical_n_reconstructed"] == out["ks"]["critical_n"]


def test_separability_summary_equals_per_row_reference():
  rng = np.random.default_rng(3)
  L, H, d, ns = 24, 2, 8, [4, 8]
  w, v = _causal_softmax(rng, 1, H, L, d)
  sums = sc.separability_sums(w[0], v[0], ns, 1.0)
  out = sc.separability_summary(sums, ns)
  x = np.asarray(separability.normalize_to_sphere(jnp.asarray(v[0]), 1.0))
  one = lambda a, xx, t, n: separability.separable_fraction(a, xx, n, jnp.arange(L) <= t)
  rows = jax.jit(jax.vmap(one, (0, None, 0, None)))
  plateau = []
  for h in range(H):
    fr = [np.mean(np.asarray(rows(jnp.asarray(w[0, h, n:]), jnp.asarray(x[h]), jnp.arange(n, L),
                                  n))) for n in ns]
    plateau.append(np.mean(fr))
  assert out["plateau_median"] == pytest.approx(np.median(plateau), rel=1e-4)
  assert out["heads"] == H


def test_config_rejects_bad_values():
  with pytest.raises(LimitsError, match="must include 'softmax'"):
    sc.Config(candidates=("sparsemax",))
  with pytest.raises(LimitsError, match="bracket"):
    sc.Config(calib_lo=2.0)
  with pytest.raises(LimitsError, match="unknown"):
    sc.parse_candidates("softmax,nope")
  assert sc.Config().digest() != sc.Config(seed=1).digest()
  assert sc.Config(length=256).prefix_lengths == (16, 32, 64, 128, 256)


def test_digest_keeps_its_value_and_ignores_folder_and_figure():
  """The resumable parts are keyed by the digest: its value for this config is the one cb9858c
  computed (before the CLI's flags became fields of Config), and where the run is written or
  whether it draws changes neither the digest nor the recorded settings."""
  cfg = sc.Config(seed=3, distance_ns=(5, 7))
  assert cfg.digest() == "49db3be36d91d5e1"
  moved = sc.Config(seed=3, distance_ns=(5, 7), out_dir="elsewhere", plot=False)
  assert moved.digest() == cfg.digest() and moved.as_dict() == cfg.as_dict()
  assert "out_dir" not in cfg.as_dict() and "plot" not in cfg.as_dict()
  assert sc.Config(seed=4, distance_ns=(5, 7)).digest() != cfg.digest()


def test_cli_end_to_end_tiny_then_resume(tmp_path):
  from limits.models.gpt2.testing import SAMPLE_TEXT

  text = tmp_path / "text.txt"
  text.write_text(SAMPLE_TEXT * 2, encoding="utf-8")
  out = tmp_path / "run"
  args = ["--model=tiny", f"--text={text}", "--length=32", "--eval_windows=1",
          "--calib_windows=1", "--calib_grid=3", "--calib_iters=1",
          "--candidates=softmax,softmax_t2", "--jac_rows=4", "--distance_ns=5",
          "--sep_ns=8", "--timing_rounds=1", "--lemma1_lengths=8,32", f"--out_dir={out}"]
  r = run_experiment("scorecard", args, timeout=240)
  assert r.returncode == 0, r.stderr[-2000:]
  for name in ("scorecard.md", "scorecard.json", "results.json", "scorecard.csv",
               "scorecard.png"):
    assert (out / name).is_file(), name
  res = json.loads((out / "scorecard.json").read_text())["results"]
  keys = [t["key"] for t in res["table"]]
  assert keys == ["softmax", "softmax_t2", "softmax+cal"]  # one calibrated row per family
  ref, t2, cal = res["table"]
  assert ref["delta_loss"] == 0 and ref["multiplier"] == 1 and t2["multiplier"] == 0.5
  assert cal["multiplier"] == res["calibrations"]["softmax"]["multiplier"]
  assert cal["loss"] <= ref["loss"] + 0.05  # fitted on other windows: close, not necessarily lower
  assert t2["max_jac"] < ref["max_jac"]  # T doubled: flatter weights, smaller Jacobian
  md = (out / "scorecard.md").read_text()
  assert "| softmax (T0×2) |" in md and "*n*" in md and md.count("\n- ") == 3
  # Rerun of the same command: every part reused, the same table.
  r2 = run_experiment("scorecard", args + ["--noplot"], timeout=240)
  assert r2.returncode == 0, r2.stderr[-2000:]
  assert r2.stderr.count("reused") == 1 + 3, r2.stderr
  res2 = json.loads((out / "scorecard.json").read_text())["results"]
  assert res2["table"] == res["table"]


@pytest.mark.parametrize("bad, needle", [("--eval_windows=0", "eval_windows"),
                                         ("--candidates=sparsemax", "softmax")])
def test_cli_bad_flag_one_line(tmp_path, bad, needle):
  r = run_experiment("scorecard", [bad, f"--out_dir={tmp_path / 'x'}"], timeout=120)
  assert r.returncode == 2
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
  assert not (tmp_path / "x").exists()
