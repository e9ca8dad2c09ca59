"""The record contract and the forward engine shared by every model family.

A family (``limits.models.gpt2``, ``limits.models.llama``) supplies three pure functions and the
name of its stacked-layer subtree; this module runs them:

    h = family.embed(params, tokens, config)                       # (B, L, D)
    for each layer (lax.scan over the stacked subtree):
      h, rec = family.block(p_layer, h, temperature, config=..., normalizer=...)
    logits = family.head(params, h, config)                        # (B, L, V)

Every family returns the same :class:`AttnRecord` per layer: ``q, k, v (B, H, L, d_head)`` with
k and v given per *query* head (grouped-query attention repeats a key/value head over its
group), ``scores`` the raw q·kᵀ (after any rotary embedding, before scaling and masking),
``weights`` the normalizer of ``scores / T`` under the causal mask (in a local layer also the
sliding window, ``window``), ``x`` the attention input.

Attention logits use the raw q·k scale: ``logits = scores / T`` with ``T = √d_head`` by default
(the model's own temperature) or the caller's ``temperature``. The normalizer is any callable
``normalizer(logits, mask) -> weights`` (mask True = visible); None is softmax. Masked positions
get weight exactly 0 whatever the normalizer returns.
"""

from __future__ import annotations

import functools
import importlib
import math
from typing import Any, Callable, Iterator, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from limits.errors import LimitsError
from limits.numerics import attention_mask

Normalizer = Callable[[jax.Array, jax.Array], jax.Array]

# family name -> module implementing embed / block / head / LAYERS_KEY.
FAMILY_MODULES = {"gpt2": "limits.models.gpt2.model", "llama": "limits.models.llama.model",
                  "gemma3": "limits.models.gemma3.model"}


class AttnRecord(NamedTuple):
  """One layer's attention (a leading n_layer axis when stacked by ``forward``)."""

  q: jax.Array  # (B, H, L, d_head)
  k: jax.Array  # (B, H, L, d_head), per query head
  v: jax.Array  # (B, H, L, d_head), per query head
  scores: jax.Array  # (B, H, L, L) raw q·k, before scaling and masking
  weights: jax.Array  # (B, H, L, L) normalizer output; exactly 0 where masked
  x: jax.Array  # (B, L, D) the layer's normalised input (attention input)
  # Sliding window W of a local layer (a query at position t sees keys max(0, t-W+1)..t, i.e.
  # min(t+1, W) keys), 0 for a global (full causal) layer: an int32 scalar per layer; None in
  # families without sliding windows (every layer global). See ``visible_keys``.
  window: Any = None


class Output(NamedTuple):
  logits: Optional[jax.Array]  # (B, L, V), or None with lm_head=False
  attn: Any  # AttnRecord stacked over the kept layers, record_fn's stacked output, or None


def set_path(tree: dict, path, value) -> None:
  """``tree[path[0]][path[1]]... = value``, creating the nested dicts (checkpoint name → pytree)."""
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def stack_params(flat: dict[str, Any], config, top: tuple[str, ...], stack: str,
                 layer_tensors) -> dict:
  """The stacked params pytree from ``{checkpoint name: array}`` (names already checked): each
  name in ``top`` at its dotted path, ``lm_head.weight`` unless the embeddings are tied, and each
  of ``layer_tensors`` stacked over the ``config.n_layer`` layers ``<stack>.<i>.<name>`` under
  ``<stack>``."""
  params: dict = {}
  for name in top:
    set_path(params, name.split("."), jnp.asarray(flat[name]))
  if not config.tie_word_embeddings:
    set_path(params, ["lm_head", "weight"], jnp.asarray(flat["lm_head.weight"]))
  for name in layer_tensors:
    stacked = np.stack([np.asarray(flat[f"{stack}.{i}.{name}"]) for i in range(config.n_layer)])
    set_path(params, [stack] + name.split("."), jnp.asarray(stacked))
  return params


