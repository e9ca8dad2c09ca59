"""The ``distance_model`` sweep kind: Theorem 1 (Algorithms 1-2) on a model's own attention.

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

import functools

import numpy as np

from limits.errors import check
from limits.sweep.engine import float_dtype
from limits.sweep.registry import Experiment, register


@functools.lru_cache(maxsize=2)
def _model(spec: str):
  from limits import sources

  return sources.load_model(spec)


def _distance_model_inputs(static):
  """Model weights and the run's corpus windows (W, L) for one (model, length, windows) group."""
  from limits import sources

  model = _model(static["model"])
  tokens = sources.corpus_windows(model, static["length"], static["windows"],
                                  text=static["text"] or None)
  return {"params": model.params, "tokens": np.asarray(tokens, np.int32)}


def _distance_model_fn(static, params, keys, run_key, data):
  """Theorem 1 (Algorithms 1-2) on a model's own attention, one cell per (L, N).

  The corpus windows (W, L) of the group run through ``models.forward`` once per step; each
  layer's record is reduced inside the layer scan by ``distance.head_stats`` for every N of the
  step's cells (the N axis is the batch), with x = value vectors or hidden states (AMBIG-7),
  every query t > N with its causal prefix (AMBIG-8). Per cell, over the n_layer * n_head heads
  (token-averaged first, Algorithm 1): ``d_mean`` / ``expected_mean`` / ``dmax_mean`` (mean over
  heads of d̃ (sum form, AMBIG-1), its Jensen expectation (AMBIG-3/4) and the Eq. 9 bound),
  ``violations`` (rows with d̃ > d_max, Theorem 1 says 0), ``max_ratio`` (max d̃/d_max) and
  ``rows`` (query rows checked). The same numbers as ``experiments.distance`` at that L and N.
  """
  import jax.numpy as jnp

  from limits import distance, models

  model = _model(static["model"])
  L = static["length"]
  ns = params["n"]                                                    # (b,)
  dt = jnp.dtype(float_dtype())

  def reduce(rec):
    x = distance.record_vectors(rec, static["vectors"]).astype(dt)
    return distance.head_stats(rec.weights.astype(dt), x, ns, n_cap=L - 1,
                               inclusion=static["inclusion"], bound=True)  # (W, H, b)

  st = models.forward(data["params"], data["tokens"], model.config, lm_head=False,
                    record_fn=reduce).attn                            # (n_layer, W, H, b)
  # Sum over windows (max for the ratios), then heads = layer x head, layer-major.
  heads = distance.HeadStats(*[
      (jnp.max(v, axis=1) if name.startswith("max_ratio") else jnp.sum(v, axis=1)).reshape(
          (-1, v.shape[-1]))
      for name, v in zip(distance.HeadStats._fields, st)])             # (n_layer*H, b)
  means = distance.token_means(heads)                                  # (n_layer*H, b)
  return {"d_mean": jnp.nanmean(means["d_sum"], axis=0),
          "expected_mean": jnp.nanmean(means["expected"], axis=0),
          "dmax_mean": jnp.nanmean(means["dmax_sum"], axis=0),
          "violations": jnp.sum(heads.viol_sum, axis=0),
          "max_ratio": jnp.max(heads.max_ratio_sum, axis=0),
          "rows": jnp.sum(heads.count, axis=0)}


def _distance_model_validate(cell):
  check(cell["vectors"] in ("value", "hidden"),
        f"vectors={cell['vectors']!r}; choose value or hidden")
  check(cell["inclusion"] in ("n_over_l_minus_1", "n_over_l"),
        f"inclusion={cell['inclusion']!r}; choose n_over_l_minus_1 or n_over_l")
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["n"] < cell["length"],
        f"n={cell['n']} must be in [1, length - 1 = {cell['length'] - 1}] (t <= N is skipped)")
  check(1 <= cell["windows"] <= 4096, f"windows={cell['windows']} must be in [1, 4096]")


register(Experiment(
    name="distance_model", fn=_distance_model_fn, inputs=_distance_model_inputs,
    defaults={"model": "tiny", "length": 256, "n": 5, "windows": 1, "vectors": "value",
              "inclusion": "n_over_l_minus_1", "text": ""},
    static=("length", "windows"),
    # Fig. 2a/2b grids (AMBIG-14), cut where N >= L.
    default_grid={"length": [128, 256, 512, 1024], "n": [1, 5, 10, 20, 100]},
    validate=_distance_model_validate,
    description="Theorem 1 distances on a model's attention over corpus windows, per (L, N)"))
