"""Figures. Shared style here; one module per figure family (gradient, distance,
separability). matplotlib is imported lazily and always with the non-interactive Agg backend."""

from __future__ import annotations

import os
from pathlib import Path


def pyplot():
  """matplotlib.pyplot with the Agg backend (no display needed)."""
  import matplotlib

  matplotlib.use("Agg", force=True)
  import matplotlib.pyplot as plt

  return plt


def save(fig, path: str | os.PathLike, dpi: int = 130) -> Path:
  """Saves atomically (temp file + replace) and closes the figure."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
  fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
  os.replace(tmp, path)
  pyplot().close(fig)
  return path
