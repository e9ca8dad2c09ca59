"""Model sources: a model plus its tokenizer, corpus windows and raw attention-logit rows.

- :func:`load_model` gives a :class:`Model` of any family from a spec (``limits.models``):
  ``"tiny"`` (the project's own small GPT-2 trained on *War and Peace*, shipped in
  ``limits/assets/tiny/``; the default of every experiment), ``"smollm2"`` (SmolLM2-135M,
  Llama family), a checkpoint directory or ``.gguf`` file, or a Hugging Face name.
- :func:`corpus_windows` cuts the tokenized corpus into consecutive non-overlapping L-token
  windows from the start of the body (AMBIG-6).
- :func:`model_logit_rows` returns the raw q·k attention logits of every layer, head and query
  with the causal mask (AMBIG-12: the model's own temperature on this scale is √d_head, 8 for
  GPT-2), so the math modules receive the same ``(rows, mask)`` arrays as from synthetic sources;
  :func:`iter_logit_blocks` gives the same rows one (window, layer) at a time, with
  :func:`logit_row_meta` saying which row is which (no (R, L) array).

AMBIG-n labels name the ambiguity options of ``docs/ambiguities.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from limits import data as data_lib
from limits.errors import check

from limits.models.loading import TINY_DIR  # noqa: E402,F401 (the embedded model's folder)

DEFAULT_MODEL = "tiny"


@dataclasses.dataclass
class Model:
  """A loaded model of any family (``limits.models``) with its tokenizer.

  Attributes:
    name: the spec it was loaded from (``"tiny"``, ``"smollm2"``, a name, or the path given).
    config: the family's config (``limits.models.gpt2.Config`` or ``limits.models.llama.Config``).
    params: the stacked parameter pytree (``limits.models.load``); given as a
      :class:`Deferred`, read on first use (:func:`load_model` does so).
    tokenizer: a ``limits.models.gpt2.tokenizer.Tokenizer`` (``.encode(text) -> list[int]``).
    path: the file or directory the weights were read from.
  """
  name: str
  config: Any
  params: Any
  tokenizer: Any
  path: Path

  # ``params`` is a property (below the class): a :class:`Deferred` loader runs on first use.

  @property
  def family(self) -> str:
    return self.config.family

  @property
  def native_temperature(self) -> float:
    """The model's own temperature on the raw q·k scale: √d_head (Gemma 3:
    √query_pre_attn_scalar, its ``attn_temperature``; equal to √d_head for Gemma 3 270M)."""
    native = getattr(self.config, "attn_temperature", None)
    return float(np.sqrt(self.config.d_head) if native is None else native)

  def info(self) -> dict:
    """A small JSON-able description for results.json."""
    from limits import models

    c = self.config
    info = {"name": self.name, "path": str(self.path), "family": c.family,
            "n_layer": c.n_layer, "n_head": c.n_head, "n_kv_head": c.n_kv_head,
            "n_embd": c.n_embd, "d_head": c.d_head, "n_positions": c.n_positions,
            "vocab_size": c.vocab_size}
    windows = [int(k or 0) for k in models.layer_kinds(c)]
    if any(windows):  # local (sliding-window) layers: W per layer, 0 = global
      info["layer_windows"] = windows
    return info


class Deferred:
  """Parameters read on first use: ``Model(params=Deferred(load))`` calls ``load()`` the first
  time ``model.params`` is read and keeps the result. :func:`load_model` defers the weights
  because a step whose records are on disk (``limits.records``) needs the config and the
  tokenizer only: dequantizing SmolLM2's GGUF costs ~1.6 s per step."""

  def __init__(self, load):
    self.load = load


def _get_params(self):
  params = self.__dict__["_params"]
  if isinstance(params, Deferred):
    params = self.__dict__["_params"] = params.load()
  return params


def _set_params(self, value):
  self.__dict__["_params"] = value


Model.params = property(_get_params, _set_params,
                        doc="The stacked parameter pytree; a Deferred loader runs on first use.")


def resolve_model_dir(spec: str | os.PathLike = DEFAULT_MODEL) -> Path:
  """The file or directory a model spec refers to (may download a hub name)."""
  from limits import models

  return models.locate(spec).path


def model_config(spec: str | os.PathLike = DEFAULT_MODEL):
  """The model's config (reads config.json or the GGUF header only, not the weights)."""
  from limits import models

  return models.load_config(spec)


