"""ember-core's disk cache: private directories, verified entries that repair themselves, locks, pruning, tidying."""

from __future__ import annotations

import atexit
import json
import os
import stat
import tempfile
import threading
import time

import pytest
from ember_core import DiskCache, cache_root, cache_size_limit, clear_disk_cache, disk_cache_usage
from ember_core.caches import _directory as _cache_dir
from ember_core.caches._file_lock import file_lock
from ember_core.caches._root import TAG_NAME, check_private
from ember_core.testing import PAYLOADS, assert_no_code_ran, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

SHA = "0" * 64


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A cache root and a system temp dir of this test's own; every cache directory tidied afresh on first use."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "root"))
    monkeypatch.delenv("EMBER_CACHE_SIZE_MB", raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(_cache_dir, "_swept_temp", False)
    _cache_dir.forget_opened()
    yield tmp_path / "root"
    _cache_dir.forget_opened()


def stored(cache: DiskCache, key: str, payload: bytes = b"library bytes") -> dict:
    return cache.store(key, {"so": payload, "src": b"source of " + key.encode()}, {"source_sha256": key})


def names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != TAG_NAME)


def test_root_is_ember_cache_dir_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "a"))
    assert cache_root() == tmp_path / "a"
    monkeypatch.delenv("EMBER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "ember"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "ember"


def test_directory_is_private_ours_and_tagged(root):
    d = DiskCache("unit", ("so", "src")).directory
    st = os.lstat(d)
    assert d == root / "unit" and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert (d / TAG_NAME).read_bytes().startswith(b"Signature: 8a477f597d28d172789f06886806bc55")


def test_directory_that_is_a_symlink_is_refused_for_a_temporary_one_removed_at_exit(root, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root.mkdir()
    (root / "unit").symlink_to(elsewhere)
    assert "symlink" in check_private(root / "unit")
    exits = []
    monkeypatch.setattr(atexit, "register", lambda fn, *a: exits.append((fn, a)))
    d = DiskCache("unit", ("so", "src")).directory
    assert d.parent == tmp_path / "tmp" and d.name.startswith("ember-cache-unit-")
    (fn, args), = exits
    fn(*args)
    assert not d.exists() and elsewhere.exists()


def test_stored_entry_is_a_hit_with_its_files_and_meta(root):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    found = cache.lookup("k1", {"source_sha256": "k1"})
    assert found.hit and found.files["so"].read_bytes() == b"library bytes"
    assert found.meta == {"source_sha256": "k1"}
    assert names(cache.directory) == ["k1.json", "k1.so", "k1.src"]


def test_absent_entry_is_a_miss_not_cached(root):
    assert DiskCache("unit", ("so", "src")).lookup("nothing").reason == "not cached"


def test_entry_of_another_build_is_a_miss_and_removed(root):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    found = cache.lookup("k1", {"source_sha256": "other"})
    assert not found.hit and "another build" in found.reason and names(cache.directory) == []


def test_a_bad_entry_is_logged_with_its_files(root, caplog):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    (cache.directory / "k1.so").write_bytes(b"flipped")
    with caplog.at_level("WARNING", logger="ember.cache"):
        assert not cache.lookup("k1").hit
    assert f"{cache.directory / 'k1'}.*" in caplog.text and "k1.so does not match its recorded sha256" in caplog.text


def test_clear_removes_this_caches_entries_only(root):
    mine, other = DiskCache("unit", ("so", "src")), DiskCache("other", ("so", "src"))
    stored(mine, "k1"), stored(mine, "k2"), stored(other, "k1")
    assert mine.clear() == 2
    assert not mine.lookup("k1").hit and not mine.lookup("k2").hit and other.lookup("k1").hit


def test_a_hit_refreshes_the_entrys_recency(root):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    os.utime(cache.path("k1", "json"), (1000, 1000))
    assert cache.lookup("k1").hit
    assert os.stat(cache.path("k1", "json")).st_mtime > time.time() - 60


def test_bad_keys_and_suffixes_are_refused(root):
    with pytest.raises(ValueError, match="cache key"):
        DiskCache("unit", ("so",)).lookup("../escape")
    with pytest.raises(ValueError, match="suffixes"):
        DiskCache("unit", ("json",))


def _write(data: bytes):
    def corrupt(path):
        _clear(path)
        path.write_bytes(data)
    return corrupt


def _clear(path):
    if path.is_dir() and not path.is_symlink():
        path.rmdir() if not any(path.iterdir()) else None
    elif path.exists() or path.is_symlink():
        path.unlink()


def _sidecar_fields(**fields):
    def corrupt(path):
        data = json.loads(path.read_text())
        data.update(fields)
        path.write_text(json.dumps(data))
    return corrupt


def _directory(path):
    _clear(path)
    path.mkdir()
    (path / "inside").write_text("x")


def _fifo(path):
    _clear(path)
    os.mkfifo(path)


def _symlink_outside(path):
    outside = path.parent.parent.parent / "outside.txt"
    outside.write_text("not ember's")
    _clear(path)
    path.symlink_to(outside)


def _truncated(path):
    data = path.read_bytes()
    _write(data[: len(data) // 2])(path)


CORRUPTIONS = {
    ("json", "garbage bytes"): _write(b"\xff\xfe\x00garbage"),
    ("json", "empty"): _write(b""),
    ("json", "list"): _write(b"[]"),
    ("json", "string"): _write(b'"text"'),
    ("json", "key is an int"): _sidecar_fields(key=5),
    ("json", "format is a bool"): _sidecar_fields(ember_cache=True),
    ("json", "files is a list"): _sidecar_fields(files=[1, 2]),
    ("json", "sha is nested"): _sidecar_fields(files={"so": [[[SHA]]], "src": SHA}),
    ("json", "sha is a number"): _sidecar_fields(files={"so": 1e308, "src": SHA}),
    ("json", "meta is garbage"): _sidecar_fields(meta={"a": {"b": [None, {"c": 1}]}}),
    ("json", "NaN"): _write(b'{"ember_cache": NaN}'),
    ("json", "huge number"): _write(b'{"ember_cache": ' + b"9" * 6000 + b"}"),
    ("json", "deep nesting"): _write(b"[" * 30000 + b"]" * 30000),
    ("json", "too big"): _write(b'{"pad": "' + b"x" * 70000 + b'"}'),
    ("json", "directory"): _directory,
    ("json", "fifo"): _fifo,
    ("json", "symlink outside"): _symlink_outside,
    ("so", "directory"): _directory,
    ("so", "fifo"): _fifo,
    ("so", "symlink outside"): _symlink_outside,
    ("so", "truncated"): _truncated,
    ("so", "empty"): _write(b""),
    ("so", "missing"): _clear,
    ("src", "directory"): _directory,
    ("src", "other bytes"): _write(b"edited by hand"),
}


@pytest.mark.parametrize("where,how", sorted(CORRUPTIONS), ids=lambda v: v.replace(" ", "-"))
def test_corrupt_entry_is_a_miss_removed_then_stored_again(root, where, how):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1", b"\x7fELF" + bytes(range(256)) * 8)
    CORRUPTIONS[where, how](cache.path("k1", where))
    found = cache.lookup("k1", {"source_sha256": "k1"})
    assert not found.hit and found.reason and found.reason != "not cached"
    assert names(cache.directory) == [], "the bad entry was not removed"
    assert not (root.parent / "outside.txt").exists() or (root.parent / "outside.txt").read_text() == "not ember's"
    stored(cache, "k1")
    assert cache.lookup("k1", {"source_sha256": "k1"}).hit


@pytest.mark.skipif(os.getuid() == 0, reason="root reads files of mode 0")
@pytest.mark.parametrize("where", ["json", "so"])
def test_unreadable_file_is_a_miss_and_removed(root, where):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    os.chmod(cache.path("k1", where), 0)
    assert not cache.lookup("k1").hit and names(cache.directory) == []


@pytest.mark.parametrize("where", ["json", "so", "src"])
def test_file_that_cannot_be_opened_is_a_miss_and_removed(root, where, monkeypatch):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    denied, real_open = cache.path("k1", where).name, os.open

    def open_denied(path, *args, **kwargs):  # files are opened by name in their directory's descriptor
        if os.path.basename(str(path)) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_denied)
    found = cache.lookup("k1")
    assert not found.hit and "Permission denied" in found.reason and names(cache.directory) == []


def test_store_replaces_a_directory_at_an_entry_path(root):
    cache = DiskCache("unit", ("so", "src"))
    _directory(cache.path("k1", "so"))
    stored(cache, "k1")
    assert cache.lookup("k1").hit


def test_size_limit_reads_ember_cache_size_mb(monkeypatch):
    monkeypatch.delenv("EMBER_CACHE_SIZE_MB", raising=False)
    assert cache_size_limit() == 1024 * 1024 * 1024
    monkeypatch.setenv("EMBER_CACHE_SIZE_MB", "0.5")
    assert cache_size_limit() == 512 * 1024
    monkeypatch.setenv("EMBER_CACHE_SIZE_MB", "0")
    assert cache_size_limit() is None
    monkeypatch.setenv("EMBER_CACHE_SIZE_MB", "lots")
    assert cache_size_limit() == 1024 * 1024 * 1024


def test_store_prunes_least_recently_used_entries_first(root, monkeypatch):
    cache = DiskCache("unit", ("so", "src"))
    for k in range(4):
        stored(cache, f"k{k}", b"x" * 1000)
        os.utime(cache.path(f"k{k}", "json"), (1000 + k, 1000 + k))
    cache.lookup("k0")  # k0 is now the most recently used
    size = sum(p.stat().st_size for p in cache.directory.glob("k0.*"))
    monkeypatch.setenv("EMBER_CACHE_SIZE_MB", str(3.5 * size / 2**20))  # room for three entries
    stored(cache, "k4", b"x" * 1000)
    left = {p.stem for p in cache.directory.glob("*.json")}
    assert left == {"k0", "k3", "k4"}


def test_the_entry_just_stored_is_kept_even_over_the_limit(root, monkeypatch):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "old")
    monkeypatch.setenv("EMBER_CACHE_SIZE_MB", str(10 / 2**20))
    stored(cache, "new", b"y" * 5000)
    assert {p.stem for p in cache.directory.glob("*.json")} == {"new"}


def _aged(path, seconds=3600):
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def test_start_up_removes_stale_work_folders_not_held_by_a_live_build(root):
    d = root / "unit"
    d.mkdir(parents=True, mode=0o700)
    for name in (".build-dead-abc", ".build-held-abc", ".build-fresh-abc", ".build-legacy1"):
        (d / name).mkdir()
        (d / name / "ember.cpp").write_text("x")
    for name in (".build-dead-abc", ".build-held-abc", ".build-legacy1"):
        _aged(d / name)
    (d / ".k1.json.abc.tmp").write_bytes(b"half")
    _aged(d / ".k1.json.abc.tmp")
    (d / "half.so").write_bytes(b"no sidecar")
    _aged(d / "half.so")
    (d / "dead.lock").write_bytes(b"")
    _aged(d / "dead.lock")
    (d / "notes.txt.bak").write_text("not ember's")
    _aged(d / "notes.txt.bak")
    with file_lock(d / "held.lock"):
        assert DiskCache("unit", ("so", "src")).directory.is_dir()
        assert names(d) == [".build-fresh-abc", ".build-held-abc", "held.lock", "notes.txt.bak"]


def test_start_up_removes_stale_fallback_directories_of_dead_processes(root, tmp_path):
    temp = tmp_path / "tmp"
    for name in ("ember-cache-cpp-dead", "ember-cpp-abcd1234", "ember-cache-cpp-new", "ember-project"):
        (temp / name).mkdir()
    (temp / "ember-cache-cpp-live").mkdir()
    for name in ("ember-cache-cpp-dead", "ember-cpp-abcd1234", "ember-cache-cpp-live", "ember-project"):
        _aged(temp / name, 2 * 86400)
    with file_lock(temp / "ember-cache-cpp-live" / ".alive.lock"):
        assert DiskCache("unit", ("so", "src")).directory.is_dir()
        assert sorted(p.name for p in temp.iterdir()) == ["ember-cache-cpp-live", "ember-cache-cpp-new",
                                                          "ember-project"]


def test_lock_makes_a_second_builder_wait_then_find_the_entry(root):
    cache = DiskCache("unit", ("so", "src"))
    builds, results = [], []

    def build():
        with cache.lock("k1") as held:
            assert held
            found = cache.lookup("k1")
            if not found.hit:
                builds.append(1)
                time.sleep(0.3)
                stored(cache, "k1")
            results.append(cache.lookup("k1").hit)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and results == [True, True, True]
    assert not cache.path("k1", "lock").exists()


def test_lock_not_waited_for_says_it_is_not_held(root):
    cache = DiskCache("unit", ("so", "src"))
    with cache.lock("k1") as first:
        other = []
        t = threading.Thread(target=lambda: other.append(cache.lock("k1", wait=False).__enter__()))
        t.start()
        t.join()
        assert first and other == [False]


def test_lookup_leaves_an_entry_being_rebuilt_to_its_builder(root):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    cache.path("k1", "src").write_bytes(b"changed")
    seen = []
    with cache.lock("k1"):
        t = threading.Thread(target=lambda: seen.append(cache.lookup("k1")))
        t.start()
        t.join()
        assert not seen[0].hit and cache.path("k1", "so").exists()


def test_usage_and_clear_see_only_embers_files(root):
    cache = DiskCache("unit", ("so", "src"))
    stored(cache, "k1")
    stored(cache, "k2")
    (cache.directory / "README").write_text("mine")
    (root / "unrelated").mkdir()
    (root / "unrelated" / "k9.json").write_text("{}")
    (usage,) = [u for u in disk_cache_usage() if u.name == "unit"]
    assert usage.entries == 2 and usage.bytes > 0 and usage.problem is None
    assert "unrelated" not in [u.name for u in disk_cache_usage()]
    (cleared,) = [u for u in clear_disk_cache() if u.name == "unit"]
    assert cleared.entries == 2
    assert names(cache.directory) == ["README"] and (cache.directory / TAG_NAME).exists()
    assert (root / "unrelated" / "k9.json").exists()


# Fuzzing: whatever the sidecar holds, lookup ends in a miss or a hit on the true files, quickly, and never raises.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.sampled_from(PAYLOADS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
FIELDS = st.sampled_from(["ember_cache", "key", "files", "meta", "so", "src"])


def _near_valid(fields: dict) -> bytes:
    """A valid sidecar of entry k1 with some fields (or files' digests) replaced by random JSON."""
    def build(valid: dict) -> bytes:
        files = {**valid["files"], **{k: v for k, v in fields.items() if k in ("so", "src")}}
        data = {**valid, "files": files, **{k: v for k, v in fields.items() if k not in ("so", "src")}}
        return json.dumps(data).encode()
    return build


SIDECARS = st.one_of(
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=2000),
    st.dictionaries(FIELDS, JSON_VALUES, min_size=1, max_size=3).map(_near_valid),
)


@fuzz_settings(200)
@given(sidecar=SIDECARS)
def test_fuzzed_sidecar_is_a_miss_or_a_hit_on_the_true_files(root, sidecar):
    cache = DiskCache("fuzz", ("so", "src"))
    stored(cache, "k1")
    valid = json.loads(cache.path("k1", "json").read_text())
    data = sidecar(valid) if callable(sidecar) else sidecar
    cache.path("k1", "json").write_bytes(data)
    start = time.monotonic()
    found = cache.lookup("k1", {"source_sha256": "k1"})
    assert time.monotonic() - start < 2.0
    if found.hit:
        assert json.loads(data)["files"] == valid["files"] and found.files["so"].read_bytes() == b"library bytes"
    else:
        assert found.reason and names(cache.directory) == []
    assert_no_code_ran()


def test_clear_leaves_a_folder_that_only_has_a_caches_name_alone(root):
    DiskCache("unit2", ("cpp",))  # declared, never used: its folder below is not ember's
    (root / "unit2").mkdir(parents=True, mode=0o700)
    (root / "unit2" / "main.cpp").write_text("int main() {}")
    assert "unit2" not in [u.name for u in clear_disk_cache()]
    assert (root / "unit2" / "main.cpp").exists()
