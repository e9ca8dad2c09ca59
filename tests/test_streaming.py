"""limits.records.streaming.one_behind: the one-item-in-flight loop of Algorithms 1, 2 and 4.

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
