"""ResultCache: a stage's result for a graph kept as text in the verified disk cache; every lookup is a hit or a
miss event, and an entry the reader refuses is a logged miss, removed, that names the file and what is wrong."""

import json

import pytest
from ember_core import (
    Graph,
    ResultCache,
    SchemaError,
    clear_result_caches,
    facts_key,
    record_events,
    testing,
)
from ember_core.caches import _directory as _cache_dir

FACTS = {"graph": "f" * 32, "stage": "toy 1.0"}
GRAPH = Graph(name="g")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "root"))
    _cache_dir.forget_opened()
    yield ResultCache("unit_results", "txt", "toy", "toy result")
    _cache_dir.forget_opened()


def read_number(text: str) -> int:
    data = json.loads(text)
    if not isinstance(data.get("n"), int):
        raise SchemaError("n", f"expected an int, got {data.get('n')!r}")
    return data["n"]


def entry_file(cache: ResultCache):
    return cache.disk.path(facts_key(FACTS), "txt")


def restamp(cache: ResultCache, text: bytes, signed: bool = True) -> None:
    """Rewrite the entry's file and its sidecar's sha256, as a consistent entry of other contents would be."""
    testing.restamp(entry_file(cache), text, signed=signed)


def test_a_stored_result_reads_back_as_a_hit_event(cache):
    assert cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    with record_events() as rec:
        assert cache.load(FACTS, GRAPH, read_number) == 7
    [hit] = rec.kinds("disk_cache_hit")
    assert hit.stage == "toy" and hit.graph is GRAPH and hit.data["cache"] == "unit_results"
    assert hit.data["key"] == facts_key(FACTS) and hit.data["file"] == str(entry_file(cache))


def test_nothing_stored_is_a_miss_event_not_cached(cache):
    with record_events() as rec:
        assert cache.load(FACTS, GRAPH, read_number) is None
    [miss] = rec.kinds("disk_cache_miss")
    assert miss.stage == "toy" and miss.data["reason"] == "not cached"


def test_other_facts_are_another_entry(cache):
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    assert cache.load({**FACTS, "stage": "toy 1.1"}, GRAPH, read_number) is None
    assert cache.load(FACTS, GRAPH, read_number) == 7


def test_the_facts_are_kept_in_the_sidecar(cache):
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    sidecar = json.loads(cache.disk.path(facts_key(FACTS), "json").read_text())
    assert sidecar["meta"] == FACTS


def test_flipped_bytes_are_a_miss_naming_the_file_and_the_entry_is_removed(cache, caplog):
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    entry_file(cache).write_bytes(b'{"n": 8}')
    with record_events() as rec, caplog.at_level("WARNING", logger="ember.cache"):
        assert cache.load(FACTS, GRAPH, read_number) is None
    [miss] = rec.kinds("disk_cache_miss")
    assert "does not match its recorded sha256" in miss.data["reason"] and entry_file(cache).name in caplog.text
    assert not entry_file(cache).exists()


def test_an_entry_the_reader_refuses_is_a_miss_naming_file_and_field_then_rebuilt(cache, caplog):
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    restamp(cache, b'{"n": "seven"}')
    with record_events() as rec, caplog.at_level("WARNING", logger="ember.cache"):
        assert cache.load(FACTS, GRAPH, read_number) is None
    [miss] = rec.kinds("disk_cache_miss")
    assert miss.data["reason"] == f"{entry_file(cache)}: n: expected an int, got 'seven'"
    assert str(entry_file(cache)) in caplog.text and "n: expected an int" in caplog.text
    assert not entry_file(cache).exists()
    assert cache.store(FACTS, GRAPH, json.dumps({"n": 7})) and cache.load(FACTS, GRAPH, read_number) == 7


@pytest.mark.parametrize("text, says", [(b"{\"n\": ", "JSONDecodeError"), (b"\xff\xfe", "UnicodeDecodeError"),
                                         (b"[" * 100000 + b"]" * 100000, "RecursionError")])
def test_whatever_the_reader_raises_on_bad_text_is_a_miss(cache, text, says):
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    restamp(cache, text)
    with record_events() as rec:
        assert cache.load(FACTS, GRAPH, read_number) is None
    assert says in rec.kinds("disk_cache_miss")[0].data["reason"]


def test_a_result_over_the_size_limit_is_not_stored(cache, monkeypatch):
    monkeypatch.setattr("ember_core.caches._result_cache.MAX_TEXT_BYTES", 10)
    assert not cache.store(FACTS, GRAPH, json.dumps({"n": 7, "pad": "x" * 20}))
    assert cache.load(FACTS, GRAPH, read_number) is None


def test_clear_result_caches_empties_every_result_cache(cache):
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    assert clear_result_caches() >= 1
    assert cache.load(FACTS, GRAPH, read_number) is None


def test_an_entry_changed_consistently_without_the_users_key_is_a_miss(cache):
    # Files and sha256s agree, as anyone could make them agree; the signature is what only this user can make.
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    restamp(cache, json.dumps({"n": 8}).encode(), signed=False)
    with record_events() as rec:
        assert cache.load(FACTS, GRAPH, read_number) is None
    assert "not signed with this user's cache key" in rec.kinds("disk_cache_miss")[0].data["reason"]
    cache.store(FACTS, GRAPH, json.dumps({"n": 7}))
    assert cache.load(FACTS, GRAPH, read_number) == 7
