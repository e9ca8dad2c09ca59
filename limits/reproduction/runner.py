"""Runs the reproduction plan (:mod:`limits.reproduction`): each step as its own subprocess
(``python -m experiments.X``, exactly the command a user would type) in ``OUT/<step>/``, then the
report. ``experiments/reproduce.py`` is the CLI over this module. On Linux each step is forked
from one step server that imported JAX, NumPy, SciPy and matplotlib once
(:mod:`limits.reproduction.stepserver`: the child runs the module as ``python -m`` does, same
argv, environment and ``ps`` line); ``LIMITS_STEP_SERVER=off`` starts a fresh interpreter per step.

A rerun skips a step whose ``results.json`` is a finished run recording the step's settings
(:func:`limits.reproduction.step_done`): the same record every CLI writes, no separate marker.
So an interrupted reproduction loses at most the step in flight.
Killing the parent (Ctrl-C, SIGTERM, SIGHUP, even SIGKILL) ends the running step too
(``PR_SET_PDEATHSIG``), so a rerun never shares a step folder with a leftover process.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from limits.reproduction import stepserver
from limits.runs import interrupts
from limits import reproduction as rp
from limits.runs import results as res

EXPERIMENT = rp.EXPERIMENT

# Runs in the child before it becomes the step: ask the kernel to SIGTERM it when this parent
# dies (even by SIGKILL), and give up if the parent is already gone; then exec the step.
_LAUNCHER = r"""
import ctypes, os, signal, sys
try:
  ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except Exception:
  pass
if os.getppid() != int(sys.argv[1]):
  sys.exit(143)
os.execv(sys.executable, [sys.executable, "-m"] + sys.argv[2:])
"""


def _terminate(proc: subprocess.Popen, grace: float = 30.0) -> None:
  """Ends the step's whole process group: SIGTERM, then SIGKILL after ``grace`` seconds (the
  step stops at its next safe point, :mod:`limits.runs.interrupts`, with what it finished written)."""
  for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
    try:
      os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
      return
    try:
      proc.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue


def _raise_interrupt(signum, frame):
  del frame
  raise KeyboardInterrupt(f"signal {signum}")


def _last_error(log: Path) -> str:
  """The step's own one-line error (the last 'error:' line), else its last line."""
  try:
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
  except OSError:
    return ""
  return next((l for l in reversed(lines) if l.startswith("error:")), lines[-1] if lines else "")


RECORDS = "records"  # OUT/records: the shared per-window records of the steps (limits.records)
# glibc >= 2.35: malloc asks for transparent huge pages (madvise) for its mmap'd chunks. Every
# (L, L) record is a fresh allocation of tens of MB; first-touching it in 4 KiB pages cost about
# as much as writing it (SmolLM2 L = 1,024, one forward with every record: 7.1 -> 5.3 CPU s,
# python -m benchmarks.forward). Placement only: the same numbers. Older glibc ignores it.
HUGE_PAGES = "glibc.malloc.hugetlb"


def _with_huge_pages(tunables: str) -> str:
  """``GLIBC_TUNABLES`` with ``glibc.malloc.hugetlb=1`` added, unless the caller named it."""
  items = [t for t in tunables.split(":") if t]
  if any(t.split("=")[0] == HUGE_PAGES for t in items):
    return tunables
  return ":".join(items + [f"{HUGE_PAGES}=1"])


def records_env(out: Path) -> dict[str, str]:
  """The steps' environment: ``$LIMITS_RECORDS_DIR`` = ``OUT/records`` (one forward per window
  and L for the whole reproduction) unless the caller set it (a folder, or ``off``), and
  ``GLIBC_TUNABLES`` asking malloc for huge pages (:data:`HUGE_PAGES`) unless it names them."""
  from limits import records

  env = dict(os.environ)
  env.setdefault(records.ENV_DIR, str(out / RECORDS))
  env["GLIBC_TUNABLES"] = _with_huge_pages(env.get("GLIBC_TUNABLES", ""))
  return env


def remove_records(out: Path, status, names=None) -> None:
  """Deletes ``OUT/records`` once every step of the plan succeeded (a failed or interrupted
  run keeps it, and so does a run of part of the plan, ``--only``: a rerun, or the run of the
  other steps, reads its records instead of recomputing them). ``names``: the steps of the
  whole plan (default :data:`limits.reproduction.STEP_NAMES`)."""
  import shutil

  names = rp.STEP_NAMES if names is None else names
  if all(status.get(n, {}).get("status") == "ok" for n in names):
    shutil.rmtree(out / RECORDS, ignore_errors=True)


