"""The remote cache in ember-core, against an in-memory blob store: entries travel between two cache roots (two
machines), code only when signed with the team key, poisoned entries are misses with their reason, and a store that
is down costs one try and one warning. (tests/test_remote_redis.py runs the same against a real Redis server.)"""

from __future__ import annotations

import json
import logging
import os
import tempfile

import pytest
from ember_core import DiskCache
from ember_core.caches import (
    BackendUnavailable,
    BadEntry,
    PackedEntry,
    TeamKey,
    TeamKeyError,
    _registry,
    forget_remote_caches,
    register_blob_store,
    remote_cache,
    team_key,
)
from ember_core.caches import _directory as _cache_dir
from ember_core.caches._packed import MAGIC, pack, unpack
from ember_core.caches._remote import shown_url
from ember_core.testing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

KEY = "k" * 40
SECRET = "a team secret of enough bytes"


class MemoryStore:
    """A blob store in a dict; `down` makes every call fail as an unreachable server's would."""

    def __init__(self):
        self.blobs: dict[str, bytes] = {}
        self.calls = 0
        self.down = False

    def get(self, name):
        self.calls += 1
        if self.down:
            raise BackendUnavailable("connection refused")
        return self.blobs.get(name)

    def put(self, name, data):
        self.calls += 1
        if self.down:
            raise BackendUnavailable("connection refused")
        self.blobs[name] = data

    def close(self):
        pass