def flat_shapes(config, per_layer: dict[str, tuple[int, ...]], stack: str = "layers"
                ) -> dict[str, tuple[int, ...]]:
  """Every checkpoint tensor name and shape of a decoder with ``embed_tokens``, a final
  ``norm`` and ``lm_head`` unless tied: ``<stack>.<i>.<name>`` for each of ``per_layer``."""
  shapes = {"embed_tokens.weight": (config.vocab_size, config.n_embd)}
  for i in range(config.n_layer):
    for name, shape in per_layer.items():
      shapes[f"{stack}.{i}.{name}"] = shape
  shapes["norm.weight"] = (config.n_embd,)
  if not config.tie_word_embeddings:
    shapes["lm_head.weight"] = (config.vocab_size, config.n_embd)
  return shapes


def check_stacked_params(params, config, per_layer: dict[str, tuple[int, ...]], what: str,
                         stack: str = "layers") -> None:
  """LimitsError ``<what> params: ...`` unless every tensor of :func:`flat_shapes` is present
  in the stacked pytree (layer tensors with a leading n_layer axis) with its shape."""
  expected = {"embed_tokens.weight": (config.vocab_size, config.n_embd),
              "norm.weight": (config.n_embd,)}
  if not config.tie_word_embeddings:
    expected["lm_head.weight"] = (config.vocab_size, config.n_embd)
  for name, shape in per_layer.items():
    expected[f"{stack}.{name}"] = (config.n_layer,) + shape
  for name, shape in expected.items():
    node = params
    try:
      for part in name.split("."):
        node = node[part]
      got = tuple(node.shape)
    except (KeyError, TypeError, AttributeError):
      raise LimitsError(f"{what} params: missing tensor {name}") from None
    if got != shape:
      raise LimitsError(f"{what} params: {name} has shape {got}, config expects {shape}")


def family_module(config):
  """The module implementing ``config``'s family (``config.family``)."""
  name = getattr(config, "family", None)
  if name not in FAMILY_MODULES:
    raise LimitsError(f"config of type {type(config).__name__} names no known model family "
                      f"(family={name!r}); supported: {', '.join(sorted(FAMILY_MODULES))}")
  return importlib.import_module(FAMILY_MODULES[name])


def softmax_normalizer(logits, mask):
  """Masked softmax over the last axis: exact zeros where masked, finite for a fully masked row."""
  return _masked_softmax(logits, mask, materialize=False)


def _masked_softmax(logits, mask, *, materialize: bool):
  """:func:`softmax_normalizer`; ``materialize`` writes exp(z − max) once
  (``optimization_barrier``) instead of letting XLA recompute it in both the row-sum fusion
  and the division fusion of an (L, L) block: the same operations on the same values, so the
  same bits (SmolLM2 L = 1,024, every record: 6.4 -> 5.7 CPU s, forward with logits)."""
  fill = jnp.finfo(logits.dtype).min
  z = jnp.where(mask, logits, fill)
  z = z - jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
  e = jnp.where(mask, jnp.exp(z), 0)
  if materialize:
    e = jax.lax.optimization_barrier(e)
  denom = jnp.sum(e, axis=-1, keepdims=True)
  return e / jnp.where(denom > 0, denom, 1)


def visible_keys(length: int, window=None) -> np.ndarray:
  """(L,) number of keys each query position sees: t+1 causal, min(t+1, W) in a local layer
  (``window`` = the record's ``window``: W > 0, or 0 / None for a global layer)."""
  t = np.arange(1, length + 1)
  w = 0 if window is None else int(window)
  return np.minimum(t, w) if w > 0 else t


