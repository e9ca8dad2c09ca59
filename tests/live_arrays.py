"""Counting the device arrays a test's own run holds (tests/test_distance_scan.py,
tests/test_distance_ks_stream.py: Algorithm 3 at L = 4,096 must hold one layer at a time)."""

import contextlib
import gc

import jax


@contextlib.contextmanager
def frozen_heap():
  """Everything alive now moved out of the collector's reach (``gc.freeze``) for the block, so
  the ``gc.collect()`` before each count scans only what the run itself creates: in a pytest
  worker that ran many tests first, each full collection took long enough that the two
  streaming tests took 420 and 362 s in the default suite against ~22 s alone (eighteenth
  session, ``--durations``). Objects frozen here are not counted anyway (they existed before)."""
  gc.collect()
  gc.freeze()
  try:
    yield
  finally:
    gc.unfreeze()


def counting_square_arrays(real, L: int, seen: list):
  """``real`` wrapped to append, at each call, the number of live arrays of shape (..., L, L)
  that did not exist when this was called (other tests' arrays in the same pytest worker are
  kept alive here, so their ids stay theirs); cyclic garbage is collected before each count."""
  gc.collect()
  before = [a for a in jax.live_arrays() if a.ndim >= 2 and a.shape[-2:] == (L, L)]
  ids = {id(a) for a in before}

  def counting(*args, **kw):
    gc.collect()
    seen.append(sum(1 for a in jax.live_arrays()
                    if a.ndim >= 2 and a.shape[-2:] == (L, L) and id(a) not in ids))
    return real(*args, **kw)

  counting.before = before  # the excluded arrays stay alive as long as the wrapper
  return counting
