"""limits.records.streaming: the layer loops of Algorithms 1-4 (one_behind: one item in
flight; in_threads: two items computed at once in worker threads, under the caller's JAX
settings).

The order of events is the contract: item l + 1 is dispatched before item l is finished (so
the host's work overlaps the device's), every dispatched value is finished once, in order.
A loop that finishes at once (no overlap), drops the last value or finishes out of order fails
here; tests/test_distance_pipeline.py checks the streamed sums of Algorithms 1-2 bitwise.
"""

import pytest

from limits.records.streaming import one_behind


def _events(items):
  log = []
  n = one_behind(items, lambda i: log.append(("dispatch", i)) or i * 10,
                 lambda d: log.append(("finish", d)))
  return n, log


def test_each_value_is_finished_after_the_next_dispatch_in_order():
  n, log = _events(range(3))
  assert n == 3
  assert log == [("dispatch", 0), ("dispatch", 1), ("finish", 0), ("dispatch", 2),
                 ("finish", 10), ("finish", 20)]


def test_one_item_and_none():
  assert _events([7]) == (1, [("dispatch", 7), ("finish", 70)])
  assert _events([]) == (0, [])


def test_a_generator_is_consumed_one_item_ahead_only():
  pulled = []

  def gen():
    for i in range(4):
      pulled.append(i)
      yield i

  finished = []

  def finish(d):
    # when d is finished, exactly item d + 1 has been pulled (one in flight), or all of them
    finished.append(d)
    assert pulled == list(range(min(d + 2, 4)))

  one_behind(gen(), lambda i: i, finish)
  assert finished == [0, 1, 2, 3]


def test_an_error_propagates_and_stops_the_loop():
  log = []

  def finish(d):
    log.append(d)
    if d == 1:
      raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    one_behind(range(5), lambda i: i, finish)
  assert log == [0, 1]


# ---------------------------------------------------------------- in_threads (Algorithm 4)

def test_in_threads_finishes_every_value_in_order_on_the_callers_thread():
  import threading

  from limits.records.streaming import in_threads

  main, seen = threading.current_thread().name, []
  n = in_threads(range(7), lambda i: i * 10,
                 lambda d: seen.append((d, threading.current_thread().name)))
  assert n == 7
  assert seen == [(10 * i, main) for i in range(7)]
  assert in_threads([], lambda i: i, seen.append) == 0


def test_in_threads_computes_two_items_at_once():
  """Each pair of items meets at a barrier inside dispatch: a loop that runs one dispatch at a
  time (or on the caller's thread) times out there."""
  import threading

  from limits.records.streaming import in_threads

  barrier, names = threading.Barrier(2, timeout=10), set()

  def dispatch(i):
    names.add(threading.current_thread().name)
    barrier.wait()
    return i

  got = []
  in_threads(range(4), dispatch, got.append)
  assert got == [0, 1, 2, 3]
  assert len(names) == 2 and all(n.startswith("in-flight") for n in names)


def test_in_threads_pulls_at_most_two_items_ahead_of_the_finished():
  from limits.records.streaming import in_threads

  pulled, finished = [], []

  def gen():
    for i in range(5):
      pulled.append(i)
      yield i

  def finish(d):
    finished.append(d)
    assert len(pulled) <= d + 2

  in_threads(gen(), lambda i: i, finish)
  assert finished == [0, 1, 2, 3, 4] and pulled == [0, 1, 2, 3, 4]


def test_in_threads_errors_stop_the_loop_and_leave_no_thread():
  import threading

  from limits.records.streaming import in_threads

  def dispatch(i):
    if i == 2:
      raise ValueError("bad layer 2")
    return i

  got = []
  with pytest.raises(ValueError, match="bad layer 2"):
    in_threads(range(6), dispatch, got.append)
  assert got == [0, 1]  # the values before the failing item were finished, in order

  pulled = []

  def gen():
    for i in range(10):
      pulled.append(i)
      yield i

  def finish(d):
    if d == 1:
      raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    in_threads(gen(), lambda i: i, finish)
  assert pulled == [0, 1, 2]  # nothing read after the interrupt
  assert not [t for t in threading.enumerate() if t.name.startswith("in-flight")]


def test_in_threads_waits_for_jax_arrays_in_the_worker():
  import jax.numpy as jnp
  import numpy as np

  from limits.records.streaming import in_threads

  got = []
  in_threads(range(3), lambda i: (i, jnp.arange(4.0) * i), lambda d: got.append(d))
  assert [g[0] for g in got] == [0, 1, 2]
  np.testing.assert_array_equal(np.asarray(got[2][1]), [0.0, 2.0, 4.0, 6.0])


def test_in_threads_workers_share_the_callers_x64_and_transfer_guard():
  """A jax.enable_x64 or jax.transfer_guard block around the loop holds inside the workers'
  dispatch (both are thread-local in JAX: a plain worker thread computes in float32 and
  ignores the guard), and a worker outside such a block gets the global settings."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from limits.records.streaming import in_threads

  def dtypes(items):
    got = []
    in_threads(items, lambda i: jnp.zeros(()) + i, lambda d: got.append(d.dtype))
    return got

  with jax.enable_x64(True):
    assert dtypes(range(3)) == [jnp.float64] * 3
  assert dtypes(range(3)) == [jnp.float32] * 3
  with jax.transfer_guard("disallow"):
    with pytest.raises(Exception, match="[Dd]isallowed"):
      in_threads([np.ones(3)], lambda a: jnp.sin(a), lambda d: None)  # implicit host -> device
  got = []
  in_threads([np.ones(3)], lambda a: jnp.sin(a), got.append)  # no guard: allowed
  assert len(got) == 1
