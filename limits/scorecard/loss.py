"""Language-model loss of a swapped model and the one-scalar calibration that minimises it."""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from limits.scorecard.candidates import normalizer


@jax.jit
def next_token_nll(logits, tokens):
  """Next-token NLL (B, L−1) from LM logits (B, L, V) and tokens (B, L)."""
  lp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(lp, tokens[:, 1:, None], axis=-1)[..., 0]


def base_temperature(config) -> float:
  """T0, the model's own temperature on the raw q·k scale (AMBIG-12): √d_head, or the family's
  ``attn_temperature`` (Gemma 3: √query_pre_attn_scalar), as ``limits.models.forward`` uses
  with ``temperature=None``."""
  native = getattr(config, "attn_temperature", None)
  return float(math.sqrt(config.d_head) if native is None else native)


def token_nll(params, config, tokens, family: str, multiplier: float, length: int) -> np.ndarray:
  """Next-token NLL (B, L−1) of the model with ``family`` at multiplier c in every layer."""
  from limits import models

  t0 = base_temperature(config)
  out = models.forward(params, jnp.asarray(tokens), config, normalizer=normalizer(family, length),
                       temperature=t0 / float(multiplier), layers=())
  return np.asarray(next_token_nll(out.logits, jnp.asarray(tokens)))


def calibrate(loss_fn: Callable[[float], float], lo: float, hi: float, *, grid: int = 5,
              iters: int = 5) -> dict:
  """argmin of ``loss_fn(c)`` over c ∈ [lo, hi], searched on u = ln c.

  ``grid`` log-spaced points plus c = 1 (the model's own scale, so a calibrated row is never
  worse than the uncalibrated one on the calibration windows), then ``iters`` evaluations of
  Brent's bounded method (golden-section steps with parabolic interpolation;
  ``scipy.optimize.minimize_scalar(method="bounded")``, tolerance 0.01 in ln c) between the
  best grid point's neighbours. Deterministic. Returns ``{"multiplier", "loss",
  "trace": [[c, loss], ...], "at_edge"}`` with the best point evaluated; ``at_edge`` is True
  when that point is an end of the bracket (the minimum may lie outside it).
  """
  import scipy.optimize

  trace: list[list[float]] = []

  def f(u):
    c = float(math.exp(u))
    v = float(loss_fn(c))
    trace.append([c, v])
    return v if math.isfinite(v) else math.inf

  us = sorted(set(np.linspace(math.log(lo), math.log(hi), int(grid)).tolist()) | {0.0})
  vals = [f(u) for u in us]
  i = int(np.argmin(vals))
  a, b = us[max(i - 1, 0)], us[min(i + 1, len(us) - 1)]
  if iters >= 1 and b > a:
    scipy.optimize.minimize_scalar(f, bounds=(a, b), method="bounded",
                                   options={"maxiter": int(iters), "xatol": 0.01})
  best = min(trace, key=lambda cv: cv[1] if math.isfinite(cv[1]) else math.inf)
  return {"multiplier": best[0], "loss": best[1], "trace": trace,
          "at_edge": bool(best[0] in (math.exp(us[0]), math.exp(us[-1])))}
