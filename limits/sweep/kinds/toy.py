"""The ``toy`` sweep kind: a cheap deterministic + random cell, for the engine's tests."""

from __future__ import annotations

import os
import time

import numpy as np

from limits.errors import check
from limits.sweep.registry import Experiment, register


def _toy_fn(static, params, keys, run_key):
  """Toy cell: deterministic closed forms plus one uniform draw per cell.

  ``square = x**2``, ``series = sum_{j<n} x**j`` (a length-n geometric sum), ``powers`` the
  ``(n,)`` vector ``x**j``, ``noise ~ U[0, 1)`` from the cell's key. ``LIMITS_SWEEP_TOY_DELAY``
  (seconds, read when compiling) makes each step sleep, for kill-and-resume tests.
  """
  import jax
  import jax.numpy as jnp

  x = params["x"]  # (b,)
  delay = float(os.environ.get("LIMITS_SWEEP_TOY_DELAY", "0") or 0)
  if delay > 0:
    def _sleep(a):
      time.sleep(delay)
      return np.asarray(a)

    x = jax.pure_callback(_sleep, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
  j = jnp.arange(static["n"], dtype=x.dtype)  # (n,)
  powers = x[:, None] ** j[None, :]  # (b, n)
  noise = jax.vmap(lambda k: jax.random.uniform(k, dtype=x.dtype))(keys)  # (b,)
  return {"square": x * x, "series": powers.sum(axis=1), "powers": powers, "noise": noise}


def _toy_validate(cell):
  check(1 <= cell["n"] <= 64, f"toy n={cell['n']} must be in [1, 64]")


register(Experiment(
    name="toy", fn=_toy_fn, defaults={"x": 0.5, "n": 3}, static=("n",),
    default_grid={"x": [0.0, 0.5, 1.0, 2.0], "n": [1, 3]}, validate=_toy_validate,
    description="cheap deterministic + random cell, for tests"))
