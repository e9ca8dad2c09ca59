"""g(T, ε)'s directions: one per (row, ε), shared by every temperature (AMBIG-13,
``task.direction_key``), drawn once per run. So a run's g values do not depend on how the
temperatures are batched (``--t_batch``), and a temperature's g equals ``fd_batch`` of the
sampled rows at that temperature alone with the key ``fold_in(direction key, 0)`` (the key of
the first batch when each batch drew its own directions, so those values did not change)."""

import jax
import numpy as np

from limits import normalizers
from limits.gradient import sensitivity
from limits.gradient import task as gradient
from limits.runs import seeding

TEMPS = "0.05,0.3,1,4,20"


def _run(t_batch):
  config = gradient.GradientConfig(source="synthetic", rows=6, length=16, t_batch=t_batch,
                                   temperatures=TEMPS, check_rows=1, fd_rows=6)
  with jax.enable_x64(True):
    return config, gradient.run(gradient.plan(config), log=lambda s: None).results


def test_g_does_not_depend_on_the_batching_of_temperatures():
  # red when each batch draws its own directions (fold_in(direction key, first index))
  g = [[t["g"] for t in _run(b)[1]["per_temperature"]] for b in (1, 2, 5)]
  assert g[0] == g[1] == g[2]
  assert len(g[0]) == 5


def test_each_temperature_uses_the_runs_one_direction_per_row():
  config, res = _run(2)
  k_rows, _, k_dir = seeding.streams(config.seed, 3)
  with jax.enable_x64(True):
    rows = np.asarray(gradient.synthetic_rows(k_rows, config.rows, config.length,
                                              config.logit_scale, np.float64))
    mask = np.ones(rows.shape, bool)
    eps = gradient.parse_epsilons(config.epsilons)
    for j, t in enumerate(float(x) for x in TEMPS.split(",")):
      # every row is sampled (fd_rows >= rows): g of that temperature alone, same key
      g = sensitivity.fd_batch(normalizers.get("softmax"), rows, mask, [t], eps,
                               jax.random.fold_in(k_dir, 0))[:, 0]  # (S, E)
      got = res["per_temperature"][j]["g"]
      for e, ev in enumerate(eps):
        np.testing.assert_allclose(got[f"{ev:g}"]["mean"], g[:, e].mean(), rtol=1e-12)
