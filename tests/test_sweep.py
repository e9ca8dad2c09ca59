"""Tests of limits.sweep: grids and ids, the toy/gradient/separability/distance_model cell functions against
independent computations, device-count independence (1 vs 8 simulated CPU devices, padding,
simulated multi-host shards), and the store (corrupt/partial records, checksums, manifests)."""

import dataclasses
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import sweep
from limits.errors import LimitsError
from tests.cli_helpers import simulated_devices_env

REPO = Path(__file__).resolve().parent.parent

# A toy grid of 14 cells in 2 static groups (n = 2, 3) of 7: 7 is not a multiple of the device
# counts used (2, 3, 4, 8), so every run pads its last batch.
TOY_GRID = {"x": [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, -1.0], "n": [2, 3]}
# Includes the extreme but legal T = 1e-4 and logits of size ~1e4 (logit_scale).
GRAD_GRID = {"temperature": [1e-4, 0.1, 1.0, 10.0], "epsilon": [1e-3, 10.0],
             "logit_scale": [1.0, 1e4], "length": 8, "rows": 4}


def _distance_grid(root):
  """distance_model cells on the random model under ``root`` (L = 16, 2 N, 2 windows)."""
  return {"model": str(root / "model"), "text": str(root / "text.txt"), "length": [16],
          "n": [1, 5], "windows": 2}


def _make_model(root):
  from tests.cli_helpers import make_model_and_texts

  return make_model_and_texts(root, repeat=10, n_layer=2, n_head=2, n_embd=16, n_positions=64,
                              vocab_size=300, seed=4)


def _records(run_dir):
  """Records as comparable tuples (id, cell, result) in grid order."""
  return [(r["id"], r["cell"], r["result"]) for r in sweep.collect(run_dir, complete=True)]


def _run(exp, grid, run_dir, **kw):
  kw.setdefault("devices", 1)
  kw.setdefault("progress", False)
  kw.setdefault("log", None)
  return sweep.run_sweep(exp, grid, run_dir, **kw)


def _lines(path):
  return Path(path).read_bytes().split(b"\n")


# ---------------------------------------------------------------------------------- grids, ids


def test_cell_id_is_sha256_of_canonical_json():
  # Independent: the canonical text written by hand, hashed with hashlib.
  text = '{"n":3,"x":0.5}'
  assert sweep.cell_id({"x": 0.5, "n": 3}) == hashlib.sha256(text.encode()).hexdigest()[:16]
  assert sweep.cell_id({"n": 3, "x": 0.5}) == sweep.cell_id({"x": 0.5, "n": 3})


def test_defaults_and_types_make_equal_cells_equal():
  exp = sweep.get_experiment("gradient")
  a = exp.make_grid(sweep.parse_grid("epsilon=10;temperature=1"))
  b = exp.make_grid({"cells": [{"temperature": 1.0, "epsilon": 10.0, "length": 64}]})
  assert a.cells == b.cells and a.ids == b.ids
  assert isinstance(a.cells[0]["epsilon"], float) and a.cells[0]["rows"] == 256


# The kinds' parameters are fields of the experiments' config dataclasses (issue 26): written
# out here from GradientConfig / SeparabilityConfig / DistanceConfig as the CLIs' --help shows
# them, not read from the code under test.
CONFIG_DEFAULTS = {
    "gradient": {"logit_scale": 8.0, "normalizer": "softmax", "length": 64, "rows": 256},
    "separability_sphere": {"length": 1024, "dim": 64, "samples": 1000, "alpha_kind": "softmax",
                            "alpha_temperature": 1.0, "radius": 1.0, "zipf_s": 1.0},
    "distance_model": {"model": "tiny", "windows": 1, "vectors": "value",
                       "inclusion": "n_over_l_minus_1", "text": None},
}


@pytest.mark.parametrize("kind,module", [("gradient", "experiments.gradient"),
                                         ("separability_sphere", "experiments.separability"),
                                         ("distance_model", "experiments.distance")])
def test_kind_parameters_are_the_config_fields(kind, module):
  from limits import reproduction as rp

  exp = sweep.get_experiment(kind)
  step = next(s for s in rp.STEPS if s.module == module)
  assert exp.defaults.config is step.config  # one config class: the step's and the kind's
  for name, default in CONFIG_DEFAULTS[kind].items():
    assert exp.defaults[name] == default and name in {f.name for f in
                                                      dataclasses.fields(step.config)}
  line = next(l for l in sweep.describe().splitlines()
              if l.startswith(f"  parameters of {step.config.__module__}:"))
  assert step.config.__name__ in line  # --describe names the config the parameters are of


