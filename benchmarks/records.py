"""The shared records (``limits.records``) against a step's own forward, alternating in one
process, wall and CPU seconds (user + system of every thread):

- ``forward``: the forward with every record field to the host (what the first step that
  needs a window pays anyway);
- ``forward+write``: the store's computing call (the forward, each layer's files written and
  hashed in the loop);
- ``read``: every later step (memory-mapped files, each field checksum-checked): all fields,
  and the fields the vanishing step reads (q, k, scores and the ``weights_key0`` column).

Then the parts of one window's write: its bytes, the XXH3-64 and CRC-32 checksums of them and
the file writes (CPU seconds). Prints medians (min) and the load.

    python -m benchmarks.records --model=smollm2 --length=1024 --pairs=3
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

VANISHING = ("q", "k", "scores", "weights_key0")  # what the vanishing step reads


def main(argv):
  del argv
  import numpy as np

  from limits import models, records
  from limits.records import sources
  from limits.records import store as store_lib

  m = sources.load_model(FLAGS.model)
  L = FLAGS.length
  tok = (np.arange(L, dtype=np.int32)[None] * 31) % m.tokenizer.vocab_size

  def layer_arrays():
    for i, r in models.iter_layers(m.params, tok, m.config):
      yield i, records._with_derived({f: np.asarray(getattr(r, f)) for f in records.FIELDS})

  def forward():
    for _ in layer_arrays():
      pass

  def write(d):
    shutil.rmtree(d, ignore_errors=True)
    for _ in records.iter_arrays(m, tok, ("q",), store=records.RecordStore(d)):
      pass

  def read(d, fields):
    for _ in records.iter_arrays(m, tok, fields, store=records.RecordStore(d)):
      pass

  with tempfile.TemporaryDirectory() as tmp:
    d = os.path.join(tmp, "store")
    cases = {"forward": forward, "forward+write": lambda: write(d),
             "read all fields": lambda: read(d, records.FIELDS),
             "read vanishing's": lambda: read(d, VANISHING)}
    for fn in cases.values():
      fn()  # compile, warm up
    times = {k: [] for k in cases}
    for _ in range(FLAGS.pairs):
      for name, fn in cases.items():
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    arrays = [a for _, arr in layer_arrays() for a in arr.values()]
    nbytes = sum(a.nbytes for a in arrays)
    parts = {}
    c0 = time.process_time()
    for a in arrays:
      store_lib.checksum(a)
    parts["xxh3_64" if store_lib._XXH3 is not None else "crc32 (no xxhash)"] = (
        time.process_time() - c0)
    c0 = time.process_time()
    for a in arrays:
      store_lib._crc(a)
    parts["crc32"] = time.process_time() - c0
    c0 = time.process_time()
    for j, a in enumerate(arrays):
      with open(os.path.join(tmp, f"w{j}.bin"), "wb") as f:
        f.write(memoryview(np.ascontiguousarray(a)).cast("B"))
    parts["file writes"] = time.process_time() - c0
  base = statistics.median(c for _, c in times["forward"])
  for name, v in times.items():
    wall = statistics.median(w for w, _ in v)
    cpu = statistics.median(c for _, c in v)
    print(f"{FLAGS.model} L={L} {name:21s} wall {wall:6.2f} s (min {min(w for w, _ in v):.2f})"
          f"  CPU {cpu:6.2f} s ({cpu / base:.2f}x the forward's)")
  print(f"one window's write: {nbytes / 1e9:.2f} GB; CPU s: "
        + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
  print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) + f" ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
  app.run(main)
