"""GGUF files (llama.cpp's format; data only, cannot run code): config, weights, tokenizer.

Read with the ``gguf`` package and dequantized to float32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
the K-quants and every other type ``gguf.quants.dequantize`` supports). Tensor names are
mapped to HF Llama names. llama.cpp's converter permutes the rows of the Q and K projections
for its own RoPE layout (``convert_hf_to_gguf.py``, ``LlamaModel.permute``); :func:`unpermute`
undoes it so the weights match HF's rotate-half convention.

The tokenizer is rebuilt from the file's vocabulary and merges with HF ``tokenizers``:
byte-level BPE with the file's pre-tokenizer (``tokenizer.ggml.pre``: GPT-2's regex, with
digits split one by one for ``smollm``-style vocabularies), control tokens as special tokens.

A model split by ``gguf-split`` (``split.count`` > 1) is read from its first file
``<prefix>-00001-of-<count>.gguf``; the other splits are the files of the same prefix beside
it, each refused if it resolves outside that folder (``limits.models.files.inside``).
"""

from __future__ import annotations

import functools
import pathlib
import re
from typing import Any

import numpy as np

from limits.errors import LimitsError, first_line

ARCHITECTURES = ("llama", "gemma3")
FAMILY_OF_ARCHITECTURE = {"llama": "llama", "gemma3": "gemma3"}
# tokenizer.ggml.pre values whose pre-tokenizer splits digits individually before GPT-2's regex.
_DIGIT_SPLIT_PRE = ("smollm", "llama-bpe", "llama3", "deepseek-llm", "falcon3")
_TOKEN_CONTROL = 3  # gguf TokenType.CONTROL
# llama.* header keys read as integers and as numbers (checked before use: one line each).
_INTEGER_KEYS = ("block_count", "embedding_length", "feed_forward_length", "context_length",
                 "attention.head_count", "attention.head_count_kv", "attention.key_length",
                 "rope.dimension_count", "vocab_size")
_NUMBER_KEYS = ("attention.layer_norm_rms_epsilon", "rope.freq_base")
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

# GGUF tensor names (after ``blk.<i>.``) -> HF Llama names (after ``layers.<i>.``).
# The names every llama.cpp decoder block shares (Llama, Gemma 3): attention and the gated MLP.
SHARED_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_LAYER_NAMES = {**SHARED_LAYER_NAMES, "ffn_norm.weight": "post_attention_layernorm.weight"}
_GLOBAL_NAMES = {"token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight",
                 "output.weight": "lm_head.weight"}


