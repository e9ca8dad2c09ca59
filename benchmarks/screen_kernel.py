r"""The gradient screen's kernel on one (window, layer) block, and how many of its exps count.

  python -m benchmarks.screen_kernel --model=smollm2 --layer=15 --repeats=5
  python -m benchmarks.screen_kernel --model=tiny --length=128 --repeats=2
  python -m benchmarks.screen_kernel --model=smollm2 --layer=15 --against_elems=262144

One block of the gradient step: the raw q·k rows of every head of one layer of the first corpus
window (H·L rows, float32 as the step reads them, ``limits.records.sources.iter_logit_blocks``
without the zeroing copy) with the layer's mask, cut into the step's span groups
(``limits.gradient.sensitivity.span_groups`` at ``SPAN_STEP``) and run through the screen's
group kernels (``limits.gradient.screen._screen_group_fn``) at the paper's 26 temperatures
(or ``--temperatures``), thresholds in float64 as the step runs. Printed:

- ms per block: the best and the median of ``--repeats`` timed passes over every group (after
  one untimed pass that compiles), and the process's CPU seconds per pass;
- with ``--against_elems=N``: the step's chunks (``screen.SCREEN_ELEMS`` elements) against
  chunks of N, alternated in one process (``common.alternate``, ``--repeats`` pairs), and
  whether the two give the same outputs bit for bit;
- the (row, T, key) elements the kernels evaluate (each group's rows × its span w × K) and
  their rate against the fused float32 exp + sum rate measured in the same process
  (``benchmarks.work.measure_rates``): the step's floor counts one such element per entry;
- per temperature, the fraction of those elements whose float32 exp is a normal number
  (:func:`normal_exp_counts`: a visible key other than the row's arg-max with
  d·(1/T) ≥ log(FLT_MIN) ≈ −87.34, d = l − l₁ rounded to float32 as the kernel rounds it):
  what a kernel that skipped the keys whose exp underflows could save (WORKSPACE, twenty-eighth
  section: 33.9 % over the 26 T on SmolLM2's layer 15, 0.4 % at the 14 T ≤ 0.4);
- at the T ≤ 0.4, the elements a kernel would evaluate on rows compacted to their keys whose
  float32 exp is not zero, each chunk of the screen's rows padded to its largest count (at
  least 8 keys) (:func:`compacted_elements`), as a fraction of those temperatures' elements.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
LOG_FLT_MIN = float(np.log(np.finfo(np.float32).tiny))  # −87.3365: exp below is subnormal or 0
LOG_NONZERO = -150 * float(np.log(2.0))  # −103.972: exp below rounds to 0 in float32
MIN_KEYS = 8  # the narrowest compacted row counted by compacted_elements


def _define_flags() -> None:
  """Defined when run as a script only (tests import this module beside other benchmarks)."""
  flags.DEFINE_string("model", "smollm2", "Model spec (limits.records.sources.load_model).")
  flags.DEFINE_integer("length", 1024, "Window length L.")
  flags.DEFINE_integer("layer", 15, "Layer whose block is timed.")
  flags.DEFINE_integer("repeats", 5, "Timed passes over the block's groups.")
  flags.DEFINE_string("temperatures", "", "Comma-separated T (default: the paper grid, 26).")
  flags.DEFINE_integer("against_elems", 0, "If > 0: also time the kernels with chunks of this "
                       "many (row, T, key) elements, alternated in one process with the step's "
                       "(screen.SCREEN_ELEMS), and check that their outputs are equal.")


def _cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


def block_rows(model_name: str, length: int, layer: int):
  """(rows (H·L, L) float32, mask (H·L, L) bool) of one layer of the first window."""
  from limits.gradient.blocks import _head_mask
  from limits.records import sources

  model = sources.load_model(model_name)
  if not 0 <= layer < model.config.n_layer:
    raise SystemExit(f"--layer={layer}: the model has layers 0 to {model.config.n_layer - 1}")
  tokens = sources.corpus_windows(model, length, 1)
  for _, rows, vis in sources.iter_logit_blocks(model, tokens, layers=[layer],
                                                zero_masked=False):
    return rows, _head_mask(vis, rows.shape[0])
  raise SystemExit("no block")


def groups(mask):
  """The step's span groups of the block: [(row indices, w)]."""
  from limits.gradient import sensitivity

  return list(sensitivity.span_groups(mask, step=sensitivity.SPAN_STEP))


