"""GPT-2 forward pass in pure JAX that exposes every layer's attention (q, k, v, scores, weights).

Pre-LN transformer blocks (Radford et al. 2019; HF ``modeling_gpt2.py``, nanoGPT ``model.py``):

    a = ln_1(h);  h += c_proj(attn(a));  h += mlp(ln_2(h));   logits = ln_f(h) @ wte.T

Parameters are a nested dict whose paths are the checkpoint names (``h.3.attn.c_attn.weight`` is
``params["h"]["attn"]["c_attn"]["weight"][3]``): the ``h`` subtree is stacked over layers and
run with ``lax.scan``. Conv1D weights are stored as in the checkpoint, ``(in, out)``, so a linear
layer is ``x @ W + b``.

Attention logits (AMBIG-12, raw q·k scale): ``scores = q·kᵀ`` (raw), ``logits = scores / T``
with ``T = √d_head`` by default (the model's own scale) or the caller's ``temperature``. The
normalizer is any callable ``normalizer(logits, mask) -> weights`` (mask True = visible, causal);
``None`` is softmax. Masked positions get weight exactly 0 whatever the normalizer returns.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from limits.errors import LimitsError
from limits.gpt2.config import Config

Params = dict
Normalizer = Callable[[jax.Array, jax.Array], jax.Array]


class AttnRecord(NamedTuple):
  """One layer's attention (a leading n_layer axis when stacked by ``forward``)."""

  q: jax.Array  # (B, H, L, d_head)
  k: jax.Array  # (B, H, L, d_head)
  v: jax.Array  # (B, H, L, d_head)
  scores: jax.Array  # (B, H, L, L) raw q·k, before scaling and masking
  weights: jax.Array  # (B, H, L, L) normalizer output; exactly 0 where masked
  x: jax.Array  # (B, L, D) the layer's ln_1 output (attention input)


class Output(NamedTuple):
  logits: Optional[jax.Array]  # (B, L, V), or None with lm_head=False
  attn: Any  # AttnRecord stacked over the kept layers, record_fn's stacked output, or None


# ----------------------------------------------------------------------------------------------
# Checkpoint tensors: the explicit list, with shapes (HF names, no "transformer." prefix).

LAYER_TENSORS = (
    "ln_1.weight", "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias",
)


def layer_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Shapes of one block's tensors, keyed by the name after ``h.<i>.``."""
  d, m = config.n_embd, config.d_mlp
  return {
      "ln_1.weight": (d,), "ln_1.bias": (d,),
      "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
      "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
      "ln_2.weight": (d,), "ln_2.bias": (d,),
      "mlp.c_fc.weight": (d, m), "mlp.c_fc.bias": (m,),
      "mlp.c_proj.weight": (m, d), "mlp.c_proj.bias": (d,),
  }


def checkpoint_shapes(config: Config) -> dict[str, tuple[int, ...]]:
  """Every checkpoint tensor name (no prefix) and its shape, in checkpoint order."""
  shapes = {"wte.weight": (config.vocab_size, config.n_embd),
            "wpe.weight": (config.n_positions, config.n_embd)}
  per_layer = layer_shapes(config)
  for i in range(config.n_layer):
    for name in LAYER_TENSORS:
      shapes[f"h.{i}.{name}"] = per_layer[name]
  shapes["ln_f.weight"] = (config.n_embd,)
  shapes["ln_f.bias"] = (config.n_embd,)
  if not config.tie_word_embeddings:
    shapes["lm_head.weight"] = (config.vocab_size, config.n_embd)
  return shapes


def _set(tree: dict, path: Sequence[str], value) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _get(tree: dict, path: Sequence[str]):
  for key in path:
    tree = tree[key]
  return tree


