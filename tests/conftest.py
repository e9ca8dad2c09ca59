"""Shared test set-up. Tests default to float32; those that verify a bound use
``with jax.enable_x64(True):`` (JAX 0.10's context manager) and say their tolerance.

The project embeds *War and Peace* (``limits/assets/war_and_peace.txt.xz``, the default corpus
of every experiment). Tests that only need some text use a generated or built-in one
(``--text`` / ``text=``); tests that need the real novel take the ``reference_corpus`` fixture
(the embedded body as a file) and are marked ``corpus``. No environment variable is needed.
No test reaches the internet: corpus downloads are off and the corpus cache is an empty folder
in every test (``_corpus_offline``), and so are hub downloads (``_hub_offline``).
"""

import os
import shutil
from pathlib import Path

# JAX's persistent compilation cache (keyed by the compiled program and the JAX version, so a
# stale entry is never used): the many small CLI runs the tests start as subprocesses compile
# the same programs once instead of once per process. Set before JAX is imported;
# subprocesses inherit it; an existing setting is kept. One folder per pytest-xdist worker:
# without a size cap JAX writes entries in place (no lock), so two workers never share one,
# and a worker waits for its own subprocesses. (A cap turns on JAX's LRU eviction, whose
# "-atime" files vanished under concurrent processes here.) A full run writes ~33 MB; the
# folder can be deleted at any time.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ or os.environ.get("LIMITS_TEST_JAX_CACHE"):
  # (ours, inherited from the pytest-xdist controller: replaced by this worker's own folder)
  os.environ["LIMITS_TEST_JAX_CACHE"] = "1"
  os.environ["JAX_COMPILATION_CACHE_DIR"] = str(
      Path(__file__).resolve().parent.parent / ".cache" / "jax-tests"
      / os.environ.get("PYTEST_XDIST_WORKER", "main"))
# The tokenized-corpus cache (limits.records.sources.token_cache_dir) of test runs: beside
# the compilation cache, never the user's ~/.cache (tests/test_sources.py covers the cache).
os.environ.setdefault("LIMITS_TOKEN_CACHE", str(
    Path(__file__).resolve().parent.parent / ".cache" / "tokens-tests"))
