"""SentencePiece BPE tokenizers stored in GGUF files (``tokenizer.ggml.model`` = "llama").

Gemma 3's GGUF stores its SentencePiece vocabulary (262,144 pieces, scores, types) but no merges.
SentencePiece BPE merges, at each step, the adjacent pair whose concatenation is the
highest-priority piece; Gemma's priority is the pieces' order in the file (its scores do not
follow the merge order; transformers' GGUF converter says the same). So the merges are rebuilt
as every split (left, right) of a piece into two pieces, ranked by the piece's index (then
longer left part first), and run by HF ``tokenizers``' BPE with byte fallback (``<0xNN>``
pieces) and spaces written as "▁" (no prefix space: ``add_space_prefix`` false). Control pieces
(``<bos>``, ``<eos>``, ...) are special tokens and user-defined pieces are matched whole, as in
llama.cpp. Whitespace pieces the file spells with real spaces are respelled with "▁".

``encode`` adds no special tokens (no BOS), like every tokenizer in ``limits.models``.
"""

from __future__ import annotations

from limits.errors import LimitsError

_CONTROL, _USER_DEFINED = 3, 4  # gguf TokenType
SPACE = "\u2581"


def _respell(token: str) -> str:
  return SPACE * len(token) if " " in token and not token.strip() else token


def merges_from_order(tokens: list[str]) -> list[tuple[str, str]]:
  """Every split of a piece into two pieces, by the piece's index, longer left part first."""
  vocab = {t: i for i, t in enumerate(tokens)}
  merges = []
  for token in tokens:
    merges.extend((token[:j], token[j:]) for j in range(len(token) - 1, 0, -1)
                  if token[:j] in vocab and token[j:] in vocab)
  return merges


def from_gguf(reader, path):
  """The file's SentencePiece BPE as a ``limits.models.gpt2.tokenizer.Tokenizer``."""
  from tokenizers import AddedToken, decoders, normalizers
  from tokenizers import Tokenizer as HFTokenizer
  from tokenizers.models import BPE

  from limits.models.gpt2.tokenizer import Tokenizer
  from limits.models.gguf_file import field

  raw = field(reader, "tokenizer.ggml.tokens")
  if not raw:
    raise LimitsError(f"{path}: GGUF file lacks tokenizer.ggml.tokens")
  if field(reader, "tokenizer.ggml.merges") is not None:
    raise LimitsError(f"{path}: SentencePiece GGUF with stored merges is not supported (Gemma's "
                      "layout, merges rebuilt from the piece order, only)")
  if field(reader, "tokenizer.ggml.add_space_prefix", False):
    raise LimitsError(f"{path}: tokenizer.ggml.add_space_prefix=true is not supported")
  tokens = [_respell(t) for t in raw]
  types = [int(t) for t in (field(reader, "tokenizer.ggml.token_type") or [])]
  unk_id = field(reader, "tokenizer.ggml.unknown_token_id")
  unk = tokens[int(unk_id)] if unk_id is not None else None
  vocab = {t: i for i, t in enumerate(tokens)}
  tok = HFTokenizer(BPE(vocab=vocab, merges=merges_from_order(tokens), unk_token=unk,
                        fuse_unk=True, byte_fallback=True, dropout=None))
  tok.normalizer = normalizers.Replace(" ", SPACE)
  tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(),
                                   decoders.Fuse()])
  special = [tokens[i] for i, t in enumerate(types) if t == _CONTROL]
  if special:
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
  user = [tokens[i] for i, t in enumerate(types) if t == _USER_DEFINED]
  if user:
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in user])
  return Tokenizer(tok)


__all__ = ["from_gguf", "merges_from_order"]