def elements(grps, K: int) -> int:
  """(row, T, key) elements the group kernels evaluate: Σ rows × w × K."""
  return int(sum(idx.size * w for idx, w in grps)) * K


def normal_exp_counts(rows, mask, grps, temperatures) -> np.ndarray:
  """(K,) per T, the elements of the groups whose float32 exp is normal: visible keys other
  than the row's first arg-max with float32(d · float32(1/T)) ≥ log(FLT_MIN), d = l − l₁ in
  float32 (the kernel's d; its 1/T is rounded once to float32, as the kernel's ``inv``)."""
  inv = (1 / np.asarray(temperatures, np.float64)).astype(np.float32)  # (K,)
  out = np.zeros(inv.size, np.int64)
  for idx, w in grps:
    d = _others_d(rows, mask, idx, w)
    for k, s in enumerate(inv):
      out[k] += np.count_nonzero((d * s).astype(np.float32) >= LOG_FLT_MIN)
  return out


def _others_d(rows, mask, idx, w):
  """(B, w) float32 d = l − l₁ for the visible keys other than each row's first arg-max,
  −inf elsewhere (the kernel's d)."""
  l, m = rows[idx, :w], mask[idx, :w]
  x = np.where(m, l, -np.inf)
  top = np.argmax(x, axis=-1)
  others = m.copy()
  others[np.arange(idx.size), top] = False
  return np.where(others, l - x[np.arange(idx.size), top][:, None], -np.inf).astype(np.float32)


