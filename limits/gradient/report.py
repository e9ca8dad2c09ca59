"""Table and output files of the gradient experiment (Lemma 2, Corollary 3, Fig. 4).

:func:`write_outputs` prints the table and writes results.json, gradient.csv (one line per T),
rows.csv (one line per T and exact row) and gradient.png (Figure 4 style). The run records
measurements only; ``limits.claims`` judges Corollary 3, Lemma 2, g ≤ √2/ε and Figure 4's
claims from them (docs/claims.md), and the CLI prints those verdicts.
"""

from __future__ import annotations

from collections.abc import Callable


def format_table(summaries, epsilons, name) -> str:
  """The stdout table: one line per temperature (bounds, exact norms, counterexample, g)."""
  eps_cols = [f"g({e:g})" for e in epsilons]
  head = ["T", "1/4T∧√2", "1/2T", "max‖J‖", "maxT‖J‖"]
  if name == "softmax":
    head += [">paper", ">tight", "all>paper", "cex T‖J‖", "cex>paper"]
  head += eps_cols + ["|Δ|closed", "|Δ|fd"]
  lines = []
  for s in summaries:
    row = [f"{s['T']:.4g}", f"{s['paper_bound']:.4g}", f"{s['tight_bound']:.4g}",
           f"{s['max_norm']:.4g}", f"{s['max_T_norm']:.4f}"]
    if name == "softmax":
      c = s["counterexample"]
      row += [f"{s['n_exceed_paper']}/{s['exact_rows']}", f"{s['n_exceed_tight']}/{s['exact_rows']}",
              f"{s['all_rows_n_exceed_paper']}/{s['all_rows']}", f"{c['T_norm']:.4f}",
              "YES" if c["exceeds_paper"] else "no"]
    row += [f"{s['g'][f'{e:g}']['paper_stat']:.4g}" for e in epsilons]
    cf = s["closed_form"]
    row.append("n/a" if cf is None else f"{cf['max_abs']:.1e}{'' if cf['ok'] else '!'}")
    ch = s["checks"]
    row.append("n/a" if ch is None else f"{ch['fd']['max_abs']:.1e}{'' if ch['fd']['ok'] else '!'}")
    lines.append(row)
  widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
  fmt = lambda r: "  ".join(x.rjust(w) for x, w in zip(r, widths))
  return "\n".join([fmt(head)] + [fmt(r) for r in lines])


def legend(source: str) -> str:
  """What the table's columns mean (the g column's statistic depends on the source)."""
  return ("columns: paper = min{1/(4T), sqrt 2}; tight = 1/(2T); max||J|| over the exact rows; "
          ">paper/>tight = exact rows above each bound; all>paper = all rows (exact norm's "
          "decision: a proved bracket, Newton where it is open); cex = tied-top-two row "
          "(closed form 1/(2T)); g(eps) = "
          + ("max over (layer, head) of the token-mean g" if source == "model"
             else "mean over rows of g")
          + "; |Δ| = max abs difference of jacfwd vs closed form / central differences "
          "('!' = above tolerance)")


def one_over_4t_finding(summaries) -> str:
  """One sentence on Corollary 3 as printed: the tied-top-two row and the data rows (softmax)."""
  n_ex = sum(s["all_rows_n_exceed_paper"] for s in summaries)
  n_all = sum(s["all_rows"] for s in summaries)
  return (f"1/(4T) finding: the tied-top-two row has T*||J|| = "
          f"{max(s['counterexample']['T_norm'] for s in summaries):.6f} (> 1/4 at every T: "
          f"the paper's bound is violated at {sum(s['counterexample']['exceeds_paper'] for s in summaries)}"
          f"/{len(summaries)} temperatures); {n_ex}/{n_all} (row, T) pairs of the data exceed "
          f"min{{1/(4T), sqrt 2}}; max T*||J|| over data rows = "
          f"{max(s['all_rows_max_T_norm'] for s in summaries):.6f} (tight bound 1/2)")


def csv_rows(summaries, epsilons) -> list[dict]:
  """gradient.csv: one flat line per temperature."""
  out = []
  for s in summaries:
    r = {k: v for k, v in s.items() if k not in ("g", "closed_form", "checks", "counterexample")}
    for e in epsilons:
      ge = s["g"][f"{e:g}"]
      r[f"g_mean_eps_{e:g}"] = ge["mean"]
      r[f"g_max_eps_{e:g}"] = ge["max"]
      r[f"g_paper_stat_eps_{e:g}"] = ge["paper_stat"]
    if s.get("counterexample"):
      r["counterexample_T_norm"] = s["counterexample"]["T_norm"]
      r["counterexample_exceeds_paper"] = s["counterexample"]["exceeds_paper"]
    if s["closed_form"]:
      r["closed_form_max_rel_err"] = s["closed_form"]["max_rel"]
    if s["checks"]:
      r["jacrev_max_rel_err"] = s["checks"]["jacrev"]["max_rel"]
      r["fd_max_rel_err"] = s["checks"]["fd"]["max_rel"]
    out.append(r)
  return out


def write_outputs(out_dir, plan, result, write_json: Callable[[dict], object]) -> dict:
  """Prints the table (and the 1/(4T) finding for softmax), then writes results.json (through
  ``write_json(results)``), gradient.csv, rows.csv and gradient.png into ``out_dir``.

  ``plan``: the run's :class:`limits.gradient.task.Plan`; ``result``: what
  :func:`limits.gradient.task.run` returned. Returns the results block written.
  """
  from limits.runs import results as results_lib
  from limits.plotting import gradient as gradient_plot

  name, epsilons, source = plan.normalizer, plan.epsilons, plan.config.source
  summaries = result.summaries
  table = format_table(summaries, epsilons, name)
  table_legend = legend(source)
  print(table)
  print(table_legend)
  res = dict(result.results)
  if name == "softmax":
    msg = one_over_4t_finding(summaries)
    print(msg)
    res["finding_1_over_4T"] = msg
  res["table"] = table
  res["table_legend"] = table_legend
  results_lib.write_csv(out_dir / "gradient.csv", csv_rows(summaries, epsilons))
  results_lib.write_csv(out_dir / "rows.csv", result.per_row)
  gradient_plot.figure4(summaries, epsilons, out_dir / "gradient.png",
                        title=f"{name} on {source} rows (L={res['length']})",
                        stat_label=("max over (layer, head) of token-mean g"
                                    if source == "model" else "mean over rows of g"),
                        softmax=name == "softmax")
  write_json(res)  # last: results.json says complete only once every file is written
  print(f"wrote {out_dir}/results.json, gradient.csv, rows.csv, gradient.png "
        f"({result.seconds:.1f} s)")
  return res
