"""The scorecard's configuration (:class:`Config`, whose digest keys the resumable parts), the
rows it produces (:func:`row_keys`) and the layers its metrics read (:func:`metric_layers`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

from limits.errors import check
from limits.scorecard.candidates import CANDIDATES, REFERENCE, parse_candidates


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a scorecard's numbers depend on (its digest keys the resumable parts)."""
  model: str = "tiny"
  candidates: tuple[str, ...] = tuple(CANDIDATES)
  length: int = 256
  eval_windows: int = 2
  calib_windows: int = 2
  calib_lo: float = 1 / 64
  calib_hi: float = 16.0
  calib_grid: int = 5
  calib_iters: int = 5
  lemma1_lengths: tuple[int, ...] = ()   # () = powers of two from 16 to L, and L
  distance_ns: tuple[int, ...] = (5, 100)
  ks_alpha: float = 0.01
  sep_ns: tuple[int, ...] = (16, 32, 64)
  radius: float = 1.0
  jac_rows: int = 64
  epsilon: float = 0.1
  layer_stride: int = 1
  timing_rounds: int = 3
  seed: int = 0
  text: str | None = None
  data_dir: str | None = None

  def __post_init__(self):
    check(self.length >= 4, f"--length={self.length} must be >= 4")
    for name in ("eval_windows", "calib_windows", "jac_rows", "layer_stride", "timing_rounds"):
      v = getattr(self, name)
      check(isinstance(v, int) and v >= 1, f"--{name}={v!r} must be a positive integer")
    check(0 < self.calib_lo < 1 < self.calib_hi < math.inf,
          f"calibration bracket [{self.calib_lo}, {self.calib_hi}] must satisfy 0 < lo < 1 < hi")
    check(self.calib_grid >= 3, f"--calib_grid={self.calib_grid} must be >= 3")
    check(self.calib_iters >= 0, f"--calib_iters={self.calib_iters} must be >= 0")
    check(0 < self.ks_alpha < 1, f"ks_alpha={self.ks_alpha} must be in (0, 1)")
    check(self.epsilon > 0 and math.isfinite(self.epsilon), f"--epsilon={self.epsilon} must be > 0")
    check(self.radius > 0, f"radius={self.radius} must be > 0")
    for name in ("lemma1_lengths", "distance_ns", "sep_ns"):
      vals = getattr(self, name)
      check(all(isinstance(v, int) and v >= 1 for v in vals),
            f"--{name} must hold positive integers, got {list(vals)}")
    check(all(t <= self.length for t in self.lemma1_lengths),
          f"--lemma1_lengths {list(self.lemma1_lengths)} must be <= --length={self.length}")
    parse_candidates(",".join(self.candidates))

  @property
  def prefix_lengths(self) -> tuple[int, ...]:
    if self.lemma1_lengths:
      return tuple(sorted(set(self.lemma1_lengths)))
    ts = [t for t in (2 ** k for k in range(4, 20)) if t < self.length]
    return tuple(ts + [self.length])

  @property
  def families(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(CANDIDATES[k].family for k in self.candidates))

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)

  def digest(self) -> str:
    blob = json.dumps(self.as_dict(), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def row_keys(cfg: Config) -> list[tuple[str, str, bool]]:
  """(row key, family, calibrated) in run order: every uncalibrated candidate (softmax first),
  then one calibrated row per family."""
  rows = [(k, CANDIDATES[k].family, False) for k in cfg.candidates]
  rows.sort(key=lambda r: r[0] != REFERENCE)
  rows += [(f"{fam}+cal", fam, True) for fam in cfg.families]
  return rows


def metric_layers(cfg: Config, n_layer: int) -> tuple[int, ...]:
  return tuple(range(0, n_layer, cfg.layer_stride))
