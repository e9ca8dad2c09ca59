r"""Host-side (NumPy) operations of the steps against the alternatives measured beside them,
alternating in one process (``benchmarks.common.alternate``: median ratio ref / ours and its
spread), each pair checked equal first:

- ``mask``: a layer's visible scores with the masked entries 0 (``limits.records.sources
  .iter_logit_blocks``): a copy then a boolean-mask assignment (ref) against one
  ``np.copyto(zeros, scores, where=visible)`` (ours, the code);
- ``top``: Algorithm 2's host top k of one causal block (``limits.distance.host_select
  .block_top_host``, ours, the code) against one sort of a packed uint64 key per entry (value
  descending in the high 32 bits, the index in the low: ``lax.top_k``'s order with no tie pass;
  ref, not taken);
- ``select``: Algorithm 2's and 4's host top k of one causal block with its mask
  (``limits.distance.host_select.block_top_host``, ours, the code: the mask written into the
  weights' int32 bits, a partition of the values, a flat nonzero) against the path it replaced
  (:func:`top_argpartition`: the mask, the order map, ``np.argpartition`` of the indices and a
  take; ref, up to the twenty-fourth session);
- ``order``: the search's order statistics: a full row sort (ours, ``limits.selection
  .sort_rows``) against ``np.partition`` at the 2·K places a probe reads (ref, not taken).

    python -m benchmarks.host_ops --length=1024 --heads=9 --pairs=5
"""

from __future__ import annotations

import os

import numpy as np
from absl import app, flags

from benchmarks import common

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """The CLI's flags, defined when run as a script only (the tests import :func:`cases`
  beside other benchmarks that define ``length`` and ``pairs`` too)."""
  flags.DEFINE_integer("length", 1024, "Layer length L.")
  flags.DEFINE_integer("heads", 9, "Heads per layer (SmolLM2: 9).")
  flags.DEFINE_integer("k", 129, "Keys kept by the top k (Algorithm 2 at N = 100: 129).")
  flags.DEFINE_integer("pairs", 5, "Alternating pairs (after one warm-up of each).")


def causal_weights(heads: int, L: int, seed: int = 0) -> np.ndarray:
  """(heads, L, L) float32 causal softmax rows of N(0, 3²) logits, 0 above the diagonal."""
  rng = np.random.default_rng(seed)
  z = np.where(np.tri(L, dtype=bool), rng.standard_normal((heads, L, L)) * 3, -np.inf)
  w = np.exp(z - z.max(-1, keepdims=True))
  return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def mask_assign(s, vis):
  block = np.empty(s.shape, np.float32)
  block[...] = s
  block[:, ~vis] = 0.0
  return block


def mask_copyto(s, vis):
  block = np.zeros(s.shape, np.float32)
  np.copyto(block, s, where=vis)
  return block


def top_packed(key, k: int):
  """``selection.top_k_rows_host``'s indices by one sort of a packed (value, index) key."""
  from limits.selection import _ordered_int

  C = key.shape[-1]
  v = (~(_ordered_int(key).view(np.uint32) ^ np.uint32(0x80000000))).astype(np.uint64)
  packed = (v << np.uint64(32)) | np.arange(C, dtype=np.uint64)[None, :]
  packed.sort(axis=-1)
  return (packed[:, :k] & np.uint64(0xFFFFFFFF)).astype(np.int32)


def top_argpartition(a, lo: int, k: int):
  """``block_top_host`` before the twenty-fifth session: the masked float key, its order map,
  ``np.argpartition`` of the indices, the tie repair, the packed sort of the k kept."""
  from limits.distance.block import block_visible
  from limits.selection import _ordered_int

  G, R, C = a.shape
  s = _ordered_int(np.where(block_visible(lo, R, C, 0, xp=np), a, np.float32(-np.inf))
                   ).reshape(G * R, C)
  part = np.argpartition(s, C - k, axis=-1)
  cols = part[:, C - k:]
  kth = np.take_along_axis(s, part[:, C - k:C - k + 1], axis=-1)
  tied = np.flatnonzero(np.count_nonzero(s >= kth, axis=-1) > k)
  if tied.size:
    st, th = s[tied], kth[tied]
    gt, eq = st > th, st == th
    need = k - np.count_nonzero(gt, axis=-1)
    keep = gt | (eq & (np.cumsum(eq, axis=-1) <= need[:, None]))
    cols = cols.copy()
    cols[tied] = np.nonzero(keep)[1].reshape(-1, k)
  vals = np.take_along_axis(s, cols, axis=-1).view(np.uint32) ^ np.uint32(0x80000000)
  order = np.sort(((~vals).astype(np.uint64) << np.uint64(32)) | cols.astype(np.uint64),
                  axis=-1)
  return (order & np.uint64(0xFFFFFFFF)).astype(np.int32).reshape(G, R, -1)


def cases(L: int, heads: int, k: int) -> dict:
  """{name: (ref, ours)} zero-argument callables on one synthetic layer, checked equal."""
  from limits.distance.block import block_visible
  from limits.distance.host_select import block_top_host
  from limits.selection import sort_rows, top_k_rows_host

  w = causal_weights(heads, L)
  vis = np.tri(L, dtype=bool)
  lo, hi = 3 * L // 4, L  # the last causal block of 4
  key = np.where(block_visible(lo, hi - lo, hi, 0, xp=np), w[:, lo:hi, :hi],
                 np.float32(-np.inf)).reshape(-1, hi)
  ns = [int(L * f) for f in (0.78, 0.79, 0.8, 0.81, 0.82, 0.83, 0.84, 0.85)]
  kth = sorted({n - 1 for n in ns} | {n for n in ns})
  out = {"mask": (lambda: mask_assign(w, vis), lambda: mask_copyto(w, vis)),
         "top": (lambda: top_packed(key, k), lambda: top_k_rows_host(key, k)),
         "select": (lambda: [top_argpartition(w[:, a:b, :b], a, min(k, b))
                             for a, b in _blocks(L)],
                    lambda: [block_top_host(w[:, a:b, :b], a, min(k, b)) for a, b in _blocks(L)]),
         "order": (lambda: np.partition(np.where(vis, -w, np.inf), kth, axis=-1),
                   lambda: sort_rows(w))}
  assert np.array_equal(out["mask"][0](), out["mask"][1]())
  assert np.array_equal(out["top"][0](), out["top"][1]())
  assert all(np.array_equal(r, o) for r, o in zip(out["select"][0](), out["select"][1]()))
  assert np.array_equal(-out["order"][0]()[..., kth], out["order"][1]()[..., kth])
  return out


def _blocks(L: int):
  """The 4 causal blocks of a layer (``limits.distance.block.causal_blocks``)."""
  from limits.distance.block import causal_blocks

  return causal_blocks(L, 4)


def main(argv):
  del argv
  print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
  for name, (ref, ours) in cases(FLAGS.length, FLAGS.heads, FLAGS.k).items():
    r = common.alternate(ref, ours, FLAGS.pairs)
    print(f"{name} (L = {FLAGS.length}, {FLAGS.heads} heads): reference "
          f"{1e3 * r['ref_median_s']:.1f} ms, ours {1e3 * r['ours_median_s']:.1f} ms; ratio "
          f"{r['ratio_median']:.2f}x (spread {r['ratio_min']:.2f}-{r['ratio_max']:.2f}x over "
          f"{r['pairs']} alternating pairs)", flush=True)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
