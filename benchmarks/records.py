"""The shared records (``limits.records``) against a step's own forward, alternating in one
process: per window, ``forward`` (what every step did before: its own forward, the weights and
values to the host), ``forward+write`` (the first step that needs the window: the forward and
the CRC-checked files) and ``read`` (every later step and every probe of Algorithm 3: the
memory-mapped files, CRC-checked). Prints the median seconds (min, max) and the load.

    python -m benchmarks.records --model=smollm2 --length=256 --pairs=3
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

from absl import app, flags

flags.DEFINE_string("model", "smollm2", "Model spec (limits.records.sources.load_model).")
flags.DEFINE_integer("length", 256, "Window length L.")
flags.DEFINE_integer("pairs", 3, "Alternating rounds (after one warm-up round).")
FLAGS = flags.FLAGS

FIELDS = ("weights", "v")  # what the distance and separability steps read


def main(argv):
  del argv
  import numpy as np

  from limits import models, records
  from limits.records import sources

  m = sources.load_model(FLAGS.model)
  L = FLAGS.length
  tok = (np.arange(L, dtype=np.int32)[None] * 31) % m.tokenizer.vocab_size

  def forward():
    for _, r in models.iter_layers(m.params, tok, m.config):
      np.asarray(r.weights), np.asarray(r.v)

  def write(d):
    shutil.rmtree(d, ignore_errors=True)
    for _ in records.iter_layers(m, tok, store=records.RecordStore(d), fields=FIELDS):
      pass

  def read(d):
    for _, r in records.iter_layers(m, tok, store=records.RecordStore(d), fields=FIELDS):
      np.asarray(r.weights).sum()

  with tempfile.TemporaryDirectory() as tmp:
    d = os.path.join(tmp, "store")
    cases = {"forward": forward, "forward+write": lambda: write(d), "read": lambda: read(d)}
    for fn in cases.values():
      fn()  # compile, warm up
    times = {k: [] for k in cases}
    for _ in range(FLAGS.pairs):
      for name, fn in cases.items():
        t0 = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - t0)
  base = statistics.median(times["forward"])
  for name, v in times.items():
    med = statistics.median(v)
    print(f"{FLAGS.model} L={L} {name:14s} median {med:.2f} s (min {min(v):.2f}, max "
          f"{max(v):.2f}); forward / this {base / med:.1f}x")
  print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) + f" ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
  app.run(main)
