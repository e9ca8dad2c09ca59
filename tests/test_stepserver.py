"""The reproduction's step server (limits.reproduction.stepserver): a step forked from it sees
what ``python -m`` would give it (argv, sys.path[0], ``__main__``'s names, environment, its
command line in /proc, its own session, one thread, no JAX backend yet, stdout and stderr on
its log), with the preloaded modules already imported; exit codes, exceptions and signals
come back as from a fresh interpreter; the runner with ``LIMITS_STEP_SERVER=off`` (or off
Linux) starts fresh interpreters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from limits.reproduction import stepserver

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop(stepserver.ENV, None)
  env.pop("PYTEST_CURRENT_TEST", None)
  return env


@pytest.fixture
def server(monkeypatch):
  monkeypatch.chdir(REPO)
  s = stepserver.StepServer(_env())
  yield s
  s.close()


def _served(server, tmp_path, name, *flags):
  probe, log = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
  step = server.start(["tests.probe_step", f"--probe={probe}", *flags], str(log))
  return step, probe, log


def _fresh(tmp_path, name, *flags):
  probe, log = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
  with open(log, "w") as f:
    code = subprocess.run([sys.executable, "-m", "tests.probe_step", f"--probe={probe}", *flags],
                          cwd=REPO, env=_env(), stdout=f, stderr=subprocess.STDOUT,
                          timeout=120).returncode
  return code, json.loads(probe.read_text()), log


def test_served_step_sees_what_python_m_gives(server, tmp_path):
  preload = "--preload=" + ",".join(stepserver.PRELOAD)  # JAX sets 2 variables at import
  step, probe, log = _served(server, tmp_path, "s", "--exit=0", preload)
  assert step.wait(timeout=120) == 0
  served = json.loads(probe.read_text())
  code, fresh, _ = _fresh(tmp_path, "f", "--exit=0", preload)
  assert code == 0
  for key in ("argv", "path0", "main_names", "env", "stdout_tty", "stdout_line_buffering",
              "threads"):
    a, b = served[key], fresh[key]
    if key == "argv":  # the probe paths differ only in their file names
      a, b = ([x.rsplit("/", 1)[0] if x.startswith("--probe=") else x for x in v] for v in (a, b))
    assert a == b, (key, a, b)
  assert served["argv"][0] == str(REPO / "tests" / "probe_step.py")
  assert served["cmdline"][:3] == [sys.executable, "-m", "tests.probe_step"]
  assert served["cmdline"][3].startswith("--probe=")
  assert served["sid"] == served["pid"] == served["pgid"] == step.pid  # its own session
  assert served["threads"] == 1 and served["backends"] == 0  # XLA starts after the fork
  for name in stepserver.PRELOAD:  # preloaded (a fresh interpreter imports none of them)
    assert name in served["modules"] and name not in fresh["modules"], name
  assert "limits" not in served["modules"] and "experiments" not in served["modules"]
  assert {"probe stdout", "probe stderr"} <= set(log.read_text().splitlines())
  assert step.usage["cpu_s"] >= 0 and step.usage["peak_rss_mb"] > 0


def test_exit_codes_exceptions_and_signals_come_back(server, tmp_path):
  step, _, _ = _served(server, tmp_path, "e3", "--exit=3")
  assert step.wait(timeout=120) == 3
  step, _, log = _served(server, tmp_path, "r", "--raise")
  assert step.wait(timeout=120) == 1
  text = log.read_text()
  assert "Traceback" in text and "ValueError: probe raised" in text
  step, probe, _ = _served(server, tmp_path, "k", "--sleep=30")
  with pytest.raises(subprocess.TimeoutExpired):
    step.wait(timeout=0.5)
  os.killpg(step.pid, signal.SIGKILL)
  assert step.wait(timeout=30) == -signal.SIGKILL and not probe.exists()
  step, _, _ = _served(server, tmp_path, "after", "--exit=0")  # the server goes on
  assert step.wait(timeout=120) == 0


def test_close_returns_the_servers_own_cpu(server, tmp_path):
  step, _, _ = _served(server, tmp_path, "c", "--exit=0")
  step.wait(timeout=120)
  own = server.close()
  assert 0.2 < own["cpu_s"] < 30, own  # the preload (≈ 3 CPU s idle), not the step's on top
  assert own["peak_rss_mb"] > 50, own  # NumPy, JAX, SciPy and matplotlib resident


_PEAK_LAUNCHER = """
import json, sys
from limits.reproduction import stepserver
s = stepserver.StepServer(json.loads(sys.argv[1]))
step = s.start(["tests.alloc_step", "--mb=400"], sys.argv[2])
step.wait(timeout=120)
own = s.close()
print(json.dumps({"step": step.usage, "own": own, "steps_cpu_s": s.steps_cpu_s}))
"""


def test_server_peak_is_its_own_not_its_steps(tmp_path):
  """The server's reported peak is its own (≈ 260 MB with JAX, SciPy, matplotlib), not its
  400 MB step's (wait4's on the server would be the step's). Launched from a small process: the
  kernel counts the launcher's resident size at the fork into the server's high-water mark (a
  pytest worker that has run hundreds of tests holds GBs: this test failed in the full suite
  when it launched the server itself)."""
  r = subprocess.run([sys.executable, "-c", _PEAK_LAUNCHER, json.dumps(_env()),
                      str(tmp_path / "a.log")], cwd=REPO, capture_output=True, text=True,
                     timeout=180)
  assert r.returncode == 0, r.stderr
  got = json.loads(r.stdout.strip().splitlines()[-1])
  step, own = got["step"], got["own"]
  assert step["peak_rss_mb"] >= 400, got
  assert own["peak_rss_mb"] < step["peak_rss_mb"] - 200, got
  assert got["steps_cpu_s"] == step["cpu_s"]


def test_killing_the_server_ends_the_step(server, tmp_path):
  step, probe, _ = _served(server, tmp_path, "d", "--sleep=60")
  time.sleep(0.5)
  server.proc.kill()  # the server's death (as the runner's, through it) ends the step
  end = time.monotonic() + 30
  while time.monotonic() < end:
    try:
      os.kill(step.pid, 0)
    except ProcessLookupError:
      break
    time.sleep(0.1)
  else:
    os.killpg(step.pid, signal.SIGKILL)
    pytest.fail("the step outlived its server")
  assert not probe.exists()


@pytest.mark.parametrize("value, on", [("off", False), ("0", False), ("", True), ("on", True)])
def test_enabled_by_environment(monkeypatch, value, on):
  monkeypatch.setenv(stepserver.ENV, value)
  assert stepserver.enabled() is on
  monkeypatch.setattr(sys, "platform", "darwin")
  assert stepserver.enabled() is False


def test_close_before_any_step_starts_nothing():
  s = stepserver.StepServer(_env())
  assert s.close() is None and s.proc is None