def params_from_flat(flat: dict[str, Any], config: Config) -> Params:
  """Builds the stacked params pytree from ``{checkpoint name: array}`` (names already checked)."""
  params: Params = {}
  for name in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"):
    _set(params, name.split("."), jnp.asarray(flat[name]))
  if not config.tie_word_embeddings:
    _set(params, ["lm_head", "weight"], jnp.asarray(flat["lm_head.weight"]))
  for name in LAYER_TENSORS:
    stacked = np.stack([np.asarray(flat[f"h.{i}.{name}"]) for i in range(config.n_layer)])
    _set(params, ["h"] + name.split("."), jnp.asarray(stacked))
  return params


def params_to_flat(params: Params, config: Config) -> dict[str, np.ndarray]:
  """Inverse of ``params_from_flat``: ``{checkpoint name: numpy array}``."""
  flat = {}
  for name in checkpoint_shapes(config):
    parts = name.split(".")
    if parts[0] == "h":
      flat[name] = np.asarray(_get(params, ["h"] + parts[2:])[int(parts[1])])
    else:
      flat[name] = np.asarray(_get(params, parts))
  return flat


def check_params(params: Params, config: Config) -> None:
  """LimitsError unless every tensor is present with the shape the config implies."""
  per_layer = layer_shapes(config)
  expected = {"wte.weight": (config.vocab_size, config.n_embd),
              "wpe.weight": (config.n_positions, config.n_embd),
              "ln_f.weight": (config.n_embd,), "ln_f.bias": (config.n_embd,)}
  if not config.tie_word_embeddings:
    expected["lm_head.weight"] = (config.vocab_size, config.n_embd)
  for name, shape in per_layer.items():
    expected["h." + name] = (config.n_layer,) + shape
  for name, shape in expected.items():
    try:
      got = tuple(_get(params, name.split(".")).shape)
    except (KeyError, TypeError, AttributeError):
      raise LimitsError(f"GPT-2 params: missing tensor {name}") from None
    if got != shape:
      raise LimitsError(f"GPT-2 params: {name} has shape {got}, config expects {shape}")


# ----------------------------------------------------------------------------------------------
# Initialisation.

def init_params(key: jax.Array, config: Config, dtype=jnp.float32) -> Params:
  """GPT-2 initialisation (HF ``GPT2PreTrainedModel._init_weights``, nanoGPT).

  Weights N(0, 0.02²), residual projections (``attn.c_proj``, ``mlp.c_proj``) N(0, (0.02/√(2
  n_layer))²), biases 0, LayerNorm gains 1. Draws with NumPy's PCG64 seeded by the key's data
  (deterministic per key; avoids compiling one random op per tensor shape, seconds on a CPU).
  """
  seed = np.asarray(jax.random.key_data(key)).ravel().tolist()
  rng = np.random.default_rng(seed)
  dtype = jnp.dtype(dtype)
  std = 0.02
  proj_std = std / math.sqrt(2 * config.n_layer)
  shapes = {"wte.weight": (config.vocab_size, config.n_embd),
            "wpe.weight": (config.n_positions, config.n_embd),
            "ln_f.weight": (config.n_embd,), "ln_f.bias": (config.n_embd,)}
  if not config.tie_word_embeddings:
    shapes["lm_head.weight"] = (config.vocab_size, config.n_embd)
  for name, shape in layer_shapes(config).items():
    shapes["h." + name] = (config.n_layer,) + shape
  params: Params = {}
  for name, shape in shapes.items():
    leaf = name.split(".")[-2:]
    if leaf[0].startswith("ln_"):
      value = np.ones(shape) if leaf[1] == "weight" else np.zeros(shape)
    elif leaf[1] == "bias":
      value = np.zeros(shape)
    else:
      s = proj_std if leaf[0] == "c_proj" else std
      value = s * rng.standard_normal(shape, dtype=np.float32)
    _set(params, name.split("."), jnp.asarray(value, dtype))
  return params


# ----------------------------------------------------------------------------------------------
# Building blocks.

def _layer_norm(x, p, eps):
  # (..., D); biased variance, as torch.nn.LayerNorm.
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + eps) * p["weight"] + p["bias"]


