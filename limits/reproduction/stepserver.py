"""The reproduction's step server: one interpreter that imports the heavy third-party modules
once (JAX, NumPy, SciPy's statistics, matplotlib) and forks each step from there, so the 16
steps of ``--quick`` do not each pay ≈ 3–4 CPU s of imports (JAX ≈ 2 s, of which ≈ 1 s is
ml_dtypes registering its ufunc loops; scipy.stats ≈ 1.2 s; matplotlib ≈ 1 s).

Each step is still exactly the command a user would type: the forked child becomes
``python -m experiments.X --flags`` the way the interpreter's ``-m`` does
(``runpy._run_module_as_main`` with ``sys.argv = ['-m', *flags]``, ``sys.path[0]`` the working
folder, the server's own globals removed from ``__main__``), with the same environment (the
server is started with the steps' environment, :func:`limits.reproduction.runner.records_env`),
its own session and process group, its log on stdout and stderr (not a terminal, as before),
the parent-death signal, and its command line in ``/proc`` (``ps``) rewritten to that command.
The server imports modules only, in its main thread, before the first fork; it never
initialises a JAX backend (XLA's threads start in each step, after the fork), never imports
``limits`` or ``experiments`` and never imports on another thread.

Protocol (one JSON line each way, on two pipes; one step at a time): the runner writes
``{"argv": [module, *flags], "log": path}``; the server answers ``{"pid": N}`` once forked
and ``{"pid": N, "code": exit code (negative: killed by that signal), "cpu_s", "peak_rss_mb"}``
from ``wait4`` when the step ends (the step's own children included, as before). The kernel
counts the pages the step shares with the server (the preloaded modules, :data:`PRELOAD`) in
its resident peak, as it counted the launcher's before.

Linux only (``fork``, ``prctl``, ``/proc``); ``LIMITS_STEP_SERVER=off`` runs each step as a
fresh ``python -m`` instead (:func:`enabled`), the only way elsewhere.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from typing import Any

ENV = "LIMITS_STEP_SERVER"  # "off": a fresh interpreter per step
# Imported by the server before the first fork: third-party only, none starts a thread that
# holds a lock across fork (NumPy's and SciPy's OpenBLAS pools stop themselves at fork).
PRELOAD = ("numpy", "jax", "jax.numpy", "scipy.stats", "matplotlib", "matplotlib.figure",
           "matplotlib.backends.backend_agg")

_SERVER = r"""
import ctypes, json, os, signal, sys
def _serve(parent, req_fd, resp_fd, preload):
  libc = ctypes.CDLL(None, use_errno=True)
  try:
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: the runner's death ends the server
  except Exception:
    pass
  if os.getppid() != parent:
    sys.exit(143)
  import importlib
  for name in preload:
    try:
      importlib.import_module(name)
    except Exception:
      pass  # the step imports it again and reports its own error
  req, resp = os.fdopen(req_fd, "rb", buffering=0), os.fdopen(resp_fd, "wb", buffering=0)
  me = os.getpid()
  while True:
    line = req.readline()
    if not line:  # the runner is done: this process's own use, then exit
      import resource
      ru = resource.getrusage(resource.RUSAGE_SELF)
      resp.write((json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime,
                              "peak_rss_mb": ru.ru_maxrss * 1024 / 1e6}) + "\n").encode())
      sys.exit(0)
    ask = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      req.close(); resp.close()
      os.setsid()
      try:
        libc.prctl(1, signal.SIGTERM)  # the server's death (so the runner's) ends the step
      except Exception:
        pass
      if os.getppid() != me:
        os._exit(143)
      fd = os.open(ask["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
      os.dup2(fd, 1); os.dup2(fd, 2); os.close(fd)
      _retitle([sys.executable, "-m"] + ask["argv"])
      sys.argv = ["-m"] + ask["argv"][1:]
      sys.path[0] = os.getcwd()
      return ask["argv"][0]
    resp.write((json.dumps({"pid": pid}) + "\n").encode())
    _, status, ru = os.wait4(pid, 0)
    resp.write((json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status),
                            "cpu_s": ru.ru_utime + ru.ru_stime,
                            "peak_rss_mb": ru.ru_maxrss * 1024 / 1e6}) + "\n").encode())
def _retitle(argv):
  # /proc/PID/cmdline (ps) shows the step's command: written over this process's own argument
  # area (fields 48-49 of /proc/self/stat), cut to its length; best effort.
  try:
    with open("/proc/self/stat", "rb") as f:
      fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])
    data = b"\0".join(os.fsencode(a) for a in argv)[:end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)
  except Exception:
    pass
def _become(module, _run=__import__("runpy")._run_module_as_main, _g=globals()):
  keep = {"__builtins__": _g["__builtins__"]}
  _g.clear(); _g.update(keep)
  _run(module, True)
