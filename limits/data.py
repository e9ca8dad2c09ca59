"""Corpora: resolve, verify, download, split and chunk (AMBIG-6 in ``docs/ambiguities.md``).

The paper uses "consecutive chapters from *War and Peace*"; we use Project Gutenberg eBook
#2600 (Maude translation), body text from Book One "CHAPTER I" to the last line of the Second
Epilogue, cut into consecutive non-overlapping L-token windows from the start of the body.

Where the corpus comes from, in order (:func:`resolve_corpus`):

1. an explicit text file (``--text``): any UTF-8 text, used as is;
2. a data directory (``--data_dir``, else ``$LIMITS_DATA_DIR``) holding ``war_and_peace.txt``;
   a folder the user named must hold it (an error otherwise, never a fall-back);
3. the embedded copy (the default): the project's reference body, shipped xz-compressed in
   ``limits/assets/war_and_peace.txt.xz`` (provenance beside it in ``WAR_AND_PEACE.md``) and
   checked against :data:`REFERENCE_SHA256` after decompression (:func:`embedded_corpus`), so
   the experiments run with zero setup and no network.

Downloading Project Gutenberg #2600 is only an explicit option: ``--data_dir=gutenberg`` (or
``LIMITS_DATA_DIR=gutenberg``; a folder of that name is ``./gutenberg``) reads the user cache
``$LIMITS_CACHE_DIR/war_and_peace.txt`` (default ``~/.cache/limits``), else downloads
``$LIMITS_CORPUS_URL`` (default :data:`GUTENBERG_URL`) into it, announced by one line on
stderr; ``LIMITS_ALLOW_DOWNLOAD=0`` (or ``allow_download=False``) refuses the download. The
Gutenberg header and licence are stripped (:func:`strip_gutenberg`), the body is checked (size
and a known sentence) and cached atomically (temp file + ``os.replace``), so an interrupted
download leaves nothing behind. Gutenberg revises its files, so a downloaded body need not be
the project's reference body: its own sha256 is recorded (:meth:`Corpus.info`) and
:attr:`Corpus.matches_reference` says whether it is the reference (a notice on stderr when it
is not).

Every failure is one :class:`~limits.errors.LimitsError` line saying what was looked for and
the ways to provide the corpus (``--data_dir``, ``LIMITS_DATA_DIR``, ``--text``).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import lzma
import os
import re
import socket
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from limits.errors import LimitsError, check
from limits.runs.results import atomic_write_text

WAR_AND_PEACE = "war_and_peace"
FILENAME = "war_and_peace.txt"
GUTENBERG_URL = "https://www.gutenberg.org/cache/epub/2600/pg2600.txt"
# SHA-256 and size of the project's reference body (#2600, Book One "CHAPTER I" to the end of the
# Second Epilogue, header and licence removed, UTF-8, LF line endings): a corpus that matches is
# the reference exactly (Corpus.matches_reference).
REFERENCE_SHA256 = "b36c8fc4d970c156361e878ca81d8552de8e763c45d0f6a897482860643c6286"
REFERENCE_BYTES = 3_267_485
# Opening of Book One, Chapter I; every translation-faithful copy of #2600 contains it.
KNOWN_SENTENCE = "Well, Prince, so Genoa and Lucca are now just family estates of the"
# Size sanity for the real novel (the body is ~3.27 MB); tests pass a smaller minimum.
MIN_BYTES = 3_000_000
MAX_BYTES = 4_000_000

# The embedded reference body (xz; provenance in WAR_AND_PEACE.md beside it).
EMBEDDED_PATH = Path(__file__).resolve().parent / "assets" / (FILENAME + ".xz")
# The --data_dir / LIMITS_DATA_DIR value that asks for the Gutenberg download (cached).
GUTENBERG = "gutenberg"

ENV_DATA_DIR = "LIMITS_DATA_DIR"
ENV_CACHE_DIR = "LIMITS_CACHE_DIR"
ENV_ALLOW_DOWNLOAD = "LIMITS_ALLOW_DOWNLOAD"
ENV_CORPUS_URL = "LIMITS_CORPUS_URL"


@dataclass(frozen=True)
class Corpus:
  """A resolved corpus: its text, where it came from and its checksum."""
  text: str
  path: Path
  source: str  # "text" | "data_dir" | "embedded" | "cache" | "download"
  sha256: str

  @property
  def matches_reference(self) -> bool:
    """True when the text is byte-identical to the project's reference body of #2600."""
    return self.sha256 == REFERENCE_SHA256

  def info(self) -> dict:
    """A small JSON-able record for results.json."""
    return {"path": str(self.path), "source": self.source, "sha256": self.sha256,
            "bytes": len(self.text.encode("utf-8")), "matches_reference": self.matches_reference}


