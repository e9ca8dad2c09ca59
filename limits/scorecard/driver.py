"""The resumable driver: calibrations, timing and rows, each written under ``out_dir/parts``
with the configuration's digest and reused by a rerun of the same configuration."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable

from limits.runs import interrupts
from limits.errors import check
from limits.scorecard.candidates import CANDIDATES, FAMILY_LABELS, ssmax_s0
from limits.scorecard.config import Config, row_keys
from limits.scorecard.loss import calibrate, token_nll
from limits.scorecard.row import evaluate_row
from limits.scorecard.timing import relative_cost, time_forwards
from limits.scorecard.windows import split_windows, take_windows


def _safe(name: str) -> str:
  return name.replace("/", "_")


def _load_part(path: Path, digest: str):
  try:
    d = json.loads(path.read_text())
  except (OSError, ValueError):
    return None
  return d if d.get("digest") == digest else None


def run(cfg: Config, model, out_dir: Path, *, log: Callable[[str], None] = print) -> dict:
  """Runs (or resumes) the scorecard; returns ``{"rows", "calibrations", "windows", ...}``.

  Writes ``out_dir/parts/calibration_<family>.json`` after every calibration evaluation and
  ``out_dir/parts/row_<key>.json`` for every finished row; a rerun of the same ``cfg`` (same
  digest) reuses them.
  """
  from limits import data
  from limits.runs import results
  from limits.records import sources

  t_start = time.perf_counter()
  digest = cfg.digest()
  parts = Path(out_dir) / "parts"
  parts.mkdir(parents=True, exist_ok=True)
  check(cfg.length <= model.config.n_positions,
        f"--length={cfg.length} exceeds the context of {model.name!r} "
        f"(n_positions={model.config.n_positions})")
  tokens = sources.encode_corpus(model, data.resolve_corpus(text=cfg.text,
                                                            data_dir=cfg.data_dir))
  ev_idx, cal_idx = split_windows(tokens.size, cfg.length, cfg.eval_windows, cfg.calib_windows,
                                  cfg.seed)
  ev, cal = take_windows(tokens, cfg.length, ev_idx), take_windows(tokens, cfg.length, cal_idx)
  params, config, L = model.params, model.config, cfg.length

  calibrations, computed = {}, []
  for fam in cfg.families:
    path = parts / f"calibration_{_safe(fam)}.json"
    part = _load_part(path, digest)
    if part is not None and part.get("done"):
      log(f"calibration {fam}: reused c = {part['multiplier']:.4g}")
      calibrations[fam] = part
      continue
    cache = {round(math.log(c), 9): (v, s) for c, v, s in (part or {}).get("evals", [])}
    evals: list = []

    def loss_fn(c, fam=fam, cache=cache, evals=evals, path=path):
      k = round(math.log(c), 9)
      if k in cache:
        v, s = cache[k]
      else:
        t0 = time.perf_counter()
        v = float(token_nll(params, config, cal, fam, c, L).mean())
        s = time.perf_counter() - t0
      evals.append([c, v, s])
      results.write_json(path, {"digest": digest, "family": fam, "done": False, "evals": evals})
      return v

    res = calibrate(loss_fn, cfg.calib_lo, cfg.calib_hi, grid=cfg.calib_grid,
                    iters=cfg.calib_iters)
    if len(cache) < len(evals):
      computed.append(fam)  # its loss forward on the calibration batch is compiled
    part = {"digest": digest, "family": fam, "done": True, **res, "evals": evals,
            "windows": cal_idx.tolist()}
    results.write_json(path, part)
    calibrations[fam] = part
    log(f"calibration {fam}: c = {res['multiplier']:.4g} (loss {res['loss']:.4f}"
        f"{', at the bracket edge' if res['at_edge'] else ''})")

  path = parts / "timing.json"
  part = _load_part(path, digest)
  if part is None:
    t0 = time.perf_counter()
    secs = time_forwards(params, config, cal, cfg.families, L, cfg.timing_rounds,
                         compiled=computed)
    part = {"digest": digest, "seconds": secs, "relative": relative_cost(secs),
            "wall_s": time.perf_counter() - t0}
    results.write_json(path, part)
    log("timing: " + ", ".join(f"{f} {v:.2f}×" for f, v in part["relative"].items()))
  timing = part

  rows = []
  for key, fam, calibrated in row_keys(cfg):
    path = parts / f"row_{_safe(key)}.json"
    part = _load_part(path, digest)
    if part is None:
      c = calibrations[fam]["multiplier"] if calibrated else CANDIDATES[key].base
      t0 = time.perf_counter()
      metrics = evaluate_row(params, config, ev, fam, c, cfg)
      label = FAMILY_LABELS[fam] if calibrated else CANDIDATES[key].label
      part = {"digest": digest, "key": key, "label": label, "family": fam,
              "calibrated": calibrated, "multiplier": c, "s0": ssmax_s0(L), **metrics,
              "row_seconds": time.perf_counter() - t0}
      results.write_json(path, part)
      log(f"row {key}: loss {metrics['loss']['mean']:.4f} ({part['row_seconds']:.1f} s)")
      interrupts.check()  # a safe point: this row is written
    else:
      log(f"row {key}: reused")
    rows.append(part)
  compute = {"calibration_s": sum(e[2] for c in calibrations.values() for e in c["evals"]),
             "timing_s": timing.get("wall_s", sum(map(sum, timing["seconds"].values()))),
             "rows_s": sum(r["row_seconds"] for r in rows)}
  compute["total_s"] = sum(compute.values())
  return {"rows": rows, "calibrations": calibrations, "costs": timing["relative"],
          "compute_s": compute,
          "cost_seconds": timing["seconds"],
          "windows": {"evaluation": ev_idx.tolist(), "calibration": cal_idx.tolist(),
                      "length": L, "corpus_tokens": int(tokens.size)},
          "wall_s": time.perf_counter() - t_start}
