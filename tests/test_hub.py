"""Hub names (``limits.models.hub``) against a fake Hugging Face hub served on 127.0.0.1.

The fake hub implements what ``huggingface_hub.snapshot_download`` calls: the model info
(``/api/models/{repo}/revision/{rev}`` with ``sha`` and ``siblings``) and ``/{repo}/resolve/{rev}/
{file}`` (HEAD and GET; safetensors answer 302 to a ``/cdn/`` URL with X-Linked-Etag /
X-Linked-Size, as LFS files do on the real hub; no Xet headers, so no Xet path is taken). It
records every request, so a test can say which files were (never) asked for. No test reaches
the internet: every test runs with ``socket`` guarded so that any connection or name look-up
for a host other than 127.0.0.1 fails and is recorded.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import pathlib
import re
import socket
import threading
import urllib.parse

import numpy as np
import pytest

from limits.models import gpt2
from limits.errors import LimitsError
from limits.models.gpt2 import checkpoint
from limits.models.gpt2 import model as model_lib
from limits.models.gpt2.testing import make_random_model_dir
from limits.models import hub

REPO = "limits-test/tiny-gpt2"
PICKLE = b"\x80\x04\x95 a pickle that must never be fetched"


# ----------------------------------------------------------------------------------------------
# The fake hub.

class FakeHub:
  """A ThreadingHTTPServer on 127.0.0.1 serving ``repos``: repo id -> {filename: bytes}."""

  def __init__(self, repos: dict[str, dict[str, bytes]], error=None):
    self.repos = repos
    self.error = error  # (status, X-Error-Code or None) answered for unknown repos
    self.requests: list[tuple[str, str]] = []
    self.shas = {r: hashlib.sha1(r.encode()).hexdigest() for r in repos}
    self.blobs = {hashlib.sha256(b).hexdigest(): b for files in repos.values()
                  for b in files.values()}
    self.blob_repo = {hashlib.sha256(b).hexdigest(): r for r, files in repos.items()
                      for b in files.values()}
    hub_ = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_HEAD(self):
        hub_._serve(self, body=False)

      def do_GET(self):
        hub_._serve(self, body=True)

    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
    self.thread.start()

  def stop(self):
    self.server.shutdown()
    self.server.server_close()

  def paths(self) -> list[str]:
    return [p for _, p in self.requests]

  # -- handlers --------------------------------------------------------------------------------

  def _send(self, h, status, headers=(), body=b"", send_body=True):
    h.send_response(status)
    for k, v in headers:
      h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if send_body:
      h.wfile.write(body)

  def _not_found(self, h, repo, body):
    status, code = self.error or (404, "RepoNotFound")
    headers = [("X-Error-Code", code)] if code else []
    if repo in self.repos:  # a known repo, a missing file
      status, headers = 404, [("X-Error-Code", "EntryNotFound"),
                              ("X-Repo-Commit", self.shas[repo])]
    self._send(h, status, headers + [("Content-Type", "application/json")],
               json.dumps({"error": "not found"}).encode(), body)

  def _serve(self, h, body):
    path = urllib.parse.unquote(urllib.parse.urlsplit(h.path).path)
    self.requests.append((h.command, path))
    m = re.fullmatch(r"/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?", path)
    if m:
      repo = m["repo"]
      if repo not in self.repos or m["rev"] not in (None, "main", self.shas.get(repo)):
        return self._not_found(h, repo, body)
      info = {"id": repo, "modelId": repo, "sha": self.shas[repo], "private": False,
              "siblings": [{"rfilename": f} for f in sorted(self.repos[repo])]}
      return self._send(h, 200, [("Content-Type", "application/json")],
                        json.dumps(info).encode(), body)
    m = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", path)
    if m:
      repo, file = m["repo"], m["file"]
      if (repo not in self.repos or file not in self.repos[repo]
          or m["rev"] not in ("main", self.shas[repo])):
        return self._not_found(h, repo, body)
      data = self.repos[repo][file]
      digest = hashlib.sha256(data).hexdigest()
      common = [("X-Repo-Commit", self.shas[repo]), ("ETag", f'"{digest}"')]
      if file.endswith(".safetensors"):  # an LFS file: redirect to the "CDN"
        return self._send(h, 302, common + [("X-Linked-Etag", f'"{digest}"'),
                                            ("X-Linked-Size", str(len(data))),
                                            ("Location", f"{self.url}/cdn/{digest}")],
                          b"", body)
      return self._send(h, 200, common, data, body)
    m = re.fullmatch(r"/cdn/(?P<digest>[0-9a-f]{64})", path)
    if m and m["digest"] in self.blobs:
      # huggingface_hub 1.x follows a redirect that stays on the same host (here the "CDN" is
      # 127.0.0.1 too) and reads the metadata from where it lands; a real CDN is another host,
      # where it stops at the 302. So the blob also carries the hub's metadata headers.
      digest, data = m["digest"], self.blobs[m["digest"]]
      meta = [("X-Repo-Commit", self.shas[self.blob_repo[digest]]),
              ("X-Linked-Etag", f'"{digest}"'), ("X-Linked-Size", str(len(data)))]
      return self._send(h, 200, [("ETag", f'"{digest}"')] + meta, data, body)
    return self._send(h, 404, [], b"", body)


# ----------------------------------------------------------------------------------------------
# Fixtures.

@pytest.fixture()
def no_internet(monkeypatch):
  """Fails (and records) any connection or name look-up for a host other than 127.0.0.1."""
  attempts = []
  real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

  def connect(sock, address):
    if isinstance(address, tuple) and address[0] != "127.0.0.1":
      attempts.append(address)
      raise OSError(f"test guard: connection to {address} refused")
    return real_connect(sock, address)

  def getaddrinfo(host, *args, **kwargs):
    if host not in ("127.0.0.1", b"127.0.0.1"):
      attempts.append(host)
      raise socket.gaierror(f"test guard: look-up of {host} refused")
    return real_getaddrinfo(host, *args, **kwargs)

  monkeypatch.setattr(socket.socket, "connect", connect)
  monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
  yield attempts
  assert not attempts, f"a test tried to leave 127.0.0.1: {attempts}"


def _reset_sessions():
  """Drops huggingface_hub's cached HTTP session (1.x: close_session; 0.x: reset_sessions)."""
  import huggingface_hub.utils

  (getattr(huggingface_hub.utils, "close_session", None)
   or huggingface_hub.utils.reset_sessions)()