@pytest.mark.parametrize("kind,cell,ok", [
    ("gradient", {"logit_scale": 1e-9}, True), ("gradient", {"logit_scale": 0.0}, False),
    ("separability_sphere", {"radius": 1e-9, "length": 16, "samples": 2}, True),
    ("separability_sphere", {"radius": 0.0, "length": 16, "samples": 2}, False),
    ("separability_sphere", {"zipf_s": 1e-9, "length": 16, "samples": 2}, True),
    ("separability_sphere", {"zipf_s": 0.0, "length": 16, "samples": 2}, False),
    ("separability_sphere", {"alpha_kind": "zipf", "length": 16, "samples": 2}, True),
    ("separability_sphere", {"alpha_kind": "flat", "length": 16, "samples": 2}, False),
    ("distance_model", {"windows": 1}, True), ("distance_model", {"windows": 0}, False),
    ("distance_model", {"inclusion": "n_over_l"}, True),
    ("distance_model", {"inclusion": "n_over_k"}, False)])
def test_kind_parameters_take_the_config_checks(kind, cell, ok):
  exp = sweep.get_experiment(kind)
  if ok:
    exp.coerce(cell)
    return
  with pytest.raises(LimitsError) as e:
    exp.coerce(cell)
  name = next(iter(cell))
  assert str(e.value).startswith(f"{name}={cell[name]!r}") and "\n" not in str(e.value)
  assert " must " in str(e.value) or "; allowed: " in str(e.value)


def test_config_parameters_refuse_a_field_the_config_lacks():
  params = sweep.ConfigParameters("limits.distance.task:DistanceConfig", ("lenghts",))
  with pytest.raises(ValueError, match="lenghts"):
    dict(params)


def test_parse_grid_product_order_and_ranges():
  g = sweep.parse_grid("a=1,2;b=x,y,z;c=logspace:-3:2:6")
  assert len(g) == 2 * 3 * 6
  # Last axis fastest, like itertools.product.
  assert [c["b"] for c in g.cells[:12]] == ["x"] * 6 + ["y"] * 6
  np.testing.assert_allclose(g.axes["c"], [1e-3, 1e-2, 1e-1, 1, 10, 100], rtol=1e-12)
  assert sweep.parse_grid("t=linspace:0:1:3").axes["t"] == (0.0, 0.5, 1.0)


@pytest.mark.parametrize("text", ["", "x", "x=", "x=1,,2", "=1", "x=1;x=2", "1x=2",
                                  "x=logspace:1:2", "x=linspace:0:1:0", "x=1,1"])
def test_parse_grid_rejects_malformed(text):
  with pytest.raises(LimitsError) as e:
    sweep.parse_grid(text)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("grid, match", [
    ({"y": [1.0]}, "unknown parameter"),
    ({"n": [1.5]}, "must be an integer"),
    ({"n": [0]}, "n=0"),
    ({"x": ["a"]}, "must be a number"),
])
def test_make_grid_rejects_bad_cells(grid, match):
  with pytest.raises(LimitsError, match=match):
    sweep.get_experiment("toy").make_grid(grid)


def test_batches_group_static_values_in_grid_order():
  exp = sweep.get_experiment("toy")
  g = exp.make_grid(TOY_GRID)  # cells alternate n = 2, 3
  b = sweep.engine._batches(g, exp.static_names(), 4)
  assert [len(x) for x in b] == [4, 3, 4, 3]
  for chunk in b:
    assert len({g.cells[i]["n"] for i in chunk}) == 1 and chunk == sorted(chunk)
  assert sorted(i for chunk in b for i in chunk) == list(range(len(g)))


# ---------------------------------------------------------------------------------- cell functions


