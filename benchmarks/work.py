"""The work each reproduction step has to do, and its floor from rates measured in the run.

:func:`step_work` counts, from a step's settings (``limits.reproduction.step_overrides``) and
the model's config, what the step's claims need at the least, in a one-pass design:

- ``forward_flop``: the model forward (2 FLOP per weight per token + 4·L·H·d_head per token and
  layer for q·kᵀ and α·V, no LM head) of each (window, L) the step is the *first* in the run to
  need: records are computed once per (model, window, L) for the whole reproduction
  (``limits.records``), so a later step reads them;
- ``flop``: the statistics' matrix products (Alg. 1-3: s_N = A_N X and s_N Xᵀ, 4·L²·d per
  head and N; Alg. 4: the selected keys' distances, 2·L·n·d per head and n, and ⟨x_j, s_n⟩
  for every visible key j, L²·d per head and n on the causal half: r is the minimum of
  ‖α_j x_j − s‖ over all non-selected keys, so each needs its distance; counted since the
  thirteenth session, after the step's timings were seen: the floor had left it out);
- ``elements``: the statistics' elementwise passes over the L×L records (one per record read
  plus one per N, temperature or n the step evaluates on a full row);
- ``sort_elements``: entries sorted (each causal row once per (window, L, layer, head)).

The floor is ``flop / gemm_rate + elements / elementwise_rate + sort_elements / sort_rate``
with rates from :func:`measure_rates` (float32 under jit; NumPy's sort), measured at the
start of the same run, so the ratio wall / floor does not depend on the machine's load
between runs more than the load itself does. Steps with no model (synthetic rows, the sphere)
get no floor. A model of the work, stated, not a measurement: its constants are the per-entry
passes named above.
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping

VECTOR_DIM = {"value": "d_head", "key": "d_head", "hidden": "n_embd"}


def _ints(v) -> list[int]:
  return [int(x) for x in str(v).split(",") if str(x).strip()]


def layer_params(config) -> int:
  """Weights of one transformer block (attention + MLP), norms left out."""
  d, h = config.n_embd, config.n_head
  dh = config.d_head
  kv = getattr(config, "n_kv_head", h) or h
  ff = getattr(config, "d_mlp", None) or getattr(config, "n_inner", None) or 4 * d
  attn = d * h * dh + 2 * d * kv * dh + h * dh * d
  mlp = (3 if config.family == "llama" else 2) * d * ff
  return attn + mlp


def forward_flop(config, length: int) -> float:
  """One window's forward without the LM head (the records' cost)."""
  per_token = 2 * layer_params(config) + 4 * length * config.n_head * config.d_head
  return float(config.n_layer) * per_token * length


def _lengths(ov: Mapping[str, Any]) -> list[int]:
  if "lengths" in ov:
    return _ints(ov["lengths"])
  return [int(ov["length"])] if "length" in ov else []


def step_work(name: str, ov: Mapping[str, Any], config, seen: set) -> dict[str, float] | None:
  """The work of one step (see the module docstring); ``seen`` holds the (window, L) pairs whose
  forward an earlier step paid, and gets this step's. None for a step without a model."""
  if "model" not in ov or config is None:
    return None
  W = int(ov.get("windows", 1))
  lengths = _lengths(ov)
  H, NL = config.n_head, config.n_layer
  d = getattr(config, VECTOR_DIM.get(ov.get("vectors", "value"), "d_head"))
  fwd = sum(forward_flop(config, L) for L in lengths for w in range(W) if (w, L) not in seen)
  seen.update((w, L) for L in lengths for w in range(W))
  flop = elements = sorts = 0.0
  for L in lengths:
    entries = float(W * NL * H * L * L) / 2  # causal half of the (L, L) records
    if name.startswith("vanishing"):
      elements += entries
    elif name.startswith("distance_critical_n"):
      probes = 8 * math.ceil(math.log(max(L, 2)) / math.log(9))  # 8 Ns a round cut [1, L) 9-fold
      flop += 8 * d * entries * probes  # 4·L²·d per head and N (entries is the causal half)
      elements += entries * (1 + probes)
      sorts += entries
    elif name.startswith("distance"):
      k = len(_ints(ov.get("ns", "5")))
      flop += 8 * d * entries * k
      elements += entries * (1 + k)
      sorts += entries
    elif name.startswith("separability_model"):
      ns = _ints(ov.get("n_values", "1"))
      flop += 2.0 * W * NL * H * L * sum(ns) * d
      flop += 2.0 * d * entries * len(ns)  # r: ⟨x_j, s_n⟩ for every visible key (causal half)
      elements += entries * (1 + len(ns))
      sorts += entries
    elif name == "gradient":
      temps = len([t for t in str(ov.get("temperatures", "")).split(",") if t.strip()]) or 26
      elements += entries * temps
  return {"forward_flop": fwd, "flop": flop, "elements": elements, "sort_elements": sorts}


def floor_seconds(work: Mapping[str, float], rates: Mapping[str, float]) -> float:
  return ((work["forward_flop"] + work["flop"]) / rates["gemm_flop_s"]
          + work["elements"] / rates["elementwise_s"] + work["sort_elements"] / rates["sort_s"])


def _best(fn, repeats: int = 5, min_seconds: float = 1.0) -> float:
  """The fastest of at least ``repeats`` timed calls (after one untimed), timing on until
  ``min_seconds`` have passed: a rate is its best run, and a short burst of other work on the
  machine must not lower it and so inflate every floor (2026-12-07: elementwise 2.11 Gelem/s
  from 5 calls at the start of a ``benchmarks.reproduce`` run, 3.95-4.03 in four measurements
  at idle minutes later on the same machine)."""
  fn()
  best, spent, n = math.inf, 0.0, 0
  while n < repeats or spent < min_seconds:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    best, spent, n = min(best, dt), spent + dt, n + 1
  return best


def measure_rates(n: int = 1024) -> dict[str, float]:
  """float32 GEMM FLOP/s ((n, n)·(n, 64), the records' product shape, under jit), fused
  exp+sum elements/s under jit, and NumPy row-sort elements/s on (n, n): each the best of at
  least 5 calls (3 for the sort) and of at least 1 s of calls (:func:`_best`)."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  a = jax.random.normal(jax.random.key(0), (8, n, n), jnp.float32)
  b = jax.random.normal(jax.random.key(1), (8, n, 64), jnp.float32)
  mm = jax.jit(jnp.matmul)
  gemm = 2.0 * 8 * n * n * 64 / _best(lambda: mm(a, b).block_until_ready())
  ew = jax.jit(lambda x: jnp.sum(jnp.exp(x), axis=-1))
  elem = 8.0 * n * n / _best(lambda: ew(a).block_until_ready())
  host = np.asarray(a[0])
  sort = float(n * n) / _best(lambda: np.sort(host, axis=-1), repeats=3)
  return {"gemm_flop_s": gemm, "elementwise_s": elem, "sort_s": sort}
