"""JAX's persistent compilation cache for real runs, in the user cache directory.

Every experiment is a process of its own (the reproduction runs each step as one), and each
would recompile the same programs (about 230 s per SmolLM2 reproduction). :func:`enable` turns
the cache on in the calling process: it is called by the CLI entry (``limits.cli.guard``),
never at import time. The folder is ``$LIMITS_COMPILE_CACHE`` if that names a path, else
``$XDG_CACHE_HOME/limits/jax-compilation`` (``~/.cache/...``); ``LIMITS_COMPILE_CACHE=off``
(or 0) turns it off. A ``JAX_COMPILATION_CACHE_DIR`` already in the environment (the tests
set one) is left as it is. JAX keys each entry by the compiled program, the JAX/XLA versions
and the backend, so a stale entry is never used; the folder can be deleted at any time.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "LIMITS_COMPILE_CACHE"
MIN_COMPILE_SECONDS = 0.1  # JAX's default (1 s) would skip most of the suite's many small programs


def cache_dir() -> Path | None:
  """The folder :func:`enable` uses, None when turned off."""
  from limits.runs.cache_dirs import user_cache_dir

  return user_cache_dir(ENV, "jax-compilation")


def enable() -> Path | None:
  """Turns JAX's persistent compilation cache on for this process and the processes it starts
  (before the first compile); returns its folder, or None when off or when the environment
  already chose one. Through the environment when JAX is not imported yet (so a CLI that never
  needs JAX does not load it), else through ``jax.config``."""
  import sys

  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return None
  folder = cache_dir()
  if folder is None:
    return None
  try:
    folder.mkdir(parents=True, exist_ok=True)
  except OSError:
    return None  # an unwritable cache folder only costs compile time
  settings = {"jax_compilation_cache_dir": str(folder),
              "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
              "jax_persistent_cache_min_entry_size_bytes": 0}
  for name, value in settings.items():
    os.environ.setdefault(name.upper(), str(value))
  if "jax" in sys.modules:
    import jax

    for name, value in settings.items():
      jax.config.update(name, value)
  return folder