def run_step(step: rp.Step, out: Path, settings: rp.Settings, ctx: int | None, *,
             resume: bool = True, server: stepserver.StepServer | None = None
             ) -> dict[str, Any]:
  """Runs one step as a subprocess in its own process group (or skips it when ``resume`` and
  its results.json is a finished run with the step's settings); returns its status record.
  ``server``: fork it from that :class:`~limits.reproduction.stepserver.StepServer` (started
  with :func:`records_env`), else a fresh ``python -m``."""
  step_dir = out / step.name
  overrides = rp.step_overrides(step, settings, ctx)
  args = rp.as_flags(overrides)
  shown = rp.step_command(step, settings, ctx)
  log = step_dir / "log.txt"
  base = {"command": shown, "log": str(log)}
  if resume:
    ok, why = rp.step_done(step_dir, overrides)
    if ok:
      print(f"[{step.name}] done earlier, skipped: {shown}", flush=True)
      return {**base, "status": "ok", "skipped": True, "seconds": None}
    if (step_dir / "results.json").exists():
      print(f"[{step.name}] {why}: running it again", flush=True)
  step_dir.mkdir(parents=True, exist_ok=True)
  print(f"[{step.name}] {shown}", flush=True)
  argv = [step.module, *args, f"--out_dir={step_dir}"]
  t0 = time.perf_counter()
  error = None  # set here only when the step server failed under the step
  if server is not None:
    try:
      proc = server.start(argv, str(log))
    except (OSError, RuntimeError, ValueError) as e:  # the server could not start or ended
      proc = None
      code, usage, error = -1, {}, f"the step server failed: {e}"
    if proc is not None:
      try:
        code = proc.wait()
      except RuntimeError as e:  # the server ended under the step (its death ends the step)
        code, error = -1, f"the step server ended while the step ran: {e}"
      except BaseException:
        _terminate(proc)
        raise
      usage = proc.usage
  else:
    with open(log, "w", encoding="utf-8") as f:
      proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(os.getpid()), *argv],
                              stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                              env=records_env(out))
      try:
        code, usage = _wait_with_usage(proc)
      except BaseException:
        _terminate(proc)
        raise
  seconds = time.perf_counter() - t0
  base.update(usage)
  if code == 0:
    try:
      rp.load_results(step_dir)
    except rp.Unreadable as e:
      code, error = -1, f"exited 0 but {e}"
    else:
      print(f"[{step.name}] ok in {seconds:.1f}s ({usage['cpu_s']:.1f} CPU s, peak RSS "
            f"{usage['peak_rss_mb']:.0f} MB)", flush=True)
      return {**base, "status": "ok", "seconds": seconds}
  elif error is None:
    error = f"exit {code}: {_last_error(log)}"
  print(f"[{step.name}] FAILED in {seconds:.1f}s (reason at the end)", flush=True)
  return {**base, "status": "failed", "exit": code, "error": error, "seconds": seconds}


def _maxrss_mb(ru) -> float:
  """``ru_maxrss`` of a resource record in MB of 10⁶ bytes (bytes on macOS, KiB on Linux)."""
  return ru.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 1e6


def _own_peak_rss_mb() -> float:
  """This process's resident high-water mark (MB of 10⁶ bytes)."""
  return _maxrss_mb(resource.getrusage(resource.RUSAGE_SELF))


def _wait_with_usage(proc: subprocess.Popen) -> tuple[int, dict[str, float]]:
  """Waits for the step (``wait4``) and returns its exit code (negative: killed by that
  signal, as :meth:`subprocess.Popen.wait`) and its resource use: ``cpu_s`` (user + system
  seconds) and ``peak_rss_mb`` (the kernel's high-water mark of resident memory, MB of
  10⁶ bytes). Both include the step's own children that it waited for. The kernel also
  counts the launching process's high-water mark into it (the exec replaces that memory),
  so it is the larger of the step's own peak and this process's at launch: an upper bound of
  the step's. The steps run one at a time, so a reproduction's peak is at most the largest
  step's plus this driver's (``driver_peak_rss_mb`` in its results)."""
  _, status, ru = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  return proc.returncode, {"cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": _maxrss_mb(ru)}


def check_prerequisites(steps, settings: rp.Settings) -> tuple[Any | None, str]:
  """The model's config and a one-line description of model and corpus; a LimitsError (one
  line) if the model or the corpus cannot be used. Writes nothing. The model is checked even
  when no step uses it: a named model that does not exist is an error, not a footnote."""
  from limits import data
  from limits.records import sources

  config = sources.model_config(settings.model)
  if not any(s.uses_model for s in steps):
    return None, f"no model step (model {settings.model} not used)"
  corpus = data.resolve_corpus(text=settings.text, data_dir=settings.data_dir)
  kb = len(corpus.text.encode("utf-8")) / 1e6
  return config, (f"model {settings.model} ({config.n_layer} layers × {config.n_head} heads, "
                  f"context {config.n_positions}), corpus {corpus.path.name} ({corpus.source}, "
                  f"{kb:.2f} MB)")


