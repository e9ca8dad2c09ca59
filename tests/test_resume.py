"""An interrupted run continues from its last finished unit (issue 30, item 1;
limits.runs.resume): distance (every mode), separability (sphere and model), gradient and
vanishing.

Each experiment runs in this process three times on a tiny random model or a small synthetic
size: once uninterrupted (the reference), once interrupted at a safe point right after its
k-th unit was written (``interrupts.check`` raises :class:`Interrupted` there, as after a
Ctrl-C), and once more, the same command in the same folder. The rerun must (a) not recompute
the k finished units (the compute function is counted, and results.json's ``resume`` block
says k resumed, the rest computed) and (b) write tables and results.json identical to the
reference, as text (every number bit for bit), less timing fields.
"""

import csv
import json
import math

import numpy as np
import pytest

from limits.runs import interrupts, resume
from limits.runs import results as res_lib

# Timing fields (and bookkeeping that differs by construction): not compared.
VOLATILE = {"seconds", "row_seconds", "wall_s", "timings_s", "per_N_seconds", "env",
            resume.BLOCK}


# ----------------------------------------------------------------------------- the codec


def _same_bits(a, b):
  if isinstance(a, dict):
    return isinstance(b, dict) and list(a) == list(b) and all(_same_bits(a[k], b[k]) for k in a)
  if isinstance(a, (list, tuple)):
    return isinstance(b, list) and len(a) == len(b) and all(map(_same_bits, a, b))
  if isinstance(a, (np.ndarray, np.generic)) or hasattr(a, "__array__"):
    a = np.asarray(a)
    return (type(b) is (np.ndarray if isinstance(b, np.ndarray) else type(b)) and
            a.dtype == b.dtype and a.shape == np.shape(b) and
            a.tobytes() == np.asarray(b).tobytes())
  if isinstance(a, float):
    return type(b) is float and (math.isnan(a) and math.isnan(b) or
                                 np.float64(a).tobytes() == np.float64(b).tobytes())
  return type(a) is type(b) and a == b


def test_codec_round_trips_every_payload_bit_for_bit_through_json():
  import jax.numpy as jnp

  payload = {
      "f32": np.array([[0.1, np.nan], [np.inf, -0.0]], np.float32),
      "f64": np.array([1 / 3, -np.inf, 5e-324]), "ints": np.arange(3, dtype=np.int16),
      "bools": np.array([True, False]), "scalar32": np.float32(0.1), "scalar64": np.float64(2 / 3),
      "nan_scalar": np.float32("nan"), "i64": np.int64(-7), "flag": np.bool_(True),
      "jax": jnp.asarray([0.7, 1.25], jnp.float32), "py": [0.1, float("nan"), -float("inf"), 3,
                                                            True, None, "nan", (1, 2.5)],
      "nested": {"a": [{"b": np.zeros((0, 2))}]},
      "keys": {1: 0.5, 2.5: "x", "s": 1, np.int64(3): np.float32(1.5)}}
  back = resume.decode(json.loads(json.dumps(resume.encode(payload))))
  assert list(back) == list(payload)
  for k in payload:
    assert _same_bits(payload[k], back[k]), k
  assert back["py"][6] == "nan"  # a string stays a string (only tagged floats are NaN)
  assert type(back["scalar32"]) is np.float32 and back["jax"].dtype == np.float32
  # float32 0.1 read back as float64 would differ in its bits: the dtype is kept
  assert back["scalar32"] != np.float64(np.float32(0.1)) or back["scalar32"].dtype == np.float32


@pytest.mark.parametrize("bad", [{(1, 2): 2}, {"x": object()}, {"x": np.array(["a"])}])
def test_codec_refuses_what_it_cannot_restore(bad):
  with pytest.raises(TypeError):
    resume.encode(bad)


def test_units_are_restored_only_for_the_same_experiment_config_and_unit(tmp_path):
  config = {"lengths": "16,32", "x": 1.5}
  units = resume.Units("L")
  units.add("L=16", {"v": np.float32(0.25)})
  res_lib.write_results(tmp_path, "exp", config, {resume.BLOCK: units.block()})
  assert resume.Units.open(tmp_path, "exp", config, "L").get("L=16") == {"v": np.float32(0.25)}
  for args in [("other", config, "L"), ("exp", {**config, "x": 2.5}, "L"),
               ("exp", config, "N")]:
    assert resume.Units.open(tmp_path, *args).get("L=16") is None, args
  final = resume.Units("L")
  final.add("L=16", {})
  assert "partial" not in final.block(final=True) and "partial" in final.block()
  res_lib.write_results(tmp_path, "exp", config, {resume.BLOCK: final.block(final=True)})
  assert resume.Units.open(tmp_path, "exp", config, "L").get("L=16") is None  # complete run
  broken = resume.Units("L")
  broken.add("L=16", {"v": np.float32(0.25)})
  block = broken.block()
  block["partial"]["L=16"]["v"]["__npscalar__"][0] = "not a dtype"  # hand-edited
  res_lib.write_results(tmp_path, "exp", config, {resume.BLOCK: block})
  assert resume.Units.open(tmp_path, "exp", config, "L").get("L=16") is None
  (tmp_path / "results.json").write_text("{truncated")
  assert resume.Units.open(tmp_path, "exp", config, "L").get("L=16") is None


