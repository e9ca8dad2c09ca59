"""Thin helpers shared by every ``experiments/*`` absl script.

- :func:`guard` wraps ``main`` so a :class:`~limits.errors.LimitsError` becomes a one-line
  ``error: ...`` on stderr with exit code 2, and Ctrl-C says where partial results are.
- :func:`setup_precision` turns on float64 (``--x64``) before any array is made.
- Validators for ``flags.register_validator`` that give one-line messages.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, Sequence

from limits.errors import LimitsError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def guard(main: Callable[[Sequence[str]], object]) -> Callable[[Sequence[str]], object]:
  """Returns main wrapped so user errors exit non-zero with one line and no traceback."""

  @functools.wraps(main)
  def wrapped(argv: Sequence[str]):
    _quiet_library_logs()
    if len(argv) > 1:
      print(f"error: unexpected positional arguments {list(argv[1:])}; use --flag=value",
            file=sys.stderr)
      sys.exit(EXIT_USAGE)
    try:
      return main(argv)
    except LimitsError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
      print("interrupted: results written so far are kept in the run directory",
            file=sys.stderr)
      sys.exit(EXIT_INTERRUPTED)

  return wrapped


def _quiet_library_logs() -> None:
  """absl shows INFO logs by default (e.g. JAX's "Unable to initialize backend 'tpu'"); keep
  warnings and errors only, unless the user asked for a level with --verbosity/-v."""
  from absl import flags, logging

  try:
    asked = flags.FLAGS["verbosity"].present
  except KeyError:
    asked = False
  if not asked:
    logging.set_verbosity(logging.WARNING)


def setup_precision(x64: bool) -> None:
  """Enables float64 globally when asked. Call first thing in main, before any jnp array."""
  import jax

  jax.config.update("jax_enable_x64", bool(x64))


def parse_floats(text: str, name: str) -> list[float]:
  """Parses '1e-3,0.1,10' into floats; a one-line LimitsError names the flag on failure."""
  parts = [p.strip() for p in str(text).split(",") if p.strip()]
  if not parts:
    raise LimitsError(f"--{name} is empty; give a comma-separated list of numbers")
  try:
    return [float(p) for p in parts]
  except ValueError:
    raise LimitsError(f"--{name}={text!r} is not a comma-separated list of numbers") from None


def parse_ints(text: str, name: str) -> list[int]:
  """Parses '1,5,10' into ints; a one-line LimitsError names the flag on failure."""
  parts = [p.strip() for p in str(text).split(",") if p.strip()]
  if not parts:
    raise LimitsError(f"--{name} is empty; give a comma-separated list of integers")
  try:
    return [int(p) for p in parts]
  except ValueError:
    raise LimitsError(f"--{name}={text!r} is not a comma-separated list of integers") from None


PAPER_LENGTHS = (32, 64, 128, 256, 512, 1024)


def parse_lengths(text: str, ctx: int, model_name: str, minimum: int = 1,
                  name: str = "lengths") -> list[int]:
  """Sorted unique sequence lengths from ``--lengths``, each in [minimum, ctx] (the model's
  n_positions); empty text gives the paper's grid 32…1024 cut at min(1024, ctx) (or [ctx])."""
  if not str(text).strip():
    return [L for L in PAPER_LENGTHS if L <= min(1024, ctx)] or [ctx]
  lengths = sorted(set(parse_ints(text, name)))
  for L in lengths:
    if L < minimum:
      raise LimitsError(f"--{name} contains L={L}; every L must be >= {minimum}")
    if L > ctx:
      raise LimitsError(f"--{name} contains L={L}, beyond the context of model {model_name!r} "
                        f"(n_positions={ctx})")
  return lengths


# Validators for flags.register_validator(name, fn, message=...): they return bool.
def positive(value) -> bool:
  return value is None or value > 0


def nonnegative(value) -> bool:
  return value is None or value >= 0