def load_model(spec: str | os.PathLike = DEFAULT_MODEL) -> Model:
  """Loads a model and its tokenizer; every failure is a one-line LimitsError.

  Args:
    spec: see ``limits.models.loading`` (``"tiny"`` by default).
  """
  from limits import models

  loc = models.locate(spec)
  config = models.load_config(loc)
  tok = models.load_tokenizer(loc)
  check(tok.vocab_size <= config.vocab_size,
        f"model {str(spec)!r}: tokenizer has {tok.vocab_size} tokens but the model only "
        f"{config.vocab_size}")

  def weights():
    loaded, params = models.load(loc)
    check(loaded == config, f"model {str(spec)!r}: its weights' config differs from its header "
          "read at load time (was the file replaced during the run?)")
    return params

  return Model(name=str(spec), config=config, params=Deferred(weights), tokenizer=tok,
               path=loc.path)


# --------------------------------------------------------------------------------------------
# Corpus tokens.

_TOKEN_CACHE: dict[tuple, np.ndarray] = {}


def encode_corpus(model: Model, corpus: data_lib.Corpus) -> np.ndarray:
  """The whole corpus tokenized with the model's tokenizer, int32 (memoized per model/corpus
  in the process, and on disk by :func:`_cached_tokens`)."""
  key = (str(model.path), model.name, model.tokenizer.vocab_size, corpus.sha256)
  tokens = _TOKEN_CACHE.get(key)
  if tokens is None:
    tokens = _cached_tokens(model, corpus)
    if len(_TOKEN_CACHE) > 8:
      _TOKEN_CACHE.clear()
    _TOKEN_CACHE[key] = tokens
  return tokens


def _token_file(model: Model, corpus: data_lib.Corpus) -> Path | None:
  """``<token_cache_dir()>/<digest>.npy`` (None when the cache is off): the digest covers the
  tokenizer's files (path, name, size and mtime of each: ``limits.records.key.file_identity``),
  the model spec, the corpus's SHA-256, the code that tokenizes (``key.code_version``:
  limits/models, whose tokenizers these are) and the ``tokenizers`` package's version."""
  import hashlib
  import json
  from importlib import metadata

  from limits.records import key as record_key

  try:
    hf_version = metadata.version("tokenizers")
  except metadata.PackageNotFoundError:
    hf_version = None
  ident = {"model": record_key.file_identity(model.path), "spec": model.name,
           "vocab": int(model.tokenizer.vocab_size), "corpus": corpus.sha256,
           "code": record_key.code_version(), "tokenizers": hf_version}
  digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
  folder = token_cache_dir()
  return None if folder is None else folder / f"{digest}.npy"


TOKEN_CACHE_ENV = "LIMITS_TOKEN_CACHE"


def token_cache_dir() -> Path | None:
  """``$LIMITS_TOKEN_CACHE`` if it names a folder, None if it is ``off`` (or 0, no, false,
  none), else ``$XDG_CACHE_HOME/limits/tokens`` (``~/.cache/...``)."""
  from limits.runs.cache_dirs import user_cache_dir

  return user_cache_dir(TOKEN_CACHE_ENV, "tokens")


def _cached_tokens(model: Model, corpus: data_lib.Corpus) -> np.ndarray:
  """The corpus's tokens from the on-disk cache when an entry for exactly this tokenizer,
  corpus and code exists (every reproduction step is a process of its own and would tokenize
  the whole corpus again: 2 s for SmolLM2), else encoded and written there (atomically; an
  unwritable cache only costs the time). An unreadable or malformed entry is recomputed."""
  path = _token_file(model, corpus)
  if path is not None:
    try:
      tokens = np.load(path, allow_pickle=False)
      if tokens.dtype == np.int32 and tokens.ndim == 1 and tokens.size:
        return tokens
    except (OSError, ValueError, EOFError):  # missing, truncated, not an .npy
      pass
  tokens = np.asarray(model.tokenizer.encode(corpus.text), dtype=np.int32)
  if path is None:
    return tokens
  tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
      np.save(f, tokens, allow_pickle=False)
    os.replace(tmp, path)
  except OSError:  # an unwritable cache only costs the time; no half-written file is left
    with contextlib.suppress(OSError):
      tmp.unlink(missing_ok=True)
  return tokens


def _check_length(model: Model, length) -> int:
  check(isinstance(length, (int, np.integer)) and not isinstance(length, bool) and length >= 1,
        f"window length L={length!r} must be a positive integer")
  check(length <= model.config.n_positions,
        f"window length L={length} exceeds the context of model {model.name!r} "
        f"(n_positions={model.config.n_positions})")
  return int(length)


