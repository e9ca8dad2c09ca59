"""limits.runs.cache_dirs.user_cache_dir: the one rule of every user cache folder."""

from pathlib import Path

import pytest

from limits.runs.cache_dirs import user_cache_dir


@pytest.mark.parametrize("word", ["0", "off", "OFF", " no ", "false", "none"])
def test_off_words_turn_the_cache_off(monkeypatch, word):
  monkeypatch.setenv("LIMITS_X_CACHE", word)
  assert user_cache_dir("LIMITS_X_CACHE", "x") is None


def test_a_folder_a_near_miss_and_the_default(monkeypatch, tmp_path):
  monkeypatch.setenv("LIMITS_X_CACHE", str(tmp_path / "mine"))
  assert user_cache_dir("LIMITS_X_CACHE", "x") == tmp_path / "mine"
  monkeypatch.setenv("LIMITS_X_CACHE", "offline")  # not an off word: a folder name
  assert user_cache_dir("LIMITS_X_CACHE", "x") == Path("offline")
  monkeypatch.delenv("LIMITS_X_CACHE")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert user_cache_dir("LIMITS_X_CACHE", "x") == tmp_path / "xdg" / "limits" / "x"
  monkeypatch.delenv("XDG_CACHE_HOME")
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert user_cache_dir("LIMITS_X_CACHE", "x") == tmp_path / "home" / ".cache" / "limits" / "x"