def _activation(name: str, x):
  if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
    return jax.nn.gelu(x, approximate=True)
  if name == "gelu":
    return jax.nn.gelu(x, approximate=False)
  if name == "relu":
    return jax.nn.relu(x)
  return jax.nn.silu(x)  # "silu" / "swish"


def _linear(x, p):
  return x @ p["weight"] + p["bias"]


def softmax_normalizer(logits, mask):
  """Masked softmax over the last axis: exact zeros where masked, finite for a fully masked row."""
  fill = jnp.finfo(logits.dtype).min
  z = jnp.where(mask, logits, fill)
  z = z - jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
  e = jnp.where(mask, jnp.exp(z), 0)
  denom = jnp.sum(e, axis=-1, keepdims=True)
  return e / jnp.where(denom > 0, denom, 1)


def _block(p, h, temperature, *, config: Config, normalizer: Optional[Normalizer]):
  """One pre-LN block. h (B, L, D) -> (h (B, L, D), AttnRecord)."""
  b, l, d = h.shape
  nh, dh = config.n_head, config.d_head
  x = _layer_norm(h, p["ln_1"], config.layer_norm_epsilon)  # (B, L, D)
  qkv = _linear(x, p["attn"]["c_attn"])  # (B, L, 3D)
  q, k, v = (t.reshape(b, l, nh, dh).transpose(0, 2, 1, 3)
             for t in jnp.split(qkv, 3, axis=-1))  # each (B, H, L, dh)
  scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)  # (B, H, L, L) raw q·k
  mask = jnp.tril(jnp.ones((l, l), dtype=bool))  # (L, L) True = visible (causal)
  logits = scores / temperature.astype(scores.dtype)
  norm = softmax_normalizer if normalizer is None else normalizer
  weights = norm(logits, jnp.broadcast_to(mask, logits.shape))
  weights = jnp.where(mask, weights, 0).astype(v.dtype)  # (B, H, L, L)
  a = jnp.einsum("bhqk,bhkd->bhqd", weights, v)  # (B, H, L, dh)
  a = a.transpose(0, 2, 1, 3).reshape(b, l, d)  # (B, L, D)
  h = h + _linear(a, p["attn"]["c_proj"])
  m = _layer_norm(h, p["ln_2"], config.layer_norm_epsilon)
  m = _linear(_activation(config.activation, _linear(m, p["mlp"]["c_fc"])), p["mlp"]["c_proj"])
  return h + m, AttnRecord(q=q, k=k, v=v, scores=scores, weights=weights, x=x)


def _embed(params, tokens):
  l = tokens.shape[1]
  return params["wte"]["weight"][tokens] + params["wpe"]["weight"][:l]  # (B, L, D)


def _head(params, h, config: Config):
  h = _layer_norm(h, params["ln_f"], config.layer_norm_epsilon)
  w = params["wte"]["weight"] if config.tie_word_embeddings else params["lm_head"]["weight"]
  return h @ w.T  # (B, L, V)


def _segments(n_run: int, keep: tuple[int, ...]) -> list[tuple[int, int, bool]]:
  """Splits layers [0, n_run) into contiguous (start, stop, recorded) runs."""
  kept = set(keep)
  out = []
  for i in range(n_run):
    rec = i in kept
    if out and out[-1][2] == rec:
      out[-1] = (out[-1][0], i + 1, rec)
    else:
      out.append((i, i + 1, rec))
  return out


@functools.partial(jax.jit, static_argnames=("config", "normalizer", "lm_head", "layers",
                                             "record_fn"))
def _forward(params, tokens, temperature, *, config, normalizer, lm_head, layers, record_fn):
  h = _embed(params, tokens)
  n_run = config.n_layer if lm_head or not layers else max(layers) + 1
  block = functools.partial(_block, config=config, normalizer=normalizer)
  stacked = []
  for start, stop, recorded in _segments(n_run, layers):
    seg = jax.tree_util.tree_map(lambda a: a[start:stop], params["h"])

    def step(carry, p, recorded=recorded):
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
  logits = _head(params, h, config) if lm_head else None
  return Output(logits=logits, attn=attn)