def attend(q, k, v, temperature, normalizer: Optional[Normalizer], window: int = 0):
  """Causal attention with a swappable normalizer, shared by every family.

  Grouped-query attention without repeating k and v: with H_kv key/value heads and
  g = H / H_kv, query head i reads key/value head i // g, and the products run per key/value
  head over its g query heads stacked, ``(g·L, d_head) · (d_head, L)`` (same sums as per
  query head, one larger GEMM instead of g small ones and no (H, L, d_head) copy of k, v).

  Args:
    q: (B, H, L, d_head).
    k, v: (B, H_kv, L, d_head), H a multiple of H_kv (H_kv = H: multi-head attention).
    temperature: scalar T; logits = q·kᵀ / T.
    normalizer: ``fn(logits, mask) -> weights`` or None (softmax).
    window: static; 0 = causal, W > 0 = sliding window of W keys (local layers).

  Returns:
    (a (B, H, L, d_head), scores (B, H, L, L) raw q·k, weights (B, H, L, L)).
  """
  b, h, l, dh = q.shape
  nkv = k.shape[1]
  if h % nkv:
    raise LimitsError(f"attend: {h} query heads are not a multiple of {nkv} key/value heads")
  g = h // nkv
  qg = q.reshape(b, nkv, g * l, dh)  # query heads i = n·g .. n·g+g-1 of kv head n, stacked
  scores = jnp.einsum("bnqd,bnkd->bnqk", qg, k).reshape(b, h, l, l)  # (B, H, L, L) raw q·k
  mask = attention_mask(l, window)  # (L, L) True = visible
  logits = scores / temperature.astype(scores.dtype)
  norm = (functools.partial(_masked_softmax, materialize=True) if normalizer is None
          else normalizer)
  weights = norm(logits, jnp.broadcast_to(mask, logits.shape))
  weights = jnp.where(mask, weights, 0).astype(v.dtype)  # (B, H, L, L)
  a = jnp.einsum("bnqk,bnkd->bnqd", weights.reshape(b, nkv, g * l, l), v)  # (B, H_kv, g·L, dh)
  return a.reshape(b, h, l, dh), scores, weights


def layer_kinds(config) -> tuple:
  """Per-layer static kind (hashable) of a family whose layers differ (Gemma 3: the sliding
  window, 0 for global layers), from the family's ``layer_kinds(config)``; else all None."""
  fam = family_module(config)
  kinds = getattr(fam, "layer_kinds", None)
  return tuple(kinds(config)) if kinds is not None else (None,) * config.n_layer


def _block_fn(fam, config, normalizer, kind):
  """The family's block with its static arguments (``kind`` only for families that have it)."""
  if kind is None:
    return functools.partial(fam.block, config=config, normalizer=normalizer)
  return functools.partial(fam.block, config=config, normalizer=normalizer, kind=kind)


def _segments(n_run: int, keep: tuple[int, ...],
              kinds: tuple = ()) -> list[tuple[int, int, bool, Any]]:
  """Splits layers [0, n_run) into contiguous (start, stop, recorded, kind) runs."""
  kept = set(keep)
  out = []
  for i in range(n_run):
    rec = i in kept
    kind = kinds[i] if kinds else None
    if out and out[-1][2] == rec and out[-1][3] == kind:
      out[-1] = (out[-1][0], i + 1, rec, kind)
    else:
      out.append((i, i + 1, rec, kind))
  return out


@functools.partial(jax.jit, static_argnames=("config", "normalizer", "lm_head", "layers",
                                             "record_fn"))
def _forward(params, tokens, temperature, *, config, normalizer, lm_head, layers, record_fn):
  fam = family_module(config)
  h = fam.embed(params, tokens, config)
  n_run = config.n_layer if lm_head or not layers else max(layers) + 1
  stacked = []
  for start, stop, recorded, kind in _segments(n_run, layers, layer_kinds(config)):
    seg = jax.tree_util.tree_map(lambda a: a[start:stop], params[fam.LAYERS_KEY])
    block = _block_fn(fam, config, normalizer, kind)

    def step(carry, p, recorded=recorded, block=block):
      carry, rec = block(p, carry, temperature)
      if not recorded:
        return carry, None
      return carry, (rec if record_fn is None else record_fn(rec))

    h, recs = jax.lax.scan(step, h, seg)
    if recorded:
      stacked.append(recs)
  attn = None
  if stacked:
    attn = stacked[0] if len(stacked) == 1 else jax.tree_util.tree_map(
        lambda *xs: jnp.concatenate(xs, axis=0), *stacked)
  logits = fam.head(params, h, config) if lm_head else None
  return Output(logits=logits, attn=attn)


