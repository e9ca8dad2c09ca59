"""The scorecard's configuration (:class:`Config`, whose digest keys the resumable parts), the
rows it produces (:func:`row_keys`) and the layers its metrics read (:func:`metric_layers`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

from limits.errors import check
from limits.runs import options
from limits.scorecard.candidates import CANDIDATES, REFERENCE, parse_candidates

EXPERIMENT = "scorecard"
NOT_RECORDED = ("out_dir", "plot")  # where the run is written and whether it draws: no number


def _candidates(text: str, name: str) -> tuple[str, ...]:
  del name
  return parse_candidates(text)


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a scorecard's numbers depend on (its digest keys the resumable parts), and the
  run's folder and figure switch (:data:`NOT_RECORDED`: in neither the digest nor
  :meth:`as_dict`). Each field declares its CLI flag (``limits.runs.options``)."""
  model: str = options.model()
  candidates: tuple[str, ...] = options.option(
      tuple(CANDIDATES), "Comma-separated candidates (must include softmax, the reference).",
      parse=_candidates)
  length: int = options.option(256, "Window length L (evaluation and calibration).",
                               check=options.POSITIVE_INT)
  eval_windows: int = options.option(2, "Held-out evaluation windows (the first of the corpus).",
                                     check=options.POSITIVE_INT)
  calib_windows: int = options.option(2, "Calibration windows (seeded, after the evaluation "
                                      "ones).", check=options.POSITIVE_INT)
  calib_lo: float = options.option(1 / 64, "Calibration bracket: smallest multiplier c.",
                                   check=options.POSITIVE_NUMBER)
  calib_hi: float = options.option(16.0, "Calibration bracket: largest multiplier c.",
                                   check=options.POSITIVE_NUMBER)
  calib_grid: int = options.option(5, "Log-spaced grid points (plus c = 1) before the search.",
                                   check=options.POSITIVE_INT)
  calib_iters: int = options.option(5, "Evaluations of Brent's bounded search after the grid.",
                                    check=options.NONNEGATIVE)
  lemma1_lengths: tuple[int, ...] = options.option(  # () = powers of two from 16 to L, and L
      (), "Causal prefixes t for Lemma 1 (default: 16, 32, ... up to L, and L).",
      parse=options.comma_ints)
  distance_ns: tuple[int, ...] = options.option(
      (5, 100), "Top-N values at which d̃ is reported (N < L).", parse=options.comma_ints)
  ks_alpha: float = options.option(0.01, "KS significance level of the distance column.",
                                   cli=False)
  sep_ns: tuple[int, ...] = options.option(
      (16, 32, 64), "Top-N values averaged into the N_s/N plateau.", parse=options.comma_ints)
  radius: float = options.option(1.0, "Sphere radius of the separability column.", cli=False)
  jac_rows: int = options.option(64, "Sampled rows for the exact Jacobian norms and g.",
                                 check=options.POSITIVE_INT)
  epsilon: float = options.option(0.1, "ε of the finite-difference sensitivity g(T, ε).",
                                  check=options.POSITIVE_NUMBER)
  layer_stride: int = options.option(1, "Metrics on every k-th layer (the swap is in all).",
                                     check=options.POSITIVE_INT)
  timing_rounds: int = options.option(3, "Interleaved rounds for the forward-time cost.",
                                      check=options.POSITIVE_INT)
  seed: int = options.seed("Seed: calibration windows, Jacobian rows, directions of g.")
  text: str | None = options.text()
  data_dir: str | None = options.data_dir(
      "Folder with war_and_peace.txt (else $LIMITS_DATA_DIR, else the embedded corpus).")
  out_dir: str | None = options.out_dir(EXPERIMENT)
  plot: bool = options.plot("Write scorecard.png.")

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
    """The recorded settings: every field but :data:`NOT_RECORDED`."""
    return {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_RECORDED}

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
