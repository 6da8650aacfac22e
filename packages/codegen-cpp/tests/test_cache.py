"""The disk cache: a private directory, atomic entries, verified before loading, corrupt entries rebuilt."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
from ember_codegen_cpp import Builder, CppCodegen, _build, _cache, cache_dir
from ember_codegen_cpp._cache import Entry, check_private
from helpers import Events, trace


def _graph(k: float):
    """A graph whose source (so whose cache key) is new for each k."""
    return trace(lambda x: (x * k + 1,), torch.randn(3, 5))


def test_cache_directory_is_private_and_ours():
    d = cache_dir()
    st = os.lstat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert d.name == "cpp" and str(d).startswith(os.environ["EMBER_CACHE_DIR"])


def test_cache_directory_with_a_wider_mode_is_narrowed(tmp_path):
    d = tmp_path / "cpp"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o777)
    assert check_private(d) is None
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700


def test_cache_directory_that_is_a_symlink_or_not_ours_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "cpp").symlink_to(real)
    assert "symlink" in check_private(tmp_path / "root" / "cpp")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "root"))
    fresh = cache_dir()
    assert fresh != tmp_path / "root" / "cpp" and stat.S_IMODE(os.lstat(fresh).st_mode) == 0o700
    if os.getuid() == 0:  # root can give a directory away to test the owner check
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 12345, -1)
        assert "owned by uid 12345" in check_private(other)


def test_second_compile_hits_the_disk_cache_without_the_compiler(monkeypatch):
    graph = _graph(2.25)
    CppCodegen().compile_many([graph])
    monkeypatch.setattr(_build, "run_compiler", lambda *a, **k: pytest.fail("the compiler ran on a cache hit"))
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    with Events() as ev:
        compiled = CppCodegen().compile(graph, None, {})
    assert ev.kinds().count("cache_hit") == 1 and "cache_miss" not in ev.kinds()
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled([x])[0], x * 2.25 + 1)


def test_corrupt_library_is_rebuilt_not_loaded(monkeypatch):
    graph = _graph(3.75)
    codegen = CppCodegen()
    codegen.compile_many([graph])
    entries = sorted(cache_dir().glob("*.json"), key=os.path.getmtime)
    meta = json.loads(entries[-1].read_text())
    library = cache_dir() / f"{meta['key']}.so"
    data = library.read_bytes()
    truncated = library.with_suffix(".tmp")
    truncated.write_bytes(data[: len(data) // 2])
    os.replace(truncated, library)  # a new file: this process has the old one mapped
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    with Events() as ev:
        compiled = CppCodegen().compile(graph, None, {})
        x = torch.randn(3, 5)
        torch.testing.assert_close(compiled([x])[0], x * 3.75 + 1)
    misses = [e for e in ev.events if e.kind == "cache_miss"]
    assert len(misses) == 1 and "corrupt" in misses[0].message
    assert _cache.sha256_file(library) == json.loads(entries[-1].read_text())["library_sha256"]


def test_entry_with_a_bad_sidecar_is_removed(tmp_path):
    entry = Entry(tmp_path, "k")
    entry.library.write_bytes(b"not a library")
    entry.sidecar.write_text("{ not json")
    assert entry.lookup("sha")[0] is None and not entry.library.exists()
    entry.sidecar.write_text(json.dumps({"key": "other"}))
    assert entry.lookup("sha") == (None, "sidecar names another build")


def test_builds_leave_no_temporary_files():
    CppCodegen().compile_many([_graph(5.5)])
    leftovers = [p.name for p in cache_dir().iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_builds_of_several_graphs_overlap(monkeypatch):
    import threading
    import time

    running, peak, lock = [0], [0], threading.Lock()
    real = _build.run_compiler

    def counted(*args, **kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.2)
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(_build, "run_compiler", counted)
    graphs = [_graph(10.5 + k) for k in range(3)]
    compiled = CppCodegen(Builder()).compile_many(graphs)
    assert peak[0] >= min(2, os.cpu_count() or 1)
    x = torch.randn(3, 5)
    for k, c in enumerate(compiled):
        torch.testing.assert_close(c([x])[0], x * (10.5 + k) + 1)