# Likewise the GGUF header cache (limits.models.gguf_cache; tests/test_gguf_cache.py).
os.environ.setdefault("LIMITS_GGUF_CACHE", str(
    Path(__file__).resolve().parent.parent / ".cache" / "gguf-tests"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# XLA's CPU backend at LLVM optimisation level 0 (XLA's own graph passes, fusion included, are
# unchanged): the tests run small shapes, where compiling is most of the time. Measured on 2
# cores: the distance CLI's vary_length run 19.1 s -> 11.3 s, its float64 verdicts equal to
# ~1e-9 relative (the float32 forward's last bits). Every tolerance in the tests is far wider,
# and the tests that compare runs bitwise compare runs under the same flags (subprocesses
# inherit them). Real runs keep XLA's default. LIMITS_TEST_XLA_DEFAULT=1 turns this off.
#
# And XLA's CPU fusions emitted by its LLVM IR emitters, not the newer MLIR fusion emitters
# (--xla_cpu_use_fusion_emitters=false; a flag of the pinned jaxlib 0.10.2, where an unknown
# flag would stop every test): compiling is cheaper still. Measured 2026-12-05 on 2 loaded
# cores, CPU seconds: the distance CLI's vary_length run (tiny model, L = 32, 64, float64)
# 12.8 -> 8.2, the gradient CLI (3 T, 32 rows) 12.4 -> 9.0; every number in both results.json
# equal to 4e-15 relative, the verdicts identical, but for the closed-form check's own residual
# (max |Δ| 2.0e-14 -> 1.6e-14, both float64 rounding). The same rules as above:
# subprocesses inherit it, and LIMITS_TEST_XLA_DEFAULT=1 turns both off (XLA's defaults, as
# real runs use).
#
# And the whole LLVM module of a program compiled in one piece
# (--xla_cpu_parallel_codegen_split_count=1; XLA's default splits it into 32 parts compiled on a
# thread pool, which two pytest-xdist workers on 2 cores only contend for). Measured 2026-12-06
# (nineteenth session, load 7-9 from other jobs): tests/test_selection.py, test_distance_fast.py
# and test_bounds.py in one process, ~895 compilations, alternated 3 times: process CPU s
# 62.8 / 61.1 / 61.0 without, 60.4 / 58.6 / 47.0 with (median pair ratio 0.96); the same
# tests pass. It changes how the code is partitioned, not what is computed.
if not os.environ.get("LIMITS_TEST_XLA_DEFAULT"):
  for _flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false",
                "--xla_cpu_parallel_codegen_split_count=1"):
    if _flag.split("=")[0].lstrip("-") not in os.environ.get("XLA_FLAGS", ""):
      os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import pytest  # noqa: E402

from limits import data  # noqa: E402


# pytest-xdist hands out whole files (--dist loadfile). Its default order, the files with the
# most tests first, left short but heavy files (the SmolLM2 parity: 4 tests, ~40 s) for the end,
# run by one worker while the other idled. The files below go first, longest first (their summed
# durations on 2 cores, 2026-12-05, all ≥ 30 s); the rest follow in collection order. A file
# missing here only runs later; nothing is left out.
SLOWEST_FIRST = (
    "test_robustness.py", "test_scorecard.py", "test_separability.py", "test_train_tiny.py",
    "test_sweep_cli.py", "test_sweep.py", "test_distance.py", "test_jacobians.py",
    "test_reproduce.py", "test_normalizers.py", "test_gradient_robustness.py",
    "test_gradient_cli.py", "test_vanishing_cli.py", "test_smollm2.py", "test_distance_cli.py",
    "test_distance_fast.py", "test_gpt2_hf.py")


def pytest_collection_modifyitems(config, items):
  """Test files in SLOWEST_FIRST order, then the others; tests keep their order in a file."""
  del config
  rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


def pytest_xdist_auto_num_workers(config):
  """``-n auto``: one worker per core, at most 4 (each worker holds JAX, torch and a model)."""
  del config
  return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count() or 1))


@pytest.fixture(scope="session")
def reference_corpus(tmp_path_factory) -> Path:
  """Path of a war_and_peace.txt holding the embedded reference body (limits.data's
  embedded_corpus, checked against the reference sha256 when decompressed), written once per
  session into a temporary folder. No environment variable or download is needed."""
  path = tmp_path_factory.mktemp("reference_corpus") / data.FILENAME
  path.write_text(data.embedded_corpus().text, encoding="utf-8", newline="\n")
  return path


@pytest.fixture(scope="session")
def _empty_corpus_cache(tmp_path_factory) -> Path:
  return tmp_path_factory.mktemp("empty_corpus_cache")


@pytest.fixture(autouse=True)
def _corpus_offline(monkeypatch, _empty_corpus_cache):
  """No test downloads the corpus (LIMITS_ALLOW_DOWNLOAD=0), finds one in the user's cache
  (LIMITS_CACHE_DIR is an empty folder) or in the user's LIMITS_DATA_DIR (unset); subprocesses
  inherit this. The download tests serve a
  fake Gutenberg on 127.0.0.1 and lift this themselves (tests/test_data.py)."""
  monkeypatch.setenv(data.ENV_ALLOW_DOWNLOAD, "0")
  monkeypatch.setenv(data.ENV_CACHE_DIR, str(_empty_corpus_cache))
  monkeypatch.delenv(data.ENV_DATA_DIR, raising=False)  # the default is the embedded copy
  monkeypatch.delenv(data.ENV_CORPUS_URL, raising=False)
  yield
  left = sorted(_empty_corpus_cache.iterdir())
  for p in left:  # empty again for the next test, then fail this one
    shutil.rmtree(p) if p.is_dir() else p.unlink()
  assert not left, f"the test wrote {[p.name for p in left]} into the shared empty corpus cache"


@pytest.fixture(autouse=True)
def _hub_offline(monkeypatch):
  """No test reaches the internet: hub downloads are off unless a test serves a fake hub on
  127.0.0.1 and lifts this itself (tests/test_hub.py)."""
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
