"""A stand-in reproduction step for tests/test_stepserver.py: writes what a step sees of its
own process (argv, ``__main__``'s names, command line, session, threads, imported modules,
JAX backends) as JSON to ``--probe=PATH``; ``--exit=N`` exits N, ``--raise`` raises,
``--sleep=S`` sleeps first (to be killed); ``--preload=a,b`` imports those modules before
reading the environment."""

import json
import os
import sys
import threading
import time


def main(argv):
  opts = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in argv
              if a.startswith("--"))
  time.sleep(float(opts.get("sleep", 0)))
  backends = None
  if "jax" in sys.modules:
    from jax._src import xla_bridge
    backends = len(xla_bridge._backends)
  probe = {"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
           "main_names": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__")),
           "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\0"),
           "sid": os.getsid(0), "pid": os.getpid(), "pgid": os.getpgid(0),
           "threads": threading.active_count(), "modules": sorted(sys.modules),
           "backends": backends, "stdout_tty": os.isatty(1),
           "stdout_line_buffering": sys.stdout.line_buffering}
  if opts.get("preload"):  # what the step's own imports would leave in its environment
    import importlib
    for name in opts["preload"].split(","):
      importlib.import_module(name)
  probe["env"] = dict(os.environ)
  print("probe stdout")
  print("probe stderr", file=sys.stderr)
  with open(opts["probe"], "w", encoding="utf-8") as f:
    json.dump(probe, f)
  if "raise" in opts:
    raise ValueError("probe raised")
  sys.exit(int(opts.get("exit", 0)))


SEEN_AT_IMPORT = sorted(k for k in globals() if not k.startswith("__"))

if __name__ == "__main__":
  main(sys.argv[1:])