def corpus_windows(model: Model, length: int, windows: int, *,
                   text: str | os.PathLike | None = None,
                   data_dir: str | os.PathLike | None = None,
                   allow_download: bool | None = None) -> np.ndarray:
  """Consecutive non-overlapping L-token windows from the start of the corpus body (AMBIG-6).

  Args:
    model: from :func:`load_model`; its tokenizer encodes the corpus.
    length: L, at most the model's context ``n_positions``.
    windows: how many windows.
    text: a text file overriding the corpus (``--text``).
    data_dir: overrides ``$LIMITS_DATA_DIR`` (``--data_dir``); neither: the embedded corpus;
      ``"gutenberg"``: the cached Gutenberg download (:func:`limits.data.resolve_corpus`).
    allow_download: whether ``data_dir="gutenberg"`` may download (None: yes unless
      LIMITS_ALLOW_DOWNLOAD=0).

  Returns:
    int32 ``(windows, length)``; window w is tokens ``[w·L, (w+1)·L)`` of the encoded body.
  """
  length = _check_length(model, length)
  check(isinstance(windows, (int, np.integer)) and not isinstance(windows, bool) and windows >= 1,
        f"number of windows {windows!r} must be a positive integer")
  corpus = data_lib.resolve_corpus(text=text, data_dir=data_dir, allow_download=allow_download)
  tokens = encode_corpus(model, corpus)
  check(tokens.size >= length * windows,
        f"corpus {str(corpus.path)!r} has {tokens.size} tokens; {windows} windows of L={length} "
        f"need {length * windows}; use fewer windows or a shorter L")
  return data_lib.chunk(tokens, length, windows)


# --------------------------------------------------------------------------------------------
# Raw attention logits.

def causal_mask(length: int) -> np.ndarray:
  """(L, L) bool, True = visible: query t (0-based) sees keys 0..t."""
  return np.tril(np.ones((length, length), dtype=bool))


def model_logit_rows(model: Model, length: int, windows: int, *, layers=None,
                     text: str | os.PathLike | None = None,
                     data_dir: str | os.PathLike | None = None,
                     allow_download: bool | None = None):
  """Raw q·k attention logits of every (window, layer, head, query), with the causal mask.

  Each row is one query's logits ``l_j = q·k_j`` over the L keys of its window, on the raw
  scale (AMBIG-12: divide by T; the model's own T is √d_head). Masked (future) entries are set
  to 0 and marked False in ``mask``; query t (0-based) has t+1 visible entries, min(t+1, W) in
  a local layer with sliding window W (Gemma 3): the effective length is the visible count.
  The whole (R, L) matrix and mask in memory (4 windows of SmolLM2 at L = 1,024: 5.6 GB): a
  run over many rows reads them one (window, layer) block at a time instead
  (:func:`logit_row_meta` and :func:`iter_logit_blocks`, as the gradient step does).

  Returns:
    rows: float32 ``(R, L)``, R = windows · n_kept_layers · n_head · L, ordered by window, then
      layer, then head, then query.
    mask: bool ``(R, L)``, True = visible.
    meta: :func:`logit_row_meta`.
  """
  tokens = corpus_windows(model, length, windows, text=text, data_dir=data_dir,
                          allow_download=allow_download)
  meta = logit_row_meta(model, tokens, layers)
  kept, l = meta["layers"], int(length)
  rows = np.empty((meta["query"].size, l), dtype=np.float32)
  mask = np.empty((meta["query"].size, l), dtype=bool)
  for start, block, vis in iter_logit_blocks(model, tokens, kept):
    rows[start:start + block.shape[0]] = block
    mask[start:start + block.shape[0]].reshape(-1, l, l)[...] = vis  # every head of the block
  return rows, mask, meta


def logit_row_meta(model: Model, tokens: np.ndarray, layers=None) -> dict:
  """What identifies each row of :func:`model_logit_rows` for the windows ``tokens`` (n, L),
  without the rows: int32 ``(R,)`` arrays ``window``, ``layer``, ``head``, ``query``,
  ``n_visible``, ``attn_window`` (the layer's sliding window W, 0 = global), plus ``tokens``,
  ``layers`` (kept layer indices) and ``native_temperature`` (√d_head). Row r's mask is
  implied: key j is visible iff j ≤ query and (W = 0 or j > query − W)."""
  from limits import models

  c = model.config
  kept = _kept_layers(layers, c.n_layer)
  h, l = c.n_head, tokens.shape[1]
  attn_windows = [int(models.layer_kinds(c)[i] or 0) for i in kept]
  grid = np.meshgrid(np.arange(tokens.shape[0]), np.asarray(kept), np.arange(h), np.arange(l),
                     indexing="ij")
  window_i, layer_i, head_i, query_i = (g.reshape(-1).astype(np.int32) for g in grid)
  attn_window = np.asarray(attn_windows, np.int32)[np.searchsorted(kept, layer_i)]
  n_visible = np.where(attn_window > 0, np.minimum(query_i + 1, attn_window), query_i + 1)
  return {"window": window_i, "layer": layer_i, "head": head_i, "query": query_i,
          "n_visible": n_visible.astype(np.int32), "attn_window": attn_window,
          "tokens": tokens, "layers": tuple(kept),
          "native_temperature": model.native_temperature}