def cache_dir() -> Path:
  """``$LIMITS_CACHE_DIR`` or ``~/.cache/limits``."""
  env = os.environ.get(ENV_CACHE_DIR)
  return Path(env).expanduser() if env else Path.home() / ".cache" / "limits"


def sha256_bytes(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _download_allowed(allow_download: bool | None) -> bool:
  if allow_download is not None:
    return bool(allow_download)
  return os.environ.get(ENV_ALLOW_DOWNLOAD, "1").strip().lower() not in ("0", "false", "no", "off")


def _read_text_file(path: Path, source: str) -> Corpus:
  try:
    data = path.read_bytes()
  except OSError as e:
    raise LimitsError(f"cannot read corpus file {str(path)!r}: {e.strerror}") from None
  try:
    text = data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise LimitsError(f"corpus file {str(path)!r} is not UTF-8 text (byte {e.start})") from None
  text = text.replace("\r\n", "\n").replace("\r", "\n")
  return Corpus(text=text, path=path, source=source, sha256=sha256_bytes(data))


def resolve_corpus(name: str = WAR_AND_PEACE, *, text: str | os.PathLike | None = None,
                   data_dir: str | os.PathLike | None = None,
                   allow_download: bool | None = None, url: str | None = None,
                   timeout: float = 60.0) -> Corpus:
  """Finds the corpus (see the module docstring for the order) and returns it.

  Args:
    name: ``"war_and_peace"`` (the only named corpus) or a path to a text file.
    text: explicit text file; overrides everything else.
    data_dir: directory holding ``war_and_peace.txt``; overrides ``$LIMITS_DATA_DIR``.
      :data:`GUTENBERG` (``"gutenberg"``) asks for the cached Gutenberg download instead.
      None and no ``$LIMITS_DATA_DIR``: the embedded reference body.
    allow_download: whether the ``gutenberg`` option may download when the cache is empty
      (default: yes unless ``LIMITS_ALLOW_DOWNLOAD=0``). Nothing else ever downloads.
    url: the Gutenberg plain-text URL (default ``$LIMITS_CORPUS_URL``, else
      :data:`GUTENBERG_URL`; tests point it at a local server).
    timeout: network timeout in seconds.
  """
  if text is None and name != WAR_AND_PEACE:
    text = name
  if text is not None:
    path = Path(text).expanduser()
    check(path.is_file(), f"--text={str(text)!r} is not a readable file; give a UTF-8 text file")
    return _read_text_file(path, "text")

  if data_dir is not None or os.environ.get(ENV_DATA_DIR):
    # A folder the user named must hold the corpus: never fall back to the embedded copy.
    d, label = ((data_dir, "--data_dir") if data_dir is not None
                else (os.environ[ENV_DATA_DIR], ENV_DATA_DIR))
    if str(d) == GUTENBERG:
      return _gutenberg_corpus(label, allow_download, url, timeout)
    path = Path(d).expanduser() / FILENAME
    check(path.is_file(), f"{label}={str(d)!r} holds no {FILENAME}; point it at the folder "
          f"holding {FILENAME}, or unset it to use the embedded copy")
    return _read_text_file(path, "data_dir")
  return embedded_corpus()


@functools.lru_cache(maxsize=1)
def embedded_corpus() -> Corpus:
  """The reference body shipped in the package (:data:`EMBEDDED_PATH`), decompressed and
  checked against :data:`REFERENCE_SHA256` (a damaged or replaced copy is refused, one line).
  Decompressed once per process (~0.2 s)."""
  fix = (f"reinstall limits, or give the corpus with --data_dir=FOLDER or {ENV_DATA_DIR}=FOLDER "
         f"(a folder holding {FILENAME}) or --text=FILE")
  try:
    data = lzma.decompress(EMBEDDED_PATH.read_bytes())
  except OSError as e:
    raise LimitsError(f"cannot read the embedded corpus {str(EMBEDDED_PATH)!r}: "
                      f"{e.strerror or e}; {fix}") from None
  except lzma.LZMAError as e:
    raise LimitsError(f"the embedded corpus {str(EMBEDDED_PATH)!r} is not valid xz ({e}); "
                      f"{fix}") from None
  digest = sha256_bytes(data)
  check(digest == REFERENCE_SHA256 and len(data) == REFERENCE_BYTES,
        f"the embedded corpus {str(EMBEDDED_PATH)!r} decompresses to {len(data)} bytes with "
        f"sha256 {digest}, not the reference body ({REFERENCE_BYTES} bytes, {REFERENCE_SHA256}); "
        f"{fix}")
  return Corpus(text=data.decode("utf-8"), path=EMBEDDED_PATH, source="embedded", sha256=digest)


def _gutenberg_corpus(label: str, allow_download: bool | None, url: str | None,
                      timeout: float) -> Corpus:
  """``--data_dir=gutenberg``: the cached download of #2600, else a download into the cache."""
  cached = cache_dir() / FILENAME
  if cached.is_file():
    return _read_text_file(cached, "cache")
  url = url or os.environ.get(ENV_CORPUS_URL) or GUTENBERG_URL
  looked = f"{label}={GUTENBERG} asks for Project Gutenberg #2600, not in {str(cached)!r}"
  fix = (f"leave {label} unset for the embedded copy, or give --data_dir=FOLDER or "
         f"{ENV_DATA_DIR}=FOLDER (a folder holding {FILENAME}) or --text=FILE")
  if not _download_allowed(allow_download):
    raise LimitsError(f"{looked}, and downloads are off ({ENV_ALLOW_DOWNLOAD}=0); {fix}")
  print(f"limits: downloading War and Peace (Project Gutenberg #2600) from {url} into "
        f"{cached} ({ENV_ALLOW_DOWNLOAD}=0 refuses this)", file=sys.stderr, flush=True)
  try:
    path = download_corpus(url=url, dest=cached, timeout=timeout)
  except LimitsError as e:
    reason = " ".join(str(e).split())  # one line whatever the cause said
    raise LimitsError(f"{looked}, and downloading it failed: {reason}; {fix}") from None
  corpus = _read_text_file(path, "download")
  if not corpus.matches_reference:
    print(f"limits: the downloaded body has sha256 {corpus.sha256}, not the project's reference "
          f"{REFERENCE_SHA256} (Gutenberg may have revised its file); results record it",
          file=sys.stderr, flush=True)
  return corpus


def load_text(name: str = WAR_AND_PEACE, **kwargs) -> str:
  """The corpus text (see :func:`resolve_corpus` for the arguments)."""
  return resolve_corpus(name, **kwargs).text


# --------------------------------------------------------------------------------------------
# Gutenberg download and stripping.

_START_RE = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK.*$",
                       re.IGNORECASE | re.MULTILINE)
