"""limits.records: one forward per window shared through a disk cache that is never wrong.

Checks: records from the cache equal the forward's bit for bit (both the computing call and a
later call that reads the files); a second call runs no forward; changing any part of the key
(tokens, the model file's mtime, the code version, JAX's x64 setting) recomputes; a corrupt
file, a truncated file, a foreign entry (another key's manifest) and an unreadable manifest are
each detected and recomputed with one warning line, with the forward's numbers; an abandoned
iteration leaves no entry; the persistent compilation cache's switch and folder; the runner
gives its steps OUT/records and removes it only when every step succeeded.
"""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from limits import models, records, reproduction
from limits.reproduction import runner as reproduction_runner
from limits.records import sources
from limits.models.gpt2.testing import make_random_model_dir
from limits.records import key as key_lib


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  path = make_random_model_dir(tmp_path_factory.mktemp("rec") / "model", n_layer=3, n_head=2,
                               n_embd=16, n_positions=64, vocab_size=300, seed=5)
  return sources.load_model(str(path))


@pytest.fixture
def counted(monkeypatch):
  """Counts the forwards ``limits.records`` runs (calls of limits.models.iter_layers)."""
  calls = []
  real = models.iter_layers

  def counting(*a, **k):
    calls.append(1)
    return real(*a, **k)

  monkeypatch.setattr(models, "iter_layers", counting)
  return calls


TOK = (np.arange(48, dtype=np.int32)[None] * 7) % 300


def reference(model, tok=TOK):
  return {i: {f: np.asarray(getattr(r, f)) for f in records.FIELDS}
          for i, r in models.iter_layers(model.params, tok, model.config)}


def collect(model, store, tok=TOK, **kw):
  return {i: {f: getattr(r, f) for f in kw.get("fields", records.FIELDS)}
          for i, r in records.iter_layers(model, tok, store=store, **kw)}


def assert_same(got, ref):
  assert sorted(got) == sorted(ref)
  for i in got:
    for f, a in got[i].items():
      assert a.dtype == ref[i][f].dtype and np.array_equal(a, ref[i][f]), (i, f)


def test_cache_equals_forward_bitwise_and_runs_one_forward(model, tmp_path, counted):
  ref = reference(model)
  counted.clear()
  store = records.RecordStore(tmp_path)
  assert_same(collect(model, store), ref)  # computed (and written)
  assert len(counted) == 1
  got = collect(model, store, fields=("weights", "v"))  # read back, memory-mapped
  assert len(counted) == 1  # no second forward
  assert_same(got, ref)
  assert ref[0]["weights"].dtype == np.float32
  some = list(records.iter_layers(model, TOK, store=store, fields=("scores",), layers=[-1]))
  assert [i for i, _ in some] == [2] and some[0][1].weights is None
  assert np.array_equal(some[0][1].scores, ref[2]["scores"])


def test_records_read_from_the_store_never_load_the_weights(model, tmp_path, monkeypatch):
  """A step whose records are on disk needs the config and tokenizer only: load_model defers
  the weights (sources.Deferred) and reading records does not touch them; the first use of
  ``params`` loads them once, equal to models.load's."""
  store = records.RecordStore(tmp_path)
  ref = collect(model, store)                               # written with the loaded model
  loads = []
  real = models.load
  monkeypatch.setattr(models, "load", lambda *a, **k: loads.append(1) or real(*a, **k))
  fresh = sources.load_model(str(model.path))
  assert loads == [] and isinstance(fresh.__dict__["_params"], sources.Deferred)
  assert_same(collect(fresh, store), ref)                   # read back: no weights read
  assert loads == [] and isinstance(fresh.__dict__["_params"], sources.Deferred)
  params = fresh.params
  assert loads == [1] and fresh.params is params and loads == [1]
  flat = lambda p: jax.tree_util.tree_leaves(p)
  assert all(np.array_equal(a, b) for a, b in zip(flat(params), flat(model.params)))
  fresh2 = sources.load_model(str(model.path))              # no store: the forward loads them
  assert_same(collect(fresh2, None), ref)
  assert loads == [1, 1]


def test_no_store_is_the_plain_forward(model, counted):
  assert_same(collect(model, None), reference(model))


def _entry(store):
  (folder,) = [p for p in store.root.iterdir() if p.is_dir()]
  return folder