def check_tokens(tokens, config) -> jax.Array:
  """(B, L) int32 token ids, checked against the context and vocabulary (LimitsError)."""
  tokens = jnp.asarray(tokens)
  if tokens.ndim != 2:
    raise LimitsError(f"tokens must have shape (B, L), got {tuple(tokens.shape)}")
  if not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise LimitsError(f"tokens must be integers, got dtype {tokens.dtype}")
  l = tokens.shape[1]
  if l < 1 or l > config.n_positions:
    raise LimitsError(f"sequence length L={l} must be in [1, n_positions={config.n_positions}]")
  if tokens.size and isinstance(tokens, jax.Array) and not isinstance(tokens, jax.core.Tracer):
    lo, hi = int(jnp.min(tokens)), int(jnp.max(tokens))
    if lo < 0 or hi >= config.vocab_size:
      raise LimitsError(f"token ids must be in [0, vocab_size={config.vocab_size}), "
                        f"got range [{lo}, {hi}]")
  return tokens.astype(jnp.int32)


def check_layers(layers, config) -> tuple[int, ...]:
  """Sorted unique layer indices (negative allowed); None = every layer."""
  if layers is None:
    return tuple(range(config.n_layer))
  if isinstance(layers, (int, np.integer)):
    layers = (layers,)
  out = set()
  for i in layers:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
      raise LimitsError(f"layers must be integers, got {i!r}")
    j = int(i) + config.n_layer if i < 0 else int(i)
    if not 0 <= j < config.n_layer:
      raise LimitsError(f"layer index {i} out of range for n_layer={config.n_layer}")
    out.add(j)
  return tuple(sorted(out))


def check_temperature(temperature, config) -> jax.Array:
  """T as an array: √d_head for None, else a finite positive number (LimitsError)."""
  if temperature is None:
    # Default float dtype (float64 under x64), cast to the scores' dtype in the block: the
    # same rounding of √d_head as HF's torch.full([], d_head ** 0.5, dtype=scores.dtype).
    # A family whose scale is not 1/√d_head (Gemma 3: query_pre_attn_scalar) names its own.
    native = getattr(config, "attn_temperature", None)
    return jnp.asarray(math.sqrt(config.d_head) if native is None else native)
  if not isinstance(temperature, jax.core.Tracer):
    t = float(temperature)
    if not (math.isfinite(t) and t > 0):
      raise LimitsError(f"temperature={temperature!r} must be a finite positive number")
  return jnp.asarray(temperature)


