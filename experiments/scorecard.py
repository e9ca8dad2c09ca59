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

from absl import app

from limits import cli
from limits.cli import shared_flags as cli_flags
from limits.scorecard.config import EXPERIMENT, Config


def define_flags() -> None:
  """Defines this CLI's flags and their validators (called only when run as a program, so
  every experiments module can be imported beside the others)."""
  cli_flags.define_config_flags(Config)


def main(argv):
  del argv
  from limits.runs import results as res
  from limits import scorecard as sc
  from limits.records import sources

  t0 = time.perf_counter()
  cfg = cli_flags.config_from_flags(Config)  # bad values fail here, before any loading
  out_dir = res.prepare_out_dir(cfg.out_dir, EXPERIMENT)
  model = sources.load_model(cfg.model)
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
  if cfg.plot:
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