def _check_tokens(tokens, config: Config) -> jax.Array:
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


def _check_layers(layers, config: Config) -> tuple[int, ...]:
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


def _check_temperature(temperature, config: Config) -> jax.Array:
  if temperature is None:
    # Default float dtype (float64 under x64), cast to the scores' dtype in the block: the
    # same rounding of √d_head as HF's torch.full([], d_head ** 0.5, dtype=scores.dtype).
    return jnp.asarray(math.sqrt(config.d_head))
  if not isinstance(temperature, jax.core.Tracer):
    t = float(temperature)
    if not (math.isfinite(t) and t > 0):
      raise LimitsError(f"temperature={temperature!r} must be a finite positive number")
  return jnp.asarray(temperature)


def forward(params: Params, tokens, config: Config, *, normalizer: Optional[Normalizer] = None,
            temperature=None, lm_head: bool = True, layers=None,
            record_fn: Optional[Callable[[AttnRecord], Any]] = None) -> Output:
  """Runs GPT-2 and returns logits plus every kept layer's attention record.

  Args:
    params: stacked parameter pytree (``init_params`` / ``load``); an argument of the jitted
      computation, never closed over.
    tokens: (B, L) integer token ids, L ≤ n_positions.
    config: the model's Config (static).
    normalizer: ``normalizer(logits (B,H,L,L), mask (B,H,L,L) bool) -> weights``; None = softmax.
      It is a static jit argument: reuse one callable object to avoid recompiling.
    temperature: None = the model's own scale, logits = scores/√d_head; a number T gives
      logits = scores/T on the raw q·k scale (AMBIG-12), so T = √d_head reproduces the model.
    lm_head: False skips ln_f and the LM head (``Output.logits`` is None) and stops after the
      last kept layer.
    layers: layer indices to record (negative allowed); records come in increasing layer order.
      None = all layers; ``()`` = none.
    record_fn: optional ``fn(AttnRecord of one layer) -> pytree`` applied inside the layer scan,
      so only its output is stacked (streaming reduction of the L×L arrays).

  Returns:
    Output(logits (B, L, V) or None, attn): ``attn`` is an AttnRecord with a leading axis over
    the kept layers (q, k, v (n, B, H, L, d_head); scores, weights (n, B, H, L, L); x (n, B, L,
    D)), or the stacked ``record_fn`` outputs, or None when no layer is kept.
  """
  tokens = _check_tokens(tokens, config)
  keep = _check_layers(layers, config)
  t = _check_temperature(temperature, config)
  return _forward(params, tokens, t, config=config, normalizer=normalizer, lm_head=bool(lm_head),
                  layers=keep, record_fn=record_fn)


@functools.partial(jax.jit, static_argnames=("config", "normalizer", "recorded"))
def _layer_step(h_params, index, h, temperature, *, config, normalizer, recorded):
  p = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False),
                             h_params)
  h, rec = _block(p, h, temperature, config=config, normalizer=normalizer)
  return h, (rec if recorded else None)


_embed_jit = jax.jit(_embed)


def iter_layers(params: Params, tokens, config: Config, *,
                normalizer: Optional[Normalizer] = None, temperature=None,
                layers=None) -> Iterator[tuple[int, AttnRecord]]:
  """Yields ``(layer_index, AttnRecord)`` one layer at a time (no leading layer axis).

  Only one layer's L×L arrays exist at once if the caller drops each record before asking for
  the next. Same semantics as ``forward`` for normalizer, temperature and layers; runs only up
  to the last requested layer. One compiled step serves every layer.
  """
  tokens = _check_tokens(tokens, config)
  keep = _check_layers(layers, config)
  t = _check_temperature(temperature, config)
  if not keep:
    return
  h = _embed_jit(params, tokens)
  kept = set(keep)
  for i in range(max(keep) + 1):
    h, rec = _layer_step(params["h"], jnp.int32(i), h, t, config=config, normalizer=normalizer,
                         recorded=i in kept)
    if rec is not None:
      yield i, rec
      del rec
