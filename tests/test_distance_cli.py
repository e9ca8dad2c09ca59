"""experiments.distance end to end on a random-weight model directory and a small text file."""

import csv
import json

import numpy as np
import pytest

from tests.cli_helpers import REPO, make_model_and_texts, run_experiment


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("distance_cli")
  return make_model_and_texts(root, n_layer=2, n_head=3, n_embd=24,
                              n_positions=64, vocab_size=300, seed=1)


def run(args, cwd=REPO):
  return run_experiment("distance", args, cwd=cwd)


def common(root, out):
  return [f"--model={root / 'model'}", f"--text={root / 'text.txt'}", f"--out_dir={out}"]


def test_vary_length_end_to_end(model_dir, tmp_path):
  out = tmp_path / "vl"
  p = run(common(model_dir, out) + ["--mode=vary_length", "--lengths=16,32", "--ns=2,5",
                                    "--x64", "--vectors=hidden"])
  assert p.returncode == 0, p.stderr
  for f in ("results.json", "per_head.csv", "summary.csv", "fig2_vary_length.png"):
    assert (out / f).is_file(), f
  res = json.loads((out / "results.json").read_text())
  assert res["experiment"] == "distance" and res["results"]["complete"] is True
  summary = res["results"]["summary"]
  assert sum(s["violations_sum"] for s in summary) == 0  # Theorem 1 (float64)
  assert "verdicts" not in res["results"]  # measurements only (issue 26)
  # 2 lengths x 2 Ns x (2 layers x 3 heads) per-head rows; queries per row = L - N.
  rows = list(csv.DictReader((out / "per_head.csv").open()))
  assert len(rows) == 2 * 2 * 6
  assert all(int(r["queries"]) == int(r["L"]) - int(r["N"]) for r in rows)
  assert sum(s["rows_checked"] for s in summary) == sum(int(r["queries"]) for r in rows)
  # Independent recomputation of one head (layer 1, head 2, L = 16, N = 5) from the model
  # with a per-query NumPy loop over explicit vector differences.
  from limits import models
  from limits.records import sources

  m = sources.load_model(str(model_dir / "model"))
  toks = sources.corpus_windows(m, 16, 1, text=model_dir / "text.txt")
  rec = dict(models.iter_layers(m.params, toks, m.config))[1]
  w = np.asarray(rec.weights[0, 2], np.float64)
  x = np.asarray(rec.x[0], np.float64)
  vals = []
  for t in range(5, 16):  # queries with t + 1 > N = 5 visible keys
    a = w[t, :t + 1]
    sel = sorted(range(t + 1), key=lambda i: (-a[i], i))[:5]
    s = sum(a[j] * x[j] for j in sel)
    vals.append(sum(np.linalg.norm(a[i] * x[i] - s) for i in range(t + 1) if i not in sel))
  got = next(r for r in rows if r["L"] == "16" and r["N"] == "5" and r["layer"] == "1"
             and r["head"] == "2")
  # float32 forward shared by both sides, sums in float64: relative 1e-5 covers the float32
  # weights/vectors being cast once (both sides use the same cast values).
  np.testing.assert_allclose(float(got["d_sum"]), np.mean(vals), rtol=1e-5)


def run_task(root, out, **settings):
  """The distance task in this process, as the CLI runs it (float64 unless x64=False)."""
  import jax

  from limits.distance import task as distance_task

  config = distance_task.DistanceConfig(model=str(root / "model"), text=str(root / "text.txt"),
                                        out_dir=str(out), **settings)
  with jax.enable_x64(config.x64):
    return distance_task.run(config)


def test_vary_n_and_critical_n(model_dir, tmp_path):
  """Algorithms 2 and 3 through the task in process (the CLI around it: the test above)."""
  out = tmp_path / "vn"
  assert run_task(model_dir, out, mode="vary_n", lengths="32", ns="1,5,20,30") == out
  res = json.loads((out / "results.json").read_text())["results"]
  from limits import claims
  by_id = {a.claim.id: a for a in claims.assess_step("distance_vary_n", res)}
  assert by_id["fig2b-plateau"].verdict in (claims.HOLDS, claims.FAILS)
  assert (out / "fig2_vary_n.png").is_file()
  out = tmp_path / "cn"
  run_task(model_dir, out, mode="critical_n", lengths="16,32", search="scan", batch=4, max_n=6)
  res = json.loads((out / "results.json").read_text())["results"]
  crit = res["critical_n"]
  assert set(crit) == {"16", "32"}
  for L, c in crit.items():
    # The scan's answer is the first probed N whose p-value exceeds alpha.
    passing = [int(n) for n, pv in c["evaluated"].items() if pv > 0.01]
    assert c["critical_n"] == (min(passing) if passing else None)
    assert max(int(n) for n in c["evaluated"]) <= 6
  assert (out / "critical_n.csv").is_file() and (out / "fig2_critical_n.png").is_file()


def _assert_usage_error(p, needle):
  assert p.returncode != 0
  assert "Traceback" not in p.stderr
  lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()
           and not ln.startswith(("I1", "W1", "E1"))]  # absl/XLA log lines
  msg = [ln for ln in lines if needle in ln]
  assert len(msg) == 1, p.stderr


@pytest.mark.parametrize("args,needle", [
    (["--mode=vary_n", "--lengths=16", "--ns=16"], "N=16 >= L=16"),
    (["--mode=vary_length", "--lengths=16,128"], "L=128, beyond the context"),
    (["--vectors=bogus"], "--vectors=bogus"),
    (["--ks_alpha=2"], "ks_alpha"),
    (["--windows=0"], "windows"),
])
def test_bad_values(model_dir, tmp_path, args, needle):
  _assert_usage_error(run(common(model_dir, tmp_path / "bad") + args), needle)


def test_empty_corpus(model_dir, tmp_path):
  p = run([f"--model={model_dir / 'model'}", f"--text={model_dir / 'empty.txt'}",
           f"--out_dir={tmp_path / 'e'}", "--lengths=16", "--ns=2"])
  assert p.returncode != 0 and "Traceback" not in p.stderr
  assert p.stderr.strip().splitlines()[-1].startswith("error:"), p.stderr