@pytest.fixture()
def env(tmp_path, monkeypatch, no_internet):
  """An empty HF cache under tmp_path, online, no token; the cwd holds no model names."""
  import huggingface_hub.constants
  import huggingface_hub.utils

  cache = tmp_path / "hf_cache"
  for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN",
              "HUGGING_FACE_HUB_TOKEN", "HF_HUB_ENABLE_HF_TRANSFER"):
    monkeypatch.delenv(var, raising=False)
  monkeypatch.setenv("HF_HUB_CACHE", str(cache))
  monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  # huggingface_hub reads these at import time: match the environment set above.
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
  # (huggingface_hub 1.x dropped hf_transfer: the attribute may not exist.)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ENABLE_HF_TRANSFER", False,
                      raising=False)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
  _reset_sessions()
  monkeypatch.chdir(tmp_path)
  yield cache
  _reset_sessions()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, bytes]:
  d = make_random_model_dir(tmp_path_factory.mktemp("served") / "m", n_layer=2, n_head=2,
                            n_embd=16, n_positions=16, vocab_size=300, seed=3)
  return {p.name: p.read_bytes() for p in d.iterdir()}


def _serve(monkeypatch, repos, error=None) -> FakeHub:
  fake = FakeHub(repos, error)
  monkeypatch.setenv("HF_ENDPOINT", fake.url)
  return fake


@pytest.fixture()
def fake_hub(monkeypatch, env, model_files):
  """REPO with the safe files plus a pickle, a Flax copy, a README and an ONNX export."""
  files = dict(model_files)
  files.update({"pytorch_model.bin": PICKLE, "flax_model.msgpack": b"not fetched",
                "README.md": b"# card", "onnx/model.onnx": b"not fetched"})
  fake = _serve(monkeypatch, {REPO: files})
  yield fake
  fake.stop()


def _one_line(excinfo) -> str:
  msg = str(excinfo.value)
  assert msg and "\n" not in msg, msg
  return msg


def _flat(params, config):
  return model_lib.params_to_flat(params, config)


# ----------------------------------------------------------------------------------------------
# Downloads and the cache.

def test_download_fetches_only_safe_files_and_loads_the_served_params(fake_hub, env,
                                                                      model_files, tmp_path):
  path = hub.resolve_name(REPO)
  assert path.is_relative_to(env) and path.name == fake_hub.shas[REPO]
  assert sorted(p.name for p in path.iterdir()) == sorted(model_files)  # nothing else fetched
  for name, data in model_files.items():
    assert (path / name).read_bytes() == data, name
  seen = fake_hub.paths()
  assert not any("pytorch_model.bin" in p or ".msgpack" in p or ".onnx" in p or "README" in p
                 for p in seen), seen
  assert any(p.startswith("/cdn/") for p in seen), seen  # the LFS redirect was followed
  # The snapshot loads to exactly the parameters of the served files.
  served = tmp_path / "served"
  served.mkdir()
  for name, data in model_files.items():
    (served / name).write_bytes(data)
  config, params = gpt2.load(path)
  config_ref, params_ref = gpt2.load(served)
  assert config == config_ref
  flat, flat_ref = _flat(params, config), _flat(params_ref, config_ref)
  assert flat.keys() == flat_ref.keys()
  for k in flat:
    np.testing.assert_array_equal(flat[k], flat_ref[k], err_msg=k)


