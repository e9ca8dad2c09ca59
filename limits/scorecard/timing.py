"""Cost: forward time per family, interleaved rounds, relative to softmax."""

from __future__ import annotations

import time
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from limits.scorecard.candidates import normalizer
from limits.scorecard.loss import base_temperature


def time_forwards(params, config, tokens, families: Sequence[str], length: int,
                  rounds: int, compiled: Sequence[str] = ()) -> dict:
  """Forward (loss) seconds per family, interleaved: one warm-up (compile) call per family not
  in ``compiled`` (already run on this shape in this process), then ``rounds`` rounds each timing
  every family once, so a change of machine load hits all families alike.
  Returns {family: [seconds per round]}."""
  from limits import models

  t0 = base_temperature(config)
  tok = jnp.asarray(tokens)

  def once(fam):
    start = time.perf_counter()
    out = models.forward(params, tok, config, normalizer=normalizer(fam, length),
                         temperature=t0, layers=())
    out.logits.block_until_ready()
    return time.perf_counter() - start

  for fam in families:
    if fam not in compiled:
      once(fam)
  secs: dict[str, list] = {fam: [] for fam in families}
  for _ in range(rounds):
    for fam in families:
      secs[fam].append(once(fam))
  return secs


def relative_cost(secs: dict, ref: str = "softmax") -> dict:
  """Median over rounds of t_family / t_ref within the same round."""
  r = np.asarray(secs[ref], np.float64)
  return {f: float(np.median(np.asarray(v, np.float64) / r)) for f, v in secs.items()}
