"""A stand-in reproduction step for tests/test_reproduce.py: touches ``--mb`` MB of memory and
spins ``--cpu`` seconds of CPU, then exits 0 without a results file (so the runner records
it as failed, with its resource use). Imports nothing heavy: with the launcher ~36 MB resident."""

import sys
import time


def main(argv):
  opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
  block = bytearray(int(float(opts.get("mb", 0)) * 1e6))  # zero-filled: every page touched
  end = time.process_time() + float(opts.get("cpu", 0))
  while time.process_time() < end:
    pass
  del block


if __name__ == "__main__":
  main(sys.argv[1:])
