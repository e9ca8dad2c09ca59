"""The ``gradient`` sweep kind: Corollary 3 / Algorithm 5 on synthetic logit rows.

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

import numpy as np

from limits.errors import check
from limits.sweep.registry import Experiment, register

# Tag folded into the run key for the logits shared by every cell of a run (common random
# numbers: cells that differ only in T, epsilon or logit_scale see the same Gaussian rows).
_LOGITS_TAG = 0x6C6F6769   # "logi"


def gradient_logits(run_key, rows: int, length: int, dtype=None):
  """The synthetic logit rows of the ``gradient`` experiment: standard Gaussians (rows, length)
  from ``fold_in(run_key, _LOGITS_TAG)``, shared by every cell of a run; cells scale them by
  ``logit_scale``."""
  import jax
  import jax.numpy as jnp

  dtype = dtype or jnp.result_type(float)
  return jax.random.normal(jax.random.fold_in(run_key, _LOGITS_TAG), (rows, length), dtype)


def _gradient_fn(static, params, keys, run_key):
  """Gradient sensitivity (Corollary 3, Algorithm 5) on synthetic logit rows.

  Per cell: logits = logit_scale * Z with Z (rows, length) shared by the run; the normalizer is
  applied to logits / T (``normalizers.get(normalizer)``; for softmax this is Eq. 2). Results:
  ``g_mean``/``g_max`` over rows of g(T, eps) = ||fn(l + eps v) - fn(l)|| / eps
  (``jacobians.fd_sensitivity``, a fresh unit direction v per row from the cell's key), and
  ``jac_norm_mean``/``jac_norm_max`` of the exact Jacobian's spectral norm. ``jacobian``:
  "dense" (softmax: the closed form (diag a - a a^T)/T, ``jacobians.softmax_closed_form``, then
  ``spectral_norm``; others: ``jacobians.exact``; memory b x rows x L x L per device),
  "secular" (softmax only: ``jacobians.softmax_closed_form_norm``, O(L) per row, for long rows)
  or "none" (no Jacobian outputs).
  """
  import jax

  from limits import jacobians, normalizers

  norm = normalizers.get(static["normalizer"])
  T, eps, scale = params["temperature"], params["epsilon"], params["logit_scale"]  # (b,)
  Z = gradient_logits(run_key, static["rows"], static["length"], T.dtype)  # (R, L)

  def one(t, e, c, key):
    logits = c * Z  # (R, L)
    fn = lambda l: norm(l / t)
    g = jacobians.fd_sensitivity(fn, logits, e, key)  # (R,)
    out = {"g_mean": g.mean(), "g_max": g.max()}
    if static["jacobian"] == "none":
      return out
    if static["jacobian"] == "secular":
      jn = jacobians.softmax_closed_form_norm(logits, t)  # (R,), O(L) per row
    elif static["normalizer"] == "softmax":
      jn = jacobians.spectral_norm(jacobians.softmax_closed_form(logits, t))  # (R, L, L) -> (R,)
    else:
      jn = jacobians.spectral_norm(jacobians.exact(fn, logits))
    out.update(jac_norm_mean=jn.mean(), jac_norm_max=jn.max())
    return out

  return jax.vmap(one)(T, eps, scale, keys)


def _gradient_validate(cell):
  from limits import normalizers

  check(cell["normalizer"] in normalizers.NAMES,
        f"normalizer={cell['normalizer']!r}; choose one of {', '.join(normalizers.NAMES)}")
  check(cell["jacobian"] in ("dense", "secular", "none"),
        f"jacobian={cell['jacobian']!r}; choose dense, secular or none")
  check(cell["jacobian"] != "secular" or cell["normalizer"] == "softmax",
        f"jacobian=secular is for softmax only, not normalizer={cell['normalizer']!r}")
  check(cell["temperature"] > 0, f"temperature={cell['temperature']} must be > 0")
  check(cell["epsilon"] > 0, f"epsilon={cell['epsilon']} must be > 0")
  check(cell["logit_scale"] > 0, f"logit_scale={cell['logit_scale']} must be > 0")
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["rows"] <= 65536, f"rows={cell['rows']} must be in [1, 65536]")


register(Experiment(
    name="gradient", fn=_gradient_fn,
    defaults={"temperature": 1.0, "epsilon": 1e-3, "logit_scale": 1.0, "normalizer": "softmax",
              "length": 64, "rows": 128, "jacobian": "dense"},
    static=("length", "rows"),
    # AMBIG-11: log grid 1e-3..1e2, 5 points per decade; the paper's three epsilons.
    default_grid={"temperature": [float(t) for t in np.logspace(-3, 2, 26)],
                  "epsilon": [1e-3, 1e-1, 10.0]},
    validate=_gradient_validate,
    description="g(T, eps) by finite differences and the exact Jacobian norm on random logits"))
