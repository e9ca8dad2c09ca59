"""The one seeding rule (limits.runs.seeding) against the derivations written out with JAX's own
functions, and the tasks and sweep kinds that use it."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from limits.runs import seeding


def _data(key):
  return np.asarray(jax.random.key_data(key))


def test_tags_are_the_four_ascii_bytes_big_endian():
  # Written out by hand: "logi" = 6c 6f 67 69, "alph" = 61 6c 70 68, "poin" = 70 6f 69 6e.
  assert seeding.tag("logi") == 0x6C6F6769
  assert seeding.tag("alph") == 0x616C7068
  assert seeding.tag("poin") == 0x706F696E
  for bad in ("log", "logis", "lögi"):
    with pytest.raises(ValueError):
      seeding.tag(bad)


def test_streams_tags_cells_and_numpy_seeds_follow_the_rule():
  seed = 7
  ref_root = jax.random.key(seed)
  assert (_data(seeding.root(seed)) == _data(ref_root)).all()
  got, ref = seeding.streams(seed, 3), jax.random.split(ref_root, 3)
  assert (_data(got) == _data(ref)).all()
  assert (_data(seeding.tagged(ref_root, "logi"))
          == _data(jax.random.fold_in(ref_root, 0x6C6F6769))).all()
  assert (_data(seeding.cell_key(ref_root, 3, 5))
          == _data(jax.random.fold_in(jax.random.fold_in(ref_root, 3), 5))).all()
  assert seeding.numpy_seed(ref_root) == int(_data(ref_root).ravel()[-1])
  # Different seeds, streams, tags and cells give different keys (no stream reused).
  keys = [seeding.root(8), *seeding.streams(seed, 3), seeding.tagged(ref_root, "alph"),
          seeding.tagged(ref_root, "poin"), seeding.cell_key(ref_root, 3, 6), ref_root]
  words = {tuple(_data(k).ravel()) for k in keys}
  assert len(words) == len(keys)


def test_sweep_cell_keys_are_the_rule_traced_and_on_the_host():
  """The engine's host path (_cell_keys) and the rule agree cell by cell."""
  from limits.sweep import engine

  halves = np.array([[1, 2], [3, 4]], np.uint32)
  run_key, keys = engine._cell_keys(11, halves)
  for (hi, lo), k in zip(halves, keys):
    assert (_data(k) == _data(jax.random.fold_in(jax.random.fold_in(jax.random.key(11),
                                                                      int(hi)), int(lo)))).all()
