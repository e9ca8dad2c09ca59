"""The one seeding rule of every run: a task's random streams and a sweep cell's key both come
from ``--seed`` by these functions (issue 26, "one experiment protocol").

- :func:`root`: the run's key, ``jax.random.key(seed)``; nothing random is drawn from anything
  else.
- :func:`streams`: a task's independent streams, ``jax.random.split(root(seed), k)`` in a fixed
  order (gradient: rows, subsample, directions; separability: weights, Monte Carlo points).
- :func:`tagged`: a named stream of a run, ``fold_in(key, tag)`` with the tag's four ASCII bytes
  as one big-endian uint32 (the sweep's data shared by every cell of a run: ``"logi"``,
  ``"alph"``, ``"poin"``); an indexed stream (head h, sample i, batch start) is
  ``jax.random.fold_in(key, i)``.
- :func:`cell_key`: a sweep cell's key, ``fold_in(fold_in(root(seed), hi), lo)`` with ``hi, lo``
  the two uint32 halves of its cell id (so it depends on the seed and the cell's parameters
  only, never on its position or batch).
- :func:`numpy_seed`: a NumPy seed drawn from a key (the key's last uint32 word), for host-side
  sampling (``numpy.random.default_rng``; gradient's row subsample and g rows). A host stream
  with no key before it takes the run seed itself (distance's KS head subsets,
  ``limits.stats.head_subsets(..., seed)``).

The rule writes down what the tasks and the sweep already did (cb9858c): no stream changed, so
no reproduction or sweep number changed. JAX is imported on first use.
"""

from __future__ import annotations

from typing import Any


def root(seed: Any):
  """The run's key: ``jax.random.key(seed)`` (``seed`` an int or a traced uint32)."""
  import jax

  return jax.random.key(seed)


def streams(seed: int, k: int):
  """``k`` independent keys of a task, in a fixed order: ``split(root(seed), k)``."""
  import jax

  return jax.random.split(root(seed), k)


def tag(name: str) -> int:
  """A stream name of four ASCII characters as one big-endian uint32 (``"logi"`` ->
  0x6C6F6769)."""
  raw = name.encode("ascii")
  if len(raw) != 4:
    raise ValueError(f"a stream tag is four ASCII characters, not {name!r}")
  return int.from_bytes(raw, "big")


def tagged(key, name: str):
  """The named stream ``name`` of ``key``: ``fold_in(key, tag(name))``."""
  import jax

  return jax.random.fold_in(key, tag(name))


def cell_key(run_key, hi, lo):
  """A sweep cell's key from the run key and its cell id halves (ints or traced uint32)."""
  import jax

  return jax.random.fold_in(jax.random.fold_in(run_key, hi), lo)


def numpy_seed(key) -> int:
  """A NumPy seed drawn from ``key``: the last uint32 word of its key data."""
  import jax
  import numpy as np

  return int(np.asarray(jax.random.key_data(key)).ravel()[-1])
