"""The user cache folders of limits (one rule for every cache: JAX compilations, corpus tokens,
GGUF headers): ``$ENV`` names a folder, or turns the cache off with 0, off, no, false or none;
unset, the folder is ``$XDG_CACHE_HOME/limits/<name>`` (``~/.cache/limits/<name>``)."""

from __future__ import annotations

import os
from pathlib import Path

OFF = ("0", "off", "no", "false", "none")


def user_cache_dir(env: str, name: str) -> Path | None:
  """The cache folder named by ``$env`` (None when it says off), else the default above."""
  value = os.environ.get(env, "").strip()
  if value.lower() in OFF:
    return None
  if value:
    return Path(value).expanduser()
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(base) / "limits" / name
