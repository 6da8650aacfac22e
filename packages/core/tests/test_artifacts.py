"""Portable artifacts in ember-core: `recording()` keeps what a block used and nothing else, and entries saved under
one cache root load into another through the local backend (tests/test_cache_artifacts.py runs whole compiles)."""

from __future__ import annotations

import tempfile

import pytest
from ember_core import DiskCache
from ember_core.caches import LocalBackend, load_artifact, recording, save_artifact
from ember_core.caches import _directory as _cache_dir

KEY_A, KEY_B, KEY_C = "a" * 40, "b" * 40, "c" * 40


@pytest.fixture
def machine(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("EMBER_REMOTE_CACHE", raising=False)
    monkeypatch.delenv("EMBER_CACHE_KEY", raising=False)

    def use(name: str):
        monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / name))
        _cache_dir.forget_opened()
    yield use
    _cache_dir.forget_opened()


def test_recording_keeps_what_the_block_looked_up_or_stored(machine):
    machine("a")
    cache = DiskCache("unit_recorded", ("plan",))
    cache.store(KEY_A, {"plan": b"before"}, {})
    with recording() as entries:
        cache.store(KEY_B, {"plan": b"stored inside"}, {})
        cache.lookup(KEY_C)  # a miss is recorded too: what the block needed
        assert entries == []  # filled when the block ends
    cache.lookup(KEY_A)
    assert entries == [("unit_recorded", KEY_B), ("unit_recorded", KEY_C)]


def test_entries_saved_on_one_root_load_into_another(machine, tmp_path):
    machine("a")
    cache = DiskCache("unit_shipped", ("so", "txt"), loaded=("so",))
    cache.store(KEY_A, {"so": b"\x7fELF code", "txt": b"its source"}, {"n": 1})
    report = save_artifact(tmp_path / "x.ember-cache", [("unit_shipped", KEY_A), ("unit_shipped", KEY_B)])
    assert report.entries == [("unit_shipped", KEY_A)] and report.skipped[0][2] == "not in the local cache any more"
    machine("b")
    assert not cache.lookup(KEY_A, remote=False).hit
    loaded = load_artifact(tmp_path / "x.ember-cache")
    assert loaded.entries == [("unit_shipped", KEY_A)] and not loaded.skipped
    entry = LocalBackend().get(cache, KEY_A)
    assert entry.files == {"so": b"\x7fELF code", "txt": b"its source"} and entry.meta == {"n": 1}
    assert load_artifact(tmp_path / "x.ember-cache").entries == [("unit_shipped", KEY_A)]  # already there: loaded
