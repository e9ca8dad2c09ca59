"""One timing rule for every benchmark: reference and ours in the same process, alternating.

``alternate(ref, ours, pairs)`` runs ``ref()`` then ``ours()`` ``pairs`` times after one warm-up
of each (compiles excluded), and reports the seconds of every run, the median of each side, the
median of the per-pair ratios ref/ours and their spread (min–max). On a shared machine the
spread says how much to trust the median.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def timed(fn: Callable[[], object]) -> float:
  """Wall seconds of fn() (fn must block until its result is ready)."""
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


def alternate(ref: Callable[[], object], ours: Callable[[], object], pairs: int = 5,
              warmup: bool = True) -> dict:
  """{"ref_s", "ours_s" (lists), "ref_median_s", "ours_median_s", "ratio_median",
  "ratio_min", "ratio_max", "pairs"}: ratio = ref seconds / ours seconds of the same pair."""
  if warmup:
    ref()
    ours()
  r, o = [], []
  for _ in range(pairs):
    r.append(timed(ref))
    o.append(timed(ours))
  ratios = [a / max(b, 1e-12) for a, b in zip(r, o)]
  return {"ref_s": r, "ours_s": o, "ref_median_s": statistics.median(r),
          "ours_median_s": statistics.median(o), "ratio_median": statistics.median(ratios),
          "ratio_min": min(ratios), "ratio_max": max(ratios), "pairs": pairs}


def line(label: str, res: dict) -> str:
  """One printed line: medians of both sides and the ratio with its spread."""
  return (f"{label}: reference {res['ref_median_s']:.2f} s, ours {res['ours_median_s']:.2f} s; "
          f"ratio {res['ratio_median']:.1f}x (spread {res['ratio_min']:.1f}-"
          f"{res['ratio_max']:.1f}x over {res['pairs']} alternating pairs)")


def load_model(spec: str, seed: int = 0):
  """(config, params) for a benchmark: ``gpt2_124m`` = GPT-2 124M shapes with random weights
  (only the time matters), else any ``limits.models.load`` spec (``tiny``, ``smollm2``, a dir)."""
  import jax

  if spec == "gpt2_124m":
    from limits.models import gpt2

    config = gpt2.Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024,
                         vocab_size=50257)
    return config, gpt2.init_params(jax.random.key(seed), config)
  from limits import models

  return models.load(spec)


# Modules that moved on 2026-12-05 (issue 26: a package per theorem): a reference taken from a
# commit before the move names them by their old paths.
RENAMED = {
    "limits/distance/kernels.py": "limits/distance_fast.py",
    "limits.distance.heads": "limits.distance_heads", "limits.distance.rows": "limits.distance_rows",
    "limits.distance.kernels": "limits.distance_fast", "limits.distance.model": "limits.distance_model",
    "limits.distance.printed": "limits.printed",
}


def module_at(rev: str, path: str, name: str):
  """The module at ``path`` (relative to the repository root) as it was at git revision
  ``rev``, loaded under ``name`` beside the current one (it must import only modules that
  still exist; a module that moved in the 2026-12-05 layout is read from its old path and its
  imports of moved modules are pointed at their new homes). Exits with one line if git cannot
  show it."""
  import importlib.util
  import re
  import subprocess
  import sys
  import tempfile
  from pathlib import Path

  root = Path(__file__).resolve().parents[1]

  def show(p):
    return subprocess.run(["git", "show", f"{rev}:{p}"], cwd=root, check=True,
                          capture_output=True, text=True).stdout

  try:
    src = show(path)
  except (OSError, subprocess.CalledProcessError) as e:
    old = RENAMED.get(path)
    try:
      src = show(old) if old else None
    except (OSError, subprocess.CalledProcessError):
      src = None
    if src is None:
      sys.exit(f"error: cannot read {path} at --ref={rev!r} ({e})")
    for new_name, old_name in RENAMED.items():
      if "/" not in new_name:
        src = re.sub(rf"\b{re.escape(old_name)}\b", new_name, src)
  file = Path(tempfile.mkdtemp()) / f"{name}.py"
  file.write_text(src)
  spec = importlib.util.spec_from_file_location(name, file)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod
