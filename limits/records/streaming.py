"""One item in flight: the loop that overlaps the host's work with the device's.

JAX dispatches a jitted call and returns at once; reading its result back waits for it. A loop
over a model's layers that dispatches layer l + 1's kernel *before* reading layer l's result
keeps the device busy while the host reads, checks and places the next records (Algorithms 1
and 2, :meth:`limits.distance.model.ModelEvaluator.head_stats`; Algorithm 4,
:func:`limits.separability.task.run_model`). :func:`one_behind` is that loop, written once.
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
D = TypeVar("D")


def one_behind(items: Iterable[T], dispatch: Callable[[T], D],
               finish: Callable[[D], None]) -> int:
  """Calls ``dispatch(item)`` for each item in order and ``finish`` on what it returned one
  item later: ``finish(d_l)`` runs after ``dispatch(item_{l+1})`` (the last right after the
  loop). Every dispatched value is finished exactly once, in dispatch order, so a caller that
  adds results up gets the same sums in the same order as the plain loop. The item itself is
  not kept past its ``dispatch`` (a layer's host arrays can be freed while its kernel runs).

  Returns the number of items. An exception from ``dispatch`` or ``finish`` propagates; the
  value dispatched but not finished at that moment is dropped (an interrupted run restarts
  its unit).
  """
  previous, have, count = None, False, 0
  for item in items:
    current = dispatch(item)
    del item
    count += 1
    if have:
      finish(previous)
    previous, have = current, True
  if have:
    finish(previous)
  return count
