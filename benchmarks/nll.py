"""Mean next-token loss (nats/token) of a model on the corpus: the first ``--windows``
consecutive L-token windows of *War and Peace* (``limits.records.sources.corpus_windows``), each scored
as given and with a BOS token prepended (``--bos``; Gemma 3 is trained with BOS = 2 first, the
tokenizer's ``encode`` adds none). The same L − 1 targets are scored both ways.

    python -m benchmarks.nll --model=gemma3-270m --length=512 --windows=1 --bos=2
    python -m benchmarks.nll --model=smollm2 --length=1024 --windows=1
"""

from __future__ import annotations

import time

from absl import app, flags

flags.DEFINE_string("model", "smollm2", "Model spec (limits.records.sources.load_model).")
flags.DEFINE_integer("length", 512, "Window length L.", lower_bound=2)
flags.DEFINE_integer("windows", 1, "Consecutive windows from the start of the body.",
                     lower_bound=1)
flags.DEFINE_integer("bos", -1, "Token id prepended for the second score (-1: none).")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  import jax.numpy as jnp
  import numpy as np

  from limits import models
  from limits.records import sources
  from limits.scorecard.loss import next_token_nll

  t0 = time.perf_counter()
  m = sources.load_model(FLAGS.model)
  toks = sources.corpus_windows(m, FLAGS.length, FLAGS.windows)  # (W, L)
  plain, with_bos = [], []
  for w in range(toks.shape[0]):
    x = np.asarray(toks[w:w + 1], np.int32)
    out = models.forward(m.params, x, m.config, layers=())
    plain.append(np.asarray(next_token_nll(out.logits, jnp.asarray(x)))[0])  # (L - 1,)
    if FLAGS.bos >= 0:
      xb = np.concatenate([[[FLAGS.bos]], x], axis=1).astype(np.int32)
      out = models.forward(m.params, xb, m.config, layers=())
      # drop the target of BOS itself: the same L - 1 targets as the plain score
      with_bos.append(np.asarray(next_token_nll(out.logits, jnp.asarray(xb)))[0, 1:])
  n = sum(len(v) for v in plain)
  line = (f"{FLAGS.model}: L = {FLAGS.length}, {toks.shape[0]} window(s), {n} targets: "
          f"{np.mean(np.concatenate(plain)):.4f} nats/token")
  if with_bos:
    line += f"; with BOS {FLAGS.bos} first: {np.mean(np.concatenate(with_bos)):.4f}"
  print(line + f" ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
  app.run(main)