def test_toy_matches_closed_form_and_documented_keys(tmp_path):
  seed = 7
  _run("toy", TOY_GRID, tmp_path, seed=seed, batch_size=3)
  recs = sweep.collect(tmp_path, complete=True)
  assert len(recs) == 14
  run_key = jax.random.key(seed)
  for r in recs:
    x, n = r["cell"]["x"], r["cell"]["n"]
    # float32 arithmetic of small powers of exactly representable x: exact to 1 ulp.
    np.testing.assert_allclose(r["result"]["square"], x * x, rtol=1e-6)
    np.testing.assert_allclose(r["result"]["powers"], [x ** j for j in range(n)], rtol=1e-6)
    np.testing.assert_allclose(r["result"]["series"], sum(x ** j for j in range(n)), rtol=1e-6)
    # The documented per-cell key: fold_in(fold_in(key(seed), hi), lo) of the id's halves.
    hi, lo = int(r["id"][:8], 16), int(r["id"][8:], 16)
    k = jax.random.fold_in(jax.random.fold_in(run_key, hi), lo)
    assert r["result"]["noise"] == float(jax.random.uniform(k))
  noise = [r["result"]["noise"] for r in recs]
  assert len(set(noise)) == len(noise) and all(0 <= u < 1 for u in noise)


def test_gradient_cells_match_independent_computation(tmp_path, one_device_runs):
  from limits import jacobians

  seed = 3  # the dense run: one_device_runs' grad1 (GRAD_GRID, seed 3, batch 4)
  # The O(L) secular-equation norm must give the same numbers as the dense closed form.
  _run("gradient", {**GRAD_GRID, "jacobian": "secular"}, tmp_path / "secular", seed=seed,
       batch_size=4)
  recs = (sweep.collect(one_device_runs / "grad1", complete=True)
          + sweep.collect(tmp_path / "secular", complete=True))
  Z = jnp.asarray(sweep.gradient_logits(jax.random.key(seed), 4, 8))  # (R, L)

  @jax.jit
  def reference(T, eps, c, key):
    sm = lambda l: jax.nn.softmax(l / T)  # reference softmax, not limits.normalizers
    X = c * Z
    J = jax.vmap(jax.jacfwd(sm))(X)  # exact Jacobian by autodiff, (R, L, L)
    # Documented unit directions: row r uses split(cell key, R)[r], then split(row key, 1)[0].
    v = jax.vmap(lambda k: jacobians.random_directions(jax.random.split(k, 1)[0], Z.shape[1:],
                                                       dtype=Z.dtype))(
        jax.random.split(key, Z.shape[0]))
    g = jnp.linalg.norm(sm(X + eps * v) - sm(X), axis=-1) / eps
    return J, jnp.linalg.norm(v, axis=-1), g

  assert len(recs) == 32
  for r in recs:
    T, eps, c = r["cell"]["temperature"], r["cell"]["epsilon"], r["cell"]["logit_scale"]
    assert all(np.isfinite(v) for v in r["result"].values()), r
    hi, lo = int(r["id"][:8], 16), int(r["id"][8:], 16)
    k = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), hi), lo)  # documented key
    J, vnorm, g = (np.asarray(a) for a in reference(T, eps, c, k))
    jn = np.linalg.norm(J, 2, axis=(1, 2))  # spectral norms by numpy
    # float32: closed form vs autodiff + SVD vs numpy agree to ~1e-5 relative; 1e-4 with margin.
    # Saturated rows (a_i ~ 1) lose absolute precision in a_i - a_i^2: ulp(1) = 1.2e-7, / T.
    atol = 2.0**-23 / T
    np.testing.assert_allclose(r["result"]["jac_norm_max"], jn.max(), rtol=1e-4, atol=atol)
    np.testing.assert_allclose(r["result"]["jac_norm_mean"], jn.mean(), rtol=1e-4, atol=atol)
    # Corollary 3's tight form: ||J||_2 <= 1/(2T) (PAPER.md §7 check 1).
    assert r["result"]["jac_norm_max"] <= 0.5 / T * (1 + 1e-5)
    np.testing.assert_allclose(vnorm, 1, rtol=1e-6)
    # g = ||softmax((l + eps v)/T) - softmax(l/T)|| / eps: float32 outputs carry a few ulp(1)
    # = 6e-8 each, so differences of L = 8 entries are good to ~1e-6 absolute before / eps.
    np.testing.assert_allclose(r["result"]["g_mean"], g.mean(), rtol=1e-4, atol=1e-6 / eps)
    np.testing.assert_allclose(r["result"]["g_max"], g.max(), rtol=1e-4, atol=1e-6 / eps)
    # The simplex has diameter sqrt(2): g <= sqrt(2)/eps for every row.
    assert r["result"]["g_max"] <= np.sqrt(2) / eps * (1 + 1e-6)


