"""Tests for limits.data: corpus resolution, Gutenberg download/strip/verify, split, chunk.

The download path runs against a local HTTP server on 127.0.0.1 (http.server in a thread)
serving a Gutenberg-shaped file that the test builds itself, so the expected body is known
independently of the code under test. No test touches the network. The embedded corpus (the
default) is checked against the checksum written out here from the shared data README, not the
constant in limits.data, and so are stripping and the download path given the reference body
wrapped as Gutenberg serves it (``reference_corpus``: the embedded body as a file). A damaged
embedded copy is refused.
"""

import functools
import hashlib
import http.server
import lzma
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from limits import data
from limits.errors import LimitsError

OPENING = ("CHAPTER I\n\n“Well, Prince, so Genoa and Lucca are now just family estates of the\n"
           "Buonapartes. But I warn you, if you don’t tell me that this means war,\n")
ENDING = ("SECOND EPILOGUE\n\n\n\n\n\nCHAPTER I\n\nHistory is the life of nations and of "
          "humanity.\n\nwe are not\nconscious.\n")
HEADER = ("\ufeffThe Project Gutenberg eBook of War and Peace\r\n\r\nTitle: War and Peace\r\n"
          "\r\n*** START OF THE PROJECT GUTENBERG EBOOK WAR AND PEACE ***\r\nWAR AND PEACE\r\n"
          "\r\nBy Leo Tolstoy/Tolstoi\r\n\r\n Contents\r\n\r\n BOOK ONE: 1805\r\n\r\n"
          "CHAPTER I\r\n\r\nCHAPTER II\r\n\r\n\r\n\r\nBOOK ONE: 1805\r\n\r\n\r\n\r\n")
FOOTER = ("\r\n\r\n\r\n\r\n*** END OF THE PROJECT GUTENBERG EBOOK WAR AND PEACE ***\r\n\r\n"
          "Updated editions will replace the previous one.\r\n(licence text)\r\n")


def make_body(filler_bytes: int) -> str:
  """A body shaped like the prepared corpus: opening, filler paragraphs, Second Epilogue."""
  para = "It was in July, 1805, and the speaker was Anna Pávlovna Schérer.\n\n"
  n = max(filler_bytes // len(para.encode()), 1)
  return OPENING + "\n" + para * n + ENDING


def gutenberg_file(body: str) -> bytes:
  """The body wrapped as Gutenberg serves it: BOM, header, table of contents, CRLF, licence."""
  return (HEADER + body.rstrip("\n").replace("\n", "\r\n") + FOOTER).encode("utf-8")


BIG_BODY = make_body(3_100_000)  # passes the real size check (3.0..4.0 MB)
SMALL_BODY = make_body(2_000)


class _Server:
  """A tiny HTTP server on 127.0.0.1 with per-path canned responses; counts requests."""

  def __init__(self, routes):
    self.routes = routes
    self.requests = 0
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):  # noqa: N802 - http.server API
        outer.requests += 1
        route = outer.routes.get(self.path)
        if route is None:
          self.send_error(404, "Not Found")
          return
        body, declared = route
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(declared))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

      def log_message(self, *args):
        pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self.thread.start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


