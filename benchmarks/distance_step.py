r"""Where one distance step's wall time goes, as the reproduction runs it.

  python -m benchmarks.distance_step -- --mode=vary_length --lengths=32,64 --model=smollm2 \
      --windows=1 [any other experiments.distance flag]

Runs ``experiments.distance`` in this process with the same flags (records from
``$LIMITS_RECORDS_DIR`` as the reproduction's steps read them) and prints the split of its wall
and CPU seconds: interpreter start and imports, the model load, the records read (memory map +
CRC), XLA compilation (the number of compiles, their tracing, lowering and backend seconds,
persistent-cache hits), the per-layer kernels (``limits.distance.kernels`` calls, compile time
taken out), and the rest (host work: tabulating, KS tests, writing). Each part is timed where
it runs (wall), so parts nested in another are subtracted from it. Tracing and lowering are
timed by JAX's events (wall): their CPU seconds stay in the part that triggered them (mostly
"layer kernels"). The kernels run asynchronously: their time shows in "device_get". Process
CPU seconds from ``resource.getrusage`` (user + system, this process and its threads).
"""

from __future__ import annotations

import collections
import os
import resource
import sys
import time

T_START = time.perf_counter()


def _cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


def _since_boot_of_process() -> float:
  """Seconds since this process started (from /proc: the interpreter's own start-up)."""
  try:
    ticks = os.sysconf("SC_CLK_TCK")
    start = int(open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]) / ticks
    uptime = float(open("/proc/uptime").read().split()[0])
    return uptime - start
  except (OSError, ValueError, IndexError):
    return float("nan")


class Timers:
  """Wall seconds per part, with nested parts subtracted from the enclosing one."""

  def __init__(self):
    self.wall = collections.defaultdict(float)
    self.cpu = collections.defaultdict(float)
    self.calls = collections.Counter()
    self.stack: list[list] = []

  def wrap(self, name, fn):
    def timed(*a, **k):
      t0, c0 = time.perf_counter(), _cpu()
      self.stack.append([name, 0.0, 0.0])
      try:
        return fn(*a, **k)
      finally:
        _, inner, inner_c = self.stack.pop()
        dt, dc = time.perf_counter() - t0, _cpu() - c0
        self.wall[name] += dt - inner
        self.cpu[name] += dc - inner_c
        self.calls[name] += 1
        if self.stack:
          self.stack[-1][1] += dt
          self.stack[-1][2] += dc
    return timed

  def wrap_iter(self, name, gen_fn):
    """A generator function whose every ``next`` is timed as ``name``."""
    def timed(*a, **k):
      it = iter(gen_fn(*a, **k))
      while True:
        t0, c0 = time.perf_counter(), _cpu()
        self.stack.append([name, 0.0, 0.0])
        try:
          item = next(it)
        except StopIteration:
          return
        finally:
          _, inner, inner_c = self.stack.pop()
          dt, dc = time.perf_counter() - t0, _cpu() - c0
          self.wall[name] += dt - inner
          self.cpu[name] += dc - inner_c
          if self.stack:
            self.stack[-1][1] += dt
            self.stack[-1][2] += dc
        self.calls[name] += 1
        yield item
    return timed

  def add_inner(self, dt):  # an event (tracing, lowering) inside whatever part runs now
    if self.stack:  # wall only: its CPU seconds stay in the enclosing part
      self.stack[-1][1] += dt


def main():
  t_boot = _since_boot_of_process()
  argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != "--"]
  t0, c0 = time.perf_counter(), _cpu()
  import jax
  from jax._src import monitoring

  from limits import records
  from limits.distance import kernels, model as dmodel
  from limits.records import sources, store
  from experiments import distance as cli_mod
  t_imports, c_imports = time.perf_counter() - t0, _cpu() - c0

  T = Timers()
  compiles = collections.defaultdict(float)
  counts = collections.Counter()

  def on_duration(event, duration, **kw):
    if event.startswith("/jax/core/compile/") or event.startswith("/jax/compilation_cache/"):
      key = event.rsplit("/", 1)[-1]
      compiles[key] += duration
      counts[key] += 1
      if key in ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration"):
        T.wall["trace + lower"] += duration
        T.calls["trace + lower"] += 1
        T.add_inner(duration)

  monitoring.register_event_duration_secs_listener(on_duration)
  from jax._src import compiler
  compiler.compile_or_get_cached = T.wrap("XLA compile", compiler.compile_or_get_cached)
  sources.load_model = T.wrap("model load", sources.load_model)
  store.Entry.read = T.wrap("records read", store.Entry.read)
  records._compute = T.wrap_iter("forward + write", records._compute)
  for name in ("layer_kernel", "_layer_kernel", "layer_top"):
    setattr(kernels, name, T.wrap("layer kernels", getattr(kernels, name)))
  kernels.sort_rows = T.wrap("host sort", kernels.sort_rows)
  dmodel.sort_rows = T.wrap("host sort", dmodel.sort_rows)
  kernels.thresholds_from_sorted = T.wrap("host thresholds", kernels.thresholds_from_sorted)
  kernels.jax.device_get = T.wrap("device_get", jax.device_get)

  from absl import app

  from limits import cli
  cli_mod.define_flags()
  t_run0, c_run0 = time.perf_counter(), _cpu()
  try:
    app.run(cli.guard(cli_mod.main), argv=argv)
  except SystemExit as e:
    if e.code not in (0, None):
      raise
  finally:
    wall_run, cpu_run = time.perf_counter() - t_run0, _cpu() - c_run0
    total = time.perf_counter() - T_START + t_boot
    print("\n== distance step profile ==", flush=True)
    print(f"interpreter start (before this script): {t_boot:7.2f} s", flush=True)
    print(f"imports (jax, limits, experiments):    {t_imports:7.2f} s wall, {c_imports:6.2f} s CPU")
    print(f"run (experiments.distance main):       {wall_run:7.2f} s wall, {cpu_run:6.2f} s CPU")
    accounted = 0.0
    accounted_c = 0.0
    for name in ("model load", "forward + write", "records read", "trace + lower", "XLA compile",
                 "layer kernels", "device_get", "host sort", "host thresholds"):
      if name in T.wall:
        accounted += T.wall[name]
        accounted_c += T.cpu[name]
        print(f"  {name:<22} {T.wall[name]:8.2f} s wall {T.cpu[name]:8.2f} s CPU  "
              f"({T.calls[name]} calls)")
    print(f"  {'rest (host work)':<22} {wall_run - accounted:8.2f} s wall "
          f"{cpu_run - accounted_c:8.2f} s CPU")
    print(f"compiles: {counts.get('backend_compile_duration', 0)} backend "
          f"({compiles.get('backend_compile_duration', 0):.2f} s), trace "
          f"{compiles.get('jaxpr_trace_duration', 0):.2f} s, lower "
          f"{compiles.get('jaxpr_to_mlir_module_duration', 0):.2f} s; persistent-cache hits "
          f"{counts.get('cache_retrieval_time_sec', 0)} "
          f"({compiles.get('cache_retrieval_time_sec', 0):.2f} s retrieval)")
    print(f"total wall since process start: {total:.2f} s; CPU {_cpu():.2f} s; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
  main()