def _numpy_sphere_mc(alpha, n, dim, samples, seed):
  """Independent NumPy Monte Carlo of Theorem 2's N_s/N (strict rule) and of delta: own RNG,
  own top-n selection, own distances. Returns (mean, stderr) of N_s/N and mean delta."""
  rng = np.random.default_rng(seed)
  a = np.asarray(alpha, np.float64)
  L = a.size
  sel = np.zeros(L, bool)
  sel[np.argsort(-a, kind="stable")[:n]] = True
  fracs, deltas = [], []
  for _ in range(samples):
    x = rng.standard_normal((L, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)          # uniform on the unit sphere
    s = (a[sel, None] * x[sel]).sum(axis=0)
    dist = np.linalg.norm(a[:, None] * x - s, axis=1)
    r = dist[~sel].min() if (~sel).any() else np.inf
    fracs.append(np.sum(dist[sel] < r) / n)
    pd = np.linalg.norm(x[:, None] - x[None], axis=-1)
    deltas.append(pd[np.triu_indices(L, 1)].min())
  f = np.asarray(fracs)
  return f.mean(), f.std(ddof=1) / np.sqrt(samples), np.mean(deltas)


def test_separability_cells_match_an_independent_numpy_monte_carlo(tmp_path):
  """The kind runs the library's Monte Carlo (separability_sphere.sample_stats and
  mean_stderr); checked against an independent NumPy estimate: means within 4 combined
  standard errors, the stated standard error within 30% of the NumPy one (S = 300: the
  relative error of an estimated standard deviation is ~1/sqrt(2S) = 4%)."""
  from limits import separability

  seed, L, dim, S = 5, 12, 6, 300
  grid = {"n": [1, 3, 6, 12], "length": L, "dim": dim, "samples": S,
          "alpha_temperature": [0.5]}
  _run("separability_sphere", grid, tmp_path, seed=seed, batch_size=2)
  recs = sweep.collect(tmp_path, complete=True)
  run_key = jax.random.key(seed)
  alpha = sweep.separability_alpha("softmax", run_key, L, 0.5)
  # The traced softmax weights equal separability.synthetic_alpha with a concrete T.
  ref_alpha = separability.synthetic_alpha(
      "softmax", L, jax.random.fold_in(run_key, 0x616C7068),  # the "alph" stream (seeding.tag)
      temperature=0.5)
  np.testing.assert_allclose(alpha, ref_alpha, rtol=1e-6)
  for r in recs:
    n, res = r["cell"]["n"], r["result"]
    mean, se, delta = _numpy_sphere_mc(ref_alpha, n, dim, 4 * S, seed=n)
    if n == 1:  # a single selected token has s = alpha_1 x_1 at distance 0: always separable
      assert res["frac_mean"] == mean == 1.0 and res["frac_stderr"] == 0.0
    elif n == L:  # no non-selected token: r = +inf, every token counts
      assert res["r_mean"] == "inf" and res["frac_mean"] == mean == 1.0
    else:
      assert abs(res["frac_mean"] - mean) <= 4 * np.hypot(res["frac_stderr"], se), (n, res, mean)
      assert 0.7 < res["frac_stderr"] / (se * 2) < 1.3, (n, res["frac_stderr"], se * 2)
    # delta: the mean minimum pairwise distance, same law (stderr not recorded: 5% margin).
    np.testing.assert_allclose(res["delta_mean"], delta, rtol=0.05)
  # Wiring: a cell is the library's monte_carlo_detail with the documented points key.
  mc = separability.monte_carlo_detail(sweep.separability_points_key(run_key), ref_alpha, 6,
                                       dim, 1.0, S)
  res = next(r["result"] for r in recs if r["cell"]["n"] == 6)
  np.testing.assert_allclose(res["frac_mean"], mc.mean, rtol=1e-5)
  np.testing.assert_allclose(res["frac_stderr"], mc.stderr, rtol=1e-4)


def test_monte_carlo_moments_merge_chunks_exactly():
  """monte_carlo_detail's chunked moments (Chan's merge over 6 chunks, the last padded) equal
  numpy's mean and std(ddof=1)/sqrt(S) of the per-sample N_s/N over every sample at once."""
  from limits import selection
  from limits.separability import sphere as mc

  with jax.enable_x64(True):
    key, L, dim, S = jax.random.key(2), 10, 3, 23
    alpha = mc.synthetic_alpha("zipf", L, jax.random.key(1))
    parts = mc.monte_carlo_detail(key, alpha, [2, 5], dim, 1.0, S, chunk=4)
    a2 = alpha[None]
    per = jax.jit(jax.vmap(lambda i: mc.sample_stats(key, i, a2, selection.sort_desc(a2),
                                                     jnp.asarray([2, 5]), dim, 1.0)))(
        jnp.arange(S))
    per = np.asarray(per)[:, 0, 0]  # (S, K) N_s/N
    np.testing.assert_allclose(parts.mean, per.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(parts.stderr, per.std(axis=0, ddof=1) / np.sqrt(S), rtol=1e-10)


# ---------------------------------------------------------------------------------- devices


MULTI_DEVICE_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    from limits import sweep
    out = sys.argv[1]
    toy, grad = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    assert jax.device_count() == 8, jax.device_count()
    kw = dict(progress=False, log=None)
    sweep.run_sweep("toy", toy, out + "/toy8", seed=7, batch_size=1, devices=8, **kw)
    sweep.run_sweep("gradient", grad, out + "/grad8", seed=3, batch_size=4, devices=8, **kw)
    sweep.run_sweep("gradient", grad, out + "/grad2", seed=3, batch_size=4, devices=2, **kw)
    dist = json.loads(sys.argv[4])
    sweep.run_sweep("distance_model", dist, out + "/dist8", batch_size=1, devices=8, **kw)
    # Two simulated hosts on 4 devices: devices 0-1 belong to process 0, 2-3 to process 1.
    for p in (0, 1):
      s = sweep.run_sweep("toy", toy, out + "/hosts", seed=7, batch_size=2, devices=4,
                          process_index=p, device_processes=[0, 0, 1, 1], **kw)
      print(json.dumps({"process": p, "computed": s.computed, "shard": s.shard.name}))
    # The same toy cell as a host kind (engine's host path), same simulated hosts.
    import dataclasses
    host = dataclasses.replace(sweep.get_experiment("toy"), name="toy_host", host=True)
    for p in (0, 1):
      sweep.run_sweep(host, toy, out + "/hosts_host", seed=7, batch_size=2, devices=4,
                      process_index=p, device_processes=[0, 0, 1, 1], **kw)
""")


@pytest.fixture(scope="module")
def multi_device_runs(tmp_path_factory):
  out = tmp_path_factory.mktemp("multi")
  env = simulated_devices_env(8)
  _make_model(out)
  p = subprocess.run([sys.executable, "-c", MULTI_DEVICE_SCRIPT, str(out), json.dumps(TOY_GRID),
                      json.dumps(GRAD_GRID), json.dumps(_distance_grid(out))], cwd=REPO, env=env,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr[-3000:]
  hosts = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
  return out, hosts


@pytest.fixture(scope="module")
def one_device_runs(tmp_path_factory):
  """The 1-device runs several tests compare with (computed once): the toy grid (seed 7,
  batch 1) in toy1/ and the gradient grid (seed 3, batch 4) in grad1/."""
  out = tmp_path_factory.mktemp("one_device")
  _run("toy", TOY_GRID, out / "toy1", seed=7, batch_size=1)
  _run("gradient", GRAD_GRID, out / "grad1", seed=3, batch_size=4)
  return out


def test_one_and_eight_devices_give_the_same_records(one_device_runs, multi_device_runs):
  out, _ = multi_device_runs
  ref = one_device_runs
  # Keys depend only on cell ids and every device runs a (batch_size,)-shaped program: the toy
  # cell (exact float ops) is bitwise identical on 1 and 8 devices.
  assert _records(out / "toy8") == _records(ref / "toy1")
  # Any two multi-device runs compile the same partitioned program: bitwise identical.
  assert _records(out / "grad8") == _records(out / "grad2")
  # A 1-device program is compiled without partitioning and XLA may fuse it differently, so
  # float results can differ in the last bits, which g's finite difference divides by eps:
  # a few ulp(1) = 6e-8 per softmax entry -> 1e-6/eps absolute; the Jacobian norm's entries
  # a_i - a_i^2 carry ulp(1) = 1.2e-7 absolute, / T; 1e-5 relative otherwise.
  one, eight = _records(ref / "grad1"), _records(out / "grad8")
  assert [(i, c) for i, c, _ in one] == [(i, c) for i, c, _ in eight]
  for (_, c, a), (_, _, b) in zip(one, eight):
    for k in a:
      atol = 1e-6 / c["epsilon"] if k.startswith("g_") else 2.0**-23 / c["temperature"]
      np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=atol, err_msg=f"{c} {k}")


def _reference_distance_stats(model, tokens, ns, vectors="value"):
  """The reference per-row path ``distance.head_stats`` (not the fast path the kind calls) on
  every layer record of every window, float64: HeadStats (n_layer*H, K) summed over windows."""
  from limits import distance, models

  ref = jax.jit(distance.head_stats, static_argnames=("n_cap", "bound"))
  parts = []
  for w in range(tokens.shape[0]):
    layers = []
    for _, rec in models.iter_layers(model.params, tokens[w:w + 1], model.config):
      x = jnp.asarray(distance.record_vectors(rec, vectors), jnp.float64)
      st = ref(jnp.asarray(rec.weights, jnp.float64), x, jnp.asarray(ns),
               n_cap=tokens.shape[1] - 1, bound=True)  # (1, H, K)
      layers.append([np.asarray(v)[0] for v in st])
    parts.append([np.concatenate([l[f] for l in layers]) for f in range(len(layers[0]))])
  return distance.HeadStats(*[
      np.max(np.stack(v), axis=0) if name.startswith("max_ratio") else np.sum(np.stack(v), axis=0)
      for name, v in zip(distance.HeadStats._fields, zip(*parts))])


def test_distance_model_cells_match_the_reference_path(tmp_path, multi_device_runs):
  """Model cells (a host kind calling distance.ModelEvaluator) against the per-row reference
  path distance.head_stats, float64, on the random model; the float32 run on 8 simulated
  devices agrees."""
  from limits.records import sources

  out, _ = multi_device_runs
  grid = {**_distance_grid(out), "length": [16], "vectors": ["value", "key"]}
  with jax.enable_x64(True):
    _run("distance_model", grid, tmp_path / "dist64", batch_size=2)
    recs = _records(tmp_path / "dist64")
    model = sources.load_model(grid["model"])
    H = model.config.n_layer * model.config.n_head
    tokens = np.asarray(sources.corpus_windows(model, 16, 2, text=grid["text"]))
    refs = {v: _reference_distance_stats(model, tokens, grid["n"], v) for v in grid["vectors"]}
    assert len(recs) == 4
    for _, c, a in recs:
      L, n, k = c["length"], c["n"], grid["n"].index(c["n"])
      st = refs[c["vectors"]]
      cnt = np.asarray(st.count[:, k], np.float64)
      # Every query t > N of every head and window is one row (closed form).
      assert a["rows"] == int(cnt.sum()) == H * 2 * (L - n)
      assert a["violations"] == int(np.sum(st.viol_sum[:, k])) == 0  # Theorem 1 (Eq. 9)
      for key, field in (("d_mean", "d_sum"), ("expected_mean", "expected"),
                         ("dmax_mean", "dmax_sum")):
        ref = np.mean(np.asarray(getattr(st, field))[:, k] / cnt)
        np.testing.assert_allclose(a[key], ref, rtol=1e-10, err_msg=f"{c} {key}")
      np.testing.assert_allclose(a["max_ratio"], np.max(st.max_ratio_sum[:, k]), rtol=1e-10)
  # The float32 run on 8 simulated devices (one host call per batch of 8 slots) against the
  # float64 cells above: sums of <= 32 terms of size ~10, 1e-5 relative.
  by_cell = {(c["n"], c["vectors"]): a for _, c, a in recs}
  eight = _records(out / "dist8")
  assert len(eight) == 2
  for _, c, b in eight:
    a = by_cell[(c["n"], c["vectors"])]
    assert a["rows"] == b["rows"] and a["violations"] == b["violations"] == 0
    for key in ("d_mean", "expected_mean", "dmax_mean", "max_ratio"):
      np.testing.assert_allclose(b[key], a[key], rtol=1e-5, err_msg=f"{c} {key} f32 8 devices")


def test_padding_when_devices_do_not_divide_cells(one_device_runs, multi_device_runs):
  out, _ = multi_device_runs
  # 8 devices x batch 1: each group of 7 cells is one batch padded to 8; padding dropped.
  lines = [l for l in _lines(out / "toy8" / "records.0.jsonl") if l]
  ids = [json.loads(l)["id"] for l in lines]
  assert len(ids) == 14 and len(set(ids)) == 14
  assert _records(out / "toy8") == _records(one_device_runs / "toy1")  # seed 7, batch 1


def test_simulated_multi_host_writes_own_shards(one_device_runs, multi_device_runs):
  out, hosts = multi_device_runs
  d = out / "hosts"
  assert sorted(p.name for p in sweep.shard_paths(d)) == ["records.0.jsonl", "records.1.jsonl"]
  assert [h["shard"] for h in hosts] == ["records.0.jsonl", "records.1.jsonl"]
  ids = [{json.loads(l)["id"] for l in _lines(d / f"records.{p}.jsonl") if l} for p in (0, 1)]
  # Expected owners, from the layout: 4 devices x batch 2 = global batches of 8 slots; the
  # j-th cell of a static group (grid order) sits in slot j % 8 on device (j % 8) // 2, and
  # devices 0-1 belong to process 0, 2-3 to process 1.
  g = sweep.get_experiment("toy").make_grid(TOY_GRID)
  expect = ({*()}, {*()})
  for n in (2, 3):
    group = [cid for cid, c in zip(g.ids, g.cells) if c["n"] == n]
    for j, cid in enumerate(group):
      expect[((j % 8) // 2) // 2].add(cid)
  assert ids[0] == expect[0] and ids[1] == expect[1]
  assert (len(ids[0]), len(ids[1])) == (8, 6)
  assert [h["computed"] for h in hosts] == [8, 6]
  assert _records(d) == _records(one_device_runs / "toy1")  # seed 7, batch 1, one device


def test_host_kind_splits_batches_between_processes_like_a_traced_kind(multi_device_runs):
  """The engine's host path (toy's cell function called on the host) on two simulated hosts:
  each process writes the cells its devices own in the sharded path, with the same records."""
  out, _ = multi_device_runs
  for p in (0, 1):
    traced = {json.loads(l)["id"] for l in _lines(out / "hosts" / f"records.{p}.jsonl") if l}
    host = {json.loads(l)["id"] for l in _lines(out / "hosts_host" / f"records.{p}.jsonl") if l}
    assert host == traced
  assert _records(out / "hosts_host") == _records(out / "hosts")


def test_select_devices_errors():
  n = jax.device_count()
  with pytest.raises(LimitsError, match="only"):
    sweep.select_devices(n + 1)
  assert len(sweep.select_devices(None)) == n and len(sweep.select_devices(1)) == 1


# ---------------------------------------------------------------------------------- store


def test_resume_skips_finished_cells(tmp_path):
  s1 = _run("toy", TOY_GRID, tmp_path, batch_size=2)
  first = _records(tmp_path)
  s2 = _run("toy", TOY_GRID, tmp_path, batch_size=2)
  assert (s1.computed, s2.computed, s2.done_before) == (14, 0, 14)
  assert _records(tmp_path) == first
  assert len([l for l in _lines(tmp_path / "records.0.jsonl") if l]) == 14


def test_partial_trailing_record_is_truncated_and_recomputed(tmp_path):
  _run("toy", TOY_GRID, tmp_path, batch_size=2)
  ref = _records(tmp_path)
  shard = tmp_path / "records.0.jsonl"
  data = shard.read_bytes()
  lines = data.split(b"\n")[:-1]
  # Simulate a crash mid-write: the last record only half written, no newline.
  half = lines[-1][: len(lines[-1]) // 2]
  shard.write_bytes(b"\n".join(lines[:-1]) + b"\n" + half)
  rep = sweep.read_shard(shard)
  assert len(rep.records) == 13 and "partial" in rep.problems[0]
  msgs = []
  s = _run("toy", TOY_GRID, tmp_path, batch_size=2, log=msgs.append)
  assert s.computed == 1 and any("line 14" in m and "recomputed" in m for m in msgs)
  assert _records(tmp_path) == ref
  assert (tmp_path / "records.0.jsonl.corrupt").read_bytes() == half + b"\n"
  assert all(sweep.parse_record_line(l)[0] for l in _lines(shard) if l)


def test_checksum_mismatch_is_detected_and_recomputed(tmp_path):
  _run("toy", TOY_GRID, tmp_path, batch_size=2)
  ref = _records(tmp_path)
  shard = tmp_path / "records.0.jsonl"
  lines = shard.read_bytes().split(b"\n")
  rec = json.loads(lines[3])
  old = json.dumps(rec["result"]["square"]).encode()
  assert old in lines[3]
  # Valid JSON, wrong content: only the checksum can tell.
  lines[3] = lines[3].replace(b'"square":' + old, b'"square":' + json.dumps(
      rec["result"]["square"] + 1.0).encode())
  json.loads(lines[3])
  shard.write_bytes(b"\n".join(lines))
  assert sweep.parse_record_line(lines[3]) == (None, "checksum mismatch")
  # collect is read-only: it skips the bad record.
  assert rec["id"] not in {r["id"] for r in sweep.collect(tmp_path)}
  s = _run("toy", TOY_GRID, tmp_path, batch_size=2)
  assert s.computed == 1 and any("checksum mismatch" in p for p in s.problems)
  assert _records(tmp_path) == ref
  assert b"\n".join(l for l in lines if l) .count(b"\n") == 13


def test_garbage_line_in_the_middle_is_removed(tmp_path):
  _run("toy", TOY_GRID, tmp_path, batch_size=2)
  ref = _records(tmp_path)
  shard = tmp_path / "records.0.jsonl"
  lines = shard.read_bytes().split(b"\n")
  lines[5] = b'{"not": "a record"'
  shard.write_bytes(b"\n".join(lines))
  s = _run("toy", TOY_GRID, tmp_path, batch_size=2)
  assert s.computed == 1 and "line 6" in s.problems[0]
  assert _records(tmp_path) == ref


def test_different_grid_or_config_is_refused(tmp_path):
  _run("toy", TOY_GRID, tmp_path, batch_size=2)
  with pytest.raises(LimitsError, match="different sweep with recorded cells: grid axis 'x': "):
    _run("toy", {"x": [0.0]}, tmp_path)
  with pytest.raises(LimitsError, match="seed: 0 before, 1 now"):
    _run("toy", TOY_GRID, tmp_path, seed=1)
  with pytest.raises(LimitsError, match="experiment: 'toy' before, 'gradient' now"):
    _run("gradient", GRAD_GRID, tmp_path)
  with pytest.raises(LimitsError, match="not empty"):
    _run("toy", TOY_GRID, tmp_path, resume=False)
  # Execution settings do not change the numbers: a different batch size may resume.
  assert _run("toy", TOY_GRID, tmp_path, batch_size=5).computed == 0


def test_collect_merges_shards_in_grid_order(tmp_path):
  exp = sweep.get_experiment("toy")
  g = exp.make_grid(TOY_GRID)
  _run("toy", g, tmp_path, batch_size=2)
  shard = tmp_path / "records.0.jsonl"
  lines = [l for l in shard.read_bytes().split(b"\n") if l]
  # Spread the records over three shard files in reverse order.
  shard.unlink()
  for p, part in enumerate((lines[:5], lines[5:9], lines[9:])):
    (tmp_path / f"records.{p + 2}.jsonl").write_bytes(b"\n".join(part[::-1]) + b"\n")
  recs = sweep.collect(tmp_path, complete=True)
  assert [r["id"] for r in recs] == g.ids and [r["index"] for r in recs] == list(range(14))
  (tmp_path / "records.3.jsonl").unlink()
  with pytest.raises(LimitsError, match="4 of 14 cells have no record"):
    sweep.collect(tmp_path, complete=True)


def test_shard_path_naming():
  assert sweep.shard_path("/r", 0).name == "records.0.jsonl"
  assert sweep.shard_path("/r", 12).name == "records.12.jsonl"


def test_maybe_initialize_distributed_reads_environment(monkeypatch):
  calls = []
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
  monkeypatch.setattr(sweep.devices, "_DISTRIBUTED_DONE", False)
  assert sweep.maybe_initialize_distributed({}) is False and calls == []
  assert sweep.maybe_initialize_distributed({"LIMITS_DISTRIBUTED": "0"}) is False
  env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "2",
         "JAX_PROCESS_ID": "1"}
  assert sweep.maybe_initialize_distributed(env) is True
  assert calls == [{"coordinator_address": "10.0.0.1:1234", "num_processes": 2,
                    "process_id": 1}]
  monkeypatch.setattr(sweep.devices, "_DISTRIBUTED_DONE", False)
  assert sweep.maybe_initialize_distributed({"LIMITS_DISTRIBUTED": "1"}) is True
  assert calls[-1] == {}
  monkeypatch.setattr(sweep.devices, "_DISTRIBUTED_DONE", False)
  with pytest.raises(LimitsError, match="JAX_PROCESS_ID"):
    sweep.maybe_initialize_distributed({"LIMITS_DISTRIBUTED": "1", "JAX_PROCESS_ID": "x"})