def write_report(out: Path, status, settings: rp.Settings, seconds: float, config,
                 run_config: dict[str, Any], server: dict[str, float] | None = None) -> str:
  """Judges every claim from the step files and writes report.md and results.json
  (``run_config``: the command's configuration, recorded with the results;
  ``server``: the step server's own CPU seconds (its imports) and peak, when the steps were
  forked from one, :mod:`limits.reproduction.stepserver`)."""
  ctx = config.n_positions if config is not None else None
  context = {"d_head": getattr(config, "d_head", None),
             "windows": settings.windows or (1 if settings.quick else 4)}
  assessments = rp.assess_all(out, status, context)
  tally = rp.claims.tally(assessments)
  rows = [rp.row(a, out) for a in assessments]
  report = rp.render_report(rows, status, settings, seconds, ctx, tally)
  res.atomic_write_text(out / "report.md", report)
  print(next(line for line in report.splitlines() if line.startswith("Paper's claims:")),
        flush=True)
  res.write_results(out, EXPERIMENT, run_config,
                    {"claims": rows, "tally": tally, "steps": status, "seconds": seconds,
                     "driver_peak_rss_mb": _own_peak_rss_mb(),
                     "step_server": server},
                    seed=settings.seed)
  return report


def run_all(steps, out: Path, settings: rp.Settings, config, run_config: dict[str, Any], *,
            resume: bool = True) -> dict[str, dict[str, Any]]:
  """Every step in order, then the report; SIGTERM/SIGHUP/Ctrl-C end the running step, mark it
  "interrupted" and still write the report of what finished (then re-raise). The caller's
  SIGTERM/SIGHUP handlers are back in place when it returns or raises."""
  ctx = config.n_positions if config is not None else None
  # The steps run in subprocesses: raising here, in proc.wait, is safe (limits.runs.interrupts
  # defers SIGINT and SIGTERM in the steps themselves, and in this CLI until here).
  previous = {sig: signal.signal(sig, _raise_interrupt)
              for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
  t0 = time.perf_counter()
  status: dict[str, dict[str, Any]] = {}
  server = stepserver.StepServer(records_env(out)) if stepserver.enabled() else None
  server_use = None
  try:
    for step in steps:
      interrupts.check()  # a signal deferred before the steps started (checks, folder)
      status[step.name] = run_step(step, out, settings, ctx, resume=resume, server=server)
    if server is not None:
      server_use, server = server.close(), None
  except KeyboardInterrupt:
    running = next((s for s in steps if s.name not in status), None)
    if running is not None:
      status[running.name] = {"status": "interrupted",
                              "command": rp.step_command(running, settings, ctx),
                              "error": "interrupted", "log": str(out / running.name / "log.txt"),
                              "seconds": None}
    for step in steps:  # the steps after it were asked for but never started
      status.setdefault(step.name, {"status": "not reached", "seconds": None, "log": "",
                                    "command": rp.step_command(step, settings, ctx),
                                    "error": "the reproduction was interrupted before it"})
    if server is not None:
      server_use, server = server.close(), None
    write_report(out, status, settings, time.perf_counter() - t0, config, run_config,
                 server_use)
    raise
  finally:
    if server is not None:
      server.close()
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  write_report(out, status, settings, time.perf_counter() - t0, config, run_config, server_use)
  remove_records(out, status)
  return status


def reproduce(steps, settings: rp.Settings, out_dir, run_config: dict[str, Any], *,
              resume: bool = True, identity=None, overwrite=None):
  """``experiments.reproduce`` less its flags: checks the model and corpus (one line if
  unusable), prepares and locks the output folder, runs :func:`run_all` and releases the lock.
  Returns ``(out, status)``. ``identity``/``overwrite``: as :func:`limits.runs.results.prepare_out_dir`
  (default: from the running CLI's flags)."""
  rp.check_plan(steps, settings)  # every override a field of its step's config, else one line
  config, what = check_prerequisites(steps, settings)  # one line, exit 2 if unusable
  out = res.prepare_out_dir(out_dir, EXPERIMENT, identity=identity, overwrite=overwrite)
  try:
    print(f"reproduce: {what}; writing to {out}", flush=True)
    return out, run_all(steps, out, settings, config, run_config, resume=resume)
  finally:
    res.release_dir(out)
