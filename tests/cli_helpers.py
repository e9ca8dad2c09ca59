"""Shared set-up for the end-to-end CLI tests: a random-weight model directory with small texts,
and a runner that calls ``python -m experiments.NAME`` the way a user would."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_model_and_texts(root: Path, *, repeat: int = 6, **model_kwargs) -> Path:
  """root/model (random GPT-2, ``make_random_model_dir(**model_kwargs)``), root/text.txt
  (the sample text ``repeat`` times) and root/empty.txt. Returns root."""
  from limits.models.gpt2.testing import SAMPLE_TEXT, make_random_model_dir

  make_random_model_dir(root / "model", **model_kwargs)
  (root / "text.txt").write_text(SAMPLE_TEXT * repeat, encoding="utf-8")
  (root / "empty.txt").write_text("", encoding="utf-8")
  return root


def simulated_devices_env(n: int) -> dict:
  """This process's environment for a CPU subprocess that sees ``n`` simulated devices (XLA's
  host-platform device count added to the inherited XLA_FLAGS)."""
  flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}"
  return dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")


def run_experiment(module: str, args, *, cwd=REPO, timeout: int = 300, env=None):
  """Runs ``python -m experiments.<module> *args`` on CPU without the corpus; CompletedProcess."""
  env = dict(os.environ if env is None else env, JAX_PLATFORMS="cpu")
  env.pop("LIMITS_DATA_DIR", None)
  return subprocess.run([sys.executable, "-m", f"experiments.{module}", *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=timeout)


def start_experiment(module: str, args, *, cwd=REPO, env=None):
  """Like :func:`run_experiment` but returns the running Popen (stdout/stderr piped)."""
  env = dict(os.environ if env is None else env, JAX_PLATFORMS="cpu")
  env.pop("LIMITS_DATA_DIR", None)
  return subprocess.Popen([sys.executable, "-m", f"experiments.{module}", *args], cwd=cwd,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def interruptible():
  """Around the start of a CLI a test interrupts with SIGINT: the child starts with SIGINT's
  default action, as a terminal's Ctrl-C finds it. A shell without job control starts
  background jobs with SIGINT ignored and every child inherits that (Python then installs no
  KeyboardInterrupt handler), so a suite started with ``pytest &`` would otherwise send a SIGINT
  the CLI never sees. A handled signal is reset to the default by exec, so this process handles
  SIGINT while the child starts (no ``preexec_fn``: forking a threaded JAX process is unsafe)."""
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)


def pids_with(needle: str) -> list[int]:
  """Pids of live processes whose command line contains ``needle`` (Linux /proc)."""
  out = []
  for d in Path("/proc").iterdir():
    if not d.name.isdigit():
      continue
    try:
      cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
      state = next((l for l in (d / "status").read_text().splitlines()
                    if l.startswith("State:")), "")
    except OSError:
      continue
    if needle in cmd and "Z" not in state.split()[1:2]:  # zombies are already dead
      out.append(int(d.name))
  return out