@pytest.mark.parametrize("change", ["tokens", "mtime", "code", "x64"])
def test_any_change_of_the_key_recomputes(model, tmp_path, counted, monkeypatch, change):
  store = records.RecordStore(tmp_path / "store")
  collect(model, store)
  collect(model, store)
  assert len(counted) == 1
  tok = TOK
  if change == "tokens":
    tok = TOK.copy()
    tok[0, -1] += 1  # one token of the window
  elif change == "mtime":
    st = os.stat(model.path / "model.safetensors")
    os.utime(model.path / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
  elif change == "code":
    monkeypatch.setattr(key_lib, "code_version", lambda: "another version")
  x64 = jax.config.jax_enable_x64 != (change == "x64")
  try:
    with jax.enable_x64(x64):
      assert_same(collect(model, store, tok), reference(model, tok))
  finally:
    if change == "mtime":
      os.utime(model.path / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
  assert len(counted) == 3  # the recompute (the reference is the third forward)
  assert len([p for p in store.root.iterdir() if p.is_dir()]) == 2  # a second entry


def _flip_byte(path):
  data = bytearray(path.read_bytes())
  data[len(data) // 2] ^= 0x40
  path.write_bytes(bytes(data))


def _truncate(path):
  data = path.read_bytes()
  path.write_bytes(data[:-4])


def _foreign(folder):
  man = json.loads((folder / "manifest.json").read_text())
  man["key"]["tokens_sha256"] = "0" * 64  # another window's entry under this window's name
  (folder / "manifest.json").write_text(json.dumps(man))


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "manifest"])
def test_damaged_entry_is_recomputed_never_read(model, tmp_path, counted, capfd, damage):
  store = records.RecordStore(tmp_path)
  ref = reference(model)
  collect(model, store)
  folder = _entry(store)
  target = folder / "001.weights.bin"
  if damage == "flip":
    _flip_byte(target)
  elif damage == "truncate":
    _truncate(target)
  elif damage == "foreign":
    _foreign(folder)
  else:
    (folder / "manifest.json").write_text("{not json")
  counted.clear()
  assert_same(collect(model, store, fields=("weights", "x")), ref)
  assert len(counted) == 1  # recomputed once
  err = capfd.readouterr().err
  assert err.count("warning: records cache:") == 1, err
  assert {"flip": "checksum", "truncate": "truncated", "foreign": "stale or foreign",
          "manifest": "unreadable"}[damage] in err
  counted.clear()
  assert_same(collect(model, store, fields=("weights",)), ref)  # the entry was rewritten
  assert counted == []


def test_undamaged_field_is_still_read_when_another_is_corrupt(model, tmp_path, counted):
  """The checksum is checked per field read: a corrupt q does not stop a reader of the weights."""
  store = records.RecordStore(tmp_path)
  collect(model, store)
  _flip_byte(_entry(store) / "001.q.bin")
  counted.clear()
  collect(model, store, fields=("weights",))
  assert counted == []
  collect(model, store, fields=("q",))  # the reader of q sees the damage and recomputes
  assert len(counted) == 1


def test_checksum_is_xxh3_64_of_the_raw_bytes_else_crc32(monkeypatch):
  """The manifest's checksum: XXH3-64 of the C-order bytes (the published value for empty
  input, 0x2D06800538D394C2, and xxhash's own digest of a float32 array); CRC-32 (zlib's)
  when xxhash is missing."""
  import zlib

  import xxhash

  from limits.records import store as store_lib

  assert store_lib.checksum(np.zeros(0, np.float32)) == {"xxh3_64": 0x2D06800538D394C2}
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  assert store_lib.checksum(a) == {"xxh3_64": xxhash.xxh3_64_intdigest(a.tobytes())}
  assert store_lib.checksum(a.T) == {"xxh3_64": xxhash.xxh3_64_intdigest(a.T.tobytes())}
  b = a.copy()
  b.view(np.uint32)[1, 2, 3] ^= 1  # one bit of one element
  assert store_lib.checksum(b) != store_lib.checksum(a)
  monkeypatch.setattr(store_lib, "_XXH3", None)
  assert store_lib.checksum(a) == {"crc32": zlib.crc32(a.tobytes())}


def test_crc32_entries_stay_readable_and_checked(model, tmp_path, counted, monkeypatch):
  """An entry written without xxhash (CRC-32) is read by a process that has it, bit for bit,
  with no forward; a flipped byte in it is still detected and recomputed."""
  from limits.records import store as store_lib

  store = records.RecordStore(tmp_path)
  ref = reference(model)
  with monkeypatch.context() as m:
    m.setattr(store_lib, "_XXH3", None)
    collect(model, store)
  man = json.loads((_entry(store) / "manifest.json").read_text())
  assert set(man["layers"]["1"]["q"]) == {"shape", "dtype", "crc32"}
  counted.clear()
  assert_same(collect(model, store), ref)
  assert counted == []
  _flip_byte(_entry(store) / "002.scores.bin")
  assert_same(collect(model, store, fields=("scores",)), ref)
  assert len(counted) == 1


def test_xxh3_entry_without_xxhash_is_recomputed_not_read(model, tmp_path, counted, capfd,
                                                          monkeypatch):
  """An XXH3 entry read where xxhash is missing cannot be verified: one warning, the forward
  recomputed (its numbers), the entry rewritten with CRC-32; a manifest field with no checksum
  at all is refused the same way."""
  from limits.records import store as store_lib

  store = records.RecordStore(tmp_path)
  ref = reference(model)
  collect(model, store)
  man = json.loads((_entry(store) / "manifest.json").read_text())
  assert set(man["layers"]["0"]["weights"]) == {"shape", "dtype", "xxh3_64"}
  monkeypatch.setattr(store_lib, "_XXH3", None)
  counted.clear()
  assert_same(collect(model, store, fields=("weights",)), ref)
  assert len(counted) == 1
  err = capfd.readouterr().err
  assert err.count("warning: records cache:") == 1 and "cannot verify" in err, err
  folder = _entry(store)
  man = json.loads((folder / "manifest.json").read_text())
  assert "crc32" in man["layers"]["0"]["weights"]
  del man["layers"]["0"]["weights"]["crc32"]
  (folder / "manifest.json").write_text(json.dumps(man))
  counted.clear()
  assert_same(collect(model, store, fields=("weights",)), ref)
  assert len(counted) == 1
  assert "no checksum" in capfd.readouterr().err


def test_weights_key0_column_equals_the_forwards_weights_and_is_checked(model, tmp_path,
                                                                        counted):
  """The derived column ``weights_key0`` is weights[..., 0] of the forward, bit for bit: from
  the computing call, from a later read (no forward, only the column's own file is read: the
  weights file may be damaged) and without a store; a corrupt column file is recomputed."""
  store = records.RecordStore(tmp_path)
  ref = reference(model)
  counted.clear()
  for st in (store, store, None):  # computing call, reading call, no store
    got = {i: a for i, a, _ in records.iter_arrays(model, TOK, ("weights_key0",), store=st)}
    assert sorted(got) == sorted(ref)
    for i, a in got.items():
      assert set(a) == {"weights_key0"}
      want = ref[i]["weights"][..., 0]
      assert a["weights_key0"].shape == want.shape == (1, 2, 48)
      assert a["weights_key0"].dtype == want.dtype and np.array_equal(a["weights_key0"], want)
  assert len(counted) == 2  # the computing call and the store-less call
  _flip_byte(_entry(store) / "001.weights.bin")
  counted.clear()
  list(records.iter_arrays(model, TOK, ("weights_key0", "q"), store=store))
  assert counted == []
  _flip_byte(_entry(store) / "002.weights_key0.bin")
  got = {i: a for i, a, _ in records.iter_arrays(model, TOK, ("weights_key0",), store=store)}
  assert len(counted) == 1 and np.array_equal(got[2]["weights_key0"], ref[2]["weights"][..., 0])
  with pytest.raises(ValueError, match="unknown record fields"):
    list(records.iter_arrays(model, TOK, ("weights_key1",), store=store))
  with pytest.raises(ValueError, match="unknown record fields"):
    list(records.iter_layers(model, TOK, fields=("weights_key0",), store=store))


def test_entry_without_a_derived_column_is_recomputed(model, tmp_path, counted, capfd):
  """An entry whose manifest lacks the asked column (older writer) is not read: recomputed."""
  store = records.RecordStore(tmp_path)
  collect(model, store)
  folder = _entry(store)
  man = json.loads((folder / "manifest.json").read_text())
  del man["layers"]["0"]["weights_key0"]
  (folder / "manifest.json").write_text(json.dumps(man))
  counted.clear()
  got = {i: a for i, a, _ in records.iter_arrays(model, TOK, ("weights_key0",), store=store)}
  assert len(counted) == 1 and sorted(got) == [0, 1, 2]
  assert "malformed manifest" in capfd.readouterr().err


def test_abandoned_iteration_leaves_no_entry(model, tmp_path):
  store = records.RecordStore(tmp_path)
  it = records.iter_layers(model, TOK, store=store)
  next(it)
  it.close()
  assert list(tmp_path.iterdir()) == []


def test_store_from_env(monkeypatch, tmp_path):
  monkeypatch.delenv(records.ENV_DIR, raising=False)
  assert records.store_from_env() is None
  monkeypatch.setenv(records.ENV_DIR, "off")
  assert records.store_from_env() is None
  monkeypatch.setenv(records.ENV_DIR, str(tmp_path))
  assert records.store_from_env().root == tmp_path
  with records.session_store() as st:
    assert st.root == tmp_path
  monkeypatch.delenv(records.ENV_DIR)
  with records.session_store() as st:
    kept = st.root
    assert kept.is_dir()
  assert not kept.exists()


def test_compilation_cache_folder_and_opt_out(monkeypatch, tmp_path):
  from limits.records import compilation

  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  monkeypatch.delenv(compilation.ENV, raising=False)
  assert compilation.cache_dir() == tmp_path / "limits" / "jax-compilation"
  monkeypatch.setenv(compilation.ENV, str(tmp_path / "mine"))
  assert compilation.cache_dir() == tmp_path / "mine"
  for off in ("off", "0"):
    monkeypatch.setenv(compilation.ENV, off)
    assert compilation.cache_dir() is None
  # A folder the environment already chose (the tests' own) is left alone: nothing changes.
  assert os.environ.get("JAX_COMPILATION_CACHE_DIR")
  before = jax.config.jax_compilation_cache_dir
  monkeypatch.delenv(compilation.ENV)
  assert compilation.enable() is None and jax.config.jax_compilation_cache_dir == before


def test_compilation_cache_is_written_by_a_cli_process(tmp_path):
  """In a fresh process (as a CLI entry): JAX picks the folder up and writes a program there."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT", "LIMITS_COMPILE"))}
  env["XDG_CACHE_HOME"] = str(tmp_path)
  # Every program is written whatever its compile time (an idle machine compiles this one in
  # well under enable()'s 0.1 s threshold); enable() keeps a setting the environment made.
  env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  code = ("from limits.records import compilation as c; f = c.enable(); import jax, "
          "jax.numpy as jnp; jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready(); "
          "print(f, jax.config.jax_compilation_cache_dir)")
  p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                     cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     timeout=300)
  assert p.returncode == 0, p.stderr
  want = tmp_path / "limits" / "jax-compilation"
  assert p.stdout.split() == [str(want), str(want)]
  assert any(want.iterdir())  # the compiled program was written


def test_runner_gives_steps_out_records_and_removes_it_only_after_success(tmp_path,
                                                                           monkeypatch):
  monkeypatch.delenv(records.ENV_DIR, raising=False)
  env = reproduction_runner.records_env(tmp_path)
  assert env[records.ENV_DIR] == str(tmp_path / "records")
  monkeypatch.setenv(records.ENV_DIR, "off")
  assert reproduction_runner.records_env(tmp_path)[records.ENV_DIR] == "off"
  (tmp_path / "records" / "x").mkdir(parents=True)
  reproduction_runner.remove_records(tmp_path, {"a": {"status": "ok"},
                                                "b": {"status": "failed"}}, names=("a", "b"))
  assert (tmp_path / "records").is_dir()  # kept for the rerun
  # --only=a: part of the plan ran and succeeded; the other steps will read the records.
  reproduction_runner.remove_records(tmp_path, {"a": {"status": "ok"}}, names=("a", "b"))
  assert (tmp_path / "records").is_dir()
  # The default plan is the whole of limits.reproduction.STEPS.
  every = {n: {"status": "ok"} for n in reproduction.STEP_NAMES}
  reproduction_runner.remove_records(tmp_path, dict(list(every.items())[:-1]))
  assert (tmp_path / "records").is_dir()
  reproduction_runner.remove_records(tmp_path, {"a": {"status": "ok"}, "b": {"status": "ok"}},
                                     names=("a", "b"))
  assert not (tmp_path / "records").exists()
  (tmp_path / "records").mkdir()
  reproduction_runner.remove_records(tmp_path, every)
  assert not (tmp_path / "records").exists()
  shutil.rmtree(tmp_path, ignore_errors=True)


def test_runner_asks_malloc_for_huge_pages_unless_the_caller_set_it(tmp_path, monkeypatch):
  monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
  assert reproduction_runner.records_env(tmp_path)["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")  # the caller's kept
  assert (reproduction_runner.records_env(tmp_path)["GLIBC_TUNABLES"]
          == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")  # the caller's choice wins
  assert reproduction_runner.records_env(tmp_path)["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb_x=0")  # another name: added
  assert reproduction_runner.records_env(tmp_path)["GLIBC_TUNABLES"].endswith(
      ":glibc.malloc.hugetlb=1")


def test_unwritable_store_still_gives_the_forward(model, tmp_path, capfd):
  blocker = tmp_path / "file"
  blocker.write_text("not a folder")
  assert_same(collect(model, records.RecordStore(blocker / "store")), reference(model))
  assert "cannot write" in capfd.readouterr().err


@pytest.mark.parametrize("where", ["add", "background"])
@pytest.mark.parametrize("failing_layer", [0, 2])
def test_failed_write_gives_the_forward_and_no_entry(model, tmp_path, capfd,
                                                     monkeypatch, failing_layer, where):
  """A write that fails (first or last layer; raised by ``Writer.add`` or inside the
  background thread that writes the files): the caller still gets every layer with the
  forward's numbers, one warning, and no entry nor temporary folder is left; the next call
  computes and writes the entry."""
  from limits.records import store as store_lib

  real_add, real_write = store_lib.Writer.add, store_lib._write_layer

  def add(self, layer, arrays):
    if layer == failing_layer:
      raise OSError(28, "No space left on device")
    return real_add(self, layer, arrays)

  def write(folder, layer, arrays):
    if layer == failing_layer:
      raise OSError(28, "No space left on device")
    return real_write(folder, layer, arrays)

  if where == "add":
    monkeypatch.setattr(store_lib.Writer, "add", add)
  else:
    monkeypatch.setattr(store_lib, "_write_layer", write)
  store = records.RecordStore(tmp_path)
  ref = reference(model)
  assert_same(collect(model, store), ref)
  err = capfd.readouterr().err
  assert err.count("write failed") == 1 and "No space left" in err, err
  assert list(tmp_path.iterdir()) == []
  monkeypatch.setattr(store_lib.Writer, "add", real_add)
  monkeypatch.setattr(store_lib, "_write_layer", real_write)
  assert_same(collect(model, store), ref)
  assert len(list(tmp_path.iterdir())) == 1


def test_writer_writes_in_the_background_and_commit_waits(tmp_path, monkeypatch):
  """``Writer.add`` returns while the layer's files are still being written (the caller's work
  overlaps the disk's), marks the arrays read-only, keeps at most WRITE_AHEAD_BYTES in flight;
  ``commit`` waits for every write: the committed entry reads back bit for bit."""
  import threading

  from limits.records import store as store_lib

  gate = threading.Event()
  started = []
  real_write = store_lib._write_layer

  def slow_write(folder, layer, arrays):
    started.append(layer)
    assert gate.wait(10), "the writer was never released"
    return real_write(folder, layer, arrays)

  monkeypatch.setattr(store_lib, "_write_layer", slow_write)
  key = {"test": "background"}
  w = store_lib.RecordStore(tmp_path).writer(key)
  a = {"weights": np.arange(12, dtype=np.float32).reshape(1, 3, 4)}
  b = {"weights": -np.arange(12, dtype=np.float32).reshape(1, 3, 4)}
  w.add(0, a)  # returns with layer 0's write blocked
  assert not a["weights"].flags.writeable
  w.add(1, b)
  assert not any(w.tmp.glob("*.bin"))  # nothing written yet: both layers in flight
  gate.set()
  w.commit(2)
  entry = store_lib.RecordStore(tmp_path).open(key)
  np.testing.assert_array_equal(entry.read(0, ["weights"])["weights"], a["weights"])
  np.testing.assert_array_equal(entry.read(1, ["weights"])["weights"], b["weights"])
  assert sorted(started) == [0, 1]
  # Over the budget: the writer waits for the oldest write before taking another layer.
  monkeypatch.setattr(store_lib, "WRITE_AHEAD_BYTES", 60)  # one 48-byte layer fits, not two
  gate.clear()
  w2 = store_lib.RecordStore(tmp_path / "b").writer(key)
  w2.add(0, {"weights": np.zeros((1, 3, 4), np.float32)})
  done = threading.Event()
  t = threading.Thread(target=lambda: (w2.add(1, {"weights": np.ones((1, 3, 4), np.float32)}),
                                       done.set()))
  t.start()
  assert not done.wait(0.3)  # blocked behind layer 0's write
  gate.set()
  assert done.wait(10)
  t.join()
  w2.commit(2)



def test_next_layer_is_read_in_the_background_while_this_one_is_used(model, tmp_path,
                                                                      monkeypatch):
  """Reading an entry, layer i + 1 is mapped and checked by a background thread while the
  caller holds layer i; the layers come in order, bit for bit the forward's."""
  import threading

  from limits.records import store as store_lib

  store = records.RecordStore(tmp_path)
  ref = reference(model)
  collect(model, store)
  calls, real = [], store_lib.Entry.read

  def read(self, layer, fields):
    calls.append((layer, threading.current_thread().name))
    return real(self, layer, fields)

  monkeypatch.setattr(store_lib.Entry, "read", read)
  got = {}
  for i, r in records.iter_layers(model, TOK, store=store, fields=("weights",)):
    want = list(range(min(i + 2, 3)))  # layer i + 1 is read while the caller holds layer i
    for _ in range(500):
      if len(calls) == len(want):
        break
      threading.Event().wait(0.01)
    assert [c[0] for c in calls] == want
    got[i] = {"weights": r.weights}
  assert all(name.startswith("records-read") for _, name in calls)
  assert_same(got, {i: {"weights": ref[i]["weights"]} for i in ref})


def test_corrupt_last_layer_found_by_the_read_ahead_recomputes(model, tmp_path, counted, capfd):
  """A damaged file of the last layer, read ahead while the previous layer is used, is raised
  when its layer is reached: the earlier layers come from the entry, the forward reruns once
  and the entry is rewritten."""
  store = records.RecordStore(tmp_path)
  ref = reference(model)
  collect(model, store)
  _flip_byte(_entry(store) / "002.weights.bin")
  counted.clear()
  assert_same(collect(model, store, fields=("weights", "x")),
              {i: {f: ref[i][f] for f in ("weights", "x")} for i in ref})
  assert len(counted) == 1
  assert capfd.readouterr().err.count("checksum") == 1
  counted.clear()
  collect(model, store, fields=("weights",))
  assert counted == []


def test_stopping_early_leaves_no_read_thread(model, tmp_path):
  import threading

  store = records.RecordStore(tmp_path)
  collect(model, store)
  it = records.iter_layers(model, TOK, store=store, fields=("weights",))
  next(it)
  it.close()
  assert not [t for t in threading.enumerate() if t.name.startswith("records-read")]


def test_layers_above_the_read_ahead_budget_are_read_when_reached(model, tmp_path,
                                                                  monkeypatch):
  """Above READ_AHEAD_BYTES a layer is read in the caller's thread when it is reached (its
  pages would otherwise be resident beside the previous layer's: L = 4,096 on SmolLM2)."""
  import threading

  from limits.records import store as store_lib

  store = records.RecordStore(tmp_path)
  collect(model, store)
  calls, real = [], store_lib.Entry.read

  def read(self, layer, fields):
    calls.append(threading.current_thread().name)
    return real(self, layer, fields)

  monkeypatch.setattr(store_lib.Entry, "read", read)
  size = store_lib.Entry(_entry(store), key_lib.window_key(model, TOK)).nbytes(0, ("weights",))
  assert size == 2 * 48 * 48 * 4  # (1, H, L, L) float32 from the manifest
  monkeypatch.setattr(records, "READ_AHEAD_BYTES", size - 1)
  collect(model, store, fields=("weights",))
  assert calls and all(name == threading.current_thread().name for name in calls)
  calls.clear()
  monkeypatch.setattr(records, "READ_AHEAD_BYTES", size)
  collect(model, store, fields=("weights",))
  assert calls and all(name.startswith("records-read") for name in calls)
