"""The scorecard's outputs as text: flat table rows (also the CSV and the figure's input), the
markdown table with its sample sizes, one sentence per row, and scorecard.md (:func:`report`)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from limits.scorecard.candidates import REFERENCE
from limits.scorecard.config import Config, metric_layers


def _get(d, *path):
  for p in path:
    if d is None:
      return None
    d = d.get(p) if isinstance(d, dict) else None
  return d


def row_scale(row: dict) -> str:
  c = row["multiplier"]
  if row["family"] == "ssmax":
    return f"s={c * row['s0']:.3g}"
  return f"c={c:.3g}"


def paired_delta(nll, ref_nll) -> tuple[float, float]:
  """Mean and standard error over tokens of nll − ref_nll (paired, same tokens)."""
  d = np.asarray(nll, np.float64).ravel() - np.asarray(ref_nll, np.float64).ravel()
  return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0


def table_rows(rows: Sequence[dict], costs: dict) -> list[dict]:
  """Flat per-row numbers for the table, CSV and figure (Δ against the softmax row)."""
  ref = next(r for r in rows if r["key"] == REFERENCE)
  out = []
  for r in rows:
    dl, se = paired_delta(r["loss"]["nll"], ref["loss"]["nll"])
    l1, t1, t2, l2 = r["lemma1"], r["theorem1"], r["theorem2"], r["lemma2"]
    out.append({
        "key": r["key"], "label": r["label"], "family": r["family"],
        "calibrated": r["calibrated"], "scale": row_scale(r), "multiplier": r["multiplier"],
        "loss": r["loss"]["mean"], "delta_loss": dl, "delta_loss_se": se,
        "max_aL_first": l1["median_max_aL"][0], "max_aL_last": l1["median_max_aL"][-1],
        "max_aL_slope": l1["slope_loglog"],
        "zeros_first": l1["zero_share"][0], "zeros_last": l1["zero_share"][-1],
        "critical_n_over_L": t1["critical_n_over_L"],
        **{f"d_N{n}": v for n, v in t1["d_sum_median"].items()},
        "plateau_median": _get(t2, "plateau_median"), "plateau_q25": _get(t2, "plateau_q25"),
        "plateau_q75": _get(t2, "plateau_q75"),
        "max_jac": l2["max_norm"], "jac_bound_violations": l2["bound_violations"],
        "g_mean": l2["g_mean"], "cost": costs.get(r["family"]),
    })
  return out


def _f(v, fmt="{:.3g}", none="—"):
  if v is None or (isinstance(v, float) and not math.isfinite(v)):
    return none
  return fmt.format(v)


def sample_sizes(rows: Sequence[dict], cfg: Config, n_layer: int, n_head: int) -> dict:
  """The sample behind each column (the same for every row)."""
  r = rows[0]
  L = cfg.length
  heads = len(metric_layers(cfg, n_layer)) * n_head
  return {
      "loss": f"{r['loss']['tokens']} tokens ({cfg.eval_windows} windows × {L - 1})",
      "lemma1": f"{r['lemma1']['n_per_length']} (window, head) rows per t ∈ "
                f"{{{', '.join(map(str, r['lemma1']['lengths']))}}}",
      "theorem1": f"{heads} heads × {cfg.eval_windows} windows, queries t > N",
      "theorem2": f"{heads} heads, N ∈ {{{', '.join(str(n) for n in cfg.sep_ns if n < L)}}}",
      "lemma2": f"{r['lemma2']['rows']} rows, ε = {cfg.epsilon:g}",
      "cost": f"median of {cfg.timing_rounds} interleaved rounds, {cfg.calib_windows} × {L} "
              "tokens",
  }


def markdown_table(trows: Sequence[dict], sizes: dict, cfg: Config) -> str:
  ts = cfg.prefix_lengths
  dn = [n for n in cfg.distance_ns if n < cfg.length]
  head = (["candidate", "scale", "LM loss", "Δ vs softmax", f"max α·L (L={ts[0]}→{ts[-1]})",
           f"zeros (L={ts[0]}→{ts[-1]})", "crit. N/L"] + [f"d̃ N={n}" for n in dn]
          + ["N_s/N plateau [IQR]", "max ‖J‖", f"g(ε={cfg.epsilon:g})", "cost"])
  n_row = (["*n*", "", sizes["loss"], sizes["loss"], sizes["lemma1"], sizes["lemma1"],
            sizes["theorem1"]] + [sizes["theorem1"]] * len(dn)
           + [sizes["theorem2"], sizes["lemma2"], sizes["lemma2"], sizes["cost"]])
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
           "| " + " | ".join(n_row) + " |"]
  for r in trows:
    name = r["label"] + (" (calibrated)" if r["calibrated"] else "")
    cells = [name, r["scale"], f"{r['loss']:.3f}",
             "0 (ref.)" if r["key"] == REFERENCE else
             f"{r['delta_loss']:+.3f} ± {r['delta_loss_se']:.3f}",
             f"{r['max_aL_first']:.3g}→{r['max_aL_last']:.3g} "
             f"(slope {_f(r['max_aL_slope'], '{:.2f}')})",
             f"{100 * r['zeros_first']:.0f}%→{100 * r['zeros_last']:.0f}%",
             _f(r["critical_n_over_L"], "{:.3f}", "none ≤ L−1")]
    cells += [_f(r.get(f"d_N{n}")) for n in dn]
    cells += [f"{_f(r['plateau_median'], '{:.2f}')} [{_f(r['plateau_q25'], '{:.2f}')}, "
              f"{_f(r['plateau_q75'], '{:.2f}')}]", _f(r["max_jac"]), _f(r["g_mean"]),
              _f(r["cost"], "{:.2f}×")]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _moves(r: dict, ref: dict) -> list[str]:
  """The limitations a row moves against softmax (relative change > 10%, or > 5 points for
  shares), in words."""
  out = []

  def rel(a, b):
    if a is None or b is None:
      return None
    return (a - b) / abs(b) if b else (math.inf if a else 0.0)

  dz = r["zeros_last"] - ref["zeros_last"]
  if abs(dz) > 0.05:
    out.append(f"exact zeros at the largest L {100 * r['zeros_last']:.0f}% (softmax "
               f"{100 * ref['zeros_last']:.0f}%), so weights need not vanish like 1/L (Lemma 1)")
  x = rel(r["max_aL_last"], ref["max_aL_last"])
  if x is not None and abs(x) > 0.10:
    out.append(f"max α·L at the largest L {r['max_aL_last']:.3g} (softmax "
               f"{ref['max_aL_last']:.3g})")
  a, b = r["critical_n_over_L"], ref["critical_n_over_L"]
  if a != b and (a is None or b is None or abs(a - b) > 0.1 * max(abs(b), 1e-9)):
    out.append(f"critical N/L {_f(a, '{:.3f}', 'not reached')} (softmax "
               f"{_f(b, '{:.3f}', 'not reached')}) (Theorem 1)")
  x = None if r["plateau_median"] is None else r["plateau_median"] - ref["plateau_median"]
  if x is not None and abs(x) > 0.05:
    out.append(f"N_s/N plateau {r['plateau_median']:.2f} (softmax {ref['plateau_median']:.2f}) "
               f"(Theorem 2)")
  x = rel(r["max_jac"], ref["max_jac"])
  if x is not None and abs(x) > 0.10:
    out.append(f"max ‖J‖ {r['max_jac']:.3g} (softmax {ref['max_jac']:.3g}) (Lemma 2)")
  return out


def sentences(trows: Sequence[dict]) -> list[str]:
  """One sentence per row: which limitation it moves, by how much, at what loss and cost."""
  ref = next(r for r in trows if r["key"] == REFERENCE)
  out = []
  for r in trows:
    name = r["label"] + (" calibrated" if r["calibrated"] else "") + f" ({r['scale']})"
    if r["key"] == REFERENCE:
      out.append(f"{name} is the reference: loss {r['loss']:.3f} nats/token.")
      continue
    mv = _moves(r, ref)
    what = "; ".join(mv) if mv else "moves none of the four limitations by more than 10%"
    cost = "" if r["cost"] is None else f", {r['cost']:.2f}× the forward time"
    out.append(f"{name}: {what}; at {r['delta_loss']:+.3f} nats/token against softmax{cost}.")
  return out


def _window_text(model_info: dict, keep, reference: dict) -> str:
  """The sliding-window sentence of the report ("" for a model without local layers):
  which kept layers are local, and the reference row's Lemma 1 medians by layer kind."""
  wins = model_info.get("layer_windows")
  kinds = reference.get("lemma1_by_kind")
  if not wins or not kinds:
    return ""
  local = [i for i in keep if wins[i]]
  parts = [f"{name} layers {k['layers']}: {k['median_max_aL'][0]:.3g}→"
           f"{k['median_max_aL'][-1]:.3g} (slope {k['slope_loglog']:.2f})"
           for name, k in kinds.items()]
  return (f" Sliding-window (local) layers among them: {local} (W = "
          f"{', '.join(str(v) for v in sorted({wins[i] for i in local}))}); every metric uses "
          "each query's effective length min(t + 1, W), keys before the window are not tokens "
          f"of its row. {reference['label']}'s max α·L by layer kind, "
          + "; ".join(parts) + " (all rows: results.json lemma1_by_kind).")