def open_reader(path) -> Any:
  """A ``gguf.GGUFReader`` over ``path``; one line for a missing, truncated or corrupt file.

  The reader parses every metadata value up front, element by element (SmolLM2's 49,152-token
  vocabulary and its merges take seconds), so one parse per file is kept for the process:
  locating, loading and the tokenizer share it. The key includes the file's size and
  modification time, so a file replaced on disk is read again.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise LimitsError(f"{path}: GGUF file not found")
  st = path.stat()
  if st.st_size == 0:
    raise LimitsError(f"{path}: GGUF file is empty (0 bytes)")
  return _parsed(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def reader_class():
  """``gguf.GGUFReader`` with arrays of numbers or strings in the metadata read whole.

  The package's reader takes every array element by element through ``numpy.memmap`` slices
  (two per string): 4.2 s for SmolLM2's vocabulary and merges, paid by every process that
  opens the file (each reproduction step). Here an array of numbers is one view and an array
  of strings is walked with ``struct`` over a plain view of the same bytes; the fields are the
  package's own ``ReaderField`` with the same ``types`` and the same ``contents()`` (an array
  of numbers is one part instead of one part per element). Anything else (nested arrays, a
  byte-swapped file) goes through the package's code. It overrides the reader's private
  ``_get_field_parts`` of the pinned gguf 0.19.0 (requirements.txt); tests/test_models_loading.py
  compares every field and tensor of both readers, so a gguf upgrade that changes it fails
  there.
  """
  import struct

  from gguf import GGUFReader, GGUFValueType

  class Reader(GGUFReader):
    def _get_field_parts(self, orig_offs, raw_type):
      if raw_type != GGUFValueType.ARRAY or self.byte_order != "I":
        return super()._get_field_parts(orig_offs, raw_type)
      raw_itype = self._get(orig_offs, np.uint32)
      alen = self._get(orig_offs + 4, np.uint64)
      itype, n, offs = int(raw_itype[0]), int(alen[0]), orig_offs + 12
      nptype = self.gguf_scalar_to_np.get(itype)
      if n == 0 or (nptype is None and itype != GGUFValueType.STRING):
        return super()._get_field_parts(orig_offs, raw_type)
      types = [GGUFValueType.ARRAY, GGUFValueType(itype)]
      if nptype is not None:
        values = self._get(offs, nptype, n)
        return 12 + int(values.nbytes), [raw_itype, alen, values], [2], types
      raw = np.asarray(self.data)  # a plain view: slicing skips memmap's per-slice hooks
      view = memoryview(raw)
      parts, idxs = [raw_itype, alen], []
      u64 = np.dtype(np.uint64).newbyteorder("<")
      for _ in range(n):
        (slen,) = struct.unpack_from("<Q", view, offs)
        parts.append(raw[offs:offs + 8].view(u64))
        parts.append(raw[offs + 8:offs + 8 + slen])
        idxs.append(len(parts) - 1)
        offs += 8 + slen
      if offs > raw.size:
        raise ValueError(f"string array at offset {orig_offs} runs past the end of the file")
      return offs - orig_offs, parts, idxs, types

  return Reader


@functools.lru_cache(maxsize=2)
def _parsed(path: str, size: int, mtime_ns: int) -> Any:
  """The parsed file (``size`` and ``mtime_ns`` only key the cache); errors are not cached."""
  del size, mtime_ns
  try:
    return reader_class()(path)
  except Exception as e:  # noqa: BLE001 - the reader raises ValueError, KeyError, IndexError...
    raise LimitsError(f"{path}: not a readable GGUF file, truncated or corrupt "
                      f"({first_line(e)})") from None


def field(reader, key: str, default=None):
  """A metadata value (None/default if absent); one line if unreadable."""
  field = reader.fields.get(key)
  if field is None:
    return default
  try:
    return field.contents()
  except Exception as e:  # noqa: BLE001
    raise LimitsError(f"GGUF metadata {key} is unreadable ({first_line(e)})") from None


def split_readers(reader, path) -> list:
  """The readers of every split of the model whose first file ``path`` is (``[reader]`` for
  an unsplit file); each split must lie inside ``path``'s folder (one line otherwise)."""
  from limits.models import files

  count = field(reader, "split.count")
  if count is None or count == 1:
    return [reader]
  path = pathlib.Path(path)
  match = _SPLIT_NAME.match(path.name)
  if not isinstance(count, int) or count < 1 or not match or int(match["count"]) != count:
    raise LimitsError(f"{path}: GGUF split.count={count!r} does not match the file name; a split "
                      f"model is named <prefix>-00001-of-<count, 5 digits>.gguf")
  readers = []
  for number in range(1, count + 1):
    split = path.parent / f"{match['prefix']}-{number:05d}-of-{count:05d}.gguf"
    files.inside(split, path.parent, "GGUF split file")
    readers.append(reader if split.name == path.name else open_reader(split))
  return readers


def architecture(reader, path) -> str:
  """``general.architecture``; one line listing the supported ones for anything else."""
  arch = field(reader, "general.architecture")
  if arch is None and field(reader, "split.no", 0) not in (0, None):
    raise LimitsError(f"{path}: a later split of a split GGUF model; give its first file "
                      "(<prefix>-00001-of-<count>.gguf)")
  if arch not in ARCHITECTURES:
    raise LimitsError(f"{path}: GGUF architecture {arch!r} is not supported; supported: "
                      f"{', '.join(ARCHITECTURES)}")
  return arch