# ----------------------------------------------------------------------------- the harness


def _strip(obj):
  if isinstance(obj, dict):
    return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
  if isinstance(obj, list):
    return [_strip(v) for v in obj]
  return obj


def _outputs(out):
  """results.json less timings, and every CSV as text rows less timing columns."""
  values = {"results.json": _strip(json.loads((out / "results.json").read_text()))}
  for path in sorted(out.glob("*.csv")):
    with open(path, newline="", encoding="utf-8") as f:
      values[path.name] = [{k: v for k, v in r.items() if k not in VOLATILE}
                           for r in csv.DictReader(f)]
  return values


def _count(monkeypatch, owner, name):
  calls = []
  original = getattr(owner, name)

  def counted(*a, **k):
    calls.append(1)
    return original(*a, **k)

  monkeypatch.setattr(owner, name, counted)
  return calls


def _interrupt_after(monkeypatch, k):
  """interrupts.check raises at the first safe point after the k-th unit was recorded."""
  added = []
  original_add, original_check = resume.Units.add, interrupts.check

  def add(self, key, payload):
    added.append(key)
    return original_add(self, key, payload)

  def check():
    if len(added) >= k:
      raise interrupts.Interrupted("test")
    original_check()

  monkeypatch.setattr(resume.Units, "add", add)
  monkeypatch.setattr(interrupts, "check", check)
  return added


def _check_resume(monkeypatch, tmp_path, run, k, units, counted):
  """Reference run, interrupted run (after k units), rerun: the rerun computes units - k
  units (``counted`` = (owner, name, calls the rerun makes) of the compute function) and
  equals the reference."""
  run(tmp_path / "reference")
  reference = _outputs(tmp_path / "reference")
  block = json.loads((tmp_path / "reference" / "results.json").read_text())["results"]
  assert block[resume.BLOCK] == {"unit": block[resume.BLOCK]["unit"], "units": units,
                                 "resumed": 0, "computed": units}
  out = tmp_path / "run"
  with monkeypatch.context() as m:
    added = _interrupt_after(m, k)
    with pytest.raises(interrupts.Interrupted):
      run(out)
  assert len(added) == k
  kept = json.loads((out / "results.json").read_text())["results"]
  assert kept["complete"] is False and len(kept[resume.BLOCK]["partial"]) == k
  with monkeypatch.context() as m:
    owner, name, expected = counted
    calls = _count(m, owner, name)
    run(out)
  done = json.loads((out / "results.json").read_text())["results"]
  assert done["complete"] is True
  assert done[resume.BLOCK]["resumed"] == k and done[resume.BLOCK]["computed"] == units - k
  assert "partial" not in done[resume.BLOCK]
  assert len(calls) == expected, (len(calls), units, k)
  assert _outputs(out) == reference
  # experiments.compare --values sees no difference either (the resume counts are bookkeeping)
  from limits.claims import value_diff

  diff = value_diff.diff_runs(("reference", tmp_path / "reference"), ("resumed", out))
  assert [(d.differing, d.others) for d in diff] == [(0, ())], diff


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """A random 2-layer GPT-2 (64 positions) and a text file."""
  from limits.models.gpt2.testing import SAMPLE_TEXT, make_random_model_dir

  root = tmp_path_factory.mktemp("resume")
  model = make_random_model_dir(root / "model", n_layer=2, n_head=2, n_embd=32,
                                n_positions=64)
  text = root / "text.txt"
  text.write_text(SAMPLE_TEXT * 3)
  return model, text


def _locked(experiment, run_fn):
  """Runs ``run_fn(out)`` in a prepared, locked folder (as the CLIs do), float64."""
  import jax

  def run(out):
    out = res_lib.prepare_out_dir(out, experiment, identity={}, overwrite=False)
    try:
      with jax.enable_x64(True):
        return run_fn(out)
    finally:
      res_lib.release_dir(out)

  return run


# ----------------------------------------------------------------------------- experiments