def report(result: dict, cfg: Config, model_info: dict, command: str = "") -> tuple[list, str]:
  """(table rows, scorecard.md text) from :func:`run`'s result."""
  rows = result["rows"]
  trows = table_rows(rows, result["costs"])
  sizes = sample_sizes(rows, cfg, model_info["n_layer"], model_info["n_head"])
  keep = metric_layers(cfg, model_info["n_layer"])
  cal = result["calibrations"]
  edge = [f for f, c in cal.items() if c.get("at_edge")]
  w = result["windows"]
  t0 = float(rows[0]["temperature"]) * float(rows[0]["multiplier"])  # T = T0 / c
  t0_text = ("√d_head" if math.isclose(t0, math.sqrt(model_info["d_head"]), rel_tol=1e-9)
             else "the model's own scale (Gemma 3: √query_pre_attn_scalar)")
  lines = [
      f"# Normalizer scorecard: {model_info['name']}", "",
      f"Command: `{command}`" if command else "", "",
      f"Model {model_info['name']} ({model_info['family']}, {model_info['n_layer']} layers × "
      f"{model_info['n_head']} heads, d_head {model_info['d_head']}; T0 = {t0_text} = "
      f"{t0:.3g} on the raw q·k scale). Every candidate replaces "
      f"the normalizer in every layer; weights unchanged. Evaluation windows "
      f"{w['evaluation']} and calibration windows {w['calibration']} (L = {w['length']}, window "
      f"w = tokens [w·L, (w+1)·L) of War and Peace; calibration windows drawn with seed "
      f"{cfg.seed}, disjoint). Metrics on layers {list(keep)}; float32 forward passes, float64 "
      f"Jacobians. Scale: c multiplies the model's logits q·k/T0 (SSMax: s). Calibration: "
      f"{cfg.calib_grid} log-spaced c in [{cfg.calib_lo:g}, {cfg.calib_hi:g}] then "
      f"{cfg.calib_iters} steps of Brent's bounded search, minimising the NLL of the "
      "calibration windows"
      + (f"; best at the bracket edge for {', '.join(edge)}" if edge else "") + "."
      + _window_text(model_info, keep, rows[0]), "",
      markdown_table(trows, sizes, cfg), "",
      "Columns: Δ = paired mean NLL difference to softmax (T0) on the same tokens ± its standard "
      "error over tokens; max α·L = median over (window, layer, head) of the largest weight × t "
      "at query t−1 (t keys; min(t, W) in a sliding-window layer), with the log-log slope "
      "over t; zeros = share of exactly-zero "
      "weights at that query; crit. N/L = Algorithm 3's ascending scan N = 1, 2, …: the first "
      f"N where KS (α = {cfg.ks_alpha:g}) does not reject d̄ against the printed E (the paper's, "
      "x̄ = Σ α_j x_j) over heads ('none' if it rejects for every N; the reconstructed E's "
      "bisection is in the JSON as critical_n_reconstructed); "
      "d̃ = median over heads of the token-averaged cumulative distance (value vectors); "
      "N_s/N plateau = per head the mean of N_s/N over the N shown, median [IQR] over heads; "
      "max ‖J‖ = largest exact Jacobian norm w.r.t. the raw scores, checked against its bound ("
      + "; ".join(sorted({r["lemma2"]["bound_name"] for r in rows})) + f"; rows above it: "
      f"{sum(r['lemma2']['bound_violations'] for r in rows)}); g = mean finite-difference "
      "sensitivity; cost = forward time relative to softmax (a multiplier costs nothing, so "
      "calibrated rows share their family's cost).", "",
      "## In one sentence each", ""]
  lines += [f"- {s}" for s in sentences(trows)]
  cs = result["compute_s"]
  lines += ["", f"Computation recorded in parts/ (all invocations of this command): "
            f"{cs['total_s']:.0f} s (calibration {cs['calibration_s']:.0f} s, timing "
            f"{cs['timing_s']:.0f} s, rows {cs['rows_s']:.0f} s; loading the model and "
            f"tokenizing the corpus not included); this invocation: {result['wall_s']:.0f} s."]
  return trows, "\n".join(l for l in lines if l is not None) + "\n"