def llama_config(reader, path):
  """The Llama ``Config`` of a GGUF header (``llama.*`` keys)."""
  from limits.models.checks import check_types, is_positive_int
  from limits.models.llama.config import Config

  get = lambda k, d=None: field(reader, f"llama.{k}", d)
  need = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
          "context_length")
  missing = [k for k in need if get(k) is None]
  if missing:
    raise LimitsError(f"{path}: GGUF header lacks llama.{missing[0]}")
  check_types({f"llama.{k}": get(k) for k in _INTEGER_KEYS + _NUMBER_KEYS}, f"{path}: GGUF",
              integers=_INTEGER_KEYS, numbers=_NUMBER_KEYS, prefix="llama.")
  n_head = get("attention.head_count")
  d = get("embedding_length")
  for key in ("attention.head_count", "embedding_length", "attention.key_length"):
    if get(key) is not None and not is_positive_int(get(key)):
      raise LimitsError(f"{path}: GGUF llama.{key}={get(key)} must be a positive integer")
  if get("attention.key_length") is None and d % n_head:
    raise LimitsError(f"{path}: GGUF llama.embedding_length={d} is not divisible by "
                      f"llama.attention.head_count={n_head} (and no llama.attention.key_length "
                      "gives the head width)")
  head_dim = get("attention.key_length", d // n_head)
  rot = get("rope.dimension_count")
  if rot is not None and rot != head_dim:
    raise LimitsError(f"{path}: partial rotary (llama.rope.dimension_count={rot}, head "
                      f"dim {head_dim}) is not supported")
  scaling = get("rope.scaling.type")
  if scaling not in (None, "none"):
    raise LimitsError(f"{path}: RoPE scaling {scaling!r} is not supported (plain RoPE only)")
  tokens = field(reader, "tokenizer.ggml.tokens")
  vocab = get("vocab_size")
  if vocab is None and isinstance(tokens, list):
    vocab = len(tokens)
  if vocab is None:
    raise LimitsError(f"{path}: GGUF header gives no vocabulary size")
  names = {t.name for r in split_readers(reader, path) for t in r.tensors}
  try:
    return Config(n_layer=get("block_count"), n_head=n_head,
                  n_kv_head=get("attention.head_count_kv", n_head), n_embd=d,
                  head_dim=head_dim if head_dim != d // n_head else None,
                  d_mlp=get("feed_forward_length"), n_positions=get("context_length"),
                  vocab_size=vocab,
                  rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
                  rope_theta=float(get("rope.freq_base", 10000.0)),
                  tie_word_embeddings="output.weight" not in names)
  except LimitsError as e:
    raise LimitsError(f"{path}: GGUF header gives {e}") from None


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K row permutation: ``(n_head·d_head, D)`` rows back to HF order.

  llama.cpp stores each head's rows as interleaved pairs (x0, x_{d/2}, x1, ...); HF keeps the
  two halves contiguous (rotate-half). Inverse of ``w.reshape(n, 2, d/2, D).swapaxes(1, 2)``.
  """
  rows = w.shape[0]
  return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


# Rows per call of a quantised type's own row decoder (:func:`_dequantize_blocks`): about this
# many bytes of blocks at once. gguf.quants decodes 16 rows per call (SmolLM2's 272 tensors:
# 12,792 calls, 1.35 CPU s; in chunks of 4 MB 0.73 s; the same float32 bits,
# tests/test_gguf_dequantize.py).
DEQUANT_CHUNK_BYTES = 1 << 22


def _dequantize_blocks(data, qtype) -> np.ndarray | None:
  """``gguf.quants.dequantize`` of a block-quantised tensor, in chunks of rows of
  :data:`DEQUANT_CHUNK_BYTES` instead of its 16 rows per call: each row is decoded by the type's
  own ``dequantize_rows`` (elementwise per block), so the bits are the same. None for a type
  it has no row decoder for (float types; the caller uses ``gguf.quants.dequantize``)."""
  from gguf import quants

  cls = getattr(quants, "_type_traits", {}).get(qtype)
  if cls is None or not hasattr(cls, "dequantize_rows") or not hasattr(cls, "init_grid"):
    return None
  cls.init_grid()
  data = np.asarray(data)  # a plain view of the memmap: no memmap bookkeeping per slice
  rows = data.reshape(-1, data.shape[-1])
  shape = quants.quant_shape_from_byte_shape(data.shape, qtype)
  out = np.empty((rows.shape[0], shape[-1]), np.float32)
  step = max(1, DEQUANT_CHUNK_BYTES // max(1, rows.shape[1]))
  for i in range(0, rows.shape[0], step):
    out[i:i + step] = cls.dequantize_rows(rows[i:i + step])
  return out.reshape(shape)


def dequantize(tensor, path) -> np.ndarray:
  """One tensor as float32 (every type ``gguf.quants`` supports); one line if it cannot."""
  from gguf import quants

  try:
    out = _dequantize_blocks(tensor.data, tensor.tensor_type)
    if out is None:
      out = quants.dequantize(tensor.data, tensor.tensor_type)
  except NotImplementedError:
    raise LimitsError(f"{path}: tensor {tensor.name} uses quantization "
                      f"{tensor.tensor_type.name}, which the gguf package cannot dequantize"
                      ) from None
  except Exception as e:  # noqa: BLE001
    raise LimitsError(f"{path}: tensor {tensor.name} is corrupt or truncated "
                      f"({first_line(e)})") from None
  return np.asarray(out, dtype=np.float32)


def read_llama_tensors(reader, config, path) -> dict[str, np.ndarray]:
  """``{HF Llama name without prefix: float32 array (out, in)}`` of every tensor."""
  flat = {}
  for tensor in reader.tensors:
    name = tensor.name
    if name in _GLOBAL_NAMES:
      hf = _GLOBAL_NAMES[name]
    elif name.startswith("blk.") and name.count(".") >= 2:
      _, index, rest = name.split(".", 2)
      if rest not in _LAYER_NAMES:
        if rest.startswith("rope_freqs"):
          raise LimitsError(f"{path}: tensor {name} (RoPE frequency factors) is not supported")
        raise LimitsError(f"{path}: unexpected tensor {name} for a Llama model")
      hf = f"layers.{index}.{_LAYER_NAMES[rest]}"
    else:
      raise LimitsError(f"{path}: unexpected tensor {name} for a Llama model")
    w = dequantize(tensor, path)
    heads = (config.n_head if rest_is(name, "attn_q.weight")
             else config.n_kv_head if rest_is(name, "attn_k.weight") else None)
    if heads is not None and w.ndim == 2 and w.shape[0] % (2 * heads) == 0:
      w = unpermute(w, heads)  # other shapes: check_tensors names the mismatch
    flat[hf] = w
  return flat


def rest_is(name: str, suffix: str) -> bool:
  return name.startswith("blk.") and name.endswith("." + suffix)


def config(reader, path):
  """The Llama-family config of a GGUF header (the Gemma 3 family's is
  :func:`limits.models.gemma3.gguf.config`; :mod:`limits.models.loading` picks by architecture)."""
  return llama_config(reader, path)


def load(path, reader=None, *, dtype="float32"):
  """``(config, flat tensors)`` of a Llama-family GGUF; every problem one LimitsError naming the
  file (Gemma 3: :func:`limits.models.gemma3.gguf.load`)."""
  from limits.models import files
  from limits.models.checks import check_layer_count
  from limits.models.llama import model as llama_model

  reader = open_reader(path) if reader is None else reader
  config = llama_config(reader, path)
  flat = {}
  for split in split_readers(reader, path):
    flat.update(read_llama_tensors(split, config, path))
  check_layer_count(config.n_layer, len(flat), path)
  files.check_tensors(flat, llama_model.checkpoint_shapes(config), path, "Llama")
  return config, files.cast(flat, dtype)


def tokenizer(path):
  """The file's byte-level BPE as a ``limits.models.gpt2.tokenizer.Tokenizer`` (SentencePiece
  files: :func:`limits.models.sentencepiece.from_gguf`; :mod:`limits.models.loading` picks)."""
  from tokenizers import Tokenizer as HFTokenizer
  from tokenizers import AddedToken, decoders, pre_tokenizers, processors
  from tokenizers.models import BPE

  from limits.models.gpt2.tokenizer import Tokenizer

  reader = open_reader(path)
  model = field(reader, "tokenizer.ggml.model")
  if model != "gpt2":
    raise LimitsError(f"{path}: GGUF tokenizer model {model!r} is not supported (byte-level "
                      "BPE 'gpt2', or SentencePiece 'llama')")
  tokens = field(reader, "tokenizer.ggml.tokens")
  merges = field(reader, "tokenizer.ggml.merges")
  if not tokens or merges is None:
    raise LimitsError(f"{path}: GGUF file lacks tokenizer.ggml.tokens or tokenizer.ggml.merges")
  types = field(reader, "tokenizer.ggml.token_type") or []
  vocab = {tok: i for i, tok in enumerate(tokens)}
  pairs = [tuple(m.split(" ", 1)) for m in merges]
  tok = HFTokenizer(BPE(vocab=vocab, merges=pairs, dropout=None, continuing_subword_prefix="",
                        end_of_word_suffix="", fuse_unk=False))
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  pre = field(reader, "tokenizer.ggml.pre")
  if pre in _DIGIT_SPLIT_PRE:
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), byte_level])
  else:
    tok.pre_tokenizer = byte_level
  tok.decoder = decoders.ByteLevel()
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  special = [tokens[i] for i, t in enumerate(types) if int(t) == _TOKEN_CONTROL]
  if special:
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
  return Tokenizer(tok)