_END_RE = re.compile(r"^(\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK.*"
                     r"|End of (the )?Project Gutenberg'?s? .*)$", re.IGNORECASE | re.MULTILINE)
_CHAPTER_ONE_RE = re.compile(r"^CHAPTER I\.?[ \t]*$", re.MULTILINE)


def strip_gutenberg(raw: str) -> str:
  """The body of Gutenberg #2600: Book One "CHAPTER I" to the end of the Second Epilogue.

  Drops the BOM, normalizes line endings to LF, cuts the ``*** START/END OF THE PROJECT
  GUTENBERG EBOOK`` header and licence, skips the title and table of contents (which also list
  "CHAPTER I") by anchoring on the novel's opening sentence, and ends with one newline.
  """
  text = raw.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
  start = _START_RE.search(text)
  if start:
    text = text[start.end():]
  end = _END_RE.search(text)
  if end:
    text = text[:end.start()]
  opening = text.find(KNOWN_SENTENCE)
  check(opening >= 0, "downloaded text does not contain the opening of War and Peace "
        f"({KNOWN_SENTENCE[:30]!r}...); is the URL Gutenberg eBook #2600 in plain text?")
  chapters = [m.start() for m in _CHAPTER_ONE_RE.finditer(text, 0, opening)]
  check(bool(chapters), "downloaded text has no 'CHAPTER I' heading before the opening sentence")
  body = text[chapters[-1]:].rstrip()
  check("SECOND EPILOGUE" in body, "downloaded text has no SECOND EPILOGUE; it looks truncated")
  return body + "\n"