def test_second_resolve_uses_the_cache_with_the_hub_gone(fake_hub, env, monkeypatch,
                                                         no_internet):
  first = hub.resolve_name(REPO)
  fake_hub.stop()
  n = len(fake_hub.requests)

  def connect(sock, address):  # now not even 127.0.0.1 may be reached
    no_internet.append(address)
    raise OSError("test guard: no connection allowed")

  monkeypatch.setattr(socket.socket, "connect", connect)
  assert hub.find_cached(REPO) == first
  assert hub.resolve_name(REPO) == first
  assert checkpoint.resolve(REPO) == first  # limits.models.gpt2 names go through the hub
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  assert hub.resolve_name(REPO) == first
  assert len(fake_hub.requests) == n and not no_internet


def test_known_short_name_downloads_its_repo(monkeypatch, env, model_files):
  fake = _serve(monkeypatch, {"openai-community/gpt2": dict(model_files)})
  try:
    config, _ = gpt2.load("gpt2")  # limits.models.gpt2.load -> checkpoint.resolve -> hub
  finally:
    fake.stop()
  assert "/api/models/openai-community/gpt2/revision/main" in fake.paths()
  assert hub.find_cached("gpt2") == hub.find_cached("openai-community/gpt2") is not None
  assert config.n_layer == 2


# ----------------------------------------------------------------------------------------------
# Failures: one LimitsError line each, and nothing unsafe fetched.

@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_offline_without_cache_is_one_line(fake_hub, env, monkeypatch, value):
  monkeypatch.setenv("HF_HUB_OFFLINE", value)
  with pytest.raises(LimitsError) as e:
    hub.resolve_name(REPO)
  msg = _one_line(e)
  assert REPO in msg and str(env) in msg and "HF_HUB_OFFLINE" in msg
  assert f"hf download {REPO} config.json model.safetensors" in msg
  assert "HF_HUB_CACHE" in msg
  assert fake_hub.requests == []


def test_pickle_only_repo_is_refused_before_any_file(monkeypatch, env, model_files):
  files = {"config.json": model_files["config.json"], "tokenizer.json": model_files[
      "tokenizer.json"], "pytorch_model.bin": PICKLE}
  fake = _serve(monkeypatch, {"limits-test/pickled": files})
  try:
    with pytest.raises(LimitsError, match="pickle") as e:
      hub.resolve_name("limits-test/pickled")
  finally:
    fake.stop()
  msg = _one_line(e)
  assert "pytorch_model.bin" in msg and "arbitrary code" in msg and "safetensors" in msg
  assert not any("/resolve/" in p or "/cdn/" in p for p in fake.paths()), fake.paths()
  assert not list(env.glob("**/pytorch_model.bin"))


@pytest.mark.parametrize("status, code, words", [
    (401, "RepoNotFound", "no model repo"),  # what the real hub answers
    (404, None, "no model repo"),            # a plain 404
    (403, "GatedRepo", "gated"),
    (500, None, "failed"),
])
def test_hub_errors_are_one_line(monkeypatch, env, model_files, status, code, words):
  fake = _serve(monkeypatch, {REPO: dict(model_files)}, error=(status, code))
  try:
    with pytest.raises(LimitsError) as e:
      hub.resolve_name("limits-test/no-such-model")
  finally:
    fake.stop()
  msg = _one_line(e)
  assert "limits-test/no-such-model" in msg and words in msg and fake.url in msg
  assert fake.paths()[0].startswith("/api/models/limits-test/no-such-model")


def test_network_error_is_one_line(monkeypatch, env):
  with socket.socket() as s:  # a port on 127.0.0.1 where nothing listens
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
  with pytest.raises(LimitsError) as e:
    hub.download(REPO)
  msg = _one_line(e)
  assert REPO in msg and f"127.0.0.1:{port}" in msg and "hf download" in msg
  assert str(env) in msg


@pytest.mark.parametrize("name", ["a/b/c", "-bad", "bad-", "bad--name", "foo..bar", "x" * 97,
                                  "org/name.git", "", "/no/such/dir", "org/", "with space"])
def test_invalid_name_is_one_line(fake_hub, env, name):
  with pytest.raises(LimitsError, match="repo id") as e:
    hub.resolve_name(name)
  assert repr(name) in _one_line(e)
  assert fake_hub.requests == []


def test_cache_dirs_follow_huggingface_hub_order(monkeypatch, tmp_path):
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "a"))
  monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "b"))
  monkeypatch.setenv("HF_HOME", str(tmp_path / "c"))
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "d"))
  assert hub.cache_dirs() == [tmp_path / "a", tmp_path / "b", tmp_path / "c" / "hub",
                              tmp_path / "d" / "huggingface" / "hub"]
  assert checkpoint.hf_cache_dirs() == hub.cache_dirs()
  for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
    monkeypatch.delenv(var)
  assert hub.cache_dirs() == [pathlib.Path.home() / ".cache" / "huggingface" / "hub"]


def test_allow_patterns_never_match_a_pickle():
  from huggingface_hub.utils import filter_repo_objects
  names = ["pytorch_model.bin", "model.pt", "weights.pth", "x.ckpt", "p.pkl",
           "pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json", "config.json",
           "model.safetensors", "tokenizer.json"]
  kept = list(filter_repo_objects(names, allow_patterns=list(hub.ALLOW_PATTERNS)))
  assert kept == ["config.json", "model.safetensors", "tokenizer.json"]