_become(_serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")))
"""


def enabled() -> bool:
  """Whether steps are forked from the server: on Linux unless ``$LIMITS_STEP_SERVER`` is
  ``off`` (or ``0``/``no``/``false``)."""
  off = os.environ.get(ENV, "").strip().lower() in ("off", "0", "no", "false")
  return sys.platform.startswith("linux") and not off


class Served:
  """A running step forked by the server: ``pid`` (its own process group) and :meth:`wait`,
  as much of :class:`subprocess.Popen` as the runner's :func:`_terminate` uses."""

  def __init__(self, server: "StepServer", pid: int):
    self.server, self.pid, self.returncode = server, pid, None
    self.usage: dict[str, float] = {}

  def wait(self, timeout: float | None = None) -> int:
    """The exit code (negative: the signal), waiting up to ``timeout`` s
    (:class:`subprocess.TimeoutExpired` after it)."""
    if self.returncode is None:
      msg = self.server.read(timeout)
      if msg is None:
        raise subprocess.TimeoutExpired(f"step {self.pid}", timeout)
      self.returncode = int(msg["code"])
      self.usage = {"cpu_s": float(msg["cpu_s"]), "peak_rss_mb": float(msg["peak_rss_mb"])}
      self.server.steps_cpu_s += self.usage["cpu_s"]
    return self.returncode


class StepServer:
  """The server process, started by the first :meth:`start` (a reproduction whose steps are
  all done earlier starts none); :meth:`start` forks one step, :meth:`close` ends the server
  and returns its CPU seconds (the imports the steps no longer pay, counted once)."""

  def __init__(self, env: dict[str, str], preload=PRELOAD):
    self.env, self.preload, self.proc = dict(env), tuple(preload), None
    self._buf = b""
    self.steps_cpu_s = 0.0  # the finished steps' CPU seconds (in the server's wait4 record too)

  def _launch(self) -> None:
    req_r, self._req = os.pipe()
    self._resp, resp_w = os.pipe()
    try:
      self.proc = subprocess.Popen(
          [sys.executable, "-c", _SERVER, str(os.getpid()), str(req_r), str(resp_w),
           ",".join(self.preload)],
          pass_fds=(req_r, resp_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
          start_new_session=True, env=self.env)
    finally:
      os.close(req_r)
      os.close(resp_w)

  def start(self, argv: list[str], log: str) -> Served:
    """Forks ``python -m argv[0] argv[1:]`` with stdout and stderr on ``log``."""
    if self.proc is None:
      self._launch()
    os.write(self._req, (json.dumps({"argv": list(argv), "log": str(log)}) + "\n").encode())
    msg = self.read(None)
    if msg is None or "pid" not in msg:
      raise RuntimeError("the step server did not start the step")
    return Served(self, int(msg["pid"]))

  def read(self, timeout: float | None) -> dict[str, Any] | None:
    """The server's next message; None after ``timeout`` s; RuntimeError if it ended."""
    while b"\n" not in self._buf:
      if timeout is not None and not select.select([self._resp], [], [], timeout)[0]:
        return None
      chunk = os.read(self._resp, 65536)
      if not chunk:
        raise RuntimeError("the step server ended")
      self._buf += chunk
    line, self._buf = self._buf.split(b"\n", 1)
    return json.loads(line)

  def close(self) -> dict[str, float] | None:
    """Ends the server (end of requests; SIGKILL after 10 s) and returns its own ``cpu_s``
    (the imports, paid once; not its steps') and ``peak_rss_mb`` (its own resident peak, as
    it reports it; else from ``wait4``, its steps' peaks included); None if it never started."""
    if self.proc is None or self.proc.returncode is not None:
      return None
    own = None
    try:
      os.close(self._req)
      own = self.read(10.0)
    except (OSError, RuntimeError, ValueError):
      pass
    try:
      os.close(self._resp)
    except OSError:
      pass
    try:
      _, _, ru = os.wait4(self.proc.pid, 0) if _wait_done(self.proc, 10.0) else (0, 0, None)
    except ChildProcessError:
      return {"cpu_s": 0.0, "peak_rss_mb": 0.0}
    if ru is None:
      self.proc.kill()
      _, _, ru = os.wait4(self.proc.pid, 0)
    self.proc.returncode = 0
    if own is not None and "cpu_s" in own and "pid" not in own:
      return {"cpu_s": float(own["cpu_s"]), "peak_rss_mb": float(own["peak_rss_mb"])}
    return {"cpu_s": max(0.0, ru.ru_utime + ru.ru_stime - self.steps_cpu_s),
            "peak_rss_mb": ru.ru_maxrss * 1024 / 1e6}


def _wait_done(proc: subprocess.Popen, timeout: float) -> bool:
  """Whether ``proc`` has exited within ``timeout`` s (not reaped: wait4 reads its usage)."""
  import time

  end = time.monotonic() + timeout
  while time.monotonic() < end:
    try:
      if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
        return True
    except ChildProcessError:
      return True
    time.sleep(0.05)
  return False