@pytest.fixture
def store(monkeypatch):
    memory = MemoryStore()
    register_blob_store("memory", lambda url, timeout: memory)
    monkeypatch.setenv("EMBER_REMOTE_CACHE", "memory://team")
    monkeypatch.delenv("EMBER_CACHE_KEY", raising=False)
    monkeypatch.delenv("EMBER_CACHE_KEY_FILE", raising=False)
    forget_remote_caches()
    _registry.remote_missed.clear()
    yield memory
    forget_remote_caches()
    _registry.remote_missed.clear()


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """machine(name): switch to that machine's own, empty cache root (as a second host would have)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def use(name: str):
        monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / name))
        _cache_dir.forget_opened()
        _registry.remote_missed.clear()
    yield use
    _cache_dir.forget_opened()


def data_cache() -> DiskCache:
    return DiskCache("unit_plans", ("plan",))


def code_cache() -> DiskCache:
    return DiskCache("unit_libs", ("so", "cpp"), loaded=("so",), machine=("cpu",))


def test_an_entry_stored_on_one_machine_is_a_hit_on_another(store, machine):
    cache = data_cache()
    machine("a")
    cache.store(KEY, {"plan": b"the plan"}, {"graph": "g"})
    assert len(store.blobs) == 1
    machine("b")
    assert not (cache.directory / f"{KEY}.plan").exists()
    found = cache.lookup(KEY, {"graph": "g"})
    assert found.hit and found.data["plan"] == b"the plan" and found.origin == "memory://team"
    again = cache.lookup(KEY, {"graph": "g"})  # now a local entry, signed with b's own key
    assert again.hit and again.origin == ""


def test_code_travels_only_signed_with_the_team_key(store, machine, monkeypatch):
    cache = code_cache()
    machine("a")
    cache.store(KEY, {"so": b"\x7fELF native", "cpp": b"int f();"}, {})
    assert store.blobs == {}  # unsigned code would be refused by every reader: not shared at all
    monkeypatch.setenv("EMBER_CACHE_KEY", SECRET)
    cache.store(KEY, {"so": b"\x7fELF native", "cpp": b"int f();"}, {})
    assert len(store.blobs) == 1
    machine("b")
    found = cache.lookup(KEY)
    assert found.hit and found.origin and os.pread(found.opened["so"].fd, 100, 0) == b"\x7fELF native"


def test_code_signed_with_another_key_or_none_is_a_miss_with_the_reason(store, machine, monkeypatch, caplog):
    cache = code_cache()
    monkeypatch.setenv("EMBER_CACHE_KEY", SECRET)
    machine("a")
    cache.store(KEY, {"so": b"\x7fELF", "cpp": b"src"}, {})
    machine("b")
    monkeypatch.setenv("EMBER_CACHE_KEY", "another secret of enough bytes")
    with caplog.at_level(logging.WARNING, "ember.cache"):
        found = cache.lookup(KEY)
    assert not found.hit and "signed with another key" in found.reason and "signed with another key" in caplog.text
    machine("c")
    monkeypatch.delenv("EMBER_CACHE_KEY")
    found = cache.lookup(KEY)
    assert not found.hit and "no team key is configured" in found.reason


def rewritten(blob: bytes, change) -> bytes:
    """blob with its header changed by `change(header)` and its length brought up to date."""
    start = len(MAGIC) + 4
    length = int.from_bytes(blob[len(MAGIC):start], "big")
    header = json.loads(blob[start:start + length])
    change(header)
    text = json.dumps(header).encode()
    return MAGIC + len(text).to_bytes(4, "big") + text + blob[start + length:]


@pytest.mark.parametrize("poison, reason", [
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "sha256"),  # a file's last byte
    (lambda b: b[:-3], "truncated"),
    (lambda b: b.replace(b'"graph":"g"', b'"graph":"h"'), "signature does not match"),
    (lambda b: rewritten(b, lambda h: h["meta"].update(x={"y": 1})), "meta 'x' is"),  # wrong types
    (lambda b: rewritten(b, lambda h: h.update(files=[["plan", "8", "0" * 64]])), "not a list of [suffix, size"),
    (lambda b: rewritten(b, lambda h: h.update(signature=None)), "not signed"),
    (lambda b: b"junk" + b, "not an ember cache entry"),
])
def test_a_poisoned_entry_is_a_miss_rebuilt_and_replaced(store, machine, monkeypatch, caplog, poison, reason):
    cache = data_cache()
    monkeypatch.setenv("EMBER_CACHE_KEY", SECRET)
    machine("a")
    cache.store(KEY, {"plan": b"the plan"}, {"graph": "g"})
    (name, blob), = store.blobs.items()
    store.blobs[name] = poison(blob)
    machine("b")
    with caplog.at_level(logging.WARNING, "ember.cache"):
        found = cache.lookup(KEY, {"graph": "g"})
    assert not found.hit and reason in found.reason and "remote cache's entry is bad" in found.reason
    assert reason in caplog.text and not (cache.directory / f"{KEY}.plan").exists()
    cache.store(KEY, {"plan": b"the plan"}, {"graph": "g"})  # the rebuild replaces the poisoned entry
    assert store.blobs[name] == blob


def test_an_entry_of_another_build_is_not_used(store, machine):
    cache = data_cache()
    machine("a")
    cache.store(KEY, {"plan": b"the plan"}, {"graph": "g"})
    machine("b")
    found = cache.lookup(KEY, {"graph": "other"})
    assert not found.hit and "another build" in found.reason


def test_an_entry_for_another_cpu_is_not_found(store, machine, monkeypatch):
    cache = code_cache()
    monkeypatch.setenv("EMBER_CACHE_KEY", SECRET)
    machine("a")
    cache.store(KEY, {"so": b"\x7fELF", "cpp": b"src"}, {})
    machine("b")
    facts = DiskCache.machine_facts
    monkeypatch.setattr(DiskCache, "machine_facts", lambda self: {**facts(self), "cpu": "another"})
    assert cache.lookup(KEY).reason == "not cached"  # its remote name hashes the machine's facts


def test_a_down_server_costs_one_try_and_one_warning(store, machine, caplog):
    cache = data_cache()
    machine("a")
    store.down = True
    with caplog.at_level(logging.INFO, "ember.cache"):
        assert cache.lookup(KEY).reason == "not cached"
        cache.store(KEY, {"plan": b"p"}, {})
        assert cache.lookup("x" * 40).reason == "not cached"
    assert store.calls == 1
    assert [r.levelname for r in caplog.records if "remote cache" in r.message] == ["WARNING"]


def test_the_remote_is_asked_once_per_entry_and_process(store, machine):
    cache = data_cache()
    machine("a")
    cache.lookup(KEY)
    cache.lookup(KEY)
    assert store.calls == 1


def test_unknown_scheme_or_bad_settings_mean_no_remote_cache(monkeypatch, caplog):
    forget_remote_caches()
    monkeypatch.setenv("EMBER_REMOTE_CACHE", "gopher://x")
    with caplog.at_level(logging.WARNING, "ember.cache"):
        assert remote_cache() is None
    assert "no store for scheme 'gopher'" in caplog.text
    forget_remote_caches()
    monkeypatch.setenv("EMBER_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("EMBER_REMOTE_CACHE_TIMEOUT", "-1")
    assert remote_cache() is None
    forget_remote_caches()


def test_an_unusable_team_key_means_no_remote_cache_said_once(store, monkeypatch, caplog):
    forget_remote_caches()
    monkeypatch.setenv("EMBER_CACHE_KEY", "short")
    with caplog.at_level(logging.WARNING, "ember.cache"):
        assert remote_cache() is None and remote_cache() is None
    assert caplog.text.count("at least 16") == 1


def test_the_password_is_not_in_messages(store):
    assert shown_url("redis://user:hunter2@host:6379/0") == "redis://user:***@host:6379/0"


def test_team_key_from_a_file_must_be_private_and_long_enough(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_CACHE_KEY", raising=False)
    path = tmp_path / "key"
    path.write_text(SECRET + "\n")
    path.chmod(0o644)
    monkeypatch.setenv("EMBER_CACHE_KEY_FILE", str(path))
    with pytest.raises(TeamKeyError, match="other users may read"):
        team_key()
    path.chmod(0o600)
    assert team_key().secret == SECRET.encode()
    monkeypatch.setenv("EMBER_CACHE_KEY", SECRET)
    with pytest.raises(TeamKeyError, match="set one"):
        team_key()
    monkeypatch.delenv("EMBER_CACHE_KEY_FILE")
    monkeypatch.setenv("EMBER_CACHE_KEY", "short")
    with pytest.raises(TeamKeyError, match="at least 16"):
        team_key()


def _signed() -> tuple[bytes, object]:
    key = TeamKey(SECRET.encode(), "test")
    entry = PackedEntry("unit_libs", KEY, {"so": b"\x7fELF code", "cpp": b"int f();"}, {"n": 1}, {"cpu": "c"})
    return pack(entry, key), key


def test_pack_round_trip():
    blob, key = _signed()
    entry = unpack(blob, key, code=frozenset({"so"}), expect=("unit_libs", KEY), suffixes=("so", "cpp"))
    assert entry.files == {"so": b"\x7fELF code", "cpp": b"int f();"} and entry.signed and entry.meta == {"n": 1}


@fuzz_settings(200)
@given(st.data())
def test_any_changed_byte_of_a_signed_entry_is_refused(data):
    blob, key = _signed()
    at = data.draw(st.integers(len(MAGIC), len(blob) - 1))
    flip = data.draw(st.integers(1, 255))
    changed = blob[:at] + bytes([blob[at] ^ flip]) + blob[at + 1:]
    with pytest.raises(BadEntry):
        unpack(changed, key, code=frozenset({"so"}))


@fuzz_settings(200)
@given(st.binary(max_size=400))
def test_any_bytes_are_an_entry_or_a_bad_entry(raw):
    _, key = _signed()
    for data in (raw, MAGIC + raw, MAGIC + len(raw).to_bytes(4, "big") + raw):
        try:
            unpack(data, key)
        except BadEntry:
            pass