@pytest.fixture
def server():
  big, small = gutenberg_file(BIG_BODY), gutenberg_file(SMALL_BODY)
  srv = _Server({
      "/pg2600.txt": (big, len(big)),
      "/small.txt": (small, len(small)),
      # Content-Length promises 1000 bytes more than are sent, then the connection closes.
      "/truncated.txt": (small[:len(small) // 2], len(small)),
      "/not_wp.txt": (b"Just some other book.\n" * 100, 2200),
  })
  yield srv
  srv.close()


@pytest.fixture
def env(tmp_path, monkeypatch):
  """Isolated environment: its own empty cache dir, no data dir, downloads at their default (on)
  from a dead local URL unless the test names its server (so none reaches Gutenberg). The
  download is asked for with ``data_dir=GUTENBERG`` (``--data_dir=gutenberg``)."""
  cache = tmp_path / "cache"
  monkeypatch.setenv(data.ENV_CACHE_DIR, str(cache))
  monkeypatch.delenv(data.ENV_DATA_DIR, raising=False)
  monkeypatch.delenv(data.ENV_ALLOW_DOWNLOAD, raising=False)
  monkeypatch.setenv(data.ENV_CORPUS_URL, "http://127.0.0.1:9/no-test-reaches-the-internet")
  return cache


def _files(path: Path):
  return sorted(p.name for p in path.rglob("*")) if path.exists() else []


def _one_line(err) -> str:
  msg = str(err.value)
  assert "\n" not in msg, msg
  return msg


# ---------------------------------------------------------------------------------------------
# Stripping and verification.

def test_strip_gutenberg_recovers_the_body_exactly():
  # The expected body is the one the test built, not an output of the code under test.
  assert data.strip_gutenberg(gutenberg_file(SMALL_BODY).decode("utf-8")) == SMALL_BODY


def test_strip_gutenberg_skips_table_of_contents_chapter_headings():
  # The header's contents list has its own "CHAPTER I"; the body must start at the one before
  # the opening sentence, so nothing of the contents survives.
  out = data.strip_gutenberg(gutenberg_file(SMALL_BODY).decode("utf-8"))
  assert out.startswith("CHAPTER I\n\n“Well, Prince")
  assert "Contents" not in out and "START OF" not in out and "END OF" not in out
  assert "\r" not in out and "\ufeff" not in out


def test_strip_gutenberg_rejects_other_books():
  with pytest.raises(LimitsError) as e:
    data.strip_gutenberg("*** START OF THE PROJECT GUTENBERG EBOOK X ***\nCHAPTER I\nHello\n")
  assert "#2600" in _one_line(e)


def test_verify_body_checks_size_sentence_and_sha():
  digest = hashlib.sha256(SMALL_BODY.encode("utf-8")).hexdigest()  # independent hashlib call
  assert data.verify_body(SMALL_BODY, min_bytes=100) == digest
  assert data.verify_body(SMALL_BODY, sha256=digest.upper(), min_bytes=100) == digest
  with pytest.raises(LimitsError, match="bytes; expected"):
    data.verify_body(SMALL_BODY)  # the real-size check: far too small for the novel
  with pytest.raises(LimitsError, match="does not match"):
    data.verify_body(SMALL_BODY, sha256="0" * 64, min_bytes=100)
  with pytest.raises(LimitsError, match="lacks the sentence"):
    data.verify_body("x" * 500, min_bytes=100)


# From the shared data README (sha256 and size of the prepared body), written out here so the
# corpus checks do not rely on the constants of limits.data.
REFERENCE = ("b36c8fc4d970c156361e878ca81d8552de8e763c45d0f6a897482860643c6286", 3_267_485)


def test_strip_of_wrapped_reference_reproduces_reference_sha(reference_corpus):
  raw = reference_corpus.read_bytes()
  assert (hashlib.sha256(raw).hexdigest(), len(raw)) == REFERENCE
  out = data.strip_gutenberg(gutenberg_file(raw.decode("utf-8")).decode("utf-8"))
  assert data.verify_body(out) == REFERENCE[0]


# ---------------------------------------------------------------------------------------------
# Download against a local server.

GUT = data.GUTENBERG  # --data_dir=gutenberg: the (cached) download, only when asked for


def test_download_strips_verifies_and_caches(server, env, capsys):
  corpus = data.resolve_corpus(data_dir=GUT, url=server.url + "/pg2600.txt")  # downloads on
  assert corpus.source == "download"
  assert corpus.text == BIG_BODY
  assert (env / data.FILENAME).read_text(encoding="utf-8") == BIG_BODY
  assert corpus.sha256 == hashlib.sha256(BIG_BODY.encode("utf-8")).hexdigest()
  assert not corpus.matches_reference  # a synthetic body is not the reference text
  assert corpus.info()["sha256"] == corpus.sha256 and not corpus.info()["matches_reference"]
  assert _files(env) == [data.FILENAME]  # no temp file left behind
  # One line saying it downloads and where it stores it, one saying the body is not the
  # reference one (with its sha256).
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 2, err
  assert "downloading" in err[0] and server.url in err[0] and str(env / data.FILENAME) in err[0]
  assert corpus.sha256 in err[1] and "reference" in err[1]
  # Second call is served from the cache: no new request, even with the server gone.
  n = server.requests
  server.close()
  again = data.resolve_corpus(data_dir=GUT, url=server.url + "/pg2600.txt")
  assert again.source == "cache" and again.text == BIG_BODY and server.requests == n
  assert capsys.readouterr().err == ""


def test_download_url_and_gutenberg_from_environment(server, env, monkeypatch):
  monkeypatch.setenv(data.ENV_CORPUS_URL, server.url + "/pg2600.txt")
  assert data.resolve_corpus().source == "embedded" and server.requests == 0  # not asked for
  monkeypatch.setenv(data.ENV_DATA_DIR, GUT)
  assert data.resolve_corpus().text == BIG_BODY
  assert server.requests == 1


@pytest.mark.parametrize("how", ["env", "argument"])
def test_download_off_is_one_line_with_the_three_ways(server, env, monkeypatch, how):
  monkeypatch.setenv(data.ENV_CORPUS_URL, server.url + "/pg2600.txt")
  if how == "env":
    monkeypatch.setenv(data.ENV_ALLOW_DOWNLOAD, "0")
  with pytest.raises(LimitsError) as e:
    data.resolve_corpus(data_dir=GUT, allow_download=False if how == "argument" else None)
  msg = _one_line(e)
  assert server.requests == 0 and _files(env) == []
  assert str(env / data.FILENAME) in msg and "downloads are off" in msg  # what was looked for
  assert "--data_dir=gutenberg" in msg  # what asked for it
  for way in ("--data_dir=FOLDER", "LIMITS_DATA_DIR=FOLDER", "--text=FILE"):
    assert way in msg


def test_download_of_the_reference_gives_the_reference_body(reference_corpus, env, capsys):
  # The reference body wrapped as Gutenberg serves it, downloaded and stripped: byte-identical.
  raw = reference_corpus.read_bytes()
  page = gutenberg_file(raw.decode("utf-8"))
  srv = _Server({"/pg2600.txt": (page, len(page))})
  try:
    corpus = data.resolve_corpus(data_dir=GUT, url=srv.url + "/pg2600.txt")
  finally:
    srv.close()
  assert corpus.source == "download" and corpus.matches_reference
  assert (env / data.FILENAME).read_bytes() == raw
  assert corpus.sha256 == REFERENCE[0]
  assert len(capsys.readouterr().err.splitlines()) == 1  # no "not the reference" notice


@pytest.mark.parametrize("path, pattern", [
    ("/missing.txt", "HTTP 404"),
    ("/truncated.txt", "truncated"),
    ("/not_wp.txt", "opening of War and Peace"),
])
def test_download_failures_leave_cache_empty(server, env, path, pattern):
  with pytest.raises(LimitsError, match=pattern) as e:
    data.download_corpus(server.url + path, env / data.FILENAME, min_bytes=100)
  _one_line(e)
  assert _files(env) == []


def test_download_wrong_checksum_leaves_cache_empty(server, env):
  with pytest.raises(LimitsError, match="does not match") as e:
    data.download_corpus(server.url + "/small.txt", env / data.FILENAME, sha256="ab" * 32,
                         min_bytes=100)
  _one_line(e)
  assert _files(env) == []


def test_download_too_small_for_the_novel_is_refused(server, env):
  # Default size check (3..4 MB) refuses a plausible but far too short body.
  with pytest.raises(LimitsError, match="bytes; expected") as e:
    data.resolve_corpus(data_dir=GUT, url=server.url + "/small.txt")
  _one_line(e)
  assert _files(env) == []


def test_download_interrupted_write_leaves_nothing(server, env, monkeypatch):
  # Simulate Ctrl-C in the middle of the cache write (after the temp file is created).
  def interrupted(fd):
    raise KeyboardInterrupt

  monkeypatch.setattr(os, "fsync", interrupted)
  with pytest.raises(KeyboardInterrupt):
    data.download_corpus(server.url + "/small.txt", env / data.FILENAME, min_bytes=100)
  assert _files(env) == []


def test_server_down_error_is_one_line(server, env):
  url = server.url + "/pg2600.txt"
  server.close()  # nothing listens on its port now: connection refused, like being offline
  with pytest.raises(LimitsError) as e:
    data.resolve_corpus(data_dir=GUT, url=url, timeout=5)
  msg = _one_line(e)
  assert str(env / data.FILENAME) in msg  # what was looked for
  assert "failed" in msg and url in msg and "refused" in msg.lower()  # that and why
  for way in ("--data_dir=FOLDER", "LIMITS_DATA_DIR=FOLDER", "--text=FILE"):
    assert way in msg
  assert _files(env) == []


# ---------------------------------------------------------------------------------------------
# Resolution order.

def test_resolution_order(tmp_path, env, monkeypatch, server):
  texts = {}
  for name in ("explicit", "flag_dir", "env_dir"):
    d = tmp_path / name
    d.mkdir()
    texts[name] = f"{name} corpus\n"
    (d / (data.FILENAME if name != "explicit" else "book.txt")).write_text(texts[name])
  env.mkdir(parents=True)
  (env / data.FILENAME).write_text("cached corpus\n")
  monkeypatch.setenv(data.ENV_CORPUS_URL, server.url + "/pg2600.txt")
  monkeypatch.setenv(data.ENV_DATA_DIR, str(tmp_path / "env_dir"))
  assert data.load_text(text=tmp_path / "explicit" / "book.txt") == texts["explicit"]
  assert data.load_text(tmp_path / "explicit" / "book.txt") == texts["explicit"]
  assert data.load_text(data_dir=tmp_path / "flag_dir") == texts["flag_dir"]
  assert data.resolve_corpus().source == "data_dir"
  assert data.load_text() == texts["env_dir"]
  monkeypatch.delenv(data.ENV_DATA_DIR)
  # Without a data dir: the embedded copy, never the cache or the network, downloads on or off.
  for allow in (None, True, False):
    corpus = data.resolve_corpus(allow_download=allow)
    assert corpus.source == "embedded" and corpus.path == data.EMBEDDED_PATH
  # --data_dir=gutenberg: the cache while it is there, else the download.
  assert data.resolve_corpus(data_dir=GUT).source == "cache"
  assert data.load_text(data_dir=GUT, allow_download=False) == "cached corpus\n"
  assert server.requests == 0
  (env / data.FILENAME).unlink()
  assert data.resolve_corpus(data_dir=GUT).source == "download" and server.requests == 1


def test_named_data_dir_without_corpus_never_falls_back(tmp_path, env, monkeypatch, server):
  # A folder the user named must hold the corpus: no silent switch to the embedded copy, the
  # cache or a download.
  env.mkdir(parents=True)
  (env / data.FILENAME).write_text("cached corpus\n")
  monkeypatch.setenv(data.ENV_CORPUS_URL, server.url + "/pg2600.txt")
  with pytest.raises(LimitsError) as e:
    data.resolve_corpus(data_dir=tmp_path / "empty")
  assert str(tmp_path / "empty") in _one_line(e) and data.FILENAME in str(e.value)
  monkeypatch.setenv(data.ENV_DATA_DIR, str(tmp_path / "nowhere"))
  with pytest.raises(LimitsError, match="LIMITS_DATA_DIR") as e:
    data.resolve_corpus()
  assert str(tmp_path / "nowhere") in _one_line(e)
  assert server.requests == 0


def test_a_folder_named_gutenberg_is_a_folder(tmp_path, env, monkeypatch, server):
  # Only the bare word asks for the download; ./gutenberg (or an absolute path) is a folder.
  monkeypatch.setenv(data.ENV_CORPUS_URL, server.url + "/pg2600.txt")
  monkeypatch.chdir(tmp_path)
  (tmp_path / "gutenberg").mkdir()
  (tmp_path / "gutenberg" / data.FILENAME).write_text("folder corpus\n")
  for spelling in ("./gutenberg", str(tmp_path / "gutenberg")):
    corpus = data.resolve_corpus(data_dir=spelling)
    assert corpus.source == "data_dir" and corpus.text == "folder corpus\n"
  assert data.resolve_corpus(data_dir="gutenberg").source == "download"
  assert server.requests == 1


# ---------------------------------------------------------------------------------------------
# The embedded corpus (the default).

def test_default_is_the_embedded_reference_body(env, server, monkeypatch):
  # Downloads on, a server that would answer, an empty cache: the default still reads nothing
  # but the package's own file, and it is the README's reference body.
  monkeypatch.setenv(data.ENV_CORPUS_URL, server.url + "/pg2600.txt")
  corpus = data.resolve_corpus()
  raw = corpus.text.encode("utf-8")
  assert (hashlib.sha256(raw).hexdigest(), len(raw)) == REFERENCE  # independent of limits.data
  assert corpus.source == "embedded" and corpus.sha256 == REFERENCE[0]
  assert corpus.matches_reference and corpus.info()["matches_reference"]
  assert corpus.text.startswith("CHAPTER I\n\n“Well, Prince, so Genoa and Lucca")
  assert "SECOND EPILOGUE" in corpus.text[-300_000:] and "\r" not in corpus.text
  assert server.requests == 0 and _files(env) == []
  # Shipped compressed (the data README allows xz), with its provenance beside it; never as
  # plain text (.gitignore has war_and_peace*.txt).
  assert data.EMBEDDED_PATH.name == "war_and_peace.txt.xz"
  assert 500_000 < data.EMBEDDED_PATH.stat().st_size < 1_200_000
  assert lzma.decompress(data.EMBEDDED_PATH.read_bytes()) == raw  # a second decompression
  provenance = (data.EMBEDDED_PATH.parent / "WAR_AND_PEACE.md").read_text(encoding="utf-8")
  assert "Project Gutenberg eBook\n#2600 (public domain in the USA)" in provenance
  assert REFERENCE[0] in provenance
  assert not (data.EMBEDDED_PATH.parent / data.FILENAME).exists()


@pytest.fixture
def fake_embedded(tmp_path, monkeypatch):
  """Points limits.data at a replaceable embedded file (the memo cleared before and after)."""
  path = tmp_path / "war_and_peace.txt.xz"
  monkeypatch.setattr(data, "EMBEDDED_PATH", path)
  data.embedded_corpus.cache_clear()
  yield path
  data.embedded_corpus.cache_clear()


def test_damaged_embedded_copy_is_refused_in_one_line(fake_embedded, reference_corpus):
  body = reference_corpus.read_bytes()
  xz = functools.partial(lzma.compress, preset=0)  # fast; any xz preset decompresses the same
  # Both sides: the reference body, compressed here, loads; one byte changed does not.
  fake_embedded.write_bytes(xz(body))
  assert data.resolve_corpus().sha256 == REFERENCE[0]
  data.embedded_corpus.cache_clear()
  changed = body.replace(b"Genoa", b"Genoe", 1)
  assert len(changed) == len(body)
  fake_embedded.write_bytes(xz(changed))
  with pytest.raises(LimitsError, match="not the reference body") as e:
    data.resolve_corpus()
  msg = _one_line(e)
  assert str(fake_embedded) in msg and hashlib.sha256(changed).hexdigest() in msg
  assert "--data_dir=FOLDER" in msg and "--text=FILE" in msg
  # Not xz, truncated xz, or missing: one line each, naming the file.
  for content, pattern in ((body[:1000], "not valid xz"),
                           (xz(body)[:50_000], "not valid xz"),
                           (None, "cannot read the embedded corpus")):
    if content is None:
      fake_embedded.unlink()
    else:
      fake_embedded.write_bytes(content)
    with pytest.raises(LimitsError, match=pattern) as e:
      data.resolve_corpus()
    assert str(fake_embedded) in _one_line(e)


def test_crlf_and_bom_are_normalized(tmp_path):
  p = tmp_path / "t.txt"
  p.write_bytes("\ufeffa\r\nb\rc\n".encode("utf-8"))
  assert data.load_text(text=p) == "a\nb\nc\n"


def test_missing_explicit_text_and_bad_encoding(tmp_path, env):
  with pytest.raises(LimitsError, match="not a readable file") as e:
    data.resolve_corpus(text=tmp_path / "nope.txt")
  _one_line(e)
  bad = tmp_path / "latin1.txt"
  bad.write_bytes("caf\xe9\n".encode("latin-1"))
  with pytest.raises(LimitsError, match="not UTF-8"):
    data.resolve_corpus(text=bad)


# ---------------------------------------------------------------------------------------------
# Split and chunk.

def test_split_heldout_is_a_partition_at_a_paragraph():
  text = "".join(f"Paragraph {i} with some words.\n\n" for i in range(200))
  train, held = data.split_heldout(text, 0.05)
  assert train + held == text
  assert train.endswith("\n\n") and held.startswith("Paragraph ")
  frac = len(held) / len(text)
  # Within one paragraph (~33 chars of 6.5k, i.e. 0.5%) of the requested fraction.
  assert 0.045 <= frac <= 0.05


def test_chunk_is_consecutive_non_overlapping():
  tokens = np.arange(1000) * 7 % 997
  out = data.chunk(tokens, 64, 5)
  assert out.shape == (5, 64) and out.dtype == np.int32
  for w in range(5):
    np.testing.assert_array_equal(out[w], tokens[w * 64:(w + 1) * 64])
  with pytest.raises(LimitsError, match="need 1024") as e:
    data.chunk(tokens, 128, 8)
  _one_line(e)
  for bad in (0, -3, 2.5):
    with pytest.raises(LimitsError):
      data.chunk(tokens, bad, 1)
