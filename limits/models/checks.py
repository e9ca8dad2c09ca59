"""One-line checks of a model family's config fields (shared by the GPT-2 and Llama configs)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from limits.errors import LimitsError


def is_positive_int(value: Any) -> bool:
  """An ``int`` >= 1 (a bool is not one)."""
  return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_positive_number(value: Any) -> bool:
  """A finite int or float > 0."""
  return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_fields(config: Any, names: Iterable[str], ok: Callable[[Any], bool], what: str,
                 must: str) -> None:
  """LimitsError ``<what> <name>=<value!r> must <must>`` for the first field of ``config`` in
  ``names`` whose value ``ok`` rejects (e.g. ``what="GPT-2 config"``)."""
  for name in names:
    value = getattr(config, name)
    if not ok(value):
      raise LimitsError(f"{what} {name}={value!r} must {must}")
