"""limits.claims.figures / experiments.compare --figures: the paper's figures with every run's
curves and the verdict map, from hand-made minimal run directories (nothing recomputed)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from limits import claims as C
from limits.claims import figures as pc

PNG = b"\x89PNG\r\n\x1a\n"


def _write(d, step, results):
  (d / step).mkdir(parents=True, exist_ok=True)
  (d / step / "results.json").write_text(json.dumps({"config": {}, "results": {
      "complete": True, **results}}))


def _rec(cid, verdict, robust=True, kind="paper"):
  return {"id": cid, "kind": kind, "where": cid, "verdict": verdict, "label": "",
          "measured": "m", "sample": "", "derived_from": [], "robust": robust,
          "evidence": "empirical"}


def _dist_rows(var, values, fixed, scale):
  other = "N" if var == "L" else "L"
  return [{var: v, other: fixed, "d_sum_mean": scale * v, "expected_printed_output_mean":
           0.5 * scale * v, "dmax_sum_mean": 3 * scale * v} for v in values]


def make_run(root, name, scale, claims, steps=("all",)):
  """A reproduction run directory with the files the figures read, values scaled by ``scale``."""
  d = root / name
  d.mkdir()
  (d / "results.json").write_text(json.dumps({"results": {"claims": claims}}))
  every = "all" in steps
  if every or "distance_vary_length" in steps:
    # Two N in the file: the figure must pick N = 5.
    _write(d, "distance_vary_length", {"summary": _dist_rows("L", [32, 64, 128], 5, scale)
                                       + _dist_rows("L", [32, 64, 128], 1, 100.0)})
  if every or "distance_vary_n" in steps:
    _write(d, "distance_vary_n", {"summary": _dist_rows("N", [1, 5, 20], 512, scale)
                                  + _dist_rows("N", [1, 5, 20], 256, 100.0)})
  if every or "distance_critical_n" in steps:
    _write(d, "distance_critical_n", {"critical_scan": {
        str(L): {"printed": {"critical_n": int(scale * L / 10)},
                 "reconstructed": {"critical_n": int(0.8 * L)}} for L in (64, 128, 256)}})
  if every or "separability_model" in steps:
    ns = [1, 2, 4, 8]
    _write(d, "separability_model", {"summary": {
        "n": ns, "median": [0.9 / scale] * 4, "q25": [0.8 / scale] * 4, "q75": [0.95 / scale] * 4,
        "max": [1.0] * 4, "upper_max": [1.0] * 4}})
  if every or "vanishing" in steps:
    _write(d, "vanishing", {"sinks": {"eps": 0.3, "by_L": [
        {"L": 32, "share_by_layer": [0.0, 0.0, 0.0]},
        {"L": 64, "share_by_layer": [0.0, 0.5 * scale, 1.0]}]}})
  if every or "gradient" in steps:
    _write(d, "gradient", {"per_temperature": [
        {"T": T, "g": {"0.001": {"paper_stat": scale / T}, "10": {"paper_stat": 0.01}}}
        for T in (10.0, 0.01, 1.0)]})  # out of order: the figure sorts by T
  return d


@pytest.fixture
def runs(tmp_path):
  a = make_run(tmp_path, "a", 1.0, [_rec("c1", C.HOLDS), _rec("c2", C.FAILS, robust=False),
                                    {**_rec("m1", C.HOLDS), "evidence": "mathematical"},
                                    _rec("f1", C.HOLDS, kind="finding")])
  b = make_run(tmp_path, "b", 2.0, [_rec("c1", C.FAILS), _rec("c2", C.HOLDS, robust=False),
                                    _rec("f1", C.NOT_TESTABLE, kind="finding")],
               steps=("distance_vary_length", "gradient"))
  return [("A", a), ("B", b)]


def _lines(fig):
  return {ln.get_label(): ln for ln in fig.axes[0].get_lines()}


def test_fig2a_draws_each_runs_recorded_values_at_n_5(runs):
  fig = pc.figure("fig2a", runs)
  lines = _lines(fig)
  for label, scale in (("A", 1.0), ("B", 2.0)):
    d = lines[f"{label}: true d̃"]
    np.testing.assert_array_equal(d.get_xdata(), [32, 64, 128])
    np.testing.assert_array_equal(d.get_ydata(), [scale * 32, scale * 64, scale * 128])
    np.testing.assert_array_equal(lines[f"{label}: E (printed)"].get_ydata(),
                                  [0.5 * scale * x for x in (32, 64, 128)])
    np.testing.assert_array_equal(lines[f"{label}: bound d_max"].get_ydata(),
                                  [3 * scale * x for x in (32, 64, 128)])
  assert lines["A: true d̃"].get_color() != lines["B: true d̃"].get_color()
  assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"


def test_fig2b_picks_the_largest_l_and_missing_steps_are_named(runs):
  fig = pc.figure("fig2b", runs)
  lines = _lines(fig)
  np.testing.assert_array_equal(lines["A: true d̃"].get_xdata(), [1, 5, 20])
  np.testing.assert_array_equal(lines["A: true d̃"].get_ydata(), [1, 5, 20])  # L = 512 rows
  assert not any(k.startswith("B:") for k in lines)  # B has no distance_vary_n step
  notes = " ".join(t.get_text() for t in fig.texts)
  assert "distance_vary_n" in notes and "B" in notes


def test_fig2c_fig3_fig4_curves(runs):
  c = _lines(pc.figure("fig2c", runs))
  np.testing.assert_array_equal(c["A: first passing N, E printed"].get_ydata(), [6, 12, 25])
  np.testing.assert_array_equal(c["A: first passing N, E reconstructed"].get_ydata(),
                                [51, 102, 204])
  np.testing.assert_allclose(c["paper: 0.06·L"].get_ydata(), [0.06 * 64, 0.06 * 256])
  f3 = _lines(pc.figure("fig3", runs))
  np.testing.assert_allclose(f3["A: N_s/N median over heads"].get_ydata(), [0.9] * 4)
  f4 = _lines(pc.figure("fig4", runs))
  g = f4["B: g(T, ε = 0.001)"]
  np.testing.assert_array_equal(g.get_xdata(), [0.01, 1.0, 10.0])
  np.testing.assert_allclose(g.get_ydata(), [200.0, 2.0, 0.2])
  paper = f4["paper: min{1/(4T), √2}"]
  assert max(paper.get_ydata()) == pytest.approx(np.sqrt(2))
  # Sinks: the largest L's shares by layer against relative depth; B has no vanishing step.
  sk = pc.figure("sinks", runs)
  line = _lines(sk)["A: L = 64, 3 layers"]
  np.testing.assert_array_equal(line.get_xdata(), [0.0, 0.5, 1.0])
  np.testing.assert_array_equal(line.get_ydata(), [0.0, 0.5, 1.0])
  assert len(_lines(sk)) == 1 and "vanishing" in " ".join(t.get_text() for t in sk.texts)


def _cells(fig):
  return {p.get_gid(): p for p in fig.axes[0].patches if p.get_gid()}


def test_verdict_map_colours_follow_the_verdicts(runs):
  from limits.claims.compare import load_run

  fig = pc.verdict_map_figure([load_run(lab, d) for lab, d in runs])
  cells = _cells(fig)
  assert len(cells) == 8  # m1 is not in run B: "not run" there
  want = {"c1|A": C.HOLDS, "c2|A": C.FAILS, "f1|A": C.HOLDS,
          "c1|B": C.FAILS, "c2|B": C.HOLDS, "f1|B": C.NOT_TESTABLE}
  for gid, verdict in want.items():
    assert cells[gid].get_facecolor() == pytest.approx(to_rgba(pc.VERDICT_COLORS[verdict])), gid
  assert to_rgba(pc.VERDICT_COLORS[C.HOLDS]) != to_rgba(pc.VERDICT_COLORS[C.FAILS])
  # Not robust (flips under an admissible reading): hatched; robust: not.
  assert cells["c2|A"].get_hatch() == pc.NOT_ROBUST_HATCH
  assert cells["c2|B"].get_hatch() == pc.NOT_ROBUST_HATCH
  assert not cells["c1|A"].get_hatch() and not cells["c1|B"].get_hatch()
  # Rows: the paper's claims, then the findings.
  labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
  assert labels == ["c1", "c2", "m1 [mathematical]", "f1 (finding)"]
  assert cells["m1|B"].get_facecolor() == pytest.approx(to_rgba(pc.VERDICT_COLORS[C.NOT_RUN]))


def test_verdict_map_marks_a_claim_absent_from_a_run_not_run(tmp_path):
  a = make_run(tmp_path, "a", 1.0, [_rec("c1", C.HOLDS), _rec("c9", C.FAILS)], steps=())
  b = make_run(tmp_path, "b", 1.0, [_rec("c1", C.HOLDS)], steps=())
  from limits.claims.compare import load_run

  cells = _cells(pc.verdict_map_figure([load_run("A", a), load_run("B", b)]))
  assert cells["c9|B"].get_facecolor() == pytest.approx(to_rgba(pc.VERDICT_COLORS[C.NOT_RUN]))
  assert cells["c9|A"].get_facecolor() == pytest.approx(to_rgba(pc.VERDICT_COLORS[C.FAILS]))


def test_cli_figures_and_bad_combinations(runs, tmp_path):
  out = tmp_path / "cli_figs"
  args = [sys.executable, "-m", "experiments.compare"] + [f"--run={lab}={d}" for lab, d in runs]
  # The one test that writes the PNGs (drawing is the slow part: about 2 s per figure on a
  # loaded machine): every figure file written, PNG, no temporary file left beside them.
  p = subprocess.run(args + [f"--figures={out}"], capture_output=True, text=True)
  assert p.returncode == 0, p.stderr
  assert "| `c1` |" in p.stdout  # the tables are still printed
  names = sorted([f"{n}.png" for n in pc.FIGURES + pc.EXTRA] + ["verdict_map.png"])
  assert sorted(x.name for x in out.iterdir()) == names
  for name in names:
    assert (out / name).read_bytes()[:8] == PNG, name
    assert str(out / name) in p.stderr  # the paths are listed on stderr
  p = subprocess.run(args + [f"--figures={out}", "--values"], capture_output=True, text=True)
  assert p.returncode != 0 and "Traceback" not in p.stderr
  assert "--figures" in p.stderr.strip().splitlines()[-1]
  blocker = tmp_path / "a_file"
  blocker.write_text("x")
  p = subprocess.run(args + [f"--figures={blocker}"], capture_output=True, text=True)
  assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
  assert str(blocker) in p.stderr.strip().splitlines()[-1]


def test_fig2c_capped_scan_and_the_bisections_reconstructed_n(tmp_path):
  # The scan stops at N_max = L/4: the printed E has no pass at L = 256 (drawn open at N_max,
  # not as a first pass); the reconstructed E's critical N is the bisection's (critical_n), not
  # the capped scan's (no pass there).
  d = tmp_path / "C"
  d.mkdir()
  _write(d, "distance_critical_n", {
      "critical_scan": {str(L): {"printed": {"critical_n": None if L == 256 else 4,
                                             "n_max": L // 4},
                                 "reconstructed": {"critical_n": None, "n_max": L // 4}}
                        for L in (64, 128, 256)},
      "critical_n": {str(L): {"critical_n": int(0.8 * L)} for L in (64, 128, 256)}})
  c = _lines(pc.figure("fig2c", [("C", d)]))
  np.testing.assert_array_equal(c["C: first passing N, E printed"].get_xdata(), [64, 128])
  np.testing.assert_array_equal(c["C: no pass for N ≤ N_max, E printed"].get_ydata(), [64])
  np.testing.assert_array_equal(c["C: first passing N, E reconstructed"].get_ydata(),
                                [51, 102, 204])
  assert "C: no pass for N ≤ N_max, E reconstructed" not in c
