"""A dependency-free progress bar with rate and ETA, written to stderr.

Only redraws when stderr is a terminal (or ``force=True``); otherwise it logs a line every
``log_every`` seconds so long CI or batch runs still show progress.
"""

from __future__ import annotations

import sys
import time


def _fmt_seconds(s: float) -> str:
  if s != s or s == float("inf"):
    return "?"
  s = int(round(s))
  h, rem = divmod(s, 3600)
  m, sec = divmod(rem, 60)
  return f"{h:d}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class Progress:
  """Usage: ``with Progress(total, "distance") as p: ... p.update(k)``."""

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
    self._last = 0.0

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False

  def line(self) -> str:
    elapsed = time.perf_counter() - self.t0
    rate = self.done / elapsed if elapsed > 0 else 0.0
    eta = (self.total - self.done) / rate if rate > 0 else float("inf")
    pct = 100.0 * self.done / self.total if self.total else 100.0
    return (f"{self.desc} {self.done}/{self.total} ({pct:5.1f}%) "
            f"{rate:.2f} {self.unit}/s elapsed {_fmt_seconds(elapsed)} ETA {_fmt_seconds(eta)}")

  def update(self, n: int = 1) -> None:
    self.done += n
    if not self.enabled:
      return
    now = time.perf_counter()
    if self.tty:
      self.stream.write("\r" + self.line())
      self.stream.flush()
    elif now - self._last >= self.log_every or self.done >= self.total:
      self._last = now
      self.stream.write(self.line() + "\n")
      self.stream.flush()

  def close(self) -> None:
    if self.enabled and self.tty:
      self.stream.write("\n")
      self.stream.flush()