def compacted_elements(rows, mask, grps, temperatures, K: int, block_elems: int):
  """(compacted, full) (row, T, key) elements at ``temperatures`` of a kernel run on rows
  compacted to the keys whose float32 exp(d · float32(1/T)) is not zero (≥ ``LOG_NONZERO``),
  in chunks of ``max(1, block_elems // (K·w))`` consecutive rows of each span group (K the
  kernel's number of temperatures; ``main`` passes 2^18, the screen's chunk until the
  thirtieth session's ``SCREEN_ELEMS``), each padded to its largest count for that T and to
  at least :data:`MIN_KEYS` keys; ``full`` the same chunks at their span w."""
  inv = (1 / np.asarray(temperatures, np.float64)).astype(np.float32)
  comp = full = 0
  for idx, w in grps:
    d = _others_d(rows, mask, idx, w)
    chunk = max(1, block_elems // (K * w))
    for s in inv:
      cnt = np.count_nonzero((d * s).astype(np.float32) >= LOG_NONZERO, axis=-1)  # (B,)
      for a in range(0, idx.size, chunk):
        c = cnt[a:a + chunk]
        comp += c.size * max(MIN_KEYS, int(c.max()))
        full += c.size * w
  return comp, full


def block_pass(rows, mask, grps, temperatures, screen_elems=None):
  """A function running the screen's group kernels over every group of the block once (float64
  thresholds, x64 on) with chunks of ``screen_elems`` (default the step's
  ``screen.SCREEN_ELEMS``), returning their outputs (device arrays, ready)."""
  import jax

  from limits.gradient import screen as gradient_screen

  dt = np.dtype(np.float64)
  K = len(temperatures)
  kw = {} if screen_elems is None else {"screen_elems": screen_elems}
  scr = gradient_screen.Screen(rows, mask, dt, 1e-14, **kw)
  rows_d, mask_d = jax.device_put((rows, mask))
  Td = jax.device_put(np.asarray(temperatures, dt))
  calls = []
  for idx, w in grps:
    chunk = gradient_screen.screen_chunk(K, w, scr.screen_elems)
    calls.append((gradient_screen._screen_group_fn(w, chunk, idx.size, dt.name),
                  scr._padded(idx, chunk)))

  def one_pass():
    return jax.block_until_ready([fn(rows_d, mask_d, ix, Td) for fn, ix in calls])

  return one_pass


def time_block(rows, mask, grps, temperatures, repeats: int):
  """(seconds per pass: list, CPU seconds per pass: list) of the screen's group kernels over
  every group of the block (:func:`block_pass`), after one untimed pass."""
  one_pass = block_pass(rows, mask, grps, temperatures)
  one_pass()
  wall, cpu = [], []
  for _ in range(repeats):
    t0, c0 = time.perf_counter(), _cpu()
    one_pass()
    wall.append(time.perf_counter() - t0)
    cpu.append(_cpu() - c0)
  return wall, cpu


def main(argv) -> None:
  del argv
  import jax

  jax.config.update("jax_enable_x64", True)
  from benchmarks import work
  from limits.gradient import task as gradient_task
  from limits.records import compilation

  compilation.enable()
  temps = gradient_task.parse_temperatures(None, FLAGS.temperatures or None)
  K = len(temps)
  rows, mask = block_rows(FLAGS.model, FLAGS.length, FLAGS.layer)
  grps = groups(mask)
  n_el = elements(grps, K)
  rates = work.measure_rates()
  wall, cpu = time_block(rows, mask, grps, temps, FLAGS.repeats)
  best, med = min(wall), statistics.median(wall)
  print(f"{FLAGS.model} L={FLAGS.length} layer {FLAGS.layer}: {rows.shape[0]} rows, "
        f"{len(grps)} span groups, K = {K}: {best * 1e3:.1f} ms best / {med * 1e3:.1f} ms "
        f"median per block over {FLAGS.repeats} passes, {statistics.median(cpu):.3f} CPU s per "
        f"pass; {n_el / 1e6:.1f}M (row, T, key) elements, {n_el / best / 1e9:.2f} Gelem/s against "
        f"the fused float32 exp + sum at {rates['elementwise_s'] / 1e9:.2f} Gelem/s (floor "
        f"{n_el / rates['elementwise_s'] * 1e3:.1f} ms); load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
  if FLAGS.against_elems > 0:
    _against(rows, mask, grps, temps, FLAGS.against_elems)
  counts = normal_exp_counts(rows, mask, grps, temps)
  per_t = counts / (n_el / K)                                # (K,) each T's fraction
  low = np.asarray(temps) <= 0.4
  print(f"elements whose float32 exp is normal: {counts.sum() / n_el:.1%} over the {K} T"
        + (f"; {per_t[low].mean():.1%} at the {int(low.sum())} T <= 0.4" if low.any() else ""))
  for t, f in zip(temps, per_t):
    print(f"  T = {t:<8g} {f:6.1%}")
  if low.any():
    from limits.gradient import screen as gradient_screen

    comp, full = compacted_elements(rows, mask, grps, np.asarray(temps)[low], K,
                                    gradient_screen.BLOCK_ELEMS)
    print(f"at the {int(low.sum())} T <= 0.4, rows compacted to their keys with a non-zero "
          f"float32 exp (each chunk padded to its largest count, >= {MIN_KEYS} keys): "
          f"{comp / full:.1%} of those T's {full / 1e6:.1f}M elements; the {int(low.sum())} T "
          f"are {full / n_el:.0%} of the kernel's elements")
  sys.stdout.flush()


def _against(rows, mask, grps, temps, elems: int) -> None:
  """The step's chunks against chunks of ``elems`` elements, alternated (``common.alternate``):
  the outputs compared bit for bit, then the median ratio with its spread."""
  import jax

  from benchmarks.common import alternate
  from limits.gradient import screen as gradient_screen

  ours = block_pass(rows, mask, grps, temps)
  other = block_pass(rows, mask, grps, temps, elems)
  same = all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
             for a, b in zip(jax.tree.leaves(jax.device_get(ours())),
                             jax.tree.leaves(jax.device_get(other()))))
  res = alternate(other, ours, FLAGS.repeats)
  print(f"chunks of {gradient_screen.SCREEN_ELEMS} elements (the step's) against {elems}: "
        f"{res['ours_median_s'] * 1e3:.1f} against {res['ref_median_s'] * 1e3:.1f} ms median "
        f"per block, {res['ratio_median']:.2f}x ({res['ratio_min']:.2f}-{res['ratio_max']:.2f}) "
        f"over {FLAGS.repeats} alternated pairs; outputs "
        f"{'equal bit for bit' if same else 'DIFFER'}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
