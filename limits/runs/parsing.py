"""Comma-separated flag values as lists: one-line :class:`~limits.errors.LimitsError` messages
that name the flag (``--NAME``) and what it allows. Pure functions over strings, shared by the
tasks and the CLIs (a task parses its own config strings, so a library call gives the same
errors as the command line)."""

from __future__ import annotations

from typing import Any, Callable

from limits.errors import LimitsError


def parse_floats(text: str, name: str) -> list[float]:
  """Parses '1e-3,0.1,10' into floats; a one-line LimitsError names the flag on failure."""
  return _parse_list(text, name, float, "numbers")


def parse_ints(text: str, name: str) -> list[int]:
  """Parses '1,5,10' into ints; a one-line LimitsError names the flag on failure."""
  return _parse_list(text, name, int, "integers")


def _parse_list(text: str, name: str, kind: Callable[[str], Any], noun: str) -> list:
  parts = [p.strip() for p in str(text).split(",") if p.strip()]
  if not parts:
    raise LimitsError(f"--{name} is empty; give a comma-separated list of {noun}")
  try:
    return [kind(p) for p in parts]
  except ValueError:
    raise LimitsError(f"--{name}={text!r} is not a comma-separated list of {noun}") from None


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
