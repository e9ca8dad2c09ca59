"""Hugging Face hub names: the local HF cache first, then a download of safe files only.

``resolve_name("gpt2")`` (or ``"HuggingFaceTB/SmolLM2-135M"``) returns the snapshot directory of
the repo: from a local Hugging Face cache when one holds it (``cache_dirs``, in the order
``huggingface_hub`` itself uses), else downloaded file by file with
``huggingface_hub.hf_hub_download`` (the files the repo's model info lists) into the first of
those directories, with its progress bars. (Not ``snapshot_download``: huggingface_hub 1.x
lists the repo tree for it, an API the 0.x client did not need; the file-by-file path is the
same in both.) Only ``ALLOW_PATTERNS`` are fetched (config, safetensors, tokenizer files):
never a pickle (``pytorch_model.bin``), since unpickling can run arbitrary code; a repo whose
only weights are pickles is refused before any file is fetched. ``HF_HUB_OFFLINE=1`` turns
downloads off; ``HF_ENDPOINT`` chooses the hub (both read at call time, not at import). Every
failure is one ``LimitsError`` line: the name, where we looked, and how to get the files.
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
import re
from typing import Optional

from limits.errors import LimitsError

ALLOW_PATTERNS: tuple[str, ...] = (
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "generation_config.json",
)
KNOWN_NAMES: dict[str, str] = {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
    "distilgpt2": "distilbert/distilgpt2",
}
DEFAULT_ENDPOINT = "https://huggingface.co"

# huggingface_hub's rule (validate_repo_id): `name` or `namespace/name`, each part of letters,
# digits, '-', '_', '.', starting and ending with a word character, no '--' or '..', 96 chars.
_PART = r"\w(?:[\w.\-]*\w)?"
_REPO_ID = re.compile(rf"{_PART}(?:/{_PART})?")
_REPO_ID_RULE = ("`name` or `org/name` of letters, digits, '-', '_' and '.', neither starting nor "
                 "ending with '-' or '.', no '--' or '..', at most 96 characters")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
_WEIGHT_SUFFIXES = (".safetensors", ".msgpack", ".gguf") + _PICKLE_SUFFIXES
_TRUE = {"1", "ON", "YES", "TRUE"}


# ----------------------------------------------------------------------------------------------
# Names and the local cache.

def repo_id(name: str) -> str:
  """The hub repo id a name stands for (``gpt2`` -> ``openai-community/gpt2``); checks it."""
  name = str(name)
  if name in KNOWN_NAMES:
    return KNOWN_NAMES[name]
  if (len(name) > 96 or not _REPO_ID.fullmatch(name) or "--" in name or ".." in name
      or name.endswith(".git")):
    raise LimitsError(f"model {name!r} not found: no such file or directory, and not a Hugging "
                      f"Face repo id ({_REPO_ID_RULE})")
  return name


def _candidate_ids(name: str) -> list[str]:
  """Repo ids under which a name may sit in a cache (today's names and their legacy forms)."""
  ids = [name, repo_id(name)]
  if name.startswith(("openai-community/", "distilbert/")):
    ids.append(name.split("/", 1)[1])
  return list(dict.fromkeys(ids))


def cache_dirs() -> list[pathlib.Path]:
  """The HF hub caches consulted, in order: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub,
  then $XDG_CACHE_HOME (or ~/.cache)/huggingface/hub. Downloads go to the first one."""
  env = os.environ.get
  dirs = []
  for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
    if env(var):
      dirs.append(pathlib.Path(os.path.expanduser(env(var))))
  if env("HF_HOME"):
    dirs.append(pathlib.Path(os.path.expanduser(env("HF_HOME"))) / "hub")
  base = pathlib.Path(os.path.expanduser(env("XDG_CACHE_HOME") or "~/.cache"))
  dirs.append(base / "huggingface" / "hub")
  return list(dict.fromkeys(dirs))


def _repo_dir(cache: pathlib.Path, rid: str) -> pathlib.Path:
  return cache / ("models--" + rid.replace("/", "--"))


def snapshot(repo_dir: pathlib.Path) -> Optional[pathlib.Path]:
  """The snapshot of one cached repo that holds config.json: refs/main's, else the newest."""
  snaps = pathlib.Path(repo_dir) / "snapshots"
  if not snaps.is_dir():
    return None
  ref = pathlib.Path(repo_dir) / "refs" / "main"
  if ref.is_file():
    rev = ref.read_text().strip()
    if rev and (snaps / rev / "config.json").exists():
      return snaps / rev
  candidates = [p for p in snaps.iterdir() if (p / "config.json").exists()]
  if not candidates:
    return None
  return max(candidates, key=lambda p: p.stat().st_mtime)


def _looked_in(name: str) -> list[pathlib.Path]:
  return [_repo_dir(c, rid) for c in cache_dirs() for rid in _candidate_ids(name)]


def find_cached(name: str) -> Optional[pathlib.Path]:
  """The cached snapshot directory of ``name`` holding config.json, or None (no network)."""
  for repo_dir in _looked_in(name):
    snap = snapshot(repo_dir)
    if snap is not None:
      return snap
  return None


def _has_weights(directory: pathlib.Path) -> bool:
  return any(p.name.lower().endswith(_WEIGHT_SUFFIXES) for p in directory.iterdir())


def offline() -> bool:
  """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to 1/on/yes/true."""
  value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
  return value.strip().upper() in _TRUE


def endpoint() -> str:
  """The hub URL: HF_ENDPOINT, else https://huggingface.co."""
  return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _unavailable(name: str, why: str) -> LimitsError:
  rid = repo_id(name)
  looked = ", ".join(str(d) for d in _looked_in(name))
  return LimitsError(
      f"model {name!r} is not in the local Hugging Face cache (looked in {looked}) and {why}; "
      f"on a machine with network run `hf download {rid} config.json "
      f"model.safetensors tokenizer.json` and copy the cache here or set HF_HUB_CACHE to it")


# ----------------------------------------------------------------------------------------------
# Download.

def _first_line(e: BaseException) -> str:
  """A short reason: the OS error inside a connection failure, else the first line (200 chars)."""
  text = str(e).strip()
  m = re.search(r"\[Errno -?\d+\] [^'\")\]]+", text)
  if m:
    return m.group(0).strip()
  if "timed out" in text.lower():
    return "timed out"
  line = text.splitlines()[0] if text else type(e).__name__
  return line if len(line) <= 200 else line[:197] + "..."


def _transport_errors() -> tuple[type, ...]:
  """The HTTP client errors huggingface_hub may let through: httpx's (hub 1.x), and requests'
  where it is installed (hub 0.x)."""
  out = []
  for module, attr in (("httpx", "HTTPError"), ("requests.exceptions", "RequestException")):
    try:
      out.append(getattr(__import__(module, fromlist=[attr]), attr))
    except ImportError:
      pass
  return tuple(out)


def _hub_error(name: str, rid: str, url: str, e: Exception) -> LimitsError:
  """One line for whatever huggingface_hub (1.x: httpx underneath) raised."""
  from huggingface_hub import errors as hf_errors

  if isinstance(e, hf_errors.GatedRepoError):
    return LimitsError(f"model {name!r}: {rid} on {url} is gated; accept its licence on the hub "
                       f"and log in (`hf auth login` or HF_TOKEN), then retry")
  if isinstance(e, hf_errors.RevisionNotFoundError):
    return LimitsError(f"model {name!r}: {rid} on {url} has no 'main' revision")
  status = getattr(getattr(e, "response", None), "status_code", None)
  if isinstance(e, hf_errors.RepositoryNotFoundError) or status == 404:
    return LimitsError(f"model {name!r}: no model repo {rid} on {url} (or it is private: log in "
                       f"with `hf auth login` or set HF_TOKEN); check the spelling, e.g. "
                       f"gpt2 or HuggingFaceTB/SmolLM2-135M")
  if isinstance(e, hf_errors.OfflineModeIsEnabled):
    return _unavailable(name, "downloads are off (HF_HUB_OFFLINE)")
  if isinstance(e, _transport_errors() + (hf_errors.LocalEntryNotFoundError, OSError)):
    cause = e.__cause__ if isinstance(e, hf_errors.LocalEntryNotFoundError) and e.__cause__ else e
    return _unavailable(name, f"downloading {rid} from {url} failed ({_first_line(cause)})")
  return LimitsError(f"model {name!r}: downloading {rid} from {url} failed "
                     f"({type(e).__name__}: {_first_line(e)})")


def _refuse_pickle_only(name: str, rid: str, files: list[str]) -> None:
  """Refuses a repo whose weights are all pickles, before anything is fetched."""
  if "config.json" not in files:
    raise LimitsError(f"model {name!r}: repo {rid} has no config.json, so it is not a "
                      f"transformers checkpoint limits can read")
  if any(f.endswith(".safetensors") for f in files):
    return
  pickles = [f for f in files if f.lower().endswith(_PICKLE_SUFFIXES)]
  if pickles:
    raise LimitsError(
        f"refusing model {name!r}: repo {rid} has only pickle weights ({', '.join(pickles)}) and "
        f"no safetensors; unpickling can run arbitrary code, so limits never downloads or loads "
        f"them; use a repo (or revision) with model.safetensors, or convert it once in a "
        f"trusted environment with save_pretrained(out, safe_serialization=True)")
  raise LimitsError(f"model {name!r}: repo {rid} has no safetensors weights "
                    f"(files: {', '.join(sorted(files)[:12]) or 'none'})")


def _no_agent_registry_fetch() -> None:
  """huggingface_hub ≥ 1.x fetches an "agent harnesses" list from its import-time endpoint
  (huggingface.co, whatever HF_ENDPOINT says at call time) once per process, only to build the
  User-Agent header. limits talks to the one hub it was pointed at: the list is set empty
  (what huggingface_hub itself uses when that fetch fails) unless it was already loaded."""
  try:
    from huggingface_hub.utils import _detect_agent
  except ImportError:  # huggingface_hub 0.x: no such fetch
    return
  if getattr(_detect_agent, "_registry", "absent") is None:
    _detect_agent._registry = getattr(_detect_agent, "_EMPTY_REGISTRY",
                                      {"standardEnvVars": [], "harnesses": {}})


def download(name: str) -> pathlib.Path:
  """Downloads ``ALLOW_PATTERNS`` of a hub repo into the first of ``cache_dirs()``.

  Returns the snapshot directory. Refuses a pickle-only repo before fetching anything; off
  when HF_HUB_OFFLINE is set. One LimitsError line on any failure.
  """
  rid = repo_id(name)
  if offline():
    raise _unavailable(name, "downloads are off (HF_HUB_OFFLINE is set)")
  url = endpoint()
  try:
    from huggingface_hub import HfApi, hf_hub_download

    _no_agent_registry_fetch()
    api = HfApi(endpoint=url)
    timeout = float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10)
    info = api.model_info(rid, revision="main", timeout=timeout)
    files = [s.rfilename for s in (info.siblings or [])]
    if not files:
      files = list(api.list_repo_files(rid, revision="main"))
    _refuse_pickle_only(name, rid, files)
    wanted = [f for f in files if any(fnmatch.fnmatchcase(f, p) for p in ALLOW_PATTERNS)]
    path = None
    for f in wanted:
      got = pathlib.Path(hf_hub_download(rid, f, revision="main", endpoint=url,
                                         cache_dir=str(cache_dirs()[0])))
      path = got.parent if f == "config.json" else path
    path = path or pathlib.Path(cache_dirs()[0])
  except LimitsError:
    raise
  except Exception as e:  # noqa: BLE001 - huggingface_hub raises many types; each is one line.
    raise _hub_error(name, rid, url, e) from None
  path = pathlib.Path(path)
  if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
    raise LimitsError(f"model {name!r}: the download of {rid} from {url} into {path} lacks "
                      f"config.json or safetensors weights")
  return path


def resolve_name(name: str) -> pathlib.Path:
  """The snapshot directory of a hub name: the local cache first, then a download."""
  repo_id(name)  # a bad name is an error before any look-up
  cached = find_cached(name)
  if cached is not None and _has_weights(cached):
    return cached
  return download(name)
