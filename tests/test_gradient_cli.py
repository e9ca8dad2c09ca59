"""experiments.gradient end to end in a subprocess: files written, the 1/(4T) finding reported,
bad flags rejected with a one-line message and no traceback."""

import csv
import json
import re
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "experiments.gradient", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)


def _assert_clean_failure(r):
  assert r.returncode != 0, r.stdout + r.stderr
  assert "Traceback" not in r.stderr + r.stdout
  lines = [l for l in r.stderr.splitlines() if l.strip() and not l.startswith("Pass --help")]
  lines = [l for l in lines if "xla_bridge" not in l and "libtpu" not in l]
  assert len(lines) == 1, r.stderr  # one message line (absl adds a "Pass --help..." hint)
  return lines[0]


def test_single_temperature_end_to_end(tmp_path):
  out = tmp_path / "run"
  T = 0.25
  r = run(f"--temperature={T}", "--rows=12", "--length=10", "--check_rows=4",
          f"--out_dir={out}", "--seed=3")
  assert r.returncode == 0, r.stderr
  for f in ("results.json", "gradient.csv", "rows.csv", "gradient.png"):
    assert (out / f).is_file() and (out / f).stat().st_size > 0, f
  res = json.loads((out / "results.json").read_text())
  assert set(res) == {"experiment", "config", "env", "results"}
  assert res["config"]["temperature"] == T and res["env"]["seed"] == 3
  s = res["results"]["per_temperature"][0]
  # Independent of the code under test: the bounds' closed forms at T.
  assert s["paper_bound"] == pytest.approx(min(1 / (4 * T), math.sqrt(2)))
  assert s["tight_bound"] == pytest.approx(1 / (2 * T))
  # The counterexample row is reported and violates the paper's form (T‖J‖ = 1/2 > 1/4).
  assert s["counterexample"]["T_norm"] == pytest.approx(0.5, rel=1e-12)
  assert s["counterexample"]["exceeds_paper"] is True
  from limits import claims
  by_id = {a.claim.id: a for a in claims.assess_step("gradient", res["results"])}
  assert by_id["cor3-printed"].verdict == "fails"
  assert claims.assess(claims.BY_ID["cor3-tight"],
                       claims.summarize("gradient", res["results"])).verdict == "holds"
  # The CLI prints the registry's verdicts on the claims its step decides (synthetic rows).
  assert "claims decided by step gradient_synthetic" in r.stdout
  assert "simplex-diameter: holds" in r.stdout
  assert "1/(4T) finding" in r.stdout and "YES" in r.stdout
  # Per-row flags agree with an independent recomputation from the per-row norms.
  rows = list(csv.DictReader((out / "rows.csv").open()))
  assert len(rows) == 12
  norms = np.array([float(x["norm"]) for x in rows])
  flags = np.array([x["exceeds_paper"] == "True" for x in rows])
  np.testing.assert_array_equal(flags, norms > min(1 / (4 * T), math.sqrt(2)) * (1 + 1e-13))
  assert s["n_exceed_paper"] == int(flags.sum())
  assert np.all(norms <= 1 / (2 * T) * (1 + 1e-12))
  # jacrev and central differences agreed with jacfwd within the stated tolerances.
  assert s["checks"]["jacrev"]["ok"] and s["checks"]["fd"]["ok"] and s["closed_form"]["ok"]


def test_model_source(tmp_path):
  """--source=model through the task in this process, as the CLI runs it (float64; the CLI
  around it: the test above); the results block is what results.json holds."""
  import jax

  from limits.gradient import task as gradient
  from limits.models.gpt2 import testing

  text = tmp_path / "text.txt"
  words = ("Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. "
           "But I warn you, if you don't tell me that this means war. ") * 40
  text.write_text(words)
  model = testing.make_random_model_dir(tmp_path / "model", n_layer=2, n_head=2, n_embd=16,
                                        n_positions=32, text=words)
  config = gradient.GradientConfig(source="model", model=str(model), text=str(text), length=12,
                                   temperature=8, epsilons="0.01,1", rows=10, check_rows=2)
  with jax.enable_x64(config.x64):
    res = gradient.run(gradient.plan(config), log=lambda s: None).results
  assert res["complete"] is True and res["source"]["source"] == "model"
  assert res["n_rows"] == 2 * 2 * 12  # layers × heads × queries
  for s in res["per_temperature"]:
    assert s["exact_rows"] == 10 and s["all_rows"] == 48
    for g in s["g"].values():
      assert "paper_stat_head" in g and g["paper_stat"] <= g["max"] + 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("name", ["entmax", "sparsemax", "ssmax", "sa_softmax"])
def test_other_normalizers_and_long_rows(name, tmp_path):
  out = tmp_path / name
  # L = 40 > --dense_max_length=32: the matrix-free path.
  r = run(f"--normalizer={name}", "--alpha=1.5", "--temperatures=0.5,2", "--rows=6",
          "--length=40", "--dense_max_length=32", f"--out_dir={out}")
  assert r.returncode == 0, r.stderr
  res = json.loads((out / "results.json").read_text())["results"]
  assert res["per_temperature"][0]["exact_method"].startswith("matfree")
  assert (out / "gradient.png").is_file()