def iter_logit_blocks(model: Model, tokens: np.ndarray, layers=None, *, store=None,
                      zero_masked: bool = True):
  """Yields ``(start, rows, vis)`` per (window, layer), in the row order of
  :func:`model_logit_rows`: ``rows`` float32 ``(H·L, L)`` are that matrix's rows
  ``start : start + H·L`` (masked entries 0), ``vis`` bool ``(L, L)`` the layer's mask (the
  same for every head: causal, and the sliding window in a local layer). One layer's scores
  at a time (``limits.records.iter_layers``; ``store`` as there, None: the environment's).
  ``zero_masked=False``: the layer's scores as the forward left them, masked entries
  included, read-only, without the zeroing copy (the gradient screen masks every entry it
  reads: 37.7 MB a SmolLM2 layer, 3.4 s of its step at paper settings)."""
  from limits import models, numerics, records

  c = model.config
  kept = _kept_layers(layers, c.n_layer)
  h, l = c.n_head, tokens.shape[1]
  per_window = len(kept) * h * l
  vis_of = [np.asarray(numerics.attention_mask(l, int(models.layer_kinds(c)[i] or 0)))
            for i in kept]
  kw = {} if store is None else {"store": store}
  for w in range(tokens.shape[0]):
    for li, (layer, rec) in enumerate(records.iter_layers(model, tokens[w:w + 1], layers=kept,
                                                         fields=("scores",), **kw)):
      assert layer == kept[li]
      # Visible entries copied, masked ones left at 0, in one pass: the same bits as a copy
      # followed by ``block[:, ~vis] = 0`` (a boolean-mask assignment), 2.1× faster on a
      # SmolLM2-shaped layer (``python -m benchmarks.host_ops``, case ``mask``).
      scores = np.asarray(rec.scores[0], dtype=np.float32)  # (H, L, L)
      if zero_masked:
        block = np.zeros((h, l, l), np.float32)
        np.copyto(block, scores, where=vis_of[li])
      else:
        block = scores.view()
        block.flags.writeable = False
      del rec, scores
      yield w * per_window + li * h * l, block.reshape(h * l, l), vis_of[li]


def iter_model_layers(model: Model, length: int, windows: int, *, layers=None,
                      normalizer=None, temperature=None,
                      text: str | os.PathLike | None = None,
                      data_dir: str | os.PathLike | None = None,
                      allow_download: bool | None = None):
  """Yields ``(window, layer, AttnRecord)`` for each corpus window and kept layer, one layer's
  arrays at a time (``limits.models.iter_layers`` on window ``(1, L)``; shapes ``q, k, v
  (1, H, L, d_head)``, ``scores, weights (1, H, L, L)``, ``x (1, L, D)``).

  ``normalizer`` / ``temperature`` as in ``limits.models.forward`` (None = the model's softmax
  at T = √d_head on the raw q·k scale).
  """
  from limits import models

  tokens = corpus_windows(model, length, windows, text=text, data_dir=data_dir,
                          allow_download=allow_download)
  kept = _kept_layers(layers, model.config.n_layer)
  for w in range(tokens.shape[0]):
    for layer, rec in models.iter_layers(model.params, tokens[w:w + 1], model.config,
                                       normalizer=normalizer, temperature=temperature,
                                       layers=kept):
      yield w, layer, rec


def _kept_layers(layers, n_layer: int) -> tuple[int, ...]:
  if layers is None:
    return tuple(range(n_layer))
  if isinstance(layers, (int, np.integer)) and not isinstance(layers, bool):
    layers = (layers,)
  out = set()
  for i in layers:
    check(isinstance(i, (int, np.integer)) and not isinstance(i, bool),
          f"layer index {i!r} must be an integer")
    j = int(i) + n_layer if i < 0 else int(i)
    check(0 <= j < n_layer, f"layer index {i} out of range for n_layer={n_layer}")
    out.add(j)
  check(bool(out), "layers is empty; give at least one layer index")
  return tuple(sorted(out))
