"""Nothing in a cache runs unless only this user could have put it there. A cache root another user may write to
is refused for a private temporary cache, with a warning (a neighbour swapping `R/cpp` between two compiles never
gets a library loaded); an entry changed consistently without the user's cache key is a miss (a plan with another
constant gives eager's results, not the plan's); a verified library that does not bind is rebuilt, not an error
in every process."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import ember
import ember_codegen_cpp._loader
import ember_runtime
import pytest
import torch
from ember_codegen_cpp import compiler
from ember_core.caches import _directory as _cache_dir
from ember_core.testing import FallbackRecorder, restamp
from ember_runtime import record_events

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")

HOSTILE = """
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    int fd = open("%s", O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
}
"""


def fresh_process() -> None:
    """What a new process would hold in memory: nothing compiled, no library loaded, no cache directory opened."""
    torch._dynamo.reset()
    ember_runtime.clear_cache()
    ember_codegen_cpp._loader._loaded.clear()
    _cache_dir.forget_opened()


def run(k: float, root: Path, monkeypatch, new_process: bool = True) -> list:
    """Compile relu(x)*k+1 with the cache at `root` as a new process would (or, `new_process=False`, as the same
    process compiling another function), check it against eager; its events."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(root))
    if new_process:
        fresh_process()
    else:
        torch._dynamo.reset()
        ember_runtime.clear_cache()
    f = ember.compile(lambda x: torch.relu(x) * k + 1, options={"frontend": "trace"})
    x = torch.randn(4, 8)
    with record_events() as rec, FallbackRecorder() as fallbacks:
        torch.testing.assert_close(f(x), torch.relu(x) * k + 1)
    fallbacks.check("compile", ())
    return rec.events


def shared_library(source: str, out: Path) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([compiler(), "-shared", "-fPIC", "-x", "c", str(src), "-o", str(out)], check=True)
    return out


@pytest.fixture(autouse=True)
def forget(monkeypatch):
    yield
    fresh_process()


def plant(shared: Path, stage: Path, key: str) -> None:
    """The neighbour's steps: `shared/cpp` moved aside and a new one made holding the genuine source, the tag, their
    library under the entry's key and the genuine sidecar with the library's sha256 brought up to date."""
    if (shared / "cpp").exists():
        (shared / "cpp").rename(shared / "cpp-aside")
    planted = shared / "cpp"
    planted.mkdir(mode=0o755)
    for name in ("CACHEDIR.TAG", f"{key}.cpp", f"{key}.so", f"{key}.json"):
        shutil.copy(stage / name, planted / name)


def as_another_user(steps) -> None:
    """Run `steps()` in a child process as uid 65534 (nobody)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            steps()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the neighbour's steps failed"


@pytest.mark.parametrize("neighbour", ["same-uid", pytest.param("another-uid", marks=pytest.mark.skipif(
    os.getuid() != 0, reason="acting as another user needs root"))])
def test_a_neighbour_swapping_the_cpp_folder_of_a_shared_root_never_gets_a_library_loaded(tmp_path, monkeypatch,
                                                                                          caplog, neighbour):
    # The neighbour learns the entry's key and genuine files by compiling the same program in a cache of their own.
    own = tmp_path / "neighbours-own"
    run(3.25, own, monkeypatch)
    (sidecar,) = (own / "cpp").glob("*.json")
    key = sidecar.stem
    area = Path(tempfile.mkdtemp(prefix="ember-shared-"))  # a place both users reach (tmp_path is root's, 0700)
    area.chmod(0o755)
    marker = area / "pwned"
    stage = area / "stage"
    stage.mkdir()
    shared_library(HOSTILE % marker, stage / f"{key}.so")
    shutil.copy(own / "cpp" / "CACHEDIR.TAG", stage)
    shutil.copy(own / "cpp" / f"{key}.cpp", stage)
    data = json.loads(sidecar.read_text())
    data["files"]["so"] = hashlib.sha256((stage / f"{key}.so").read_bytes()).hexdigest()
    (stage / f"{key}.json").write_text(json.dumps(data))
    for p in stage.iterdir():
        p.chmod(0o644)

    shared = area / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename what it holds
    caplog.set_level(logging.WARNING, logger="ember.cache")
    try:
        run(1.5, shared, monkeypatch)  # the victim's first compile (of another program)
        steps = lambda: plant(shared, stage, key)  # noqa: E731
        steps() if neighbour == "same-uid" else as_another_user(steps)
        run(3.25, shared, monkeypatch, new_process=False)  # the victim's next compile
        run(3.25, shared, monkeypatch)  # and a new process of theirs
        assert not marker.exists(), "a library planted in a shared cache root was loaded"
        assert f"ember cache root {shared} is not safe to use" in caplog.text
        assert "other users may write" in caplog.text
    finally:
        shutil.rmtree(area, ignore_errors=True)


def test_a_plan_changed_consistently_without_the_users_key_gives_eager_results(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    run(3.25, root, monkeypatch)
    (plan,) = (root / "plans").glob("*.plan")
    text = plan.read_text()
    assert "3.25" in text
    restamp(plan, text.replace("3.25", "5.5").encode(), signed=False)  # sha256 brought up to date, not the signature
    events = run(3.25, root, monkeypatch)
    (miss,) = [e for e in events if e.kind == "disk_cache_miss" and e.stage == "lowering"]
    assert "not signed with this user's cache key" in miss.data["reason"]


@pytest.mark.parametrize("library", ["lacks-the-segment", "not-a-library"])
def test_a_verified_library_that_does_not_bind_is_rebuilt_once(tmp_path, monkeypatch, library, caplog):
    root = tmp_path / "cache"
    run(2.5, root, monkeypatch)
    (so,) = (root / "cpp").glob("*.so")
    other = shared_library("int ember_unrelated(void) { return 0; }\n", tmp_path / "other.so")
    content = other.read_bytes() if library == "lacks-the-segment" else b"\x7fELF not really"
    restamp(so, content)  # signed: the user's own cache holds it (an entry swapped or damaged in place)
    caplog.set_level(logging.WARNING, logger="ember.cache")
    run(2.5, root, monkeypatch)
    assert "does not bind" in caplog.text
    assert so.read_bytes() != content  # rebuilt in place: the next process binds at once
    caplog.clear()
    events = run(2.5, root, monkeypatch)
    assert [e.kind for e in events if e.stage == "codegen-cpp" and "build_cache" in e.kind] == ["build_cache_hit"]
    assert "does not bind" not in caplog.text


def test_the_signing_key_is_the_users_secret(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    run(2.0, root, monkeypatch)
    st = os.stat(root / "signing.key")
    assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o600 and st.st_size == 32