@pytest.mark.parametrize("args,needle", [
    (["--temperature=-1"], "temperature"),
    (["--temperature=0"], "temperature"),
    (["--temperatures="], "temperatures"),
    (["--temperatures=1,-2"], "temperature"),
    (["--temperature=1", "--temperatures=1,2"], "either"),
    (["--normalizer=nope"], "nope"),
    (["--normalizer=entmax", "--alpha=1"], "alpha"),
    (["--epsilons=0"], "epsilon"),
    (["--source=web"], "source"),
])
def test_bad_flags_fail_cleanly(args, needle, tmp_path):
  r = run(*args, f"--out_dir={tmp_path / 'bad'}", timeout=120)
  line = _assert_clean_failure(r)
  assert needle in line, line
  assert not (tmp_path / "bad" / "results.json").exists()


@pytest.mark.slow  # two model runs over 11 temperatures (~1 min on 2 cores)
def test_sampled_plan_gives_the_exhaustive_verdicts(tmp_path):
  """g(T, ε) on a seeded sample of 16 rows per (layer, head) against every row (--fd_rows
  larger than any head): the same verdict on every claim. The exact norms cover every row in
  both plans, so Corollary 3 / Lemma 2 counts are identical; only the Fig. 4 statistics move.

  Changed after a result was seen (twenty-seventh session): the sample was 8 rows per head.
  When g's directions became one per (row, ε) for every temperature (``task.direction_key``),
  the 8-row sample gave fig4-collapse a spread of 0.384 decades (fails: ×2 is 0.301) against
  0.121 on every row; 16 rows gave 0.139 (32 rows 0.103), and fig4-inverse-t's slope −0.849
  (32: −0.884) against −0.762. 8 of a head's 128 rows is too small a sample for a max over
  heads near the criterion's edge; 16 is one in eight."""
  from limits.models.gpt2 import testing

  words = ("Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. "
           "But I warn you, if you don't tell me that this means war. ") * 40
  text = tmp_path / "text.txt"
  text.write_text(words)
  model = testing.make_random_model_dir(tmp_path / "model", n_layer=2, n_head=2, n_embd=16,
                                        n_positions=64, text=words)
  temps = "1e-3,3e-3,1e-2,3e-2,0.1,0.3,1,3,10,30,100"
  res = {}
  for label, fd in (("sampled", 16), ("exhaustive", 10_000)):
    out = tmp_path / label
    r = run("--source=model", f"--model={model}", f"--text={text}", "--length=64",
            "--windows=2", f"--temperatures={temps}", f"--fd_rows={fd}", "--rows=8",
            "--check_rows=0", f"--out_dir={out}")
    assert r.returncode == 0, r.stderr
    res[label] = json.loads((out / "results.json").read_text())["results"]
  assert res["sampled"]["sampling"]["fd_rows"] == 2 * 2 * 16
  assert res["exhaustive"]["sampling"]["fd_rows"] == res["exhaustive"]["n_rows"] == 2 * 2 * 128
  from limits import claims
  for cid in ("cor3-printed", "cor3-tight", "lemma2", "fig4-collapse"):
    a, b = (claims.assess(claims.BY_ID[cid], claims.summarize("gradient", res[k])).verdict
            for k in ("sampled", "exhaustive"))
    assert a == b, (cid, a, b)
  # fig4-inverse-t: since issue 28 the ε whose 1/T trend is impossible (here 0.1 and 10) are
  # left out, and the one curve left (ε = 1e-3) sits at the criterion's edge on this random
  # model (slope −0.66 sampled, −0.76 exhaustive, against |slope + 1| ≤ 0.25), so its verdict
  # can differ between plans (seen 2026-12-05; this test asserted equal verdicts before). What
  # the plan must keep: the same ε left out, and each slope within 0.15 of the exhaustive one
  # (the spread of a max over 8 sampled rows per head against all 128; 16 since the change above).
  fig4 = [claims.assess(claims.BY_ID["fig4-inverse-t"], claims.summarize("gradient", res[k]))
          for k in ("sampled", "exhaustive")]
  slopes = [dict((e, float(v)) for e, v in re.findall(r"ε = ([^:]+): (-?[0-9.]+)",
                                                       a.default.measured)) for a in fig4]
  left_out = [re.findall(r"(?:^|; )ε = ([^:;]+): a 1/T trend", a.default.vacuous or "")
              for a in fig4]
  assert left_out[0] == left_out[1] and slopes[0].keys() == slopes[1].keys() and slopes[0]
  for e in slopes[0]:
    assert abs(slopes[0][e] - slopes[1][e]) <= 0.15, (e, slopes)
  for a, b in zip(res["sampled"]["per_temperature"], res["exhaustive"]["per_temperature"]):
    assert a["all_rows_n_exceed_paper"] == b["all_rows_n_exceed_paper"]
