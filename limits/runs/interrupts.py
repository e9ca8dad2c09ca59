"""Ctrl-C (SIGINT) and SIGTERM without a crash and without losing finished work.

Python's default SIGINT handler raises ``KeyboardInterrupt`` at whatever bytecode runs next.
In a JAX run that is often a bad place (issue 30, reproduced on ``experiments.distance``):

- inside JAX's garbage-collection callback (``_xla_gc_callback``) or a ``__del__``: Python
  prints "Exception ignored in ..." with a ``KeyboardInterrupt`` traceback and drops the
  exception, so the run goes on to the end and exits 0 (the "swallowed" interrupt);
- anywhere else inside JAX, including Python code that JAX's C++ calls back into (tracing,
  pytree flattening, caches): the exception unwinds through C++ that does not expect it, then
  the CLI exits. The issue saw ``Fatal Python error: Segmentation fault`` (exit 139) after the
  "interrupted" line, i.e. during interpreter teardown. Not reproduced here (the same command
  interrupted at 6, 8, 15 and 25 s was swallowed 4 of 4 times; exiting with computations still
  in flight exits cleanly 3 of 3), so the exact crash site is unconfirmed; with the signal never
  raised inside JAX and :func:`settle` before the exit, neither path is left.

So while a CLI runs (:func:`install`, called by :func:`limits.cli.guard`; :func:`deferred` for
a block of library code) a signal only records itself and writes one line. Long loops call
:func:`check` at *safe points* (after their results were written, between layers), where it
raises :class:`Interrupted` (a ``KeyboardInterrupt``); ``guard`` then waits for computations
still in flight (:func:`settle`) and exits 130 with the results written so far in the run
directory; the same command then finishes the run in place (the sweep skips its recorded cells,
reproduce its finished steps, training resumes from its checkpoint; distance, separability,
gradient and vanishing continue from their last finished unit, :mod:`limits.runs.resume`, to
the values of an uninterrupted run). A signal after the last safe point still
ends the CLI with exit 130 once the run has written everything. A second signal stops at once
with ``os._exit(130)``: no Python code (and no interpreter teardown) runs after it, so it
cannot crash either, and every file written so far is whole (writes are atomic: temp file +
rename; a write cut short leaves at most its hidden temp file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

EXIT_INTERRUPTED = 130
SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTICE = ("interrupt: stopping at the next safe point, after the work in flight is written "
          "(Ctrl-C again to stop at once)")


class Interrupted(KeyboardInterrupt):
  """Raised by :func:`check` at a safe point after SIGINT or SIGTERM."""


_state = {"signal": None, "depth": 0}


def requested() -> int | None:
  """The number of the signal received (None if none) while :func:`deferred` is active."""
  return _state["signal"]


def check() -> None:
  """A safe point: raises :class:`Interrupted` if a signal arrived. Call it only where no
  result is half-written and nothing needs undoing (e.g. right after a checkpoint)."""
  if _state["signal"] is not None:
    raise Interrupted(f"signal {_state['signal']}")


def _write_stderr(text: str) -> None:
  # os.write, not print: a handler that prints while the interrupted code is inside a write to
  # sys.stderr (a progress line) gets "reentrant call" RuntimeError raised at that point.
  try:
    os.write(2, (text + "\n").encode())
  except OSError:
    pass


def _handler(signum, frame) -> None:
  del frame
  if _state["signal"] is not None:  # the second signal: stop now, without running Python
    _write_stderr("interrupted again: stopped at once; results written so far are kept in "
                  "the run directory")
    os._exit(EXIT_INTERRUPTED)
  _state["signal"] = signum
  _write_stderr(NOTICE)


@contextlib.contextmanager
def deferred():
  """Within it, SIGINT and SIGTERM only set the flag :func:`check` reads (main thread only;
  re-entrant: an inner use keeps the outer handlers). The previous handlers come back after;
  a signal the block never reached a safe point for raises :class:`Interrupted` at its end."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  if _state["depth"]:
    _state["depth"] += 1
    try:
      yield
    finally:
      _state["depth"] -= 1
    return
  previous = {}
  try:
    for sig in SIGNALS:
      previous[sig] = signal.signal(sig, _handler)
    _state["depth"] = 1
    yield
  finally:
    _state["depth"] = 0
    for sig, handler in previous.items():
      signal.signal(sig, handler)
    pending, _state["signal"] = _state["signal"], None
  if pending is not None:  # after the block's last safe point: its work is done, stop here
    raise Interrupted(f"signal {pending}")


def install() -> None:
  """:func:`deferred` for the rest of the process (a CLI, from the moment ``main`` is wrapped,
  so a signal during flag parsing is deferred too). Main thread only; idempotent."""
  if threading.current_thread() is threading.main_thread() and not _state["depth"]:
    for sig in SIGNALS:
      signal.signal(sig, _handler)
    _state["depth"] = 1


def ignore() -> None:
  """Ignores SIGINT and SIGTERM from now on: for a CLI whose run has finished and written
  everything, during interpreter teardown. Python resets its handlers to the default action
  there, so a Ctrl-C in those last moments would otherwise kill the process by the signal
  (exit -2) or raise in an atexit function; ignored, the finished run exits 0."""
  if threading.current_thread() is threading.main_thread():
    for sig in SIGNALS:
      signal.signal(sig, signal.SIG_IGN)


def settle() -> None:
  """Waits for every JAX computation still running (no-op if JAX was never imported), so the
  interpreter never exits under XLA's threads."""
  import sys

  jax = sys.modules.get("jax")
  if jax is None:
    return
  try:
    for a in jax.live_arrays():
      a.block_until_ready()
    jax.effects_barrier()
  except Exception:  # pragma: no cover - best effort: a deleted buffer, a failed computation
    pass
