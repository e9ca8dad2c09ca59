"""AMBIG-7, the vectors x_i of Theorems 1 and 2: the key and residual-stream readings beside the
default value vectors, end to end from the model record to the reproduction's verdicts.

- The fast Theorem 1 path on key vectors equals the per-row path (``distance.head_stats``, itself
  checked against a NumPy loop in test_distance.py) fed the forward's own key records.
- The reproduction plan reruns every step whose claims depend on x_i under each other reading,
  with exactly one extra flag, and the claims of a reading step are those of its base step.
- A claim that holds on value vectors and fails on keys is reported as "depends on AMBIG-7"; a
  reading step that did not run leaves that reading not testable, never silently dropped.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limits import claims
from limits import distance
from limits import reproduction as rp


def test_key_vectors_fast_path_equals_row_path_on_the_model_records():
  """float64, relative 1e-10: two evaluations (Gram identities vs per-row sums) of the same
  terms; differences measured ~1e-15."""
  from limits import models
  from limits.records import sources

  with jax.enable_x64(True):
    model = sources.load_model("tiny")
    tok = jnp.asarray(np.random.default_rng(0).integers(0, model.config.vocab_size, (1, 48)),
                      jnp.int32)
    ns = [1, 5]
    ev = distance.ModelEvaluator(model.params, model.config, vectors="key")
    fast = ev.head_stats(tok, ns)
    parts = []
    for _, rec in models.iter_layers(model.params, tok, model.config):
      hs = distance.head_stats(rec.weights.astype(jnp.float64), rec.k.astype(jnp.float64),
                               jnp.asarray(ns), n_cap=max(ns))
      parts.append(jax.tree.map(lambda v: v[0], hs))
    ref = jax.tree.map(np.asarray, distance.concat_heads(parts))
    for name in ("d_sum", "expected", "dmax_sum"):
      np.testing.assert_allclose(getattr(fast, name), getattr(ref, name), rtol=1e-10,
                                 err_msg=name)
    value = distance.ModelEvaluator(model.params, model.config).head_stats(tok, ns)
    assert not np.allclose(value.d_sum, fast.d_sum)  # the reading changes the numbers


def test_every_x_dependent_step_has_both_other_readings():
  bases = [s for s in rp.STEPS if not s.reading and
           (s.name.startswith("distance") or s.name == "separability_model")]
  assert len(bases) == 4
  by_name = {s.name: s for s in rp.STEPS}
  for base in bases:
    for key in ("key", "hidden"):
      alt = by_name[f"{base.name}_{key}"]
      assert alt.reading == (base.name, "AMBIG-7", key)
      assert alt.full == {**base.full, "vectors": key} and "vectors" not in base.full
      assert alt.quick == {**base.quick, "vectors": key} and "vectors" not in base.quick
      assert rp.claims_of(alt.name) == rp.claims_of(base.name) != ()
  # Every claim decided by those steps is judged under the AMBIG-7 reading.
  for c in claims.CLAIMS:
    if c.step in {b.name for b in bases}:
      assert "AMBIG-7" in [rd.ambig for rd in c.readings], c.id


def _step(out, name, rows):
  d = out / name
  d.mkdir(parents=True)
  (d / "results.json").write_text(json.dumps({"results": {"summary": rows}}))


def _vary_n(by_n):
  return [{"L": 1024.0, "N": n, "d_sum_mean": d, "d_norm_mean": d, "dmax_sum_mean": 2 * d,
           "dmax_norm_mean": 2 * d, "expected_mean": d / 2, "gap_mean": d, "rows_checked": 10}
          for n, d in by_n.items()]


SAT, LINEAR = {1: 1.0, 20: 4.4, 100: 5.1}, {1: 1.0, 20: 20.0, 100: 100.0}


@pytest.mark.parametrize("key_rows,hidden_rows,robust", [
    # ×4.4 growth to N = 20, then +17 %: saturates (holds); linear growth: does not (fails).
    (SAT, SAT, True),
    (LINEAR, SAT, True),     # the keys reading is excluded: its flip changes nothing
    (SAT, LINEAR, False),    # the residual stream is admissible: its flip is named
])
def test_vector_reading_flips_only_when_admissible(tmp_path, key_rows, hidden_rows, robust):
  _step(tmp_path, "distance_vary_n", _vary_n(SAT))
  _step(tmp_path, "distance_vary_n_key", _vary_n(key_rows))
  _step(tmp_path, "distance_vary_n_hidden", _vary_n(hidden_rows))
  status = {n: {"status": "ok"} for n in
            ("distance_vary_n", "distance_vary_n_key", "distance_vary_n_hidden")}
  a = {x.claim.id: x for x in rp.assess_all(tmp_path, status)}["fig2b-plateau"]
  assert a.verdict == claims.HOLDS and a.robust is robust, a.label
  if not robust:
    assert a.label.startswith("flips under AMBIG-7 (x_i = the layer's normalised residual")
    assert "per-head key" not in a.label


def test_missing_reading_step_is_named_not_dropped(tmp_path):
  _step(tmp_path, "distance_vary_n", _vary_n({1: 1.0, 20: 4.4, 100: 5.1}))
  a = {x.claim.id: x for x in rp.assess_all(
      tmp_path, {"distance_vary_n": {"status": "ok"}})}["fig2b-plateau"]
  assert a.verdict == claims.HOLDS
  assert a.robust is None
  assert "every computable admissible reading" in a.label
  assert "distance_vary_n_hidden" in a.label
  skipped = [v for lab, v in a.readings if "per-head key" in lab]
  assert skipped and all(v.status == claims.NOT_TESTABLE for v in skipped)
