"""Figures. Shared style here; one module per figure family (gradient, distance,
separability). matplotlib is imported lazily and always with the non-interactive Agg backend."""

from __future__ import annotations

import io
import os
from pathlib import Path


def pyplot():
  """matplotlib.pyplot with the Agg backend (no display needed)."""
  import matplotlib

  matplotlib.use("Agg", force=True)
  import matplotlib.pyplot as plt

  return plt


def save(fig, path: str | os.PathLike, dpi: int = 130) -> Path:
  """Saves atomically and closes the figure: rendered in memory, then written by
  :func:`limits.runs.results.atomic_write_bytes`, so a failed write (a full disk) is one line naming
  ``path`` and leaves no temporary file (matplotlib writing a temp file itself lost both)."""
  from limits.runs import results

  path = Path(path)
  buf = io.BytesIO()
  try:
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=dpi, bbox_inches="tight")
  finally:
    pyplot().close(fig)
  return results.atomic_write_bytes(path, buf.getvalue())
