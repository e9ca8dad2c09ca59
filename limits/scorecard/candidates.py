"""The scorecard's candidate normalizers (:data:`CANDIDATES`), their families and the
normalizer function each family runs in the model (:func:`normalizer`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax

from limits import normalizers
from limits.errors import LimitsError, check


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One candidate normalizer: ``family`` groups candidates that one multiplier maps onto each
  other (softmax at any T); ``base`` is its multiplier of z = q·k/√d_head when uncalibrated."""
  key: str
  label: str
  family: str
  base: float = 1.0


CANDIDATES: dict[str, Candidate] = {c.key: c for c in (
    Candidate("softmax", "softmax (T0)", "softmax", 1.0),
    Candidate("softmax_t0.5", "softmax (T0×0.5)", "softmax", 2.0),
    Candidate("softmax_t2", "softmax (T0×2)", "softmax", 0.5),
    Candidate("sparsemax", "sparsemax", "sparsemax"),
    Candidate("entmax1.5", "1.5-entmax", "entmax1.5"),
    Candidate("entmax4/3", "4/3-entmax", "entmax4/3"),
    Candidate("ssmax", "SSMax", "ssmax"),
    Candidate("softplus", "Eq. 3, F = softplus", "softplus"),
)}
REFERENCE = "softmax"
FAMILY_LABELS = {"softmax": "softmax", "sparsemax": "sparsemax", "entmax1.5": "1.5-entmax",
                 "entmax4/3": "4/3-entmax", "ssmax": "SSMax", "softplus": "Eq. 3, F = softplus"}


def softplus_normalizer(logits, mask=None):
  """Eq. 3 with F = softplus: α_i = softplus(l_i) / Σ_j softplus(l_j) over visible j."""
  return normalizers.general(logits, jax.nn.softplus, mask)


def ssmax_s0(length: int) -> float:
  """SSMax's uncalibrated s = 1/ln L: at a query seeing L keys it is the model's own softmax."""
  return 1.0 / math.log(max(int(length), 2))


_NORMALIZERS: dict[tuple, Callable] = {}


def normalizer(family: str, length: int) -> Callable:
  """The normalizer ``fn(logits, mask)`` of a family (one object per (family, length), so jit
  does not recompile between calls)."""
  key = (family, int(length) if family == "ssmax" else 0)
  fn = _NORMALIZERS.get(key)
  if fn is None:
    if family == "softmax":
      fn = normalizers.get("softmax")
    elif family == "sparsemax":
      fn = normalizers.get("entmax", alpha=2.0)  # = sparsemax, bisection (see module doc)
    elif family == "entmax1.5":
      fn = normalizers.get("entmax", alpha=1.5)
    elif family == "entmax4/3":
      fn = normalizers.get("entmax", alpha=4 / 3)
    elif family == "ssmax":
      fn = normalizers.get("ssmax", s=ssmax_s0(length))
    elif family == "softplus":
      fn = softplus_normalizer
    else:
      raise LimitsError(f"unknown normalizer family {family!r}")
    _NORMALIZERS[key] = fn
  return fn


def parse_candidates(text: str) -> tuple[str, ...]:
  """Candidate keys from 'softmax,sparsemax,...' (must include the softmax reference)."""
  keys = [k.strip() for k in str(text).split(",") if k.strip()]
  bad = [k for k in keys if k not in CANDIDATES]
  check(not bad, f"--candidates: unknown {', '.join(bad)}; choose from {', '.join(CANDIDATES)}")
  check(REFERENCE in keys, f"--candidates must include {REFERENCE!r} (the reference row)")
  return tuple(dict.fromkeys(keys))
