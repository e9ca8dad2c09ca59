"""Evaluation and calibration windows of the corpus (disjoint by construction)."""

from __future__ import annotations

import numpy as np

from limits.errors import check


def split_windows(n_tokens: int, length: int, eval_windows: int, calib_windows: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Window indices (window w = tokens [w·L, (w+1)·L)): evaluation = the first ``eval_windows``
  (as every other experiment), calibration = ``calib_windows`` drawn without replacement by
  ``numpy.random.default_rng(seed)`` from the rest of the corpus; disjoint by construction."""
  total = int(n_tokens) // int(length)
  check(total >= eval_windows + calib_windows,
        f"the corpus has {total} windows of L={length}; {eval_windows} evaluation + "
        f"{calib_windows} calibration windows do not fit; use fewer or a shorter --length")
  ev = np.arange(eval_windows)
  rng = np.random.default_rng(seed)
  cal = np.sort(rng.choice(np.arange(eval_windows, total), size=calib_windows, replace=False))
  return ev, cal


def take_windows(tokens, length: int, idx) -> np.ndarray:
  """int32 (len(idx), L): the windows ``idx`` of the token stream."""
  t = np.asarray(tokens)
  return np.stack([t[i * length:(i + 1) * length] for i in idx]).astype(np.int32)