def verify_body(body: str, *, sha256: str | None = None, min_bytes: int = MIN_BYTES,
                max_bytes: int = MAX_BYTES) -> str:
  """Checks a prepared body (size, known sentence, optional exact sha256); returns its sha256."""
  data = body.encode("utf-8")
  check(min_bytes <= len(data) <= max_bytes,
        f"prepared corpus is {len(data)} bytes; expected {min_bytes}..{max_bytes}")
  check(KNOWN_SENTENCE in body, f"prepared corpus lacks the sentence {KNOWN_SENTENCE!r}")
  digest = sha256_bytes(data)
  if sha256 is not None:
    check(digest == sha256.lower(),
          f"prepared corpus sha256 {digest} does not match the expected {sha256.lower()}")
  return digest


def fetch(url: str, timeout: float = 60.0) -> bytes:
  """Downloads url; every failure (HTTP error, offline, truncated body) is a LimitsError."""
  try:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
      expected = resp.headers.get("Content-Length")
      data = resp.read()
  except urllib.error.HTTPError as e:
    raise LimitsError(f"download of {url} failed: HTTP {e.code} {e.reason}") from None
  except http.client.IncompleteRead as e:
    raise LimitsError(f"download of {url} truncated: got {len(e.partial)} bytes, "
                      f"{e.expected} missing") from None
  except (urllib.error.URLError, socket.timeout, OSError, http.client.HTTPException) as e:
    reason = getattr(e, "reason", e)
    raise LimitsError(f"download of {url} failed ({reason})") from None
  if expected is not None and expected.isdigit() and len(data) != int(expected):
    raise LimitsError(f"download of {url} truncated: got {len(data)} of {expected} bytes")
  return data


def download_corpus(url: str = GUTENBERG_URL, dest: str | os.PathLike | None = None, *,
                    sha256: str | None = None, min_bytes: int = MIN_BYTES,
                    max_bytes: int = MAX_BYTES, timeout: float = 60.0) -> Path:
  """Downloads Gutenberg #2600, strips it to the body, verifies and caches it atomically.

  ``sha256=None`` accepts any body that passes the size and sentence checks (Gutenberg
  revises its files; :attr:`Corpus.matches_reference` tells whether it is the reference body);
  a given ``sha256`` must match exactly. Nothing is written unless every check passes, and the
  write is temp file + ``os.replace``, so no half-written file is ever left in the cache.
  """
  dest = Path(dest) if dest is not None else cache_dir() / FILENAME
  raw = fetch(url, timeout=timeout)
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise LimitsError(f"download of {url} is not UTF-8 (byte {e.start})") from None
  body = strip_gutenberg(text)
  verify_body(body, sha256=sha256, min_bytes=min_bytes, max_bytes=max_bytes)
  atomic_write_text(dest, body)
  return dest


# --------------------------------------------------------------------------------------------
# Splitting and chunking.

def split_heldout(text: str, fraction: float = 0.05) -> tuple[str, str]:
  """(train, heldout): the held-out part is the last ``fraction`` of the characters, starting
  at the first paragraph break at or after the cut (so no paragraph is split)."""
  check(0.0 < fraction < 1.0, f"held-out fraction {fraction} must be in (0, 1)")
  cut = int(len(text) * (1.0 - fraction))
  para = text.find("\n\n", cut)
  if para >= 0:
    cut = para + 2
  check(0 < cut < len(text), f"text of {len(text)} characters is too short to split")
  return text[:cut], text[cut:]


def chunk(tokens: Sequence[int] | np.ndarray, length: int, windows: int) -> np.ndarray:
  """The first ``windows`` consecutive non-overlapping ``length``-token windows (AMBIG-6).

  Returns int32 ``(windows, length)``; window w is ``tokens[w*length:(w+1)*length]``.
  """
  check(isinstance(length, (int, np.integer)) and length >= 1,
        f"window length {length!r} must be a positive integer")
  check(isinstance(windows, (int, np.integer)) and windows >= 1,
        f"number of windows {windows!r} must be a positive integer")
  tokens = np.asarray(tokens, dtype=np.int64)
  need = int(length) * int(windows)
  check(tokens.size >= need, f"corpus has {tokens.size} tokens; {windows} windows of {length} "
        f"need {need}; use fewer windows or a shorter length")
  return tokens[:need].reshape(int(windows), int(length)).astype(np.int32)