def forward(params, tokens, config, *, normalizer: Optional[Normalizer] = None,
            temperature=None, lm_head: bool = True, layers=None,
            record_fn: Optional[Callable[[AttnRecord], Any]] = None) -> Output:
  """Runs any family's model and returns logits plus every kept layer's attention record.

  Args:
    params: stacked parameter pytree (``limits.models.load``); an argument of the jitted
      computation, never closed over.
    tokens: (B, L) integer token ids, L ≤ n_positions.
    config: the model's config (static; ``config.family`` selects the implementation).
    normalizer: ``normalizer(logits (B,H,L,L), mask (B,H,L,L) bool) -> weights``; None = softmax.
      It is a static jit argument: reuse one callable object to avoid recompiling.
    temperature: None = the model's own scale, logits = scores/√d_head; a number T gives
      logits = scores/T on the raw q·k scale, so T = √d_head reproduces the model.
    lm_head: False skips the final norm and the LM head (``Output.logits`` is None) and stops
      after the last kept layer.
    layers: layer indices to record (negative allowed); records come in increasing layer order.
      None = all layers; ``()`` = none.
    record_fn: optional ``fn(AttnRecord of one layer) -> pytree`` applied inside the layer scan,
      so only its output is stacked (streaming reduction of the L×L arrays).

  Returns:
    Output(logits (B, L, V) or None, attn): ``attn`` is an AttnRecord with a leading axis over
    the kept layers (q, k, v (n, B, H, L, d_head); scores, weights (n, B, H, L, L); x (n, B, L,
    D)), or the stacked ``record_fn`` outputs, or None when no layer is kept.
  """
  family_module(config)
  tokens = check_tokens(tokens, config)
  keep = check_layers(layers, config)
  t = check_temperature(temperature, config)
  return _forward(params, tokens, t, config=config, normalizer=normalizer, lm_head=bool(lm_head),
                  layers=keep, record_fn=record_fn)


@functools.partial(jax.jit, static_argnames=("config", "normalizer", "recorded", "kind"))
def _layer_step(layer_params, index, h, temperature, *, config, normalizer, recorded, kind):
  p = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False),
                             layer_params)
  h, rec = _block_fn(family_module(config), config, normalizer, kind)(p, h, temperature)
  return h, (rec if recorded else None)


@functools.partial(jax.jit, static_argnames=("config",))
def _embed(params, tokens, *, config):
  return family_module(config).embed(params, tokens, config)


# Records of one layer at most this large (the (H, L, L) weights and scores, float32) are
# computed one layer ahead: layer i+1 is dispatched before layer i is yielded, so the device
# computes it while the caller copies, stores or reduces layer i (XLA dispatch is
# asynchronous). Larger records (SmolLM2 at L >= 2,700) keep one layer at a time.
AHEAD_BYTES = 512 * 2**20


def record_bytes(config, length: int) -> int:
  """Bytes of one layer's two (H, L, L) float32 records (weights and scores)."""
  return 2 * 4 * int(config.n_head) * int(length) ** 2


def iter_layers(params, tokens, config, *, normalizer: Optional[Normalizer] = None,
                temperature=None, layers=None, ahead: Optional[bool] = None
                ) -> Iterator[tuple[int, AttnRecord]]:
  """Yields ``(layer_index, AttnRecord)`` one layer at a time (no leading layer axis).

  Same semantics as ``forward`` for normalizer, temperature and layers; runs only up to the
  last requested layer. One compiled step serves every layer. ``ahead`` (default: when one
  layer's records take at most :data:`AHEAD_BYTES`): the next kept layer is dispatched before
  this one is yielded, so its computation overlaps the caller's work on this one; at most two
  layers' L×L arrays exist at once (one without ``ahead``) if the caller drops each record
  before asking for the next. The records are the same either way (same programs, same
  inputs).
  """
  fam = family_module(config)
  tokens = check_tokens(tokens, config)
  keep = check_layers(layers, config)
  t = check_temperature(temperature, config)
  if not keep:
    return
  if ahead is None:
    ahead = record_bytes(config, tokens.shape[-1]) * tokens.shape[0] <= AHEAD_BYTES
  h = _embed(params, tokens, config=config)
  kept = set(keep)
  kinds = layer_kinds(config)
  pending = None  # (index, record) dispatched, not yet yielded
  for i in range(max(keep) + 1):
    h, rec = _layer_step(params[fam.LAYERS_KEY], jnp.int32(i), h, t, config=config,
                         normalizer=normalizer, recorded=i in kept, kind=kinds[i])
    if rec is None:
      continue
    if not ahead:
      yield i, rec
      del rec
      continue
    if pending is not None:
      yield pending
    pending = (i, rec)
    del rec
  if pending is not None:
    yield pending
    del pending
