r"""The normalizer scorecard (issue 17): swap each candidate normalizer into every attention
layer of a trained model, calibrate one scalar per candidate, and measure the paper's four
limitations, the LM loss and the forward time on held-out War and Peace windows.

  python -m experiments.scorecard --model=smollm2 --layer_stride=3 \
      --out_dir=results/scorecard/smollm2
  python -m experiments.scorecard --model=tiny --out_dir=results/scorecard/tiny

Writes scorecard.md (table + one sentence per candidate), scorecard.json (= results.json),
scorecard.csv and scorecard.png. Every calibration step and finished row is kept under
parts/; rerunning the same command resumes. Definitions: ``limits/scorecard/``.
"""

from __future__ import annotations

import sys
import time

from absl import app, flags

from limits import cli
from limits.runs import options, parsing
from limits.cli import shared_flags as cli_flags

FLAGS = flags.FLAGS
EXPERIMENT = "scorecard"

DEFAULTS = {"model": "tiny", "text": None, "data_dir": None, "seed": 0, "out_dir": None,
            "plot": True}
def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_corpus_flags(
      DEFAULTS, model=cli_flags.MODEL_HELP,
      data_dir="Folder with war_and_peace.txt (else $LIMITS_DATA_DIR, else the embedded corpus).",
      windows=None)
  cli_flags.define_run_flags(DEFAULTS, EXPERIMENT, plot="Write scorecard.png.",
                             seed="Seed: calibration windows, Jacobian rows, directions of g.")
  flags.DEFINE_string("candidates", "softmax,softmax_t0.5,softmax_t2,sparsemax,entmax1.5,"
                      "entmax4/3,ssmax,softplus", "Comma-separated candidates (must include "
                      "softmax, the reference).")
  flags.DEFINE_integer("length", 256, "Window length L (evaluation and calibration).")
  flags.DEFINE_integer("eval_windows", 2, "Held-out evaluation windows (the first of the corpus).")
  flags.DEFINE_integer("calib_windows", 2,
                       "Calibration windows (seeded, after the evaluation ones).")
  flags.DEFINE_float("calib_lo", 1 / 64, "Calibration bracket: smallest multiplier c.")
  flags.DEFINE_float("calib_hi", 16.0, "Calibration bracket: largest multiplier c.")
  flags.DEFINE_integer("calib_grid", 5, "Log-spaced grid points (plus c = 1) before the search.")
  flags.DEFINE_integer("calib_iters", 5, "Evaluations of Brent's bounded search after the grid.")
  flags.DEFINE_string("lemma1_lengths", "", "Causal prefixes t for Lemma 1 (default: 16, 32, ... "
                      "up to L, and L).")
  flags.DEFINE_string("distance_ns", "5,100", "Top-N values at which d̃ is reported (N < L).")
  flags.DEFINE_string("sep_ns", "16,32,64", "Top-N values averaged into the N_s/N plateau.")
  flags.DEFINE_integer("jac_rows", 64, "Sampled rows for the exact Jacobian norms and g.")
  flags.DEFINE_float("epsilon", 0.1, "ε of the finite-difference sensitivity g(T, ε).")
  flags.DEFINE_integer("layer_stride", 1, "Metrics on every k-th layer (the swap is in all).")
  flags.DEFINE_integer("timing_rounds", 3, "Interleaved rounds for the forward-time cost.")
  cli.require_positive_ints("length", "eval_windows", "calib_windows", "calib_grid", "jac_rows",
                            "layer_stride", "timing_rounds")
  cli.require("calib_iters", options.nonnegative, "be >= 0")
  cli.require_positive_numbers("calib_lo", "calib_hi", "epsilon")



def _config():
  from limits import scorecard as sc

  ints = lambda name: tuple(parsing.parse_ints(FLAGS[name].value, name)) if FLAGS[name].value else ()
  return sc.Config(
      model=FLAGS.model, candidates=sc.parse_candidates(FLAGS.candidates), length=FLAGS.length,
      eval_windows=FLAGS.eval_windows, calib_windows=FLAGS.calib_windows,
      calib_lo=FLAGS.calib_lo, calib_hi=FLAGS.calib_hi, calib_grid=FLAGS.calib_grid,
      calib_iters=FLAGS.calib_iters, lemma1_lengths=ints("lemma1_lengths"),
      distance_ns=ints("distance_ns"), sep_ns=ints("sep_ns"), jac_rows=FLAGS.jac_rows,
      epsilon=FLAGS.epsilon, layer_stride=FLAGS.layer_stride, timing_rounds=FLAGS.timing_rounds,
      seed=FLAGS.seed, text=FLAGS.text, data_dir=FLAGS.data_dir)


def main(argv):
  del argv
  from limits.runs import results as res
  from limits import scorecard as sc
  from limits.records import sources

  t0 = time.perf_counter()
  cfg = _config()  # bad values fail here, before any loading
  out_dir = res.prepare_out_dir(FLAGS.out_dir, EXPERIMENT)
  model = sources.load_model(FLAGS.model)
  log = lambda s: print(f"[{time.perf_counter() - t0:7.1f} s] {s}", file=sys.stderr, flush=True)
  log(f"loaded {model.name}; digest {cfg.digest()}")
  result = sc.run(cfg, model, out_dir, log=log)
  command = cli_flags.command_line("experiments.scorecard")
  info = model.info()
  trows, md = sc.report(result, cfg, info, command)
  payload = {"config": cfg.as_dict(), "model": info, "command": command, "table": trows,
             "sentences": sc.sentences(trows), "calibrations": result["calibrations"],
             "costs": result["costs"], "cost_seconds": result["cost_seconds"],
             "windows": result["windows"], "compute_s": result["compute_s"],
             "wall_s": time.perf_counter() - t0,
             "rows": [{k: v for k, v in r.items() if k != "digest"} for r in result["rows"]]}
  res.write_results(out_dir, EXPERIMENT, cfg.as_dict(), payload, seed=cfg.seed)
  res.write_json(out_dir / "scorecard.json",
                 {"experiment": EXPERIMENT, "config": cfg.as_dict(),
                  "env": res.env_info(cfg.seed), "results": payload})
  res.write_csv(out_dir / "scorecard.csv", trows)
  res.atomic_write_text(out_dir / "scorecard.md", md)
  if FLAGS.plot:
    from limits.plotting import scorecard as plot_lib

    plot_lib.scorecard_figure(out_dir / "scorecard.png", trows,
                              length_last=cfg.prefix_lengths[-1],
                              distance_ns=[n for n in cfg.distance_ns if n < cfg.length],
                              epsilon=cfg.epsilon, title=f"Normalizer scorecard: {model.name}, "
                              f"L = {cfg.length}")
  print(f"wrote {out_dir} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
  define_flags()
  app.run(cli.guard(main))
