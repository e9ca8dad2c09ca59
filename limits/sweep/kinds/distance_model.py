"""The ``distance_model`` sweep kind: Theorem 1 (Algorithms 1-2) on a model's own attention.

A host kind (``Experiment.host``): each batch calls ``limits.distance.model.ModelEvaluator``,
the implementation ``experiments.distance`` uses, on the process's default device.

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

import functools

import numpy as np

from limits.errors import check
from limits.sweep.engine import float_dtype
from limits.sweep.registry import ConfigParameters, Experiment, register

# The parameters: fields of the CLI's DistanceConfig (same names, defaults and checks: vectors
# AMBIG-7, inclusion AMBIG-3) and one L of --lengths and one N of --ns per cell.
PARAMETERS = ConfigParameters(
    "limits.distance.task:DistanceConfig", ("model", "windows", "vectors", "inclusion", "text"),
    elements={"length": ("lengths", 256), "n": ("ns", 5)})


@functools.lru_cache(maxsize=2)
def _model(spec: str):
  from limits.records import sources

  return sources.load_model(spec)


def _distance_model_inputs(static):
  """Model weights and the run's corpus windows (W, L) for one (model, length, windows) group."""
  from limits.records import sources

  model = _model(static["model"])
  tokens = sources.corpus_windows(model, static["length"], static["windows"],
                                  text=static["text"] or None)
  return {"params": model.params, "tokens": np.asarray(tokens, np.int32)}


def _distance_model_fn(static, params, keys, run_key, data):
  """Theorem 1 (Algorithms 1-2) on a model's own attention, one cell per (L, N); a host kind.

  The single implementation of ``experiments.distance``: ``distance.ModelEvaluator.head_stats``
  (the fast path ``distance_fast.layer_stats``, host NumPy sorting + jit) streams the group's
  corpus windows (W, L) through the model layer by layer, once per batch for every N of the
  batch's cells, with x = value or key vectors, hidden states or token embeddings (AMBIG-7),
  every query t > N with its causal prefix (AMBIG-8), in the sweep's float dtype (float64 with
  ``--x64``).
  Per cell, over the n_layer * n_head heads (token-averaged first, Algorithm 1; the same
  reductions as ``distance_model.tabulate``'s summary rows): ``d_mean`` / ``expected_mean`` /
  ``dmax_mean`` (mean over heads of d̃ (sum form, AMBIG-1), its Jensen expectation
  (AMBIG-3/4) and the Eq. 9 bound), ``violations`` (rows with d̃ > d_max, Theorem 1 says 0),
  ``max_ratio`` (max d̃/d_max) and ``rows`` (query rows checked).
  """
  from limits import distance

  model = _model(static["model"])
  ns = [int(n) for n in np.asarray(params["n"])]
  uniq = sorted(set(ns))
  col = [uniq.index(n) for n in ns]
  ev = distance.ModelEvaluator(data["params"], model.config, vectors=static["vectors"],
                               inclusion=static["inclusion"], dtype=float_dtype())
  st = ev.head_stats(data["tokens"], uniq, bound=True)               # (n_layer*H, K) each
  means = {k: np.asarray(v)[:, col] for k, v in distance.token_means(st).items()}
  with np.errstate(all="ignore"):
    return {"d_mean": np.nanmean(means["d_sum"], axis=0),
            "expected_mean": np.nanmean(means["expected"], axis=0),
            "dmax_mean": np.nanmean(means["dmax_sum"], axis=0),
            "violations": np.asarray(st.viol_sum)[:, col].sum(axis=0),
            "max_ratio": np.asarray(st.max_ratio_sum)[:, col].max(axis=0),
            "rows": np.asarray(st.count)[:, col].sum(axis=0)}


def _distance_model_validate(cell):
  PARAMETERS.check(cell)
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["n"] < cell["length"],
        f"n={cell['n']} must be in [1, length - 1 = {cell['length'] - 1}] (t <= N is skipped)")
  check(1 <= cell["windows"] <= 4096, f"windows={cell['windows']} must be in [1, 4096]")


register(Experiment(
    name="distance_model", fn=_distance_model_fn, inputs=_distance_model_inputs, host=True,
    defaults=PARAMETERS,
    static=("length", "windows"),
    # Fig. 2a/2b grids (AMBIG-14), cut where N >= L.
    default_grid={"length": [128, 256, 512, 1024], "n": [1, 5, 10, 20, 100]},
    validate=_distance_model_validate,
    description="Theorem 1 distances on a model's attention over corpus windows, per (L, N)"))
