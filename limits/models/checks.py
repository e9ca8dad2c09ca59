"""One-line checks of a model family's config fields (shared by the GPT-2 and Llama configs)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Mapping

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
      raise LimitsError(f"{what} {name}={show(value)} must {must}")


def show(value: Any, limit: int = 60) -> str:
  """``repr(value)`` cut to ``limit`` characters (a config value can be a huge list)."""
  text = repr(value)
  return text if len(text) <= limit else text[:limit - 3] + "..."


def is_int(value: Any) -> bool:
  """An ``int`` (a bool is not one)."""
  return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
  """A finite int or float (a bool is not one)."""
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_types(fields: Mapping[str, Any], source: str, *, integers: Iterable[str] = (),
                numbers: Iterable[str] = (), booleans: Iterable[str] = (),
                prefix: str = "") -> None:
  """LimitsError ``<source>: <prefix><name>=<value> must be <type>`` for the first present,
  non-null field of a config.json dict or GGUF header (``fields``) of the wrong type, before
  any ``float()``/``int()``/``bool()`` of it can raise or silently convert ("false" is truthy).
  Ranges (positive sizes, dividing head counts) are the family Config's own checks."""
  for names, ok, must in ((integers, is_int, "an integer"),
                          (numbers, is_finite_number, "a finite number"),
                          (booleans, lambda v: isinstance(v, bool), "true or false")):
    for name in names:
      value = fields.get(prefix + name)
      if value is not None and not ok(value):
        raise LimitsError(f"{source}: {prefix}{name}={show(value)} must be {must}")


def check_layer_count(n_layer: int, n_tensors: int, source) -> None:
  """One line when a config declares more layers than its weight file holds tensors (every
  layer has at least one), before a tensor list of ``n_layer`` entries is built: a config
  saying n_layer=10^12 is refused in O(1), not by enumerating its expected tensors."""
  if n_layer > n_tensors:
    raise LimitsError(f"{source}: config n_layer={n_layer} but the file holds only {n_tensors} "
                      "tensors (config does not match the weights)")