@pytest.mark.parametrize("mode,settings,units,k,counted", [
    ("vary_length", {"lengths": "16,24,32"}, 3, 2, "head_stats"),
    ("vary_n", {"lengths": "24,32", "ns": "1,5"}, 2, 1, "head_stats"),
    # critical_n: a unit per L for the search and one for the scan (3 = L=16's search and
    # scan, L=32's search): the rerun does only L=32's scan.
    ("critical_n", {"lengths": "16,32", "search": "scan", "batch": 4, "max_n": 6}, 4, 3,
     "scan_pvalues"),
])
def test_distance_resumes(mode, settings, units, k, counted, tiny, tmp_path, monkeypatch):
  from limits.distance import model as distance_model
  from limits.distance import task as distance_task

  model, text = tiny

  def run(out):
    config = distance_task.DistanceConfig(mode=mode, model=str(model), text=str(text),
                                          windows=1, out_dir=str(out), plot=False, **settings)
    import jax

    with jax.enable_x64(True):
      return distance_task.run(config)

  owner = distance_task if counted == "scan_pvalues" else distance_model.ModelEvaluator
  _check_resume(monkeypatch, tmp_path, run, k, units, (owner, counted, 1))  # one unit left


def test_distance_critical_n_resumes_after_a_search_without_redoing_it(tiny, tmp_path,
                                                                      monkeypatch):
  from limits.distance import model as distance_model
  from limits.distance import task as distance_task

  model, text = tiny

  def run(out):
    import jax

    config = distance_task.DistanceConfig(mode="critical_n", model=str(model), text=str(text),
                                          windows=1, out_dir=str(out), plot=False,
                                          lengths="16,32", search="scan", batch=4, max_n=6)
    with jax.enable_x64(True):
      return distance_task.run(config)

  # 1 unit (L=16's search) kept: the rerun searches only L=32
  _check_resume(monkeypatch, tmp_path, run, 1, 4,
                (distance_model.ModelEvaluator, "critical_n", 1))


def test_vanishing_resumes(tiny, tmp_path, monkeypatch):
  from limits import vanishing

  model, text = tiny

  def run(out):
    import jax

    config = vanishing.VanishingConfig(model=str(model), text=str(text), windows=2,
                                       lengths="16,32,64", out_dir=str(out), plot=False)
    with jax.enable_x64(True):
      return vanishing.run(config)

  _check_resume(monkeypatch, tmp_path, run, 2, 3, (vanishing, "_length_unit", 1))  # L=64


def test_separability_sphere_resumes(tmp_path, monkeypatch):
  from limits.separability import sphere
  from limits.separability import task as separability_task

  config = lambda out: separability_task.SeparabilityConfig(
      source="sphere", length=24, dim=4, samples=64, heads=2, chunk=16, n_values="1,2,4,8",
      x64=False, out_dir=str(out), plot=False)
  run = _locked(separability_task.EXPERIMENT, lambda out: separability_task.run(
      config(out), out, separability_task.grid(config(out))))
  # a unit is a block of samples (here one chunk of 16: 4 units, every N at once); the rerun
  # computes the blocks 32-47 and 48-63 only
  _check_resume(monkeypatch, tmp_path, run, 2, 4, (sphere, "_moments_between", 2))


def test_separability_model_resumes(tiny, tmp_path, monkeypatch):
  from limits.separability import model as separability_model
  from limits.separability import task as separability_task

  model, text = tiny
  config = lambda out: separability_task.SeparabilityConfig(
      source="model", model=str(model), text=str(text), length=24, windows=3,
      n_values="1,2,4", out_dir=str(out), plot=False)
  run = _locked(separability_task.EXPERIMENT, lambda out: separability_task.run(
      config(out), out, separability_task.grid(config(out))))
  # a unit is a window; the last one computed: one layer_sums call per layer (2)
  _check_resume(monkeypatch, tmp_path, run, 2, 3, (separability_model, "layer_sums", 2))


@pytest.mark.parametrize("x64", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_gradient_resumes(x64, tmp_path, monkeypatch):
  import functools

  from limits.gradient import report as gradient_report
  from limits.gradient import task as gradient

  config = lambda out: gradient.GradientConfig(
      temperatures="0.05,0.2,1,4", t_batch=2, rows=8, length=12, check_rows=1, fd_rows=8,
      x64=x64, out_dir=str(out))

  def main(out):  # what experiments/gradient.py's main does
    c = config(out)
    plan = gradient.plan(c)
    write = functools.partial(res_lib.write_results, out, gradient.EXPERIMENT,
                              res_lib.config_record(c), seed=c.seed)
    result = gradient.run(plan, checkpoint=write, units=gradient.resume_units(c, out),
                          log=lambda msg: None)
    gradient_report.write_outputs(out, plan, result, write)

  # 2 batches of 2 temperatures; 1 kept: the rerun computes 2 temperatures
  _check_resume(monkeypatch, tmp_path, _locked(gradient.EXPERIMENT, main), 1, 2,
                (gradient, "run_temperature", 2))
