"""Issue 30's table, one test per row (item 3): one line naming the bad value and what is
allowed, a non-zero exit, and nothing left that says otherwise. What main (1aa46d6) did is in
each docstring ("Before"); every test here failed there.
"""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from limits.errors import LimitsError
from tests.cli_helpers import REPO, run_experiment

EXPERIMENTS = sorted(p.stem for p in (REPO / "experiments").glob("*.py") if p.stem != "__init__")


def _one_error_line(r, code: int = 2) -> str:
  assert r.returncode == code, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
  assert "Traceback" not in r.stdout + r.stderr
  lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
  assert len(lines) == 1, r.stderr
  assert lines[0].startswith("error: "), lines
  return lines[0]


def test_reproduce_checks_a_named_model_without_model_steps(tmp_path):
  """Before: ``--only=gradient_synthetic --model=/nonexistent`` ran the step, exit 0, and the
  report named the missing model."""
  out = tmp_path / "r"
  r = run_experiment("reproduce", ["--quick", "--only=gradient_synthetic",
                                   "--model=/nonexistent", f"--out_dir={out}"], timeout=300)
  line = _one_error_line(r)
  assert "--model='/nonexistent'" in line and "no such file" in line, line
  assert not out.exists()  # refused before any step or folder


# --- a write that fails --------------------------------------------------------------------

_LIMITED = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
sys.argv = [{script!r}] + sys.argv[1:]
runpy.run_module("experiments.gradient", run_name="__main__", alter_sys=True)
"""


def test_figure_write_that_fails_names_the_file_leaves_no_temp_and_no_complete_run(tmp_path):
  """Before (a nearly full folder): "cannot write '?'", ``.gradient.tmp.png`` left and
  results.json said complete: true. The full disk is the kernel's own refusal: the CLI runs
  under RLIMIT_FSIZE = 32 KiB, so every write past 32 KiB fails (EFBIG, as ENOSPC would, mid-
  file); the results (7 KiB) and CSVs fit, the figure (~75 KiB) does not. No root, no mock."""
  out = tmp_path / "run"
  code = _LIMITED.format(limit=32 * 1024, script=str(REPO / "experiments" / "gradient.py"))
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  # No compilation cache (the tests' folder, or the CLI's own in the user cache): its entries
  # would hit the limit too (a warning line).
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env["LIMITS_COMPILE_CACHE"] = "off"
  r = subprocess.run([sys.executable, "-c", code, "--rows=8", "--length=16", "--temperature=1",
                      f"--out_dir={out}"], cwd=REPO, env=env, capture_output=True, text=True,
                     timeout=300)
  line = _one_error_line(r)
  assert f"cannot write {str(out / 'gradient.png')!r}" in line and "File too large" in line, line
  assert sorted(p.name for p in out.iterdir() if p.name not in (".lock", ".limits-run.json")) \
      == ["gradient.csv", "results.json", "rows.csv"]  # no temporary file, no figure
  res = json.loads((out / "results.json").read_text())["results"]
  assert res["complete"] is False
  # The same command with room to write finishes the run (both sides of the limit).
  again = run_experiment("gradient", ["--rows=8", "--length=16", "--temperature=1",
                                      f"--out_dir={out}"])
  assert again.returncode == 0, again.stderr[-2000:]
  assert json.loads((out / "results.json").read_text())["results"]["complete"] is True
  assert (out / "gradient.png").stat().st_size > 32 * 1024


def test_figure_writer_on_a_full_disk(tmp_path, monkeypatch):
  """The writer itself, in this process: ENOSPC at the fsync of the figure's temporary file is
  one line naming the figure; no temporary file is left and the previous figure is untouched."""
  from limits import plotting

  plt = plotting.pyplot()
  path = tmp_path / "fig.png"
  plotting.save(plt.figure(), path)
  old = path.read_bytes()
  real = os.fsync

  def full(fd):
    if ".fig.png." in os.readlink(f"/proc/self/fd/{fd}"):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd)

  monkeypatch.setattr(os, "fsync", full)
  fig = plt.figure()
  fig.gca().plot([0, 1], [1, 0])
  with pytest.raises(LimitsError) as e:
    plotting.save(fig, path)
  assert str(e.value) == (f"cannot write {str(path)!r}: No space left on device (disk full)")
  assert [p.name for p in tmp_path.iterdir()] == ["fig.png"] and path.read_bytes() == old
  monkeypatch.setattr(os, "fsync", real)
  plotting.save(fig, path)
  assert path.read_bytes() != old


# --- values ---------------------------------------------------------------------------------

def test_infinite_logit_scale_names_logit_scale(tmp_path):
  """Before: "temperature 1 is below the float64 range ... the smallest allowed T is inf"."""
  r = run_experiment("gradient", ["--temperature=1", "--logit_scale=inf", "--rows=8",
                                  "--length=16", f"--out_dir={tmp_path / 'g'}"])
  line = _one_error_line(r)
  assert "--logit_scale=inf" in line and "finite number > 0" in line, line
  assert "temperature" not in line.split(":", 2)[-1], line


def _gguf_header(path: Path, n_embd: int, n_head: int, key_length=None) -> Path:
  import gguf

  w = gguf.GGUFWriter(str(path), "llama")
  w.add_block_count(2)
  w.add_context_length(64)
  w.add_embedding_length(n_embd)
  w.add_feed_forward_length(1536)
  w.add_head_count(n_head)
  w.add_head_count_kv(n_head)
  w.add_rope_dimension_count(64)  # SmolLM2's: 576 / 9
  if key_length is not None:
    w.add_key_length(key_length)
  w.add_vocab_size(100)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def test_gguf_head_count_that_does_not_divide_the_width(tmp_path):
  """Before: head_count = 7 on a 576-wide model said "partial rotary ... head dim 82"."""
  from limits import models

  bad = _gguf_header(tmp_path / "bad.gguf", 576, 7)
  with pytest.raises(LimitsError) as e:
    models.load_config(bad)
  msg = str(e.value)
  assert "\n" not in msg and str(bad) in msg
  assert "llama.embedding_length=576 is not divisible by llama.attention.head_count=7" in msg
  # 9 heads divide 576 (head dim 64 = the rotary dimension): accepted.
  assert models.load_config(_gguf_header(tmp_path / "ok.gguf", 576, 9)).d_head == 64


def test_gpt2_load_of_a_device_is_one_line():
  """Before: ``gpt2.load('/dev/null')`` raised a raw NotADirectoryError."""
  from limits.models import gpt2

  with pytest.raises(LimitsError) as e:
    gpt2.load("/dev/null")
  assert str(e.value).startswith("/dev/null: not a checkpoint directory or a weight file")
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("module", EXPERIMENTS)
def test_help_exits_0(module):
  """Before: ``--help`` printed the help and exited 1 (absl's HelpFlag), for every CLI."""
  r = run_experiment(module, ["--help"], timeout=120)
  assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
  assert f"experiments/{module}.py:" in r.stdout, r.stdout[-2000:]  # its own flags listed
  assert "error" not in r.stderr.lower(), r.stderr
