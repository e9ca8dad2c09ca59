"""Mean next-token loss (nats/token) of a model on the corpus, in non-overlapping L-token windows
of *War and Peace* (window w is tokens ``[w·L, (w+1)·L)`` of the encoded body, as
``limits.records.sources.corpus_windows``; the last partial window is not scored). Each window
is scored as given and/or with a BOS token prepended (``--bos``; Gemma 3 is trained with BOS = 2
first, the tokenizer's ``encode`` adds none). Both scores use the same L − 1 targets (tokens 1…L−1
of the window; the target of BOS itself is dropped), so they compare directly.

Which windows: ``--windows=N`` of them (``0``: every window of the book), in ``--order=first``
(windows 0, 1, …) or ``--order=random`` (a permutation of all windows drawn from ``--seed``:
the first N of it are a uniform random sample without replacement, and a larger N extends the
same sample).

``--out=FILE.jsonl``: every finished window is appended to FILE (one JSON line, flushed and
fsynced; a header line first names the model, L, BOS, corpus, order and seed) and a rerun of
the same command skips the windows already there, so an interrupted run, or one asked for more
windows, continues where it stopped. The summary is computed from the file's windows that
belong to the requested set, so it equals an uninterrupted run's. A file written with other
settings is refused in one line.

Summary: mean NLL over all scored targets; with a random sample of n of the book's N windows,
also the standard error of that mean between windows (sd of the window means / √n, times the
finite-population factor √(1 − n/N); 0 when every window is scored).

    python -m benchmarks.nll --model=gemma3-270m --length=512 --windows=1 --bos=2
    python -m benchmarks.nll --model=smollm2 --length=1024 --windows=1
    python -m benchmarks.nll --model=gemma3-270m --length=1024 --bos=2 --noplain \\
        --order=random --seed=0 --windows=0 --out=/tmp/gemma_nll.jsonl
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
from absl import app, flags

from limits.errors import LimitsError, check


def define_flags() -> None:
  """The absl flags, defined only when this module runs as a program (so tests can import it
  beside other benchmarks that define flags of the same names)."""
  flags.DEFINE_string("model", "smollm2", "Model spec (limits.records.sources.load_model).")
  flags.DEFINE_integer("length", 512, "Window length L.", lower_bound=2)
  flags.DEFINE_integer("windows", 1, "How many windows (0: every window of the book).",
                       lower_bound=0)
  flags.DEFINE_enum("order", "first", ["first", "random"],
                    "first: windows 0, 1, ...; random: a seeded permutation of all windows.")
  flags.DEFINE_integer("seed", 0, "Seed of the permutation (--order=random).")
  flags.DEFINE_integer("bos", -1, "Token id prepended for the second score (-1: none).")
  flags.DEFINE_bool("plain", True, "Also score each window without BOS (with --bos; costs a "
                    "second forward per window).")
  flags.DEFINE_string("out", None, "Append per-window results to this .jsonl file and resume "
                      "from it (skip the windows already recorded with the same settings).")


FLAGS = flags.FLAGS

FORMAT = "limits-nll/1"


def window_order(n_windows: int, order: str, seed: int) -> np.ndarray:
  """All window indices in scoring order: 0..N−1, or a permutation drawn from ``seed``."""
  if order == "first":
    return np.arange(n_windows)
  return np.random.default_rng(seed).permutation(n_windows)


def read_store(path: Path, header: dict) -> dict[int, dict]:
  """The windows recorded in ``path`` under ``header`` ({} for a new or empty file). A partial
  last line (a write cut short) is dropped from the file; another header is a LimitsError."""
  if not path.exists() or path.stat().st_size == 0:
    return {}
  data = path.read_bytes()
  end = data.rfind(b"\n") + 1
  if end < len(data):  # an interrupted write: keep the whole lines only
    with open(path, "r+b") as f:
      f.truncate(end)
  lines = data[:end].decode("utf-8").splitlines()
  try:
    first = json.loads(lines[0])
  except (IndexError, json.JSONDecodeError):
    first = None
  if not isinstance(first, dict) or first.get("header") != header:
    old = first.get("header") if isinstance(first, dict) else None
    diff = ([f"{k}: {old.get(k)!r} (file) vs {v!r} (now)" for k, v in header.items()
             if old.get(k) != v] if isinstance(old, dict) else ["no header line"])
    raise LimitsError(f"--out={str(path)!r} holds windows of another run ({'; '.join(diff[:3])});"
                      f" give another --out file or remove it")
  done = {}
  for line in lines[1:]:
    rec = json.loads(line)
    done[int(rec["window"])] = rec
  return done


def append_record(f, rec: dict) -> None:
  f.write(json.dumps(rec) + "\n")
  f.flush()
  os.fsync(f.fileno())


def score_window(model, x: np.ndarray, bos: int, plain: bool) -> dict:
  """Summed NLL (float64) over the L − 1 targets of one window ``x`` (L,), plain and/or with
  ``bos`` prepended."""
  import jax.numpy as jnp

  from limits import models
  from limits.scorecard.loss import next_token_nll

  rec = {"targets": int(x.size - 1)}
  if plain:
    xp = x[None].astype(np.int32)
    out = models.forward(model.params, xp, model.config, layers=())
    rec["nll_sum"] = float(np.asarray(next_token_nll(out.logits, jnp.asarray(xp)),
                                      np.float64).sum())
  if bos >= 0:
    xb = np.concatenate([[bos], x])[None].astype(np.int32)
    out = models.forward(model.params, xb, model.config, layers=())
    # drop the target of BOS itself: the same L - 1 targets as the plain score
    rec["nll_bos_sum"] = float(np.asarray(next_token_nll(out.logits, jnp.asarray(xb)),
                                          np.float64)[0, 1:].sum())
  return rec


def summarize(recs: list[dict], key: str, n_total: int) -> dict:
  """Mean NLL per target over ``recs`` and its between-window standard error (finite-population
  corrected: ``n_total`` windows in the book)."""
  sums = np.array([r[key] for r in recs], np.float64)
  counts = np.array([r["targets"] for r in recs], np.float64)
  n = len(recs)
  means = sums / counts
  se = (float(np.std(means, ddof=1) / math.sqrt(n) * math.sqrt(max(0.0, 1 - n / n_total)))
        if n > 1 else float("nan"))
  return {"mean": float(sums.sum() / counts.sum()), "se": se, "windows": n,
          "targets": int(counts.sum())}


def run(model, tokens: np.ndarray, *, length: int, windows: int, order: str, seed: int,
        bos: int, plain: bool, out: str | None, header: dict, log=None) -> dict:
  """Scores the requested windows (skipping those already in ``out``) and returns
  ``{"order": [window ids], "records": [...], "plain": summary, "bos": summary, "n_total"}``."""
  from limits.runs import interrupts

  log = log or (lambda line: print(line, flush=True))
  check(plain or bos >= 0, "nothing to score: --noplain needs --bos=ID (ID ≥ 0)")
  n_total = tokens.size // length
  check(n_total >= 1, f"the corpus has {tokens.size} tokens, fewer than one window of L={length}")
  want = n_total if windows == 0 else windows
  check(want <= n_total, f"--windows={windows}: the corpus has only {n_total} windows of "
        f"L={length} ({tokens.size} tokens)")
  ids = [int(w) for w in window_order(n_total, order, seed)[:want]]
  done: dict[int, dict] = {}
  f = None
  if out:
    path = Path(out)
    done = read_store(path, header)
    new = not path.exists() or path.stat().st_size == 0
    f = open(path, "a", encoding="utf-8")
    if new:
      append_record(f, {"header": header})
    if done:
      log(f"resume: {sum(w in done for w in ids)} of {want} windows already in {out}")
  try:
    for i, w in enumerate(ids):
      if w in done:
        continue
      t0 = time.perf_counter()
      rec = {"window": w, **score_window(model, tokens[w * length:(w + 1) * length], bos, plain),
             "seconds": round(time.perf_counter() - t0, 3)}
      done[w] = rec
      if f is not None:
        with interrupts.deferred():
          append_record(f, rec)
      log(f"window {w} ({i + 1}/{want}): " + ", ".join(
          f"{k} {rec[k] / rec['targets']:.4f}" for k in ("nll_sum", "nll_bos_sum") if k in rec)
          + f" ({rec['seconds']:.1f} s)")
      interrupts.check()
  finally:
    if f is not None:
      f.close()
  recs = [done[w] for w in ids]
  res = {"order": ids, "records": recs, "n_total": n_total}
  if plain:
    res["plain"] = summarize(recs, "nll_sum", n_total)
  if bos >= 0:
    res["bos"] = summarize(recs, "nll_bos_sum", n_total)
  return res


def main(argv):
  del argv
  from limits import data as data_lib
  from limits.records import sources

  t0 = time.perf_counter()
  m = sources.load_model(FLAGS.model)
  check(FLAGS.length <= m.config.n_positions - (FLAGS.bos >= 0),
        f"--length={FLAGS.length} exceeds the context of {FLAGS.model!r} "
        f"(n_positions={m.config.n_positions}, one less with --bos)")
  corpus = data_lib.resolve_corpus()
  tokens = sources.encode_corpus(m, corpus)
  header = {"format": FORMAT, "model": FLAGS.model, "weights": str(m.path), "length": FLAGS.length,
            "bos": FLAGS.bos, "plain": FLAGS.plain, "order": FLAGS.order,
            "seed": FLAGS.seed if FLAGS.order == "random" else None,
            "corpus_sha256": corpus.sha256, "corpus_tokens": int(tokens.size)}
  res = run(m, tokens, length=FLAGS.length, windows=FLAGS.windows, order=FLAGS.order,
            seed=FLAGS.seed, bos=FLAGS.bos, plain=FLAGS.plain, out=FLAGS.out, header=header)
  first = res.get("plain") or res["bos"]
  sample = ("every window" if first["windows"] == res["n_total"] else
            f"{'a random sample (seed ' + str(FLAGS.seed) + ')' if FLAGS.order == 'random' else 'the first'}"
            f" {first['windows']} of {res['n_total']} windows")
  line = f"{FLAGS.model}: L = {FLAGS.length}, {sample}, {first['targets']} targets"
  for key, name in (("plain", ""), ("bos", f"with BOS {FLAGS.bos} first: ")):
    if key in res:
      s = res[key]
      se = f" ± {s['se']:.4f} (s.e.)" if FLAGS.order == "random" or s["windows"] == res["n_total"] else ""
      line += f"; {name}{s['mean']:.4f}{se} nats/token"
  print(line + f" ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
  from limits import cli

  define_flags()
  app.run(cli.guard(main))
