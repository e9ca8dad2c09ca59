"""The ``gradient`` sweep kind: Corollary 3 / Algorithm 5 on synthetic logit rows.

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

import numpy as np

from limits.errors import check
from limits.runs import seeding
from limits.sweep.registry import ConfigParameters, Experiment, register

# Stream of the logits shared by every cell of a run (common random numbers: cells that differ
# only in T, epsilon or logit_scale see the same Gaussian rows); limits.runs.seeding.tagged.
_LOGITS = "logi"


def gradient_logits(run_key, rows: int, length: int, dtype=None):
  """The synthetic logit rows of the ``gradient`` experiment at unit scale: (rows, length)
  standard Gaussians from ``seeding.tagged(run_key, "logi")`` (``gradient_rows.synthetic_rows``
  with scale 1), shared by every cell of a run; a cell's rows are ``logit_scale`` times these."""
  import jax.numpy as jnp

  from limits.gradient import rows as gradient_rows

  dtype = dtype or jnp.result_type(float)
  return gradient_rows.synthetic_rows(seeding.tagged(run_key, _LOGITS), rows, length, 1.0,
                                      dtype)


def _gradient_fn(static, params, keys, run_key):
  """Gradient sensitivity (Corollary 3, Algorithm 5) on synthetic logit rows.

  Per cell: logits = logit_scale * Z, Z (rows, length) standard Gaussians shared by the run
  (``gradient_rows.synthetic_rows``, the CLI's synthetic source, here with the cell's scale);
  the normalizer is applied to logits / T (for softmax this is Eq. 2). Results:
  ``g_mean``/``g_max`` over rows of g(T, eps) = ||N((l + eps v)/T) - N(l/T)|| / eps by
  ``gradient_rows.g_rows``, the function the CLI uses, with its direction convention: row r
  uses key ``jax.random.split(cell_key, rows)[r]`` and, with the cell's single eps, direction
  ``random_directions(jax.random.split(row_key, 1)[0], (length,))``; and
  ``jac_norm_mean``/``jac_norm_max`` of the exact Jacobian's spectral norm
  (``gradient_rows.row_norms``, as in the CLI). ``jacobian``: "dense" (softmax: the closed form
  (diag a - a a^T)/T; others: jacfwd; then a dense SVD; memory b x rows x L x L per device),
  "secular" (softmax only: ``jacobians.softmax_closed_form_norm``, O(L) per row, for long rows)
  or "none" (no Jacobian outputs).

  The parameters are the CLI's (``limits.gradient.task.GradientConfig``: ``logit_scale`` 8.0 =
  σ, ``rows`` 256, ``length`` 64, ``normalizer``, with their checks; :data:`PARAMETERS`); the
  CLI measures g on ``fd_rows`` sampled rows, a cell on every row. The CLI draws its rows from
  the first of ``seeding.streams(seed, 3)``, the sweep from ``seeding.tagged(run_key,
  "logi")`` (both by :mod:`limits.runs.seeding`; kept apart so neither's numbers changed).
  """
  import jax
  import jax.numpy as jnp

  from limits import normalizers
  from limits.gradient import rows as gradient_rows

  name = static["normalizer"]
  norm_fn = normalizers.get(name)
  T, eps, scale = params["temperature"], params["epsilon"], params["logit_scale"]  # (b,)
  key_z = seeding.tagged(run_key, _LOGITS)
  R, L = static["rows"], static["length"]

  def one(t, e, c, key):
    logits = gradient_rows.synthetic_rows(key_z, R, L, c, T.dtype)  # (R, L), c * Z
    g = gradient_rows.g_rows(norm_fn, logits, jnp.ones((R, L), bool), t[None], e[None],
                             jax.random.split(key, R))[:, 0, 0]  # (R,)
    out = {"g_mean": g.mean(), "g_max": g.max()}
    if static["jacobian"] == "none":
      return out
    how = {"secular": "secular"}.get(static["jacobian"],
                                     "closed" if name == "softmax" else "jacfwd")
    jn = gradient_rows.row_norms(name, {}, logits, t, how=how)  # (R,)
    out.update(jac_norm_mean=jn.mean(), jac_norm_max=jn.max())
    return out

  return jax.vmap(one)(T, eps, scale, keys)


# The parameters: fields of the CLI's GradientConfig (same names, defaults and checks), one
# temperature of --temperatures and one epsilon of --epsilons per cell, and the kind's own
# ``jacobian``.
PARAMETERS = ConfigParameters(
    "limits.gradient.task:GradientConfig", ("logit_scale", "normalizer", "length", "rows"),
    elements={"temperature": ("temperatures", 1.0), "epsilon": ("epsilons", 1e-3)},
    own={"jacobian": "dense"})


def _gradient_validate(cell):
  from limits import normalizers

  PARAMETERS.check(cell)
  check(cell["normalizer"] in normalizers.NAMES,
        f"normalizer={cell['normalizer']!r}; choose one of {', '.join(normalizers.NAMES)}")
  check(cell["jacobian"] in ("dense", "secular", "none"),
        f"jacobian={cell['jacobian']!r}; choose dense, secular or none")
  check(cell["jacobian"] != "secular" or cell["normalizer"] == "softmax",
        f"jacobian=secular is for softmax only, not normalizer={cell['normalizer']!r}")
  check(cell["temperature"] > 0, f"temperature={cell['temperature']} must be > 0")
  check(cell["epsilon"] > 0, f"epsilon={cell['epsilon']} must be > 0")
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["rows"] <= 65536, f"rows={cell['rows']} must be in [1, 65536]")


register(Experiment(
    name="gradient", fn=_gradient_fn, defaults=PARAMETERS,
    static=("length", "rows"),
    # AMBIG-11: log grid 1e-3..1e2, 5 points per decade; the paper's three epsilons.
    default_grid={"temperature": [float(t) for t in np.logspace(-3, 2, 26)],
                  "epsilon": [1e-3, 1e-1, 10.0]},
    validate=_gradient_validate,
    description="g(T, eps) by finite differences and the exact Jacobian norm on random logits"))
