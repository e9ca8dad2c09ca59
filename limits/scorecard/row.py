"""One scorecard row: a swapped model on the evaluation windows, every metric at once."""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

from limits.scorecard.candidates import normalizer
from limits.scorecard.config import Config, metric_layers
from limits.scorecard.jacobian import jacobian_metrics
from limits.scorecard.loss import base_temperature, next_token_nll
from limits.scorecard.metrics import (distance_metrics, jacobian_mask, lemma1_rows,
                                      lemma1_summary, sample_rows, separability_summary,
                                      separability_sums)


def _keep(rec):
  return rec.scores, rec.weights, rec.v


def evaluate_row(params, config, eval_tokens, family: str, multiplier: float,
                 cfg: Config) -> dict:
  """Every scorecard metric of ``family`` at multiplier c on the evaluation windows.

  A sliding-window layer (Gemma 3's local layers) is measured on each query's effective length
  min(t + 1, W) by every metric (:mod:`limits.scorecard.metrics`)."""
  from limits import models

  L = cfg.length
  T = base_temperature(config) / float(multiplier)
  fn = normalizer(family, L)
  keep = metric_layers(cfg, config.n_layer)
  kinds = models.layer_kinds(config)
  wins = [int(kinds[i] or 0) for i in keep]  # sliding window per kept layer, 0 = global
  ts = cfg.prefix_lengths
  sep_ns = [n for n in cfg.sep_ns if n < L]
  samples = sample_rows(len(eval_tokens), len(keep), config.n_head, L, cfg.jac_rows, cfg.seed)
  nll, mx, zs, jrows, jmask = [], [], [], [], []
  per_layer: list[list] = [[] for _ in keep]
  sep = None
  t0 = time.perf_counter()
  for w in range(len(eval_tokens)):
    tok = jnp.asarray(eval_tokens[w:w + 1])
    out = models.forward(params, tok, config, normalizer=fn, temperature=T, layers=keep,
                         record_fn=_keep)
    nll.append(np.asarray(next_token_nll(out.logits, tok))[0])
    scores, weights, v = (np.asarray(a[:, 0], np.float32) for a in out.attn)  # (nK, H, L, ·)
    del out
    a, b = zip(*(lemma1_rows(weights[li], ts, wins[li]) for li in range(len(keep))))
    mx.append(np.stack(a))  # (nK, H, K)
    zs.append(np.stack(b))
    for li in range(len(keep)):
      per_layer[li].append((weights[li], v[li]))
    if sep_ns:
      s = np.concatenate([separability_sums(weights[li], v[li], sep_ns, cfg.radius, wins[li])
                          for li in range(len(keep))])  # (nK·H, K, F)
      sep = s if sep is None else sep + s
    for _, li, h, q in samples[samples[:, 0] == w]:
      jrows.append(scores[li, h, q])
      jmask.append(jacobian_mask(L, q, wins[li]))
  forward_s = time.perf_counter() - t0
  layers = [(np.stack([p[0] for p in ws]), np.stack([p[1] for p in ws])) for ws in per_layer]
  dist = distance_metrics(layers, cfg.distance_ns, L, alpha=cfg.ks_alpha, windows=wins)
  del layers, per_layer
  jac = jacobian_metrics(family, np.stack(jrows), np.stack(jmask), T, L, epsilon=cfg.epsilon,
                         seed=cfg.seed)
  nll_arr = np.stack(nll)
  mx_arr, zs_arr = np.stack(mx), np.stack(zs)  # (windows, nK, H, K)
  by_kind = None
  if any(wins):  # Lemma 1 is about growth in t: local and global layers apart (issue 29)
    kind = np.asarray(wins) > 0
    by_kind = {name: {**lemma1_summary(mx_arr[:, sel], zs_arr[:, sel], ts),
                      "layers": [keep[i] for i in np.nonzero(sel)[0]]}
               for name, sel in (("local", kind), ("global", ~kind)) if sel.any()}
  return {
      "loss": {"mean": float(nll_arr.mean()), "per_window": nll_arr.mean(axis=1).tolist(),
               "tokens": int(nll_arr.size), "nll": nll_arr.astype(np.float64).tolist()},
      "lemma1": lemma1_summary(mx_arr, zs_arr, ts),
      "lemma1_by_kind": by_kind,
      "theorem1": dist,
      "theorem2": separability_summary(sep, sep_ns) if sep_ns else None,
      "lemma2": jac,
      "layers": list(keep), "temperature": T, "forward_records_s": forward_s,
      "seconds": time.perf_counter() - t0,
  }
