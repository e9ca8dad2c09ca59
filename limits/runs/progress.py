"""Progress bars with rate and ETA on stderr: a thin wrapper over ``tqdm``.

On a terminal (or in a notebook) tqdm redraws its bar in place. Elsewhere (CI, a log file, a
pipe) the bar's text is written as one plain line at the start, at most every ``log_every``
seconds after that and once at the end, so long batch runs still show progress without filling
the log with carriage returns.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

# Off a terminal: "desc 3/10 (30.0%) 1.52cells/s elapsed 00:02 ETA 00:04", one line each.
LINE_FORMAT = ("{desc} {n_fmt}/{total_fmt} ({percentage:5.1f}%) {rate_fmt} elapsed {elapsed} "
               "ETA {remaining}")


class _Bar(tqdm):
  """tqdm without its monitor thread (``monitor_interval = 0``): the thread only re-tunes
  ``miniters`` for bars that stall, and a CLI that exits on Ctrl-C (:mod:`limits.runs.interrupts`)
  should leave no thread of its own behind."""

  monitor_interval = 0


class _Lines:
  """The file tqdm writes to off a terminal: each redraw becomes one newline-ended line."""

  def __init__(self, stream):
    self.stream = stream

  def write(self, text: str) -> None:
    text = text.replace("\r", "").strip()
    if text:
      self.stream.write(text + "\n")

  def flush(self) -> None:
    self.stream.flush()


class Progress:
  """Usage: ``with Progress(total, "distance") as p: ... p.update(k)``.

  Args:
    total: the number of units expected.
    desc: the label in front of the bar.
    unit: the name of a unit (``"cells"``, ``"layers"``).
    log_every: seconds between lines when the stream is not a terminal.
    stream: where to write (default stderr).
    enabled: False counts (``done``) without writing anything.
  """

  def __init__(self, total: int, desc: str = "", *, unit: str = "it", log_every: float = 10.0,
               stream=None, enabled: bool = True):
    self.total = max(int(total), 0)
    self.desc = desc
    self.unit = unit
    self.done = 0
    self.stream = stream if stream is not None else sys.stderr
    self.enabled = enabled
    self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
    self.log_every = log_every
    self.t0 = time.perf_counter()
    if self.tty:
      self._bar = _Bar(total=self.total, desc=desc, unit=unit, file=self.stream,
                       disable=not enabled, dynamic_ncols=True)
    else:
      self._bar = _Bar(total=self.total, desc=desc, unit=unit, file=_Lines(self.stream),
                       disable=not enabled, mininterval=log_every, maxinterval=float("inf"),
                       bar_format=LINE_FORMAT, ascii=True)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False

  def line(self) -> str:
    """The current state as one line (the format written off a terminal)."""
    return tqdm.format_meter(self.done, self.total, time.perf_counter() - self.t0,
                             prefix=self.desc, unit=self.unit, bar_format=LINE_FORMAT)

  def update(self, n: int = 1) -> None:
    self.done += n
    self._bar.update(n)

  def close(self) -> None:
    self._bar.close()
