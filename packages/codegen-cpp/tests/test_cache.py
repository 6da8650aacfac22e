"""The disk cache (ember-core's, directory `cpp`): private, atomic entries verified before loading, corrupt entries
rebuilt, one build of a key across processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from ember_codegen_cpp import Builder, CppCodegen, _build, cache_dir, compiler
from ember_core.caches._entry_files import sha256_file
from ember_core.caches._root import check_private
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
    kinds = ev.kinds_of("codegen-cpp")
    assert kinds.count("build_cache_hit") == 1 and "build_cache_miss" not in kinds
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled([x])[0], x * 2.25 + 1)


def test_corrupt_library_is_rebuilt_not_loaded(monkeypatch):
    graph = _graph(3.75)
    codegen = CppCodegen()
    codegen.compile_many([graph])
    entries = sorted(cache_dir().glob("*.json"), key=os.path.getmtime)
    meta = json.loads(entries[-1].read_text())
    library = cache_dir() / f"{meta['key']}.so"
    assert meta["meta"]["flags"] == list(codegen.builder.flags)
    data = library.read_bytes()
    truncated = library.with_suffix(".tmp")
    truncated.write_bytes(data[: len(data) // 2])
    os.replace(truncated, library)  # a new file: this process has the old one mapped
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    with Events() as ev:
        compiled = CppCodegen().compile(graph, None, {})
        x = torch.randn(3, 5)
        torch.testing.assert_close(compiled([x])[0], x * 3.75 + 1)
    misses = [e for e in ev.events if e.kind == "build_cache_miss"]
    assert len(misses) == 1 and "corrupt" in misses[0].message
    assert sha256_file(library) == json.loads(entries[-1].read_text())["files"]["so"]


def test_entry_of_ember_codegen_cpp_0_1_is_rebuilt(monkeypatch):
    graph = _graph(4.125)
    CppCodegen().compile_many([graph])
    sidecar = max(cache_dir().glob("*.json"), key=os.path.getmtime)
    meta = json.loads(sidecar.read_text())
    old = {"key": meta["key"], "source_sha256": meta["meta"]["source_sha256"], "library_sha256": meta["files"]["so"]}
    sidecar.write_text(json.dumps(old))
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    with Events() as ev:
        compiled = CppCodegen().compile(graph, None, {})
        x = torch.randn(3, 5)
        torch.testing.assert_close(compiled([x])[0], x * 4.125 + 1)
    (miss,) = [e for e in ev.events if e.kind == "build_cache_miss"]
    assert "format" in miss.message


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


CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    import torch
    from ember_codegen_cpp import CppCodegen
    from helpers import trace
    graph = trace(lambda x: (x * 6.125 + 1,), torch.randn(3, 5))
    open(sys.argv[2], "w").close()
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.01)
    compiled = CppCodegen().compile(graph, None, {})
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled([x])[0], x * 6.125 + 1)
""")


def _counting_compiler(tmp_path: Path) -> Path:
    """A compiler that notes each build in builds.txt and takes a second longer than the real one."""
    script = tmp_path / "cxx"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then exec {compiler()} --version; fi
echo build >> {tmp_path / "builds.txt"}
sleep 1
exec {compiler()} "$@"
""")
    script.chmod(0o755)
    return script


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_two_processes_building_one_key_run_the_compiler_once(tmp_path):
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache"), "CXX": str(_counting_compiler(tmp_path))}
    here, go = str(Path(__file__).parent), tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-c", CHILD, here, str(tmp_path / f"ready{k}"), str(go)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in range(2)]
    try:
        _wait_for(lambda: all((tmp_path / f"ready{k}").exists() for k in range(2)) or
                  any(c.poll() is not None for c in children))
        go.touch()
        outputs = [c.communicate(timeout=300)[0] for c in children]
    finally:
        for c in children:
            c.kill()
    assert [c.returncode for c in children] == [0, 0], outputs
    assert (tmp_path / "builds.txt").read_text().split() == ["build"]
    assert len(list((tmp_path / "cache" / "cpp").glob("*.so"))) == 1


def _wait_for(condition, timeout: float = 300) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def _chain(k: float):
    """Four segments (kernels between three matmuls), each one's source new for each k."""
    def fn(x, w):
        y = (x * k).relu() @ w
        y = (y * k).sigmoid() @ w
        return (((y * k).tanh() @ w).exp().sum(1) * k,)
    return fn, (torch.randn(4, 8), torch.randn(8, 8))


def _split_codegen() -> CppCodegen:
    return CppCodegen(Builder(part_lines=20, workers=3))  # every unit of 60 lines or more in 3 parts


def test_a_split_unit_builds_in_parts_with_the_results_of_one_and_hits_the_cache(monkeypatch):
    fn, args = _chain(5.5)
    graph = trace(fn, *args)
    before = set(cache_dir().glob("*.so"))
    with Events() as ev:
        (compiled,) = _split_codegen().compile_many([graph])
    assert len(set(cache_dir().glob("*.so")) - before) == 3  # a library per part
    assert "part 3 of 3" in ev.kinds("kernels_generated")[0].data["unit"]
    whole = CppCodegen().compile(graph, None, {})
    for a, b in zip(compiled(list(args)), whole(list(args))):
        assert torch.equal(a, b)
    torch.testing.assert_close(compiled(list(args))[0], fn(*args)[0])
    monkeypatch.setattr(_build, "run_compiler", lambda *a, **k: pytest.fail("the compiler ran on a cache hit"))
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    with Events() as ev:
        again = _split_codegen().compile(graph, None, {})
    kinds = ev.kinds_of("codegen-cpp")
    assert kinds.count("build_cache_hit") == 1 and "build_cache_miss" not in kinds
    torch.testing.assert_close(again(list(args))[0], fn(*args)[0])


def test_a_corrupt_part_is_rebuilt_alone(monkeypatch):
    fn, args = _chain(6.25)
    graph = trace(fn, *args)
    before = set(cache_dir().glob("*.so"))
    _split_codegen().compile_many([graph])
    parts = sorted(set(cache_dir().glob("*.so")) - before)
    assert len(parts) == 3
    good = sha256_file(parts[1])
    truncated = parts[1].with_suffix(".tmp")
    truncated.write_bytes(parts[1].read_bytes()[:1000])
    os.replace(truncated, parts[1])
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    runs = []
    real = _build.run_compiler
    monkeypatch.setattr(_build, "run_compiler", lambda *a, **k: runs.append(1) or real(*a, **k))
    with Events() as ev:
        compiled = _split_codegen().compile(graph, None, {})
        torch.testing.assert_close(compiled(list(args))[0], fn(*args)[0])
    misses = [e for e in ev.events if e.kind == "build_cache_miss"]
    assert len(misses) == 1 and "1 of 3 parts" in misses[0].message and "corrupt" in misses[0].message
    assert len(runs) == 1 and sha256_file(parts[1]) == good
