"""The layer loops that overlap the host's work with the device's.

JAX dispatches a jitted call and returns at once; reading its result back waits for it. A loop
over a model's layers that dispatches layer l + 1's kernel *before* reading layer l's result
keeps the device busy while the host reads, checks and places the next records.
:func:`one_behind` is that loop, written once.

On XLA's CPU backend, calls dispatched from one thread run one after the other: a layer's
kernel that keeps ~1.3 cores busy leaves the rest idle whatever is in flight. Calls from two
threads run at once. :func:`in_threads` runs each item's dispatch and wait in one of two worker
threads and finishes the results in order on the caller's, the same sums bit for bit:
Algorithms 1 and 2 (:meth:`limits.distance.model.ModelEvaluator.head_stats`), Algorithm 3's
search (``ModelEvaluator._cached_stats``) and Algorithm 4
(:func:`limits.separability.task.run_model`) use it, one_behind where a layer is too large to
hold two (``ModelEvaluator._loop``). Their steps, alternated with the loop before (WORKSPACE):
separability_model 1.24–1.36× (``python -m benchmarks.reproduce --model=smollm2
--only=separability_model --reference_rev=4da5b67 --pairs=2``), vary_n 1.19–1.46× and
vary_length 1.09–1.14× (``--only=distance_vary_length,distance_vary_n --reference_rev=1057c1e
--pairs=2``), critical_n 1.17× (``--only=distance_critical_n --reference_rev=ca4fcfd``).
"""

from __future__ import annotations

import collections
import contextlib
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


def in_threads(items: Iterable[T], dispatch: Callable[[T], D], finish: Callable[[D], None],
               *, workers: int = 2) -> int:
  """:func:`one_behind` with the work in threads: ``dispatch(item)`` runs, and its JAX arrays
  are waited for (``jax.block_until_ready``), in one of ``workers`` threads, so up to
  ``workers`` items compute at once; ``finish`` runs on the caller's thread on each value in
  item order, as soon as the oldest is done and before more than ``workers`` are started, so a
  caller that adds results up gets the same sums in the same order as the plain loop. The
  caller reads item l + ``workers`` only after item l is finished (at most ``workers`` items'
  arrays held besides the one being read).

  The workers run under the caller's thread-local JAX settings (:func:`caller_settings`: a
  ``jax.enable_x64`` or ``jax.transfer_guard`` block around the loop holds inside ``dispatch``).

  Returns the number of items. An exception from ``dispatch`` is raised at its item's turn;
  one from ``finish`` (an interrupt at a safe point) stops the loop: items not started are
  dropped, the ones running are waited for (a layer's kernel) and their values dropped.
  """
  import jax
  from concurrent.futures import ThreadPoolExecutor

  settings = caller_settings()

  def job(item):
    with settings():
      return jax.block_until_ready(dispatch(item))

  pending: collections.deque = collections.deque()
  count = 0
  with ThreadPoolExecutor(workers, thread_name_prefix="in-flight") as pool:
    try:
      for item in items:
        pending.append(pool.submit(job, item))
        del item
        count += 1
        if len(pending) >= workers:
          finish(pending.popleft().result())
      while pending:
        finish(pending.popleft().result())
    finally:
      for f in pending:
        f.cancel()
  return count


GUARDS = ("host_to_device", "device_to_host", "device_to_device")  # jax.transfer_guard_<kind>


def caller_settings() -> Callable[[], contextlib.AbstractContextManager]:
  """The calling thread's JAX settings that a context manager may have set for this thread
  only (``jax.enable_x64``, ``jax.transfer_guard``): a worker thread starts from the global
  ones, so float64 arrays would come out float32 there and a transfer guard would not hold.
  Returns a function giving a context manager that sets the same values in another thread."""
  import jax

  x64 = bool(jax.config.jax_enable_x64)
  guards = {g: getattr(jax.config, f"jax_transfer_guard_{g}") for g in GUARDS}

  @contextlib.contextmanager
  def apply():
    with contextlib.ExitStack() as stack:
      stack.enter_context(jax.enable_x64(x64))
      for g, level in guards.items():
        if level is not None:
          stack.enter_context(getattr(jax, f"transfer_guard_{g}")(level))
      yield

  return apply
