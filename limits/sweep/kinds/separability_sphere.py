"""The ``separability_sphere`` sweep kind: Theorem 2 / Algorithm 4 on points on the sphere.

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

from limits.errors import check
from limits.runs import seeding
from limits.sweep.registry import ConfigParameters, Experiment, register

# Streams of the data shared by every cell of a run (common random numbers: cells that differ
# only in T or n see the same weights / points); limits.runs.seeding.tagged.
_ALPHA, _POINTS = "alph", "poin"


def separability_alpha(kind: str, run_key, length: int, temperature, zipf_s=1.0, dtype=None):
  """Weights (length,) of the ``separability_sphere`` experiment, from
  ``seeding.tagged(run_key, "alph")``: "softmax" = softmax(g / T) of standard Gaussian logits g
  (as ``separability.synthetic_alpha``, but T may be traced), "zipf" and "uniform" via
  ``separability.synthetic_alpha``."""
  import jax
  import jax.numpy as jnp

  from limits import separability

  dtype = dtype or jnp.result_type(float)
  key = seeding.tagged(run_key, _ALPHA)
  if kind == "softmax":
    g = jax.random.normal(key, (length,), dtype)
    return jax.nn.softmax(g / temperature)
  if kind == "zipf":
    a = jnp.arange(1, length + 1, dtype=dtype) ** (-jnp.asarray(zipf_s, dtype))
    a = jax.random.permutation(key, a)
    return a / jnp.sum(a)
  return separability.synthetic_alpha(kind, length, dtype=dtype)


def separability_points_key(run_key):
  """Key of the point sets: sample i uses ``fold_in(this, i)`` as ``separability.monte_carlo``
  does, so a cell's Monte Carlo equals ``monte_carlo(separability_points_key(key), ...)``."""
  return seeding.tagged(run_key, _POINTS)


def _separability_fn(static, params, keys, run_key):
  """Theorem 2 on the sphere (Algorithm 4 with synthetic embeddings), the library's Monte Carlo.

  Per cell: weights alpha (length,) of ``alpha_kind`` (``alpha_temperature`` / ``zipf_s``),
  and ``samples`` point sets, each reduced by ``separability_sphere.sample_stats`` (the per-sample core of
  ``separability.monte_carlo_detail``: x (length, dim) uniform on S^{dim-1}(M), M = ``radius``, r, delta, N_s/N
  and both Theorem 2 bounds with that sample's r and delta), then
  ``sample_moments``/``mean_stderr`` (the library's mean and standard error). Results:
  ``frac_mean``, ``frac_stderr`` (of N_s/N over samples) and the sample means of r, delta and
  the bounds (``lower`` clipped at 0, ``lower_raw`` not). Alpha and points are shared by all
  cells of a run (common random numbers); the per-cell key is not used. A cell therefore equals
  ``monte_carlo_detail(separability_points_key(run_key), alpha, n, dim, M, samples)``.
  """
  import jax
  import jax.numpy as jnp

  from limits import selection
  from limits.separability import sphere as mc

  L, dim, S = static["length"], static["dim"], static["samples"]
  T, M = params["alpha_temperature"], params["radius"]  # (b,)
  zs, ns = params["zipf_s"], params["n"]  # (b,)
  b = T.shape[0]
  pkey = separability_points_key(run_key)
  itemsize = jnp.dtype(T.dtype).itemsize
  chunk = int(max(1, min(S, (128 * 2**20) // max(1, b * itemsize * (2 * L * L + 3 * L * dim)))))

  def one(t, m, z, n):
    alpha = separability_alpha(static["alpha_kind"], run_key, L, t, z, T.dtype)[None]  # (1, L)
    rank = selection.sort_desc(alpha)
    nk = jnp.reshape(n, (1,))
    st = jax.lax.map(lambda i: mc.sample_stats(pkey, i, alpha, rank, nk, dim, m),
                     jnp.arange(S, dtype=jnp.int32), batch_size=chunk)  # (S, 6, 1, 1)
    mean, stderr = mc.mean_stderr(mc.sample_moments(st))
    mean = mean[:, 0, 0]
    i = {name: j for j, name in enumerate(mc.STAT_NAMES)}
    return {"frac_mean": mean[i["frac"]], "frac_stderr": stderr[0, 0], "r_mean": mean[i["r"]],
            "delta_mean": mean[i["delta"]], "lower_mean": mean[i["lower"]],
            "lower_raw_mean": mean[i["lower_raw"]], "upper_mean": mean[i["upper"]]}

  return jax.vmap(one)(T, M, zs, ns)


# The parameters: fields of the CLI's SeparabilityConfig (--source=sphere; same names, defaults
# and checks) and one N of --n_values per cell.
PARAMETERS = ConfigParameters(
    "limits.separability.task:SeparabilityConfig",
    ("length", "dim", "samples", "alpha_kind", "alpha_temperature", "radius", "zipf_s"),
    elements={"n": ("n_values", 8)})


def _separability_validate(cell):
  PARAMETERS.check(cell)
  check(2 <= cell["length"] <= 4096, f"length={cell['length']} must be in [2, 4096]")
  check(1 <= cell["n"] <= cell["length"], f"n={cell['n']} must be in [1, length={cell['length']}]")
  check(1 <= cell["dim"] <= 4096, f"dim={cell['dim']} must be in [1, 4096]")
  check(1 <= cell["samples"] <= 10**7, f"samples={cell['samples']} must be in [1, 1e7]")


register(Experiment(
    name="separability_sphere", fn=_separability_fn, defaults=PARAMETERS,
    static=("length", "dim", "samples"),
    # AMBIG-10: N in powers of two, M = 1.
    default_grid={"n": [1, 2, 4, 8, 16, 32, 64], "alpha_temperature": [0.1, 1.0]},
    validate=_separability_validate,
    description="Monte Carlo N_s/N on the sphere and the Theorem 2 bounds"))
