"""The C++ codegen's disk cache repairs itself: whatever is found at an entry's paths, the next compile of that
graph misses, removes the bad entry, rebuilds it and returns eager's results."""

from __future__ import annotations

import json
import os
import shutil
import stat

import ember
import ember_codegen_cpp._loader
import ember_runtime
import pytest
import torch
from ember_codegen_cpp import cache_dir, compiler
from ember_runtime import record_events

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """A cache of this test's own, and no in-process copy of any graph or library."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("ember_codegen_cpp._loader._loaded", {})
    ember_runtime.clear_cache()


def compile_and_check(k: float) -> list:
    """Compile x*k+1 afresh (a new dynamo cache, no in-memory hit), run it, return the codegen-cpp events."""
    torch._dynamo.reset()
    ember_runtime.clear_cache()
    ember_codegen_cpp._loader._loaded.clear()
    f = ember.compile(lambda x: torch.relu(x) * k + 1, options={"frontend": "trace"})
    x = torch.randn(4, 8)
    with record_events() as rec:
        torch.testing.assert_close(f(x), torch.relu(x) * k + 1)
    return [e for e in rec.events if e.stage == "codegen-cpp" and e.kind in BUILD_KINDS]


BUILD_KINDS = {"build_cache_hit": "hit", "build_cache_miss": "miss"}  # the build cache's kinds


def outcomes(events: list) -> list[str]:
    return [BUILD_KINDS[e.kind] for e in events]


def only_entry() -> dict[str, str]:
    """The paths of the cache's single entry, by role."""
    sidecars = [p for p in cache_dir().iterdir() if p.suffix == ".json"]
    assert len(sidecars) == 1, sorted(p.name for p in cache_dir().iterdir())
    key = sidecars[0].stem
    return {"sidecar": str(sidecars[0]), "library": str(cache_dir() / f"{key}.so"),
            "source": str(cache_dir() / f"{key}.cpp")}


def replace_with(path: str, make) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
    make(path)


def write(data: bytes):
    def make(path: str) -> None:
        with open(path, "wb") as f:
            f.write(data)
    return make


def sidecar_with(**fields):
    """The entry's sidecar with some fields replaced (the rest kept valid)."""
    def corrupt(paths: dict[str, str]) -> None:
        with open(paths["sidecar"]) as f:
            meta = json.load(f)
        meta.update(fields)
        replace_with(paths["sidecar"], write(json.dumps(meta).encode()))
    return corrupt


def at(role: str, make):
    return lambda paths: replace_with(paths[role], make)


def truncate_library(paths: dict[str, str]) -> None:
    with open(paths["library"], "rb") as f:
        data = f.read()
    replace_with(paths["library"], write(data[: len(data) // 2]))


def symlink_outside(role: str):
    def corrupt(paths: dict[str, str]) -> None:
        outside = os.path.join(os.path.dirname(os.path.dirname(paths[role])), "outside.txt")
        with open(outside, "w") as f:
            f.write("not ember's")
        replace_with(paths[role], lambda p: os.symlink(outside, p))
    return corrupt


def unreadable(role: str):
    return lambda paths: os.chmod(paths[role], 0)


CORRUPTIONS = {
    "sidecar-garbage-bytes": at("sidecar", write(b"\x00\xff\xfe garbage \x89PNG")),
    "sidecar-empty": at("sidecar", write(b"")),
    "sidecar-list": at("sidecar", write(b"[]")),
    "sidecar-number": at("sidecar", write(b"5")),
    "sidecar-key-int": sidecar_with(key=5),
    "sidecar-files-nested-garbage": sidecar_with(files={"so": [[{"x": None}]], "cpp": {"a": [1, 2]}}),
    "sidecar-huge-number": at("sidecar", write(b'{"key": ' + b"9" * 5000 + b"}")),
    "sidecar-deep-nesting": at("sidecar", write(b"[" * 20000 + b"]" * 20000)),
    "sidecar-directory": at("sidecar", os.mkdir),
    "library-directory": at("library", os.mkdir),
    "source-directory": at("source", os.mkdir),
    "library-empty": at("library", write(b"")),
    "library-truncated": truncate_library,
    "library-missing": lambda paths: os.unlink(paths["library"]),
    "sidecar-symlink-outside": symlink_outside("sidecar"),
    "library-symlink-outside": symlink_outside("library"),
    "library-fifo": at("library", os.mkfifo),
    "sidecar-fifo": at("sidecar", os.mkfifo),
    "sidecar-unreadable": unreadable("sidecar"),
    "library-unreadable": unreadable("library"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_entry_is_rebuilt_and_gives_eager_results(case, tmp_path):
    k = 1.5 + sorted(CORRUPTIONS).index(case) / 8
    first = compile_and_check(k)
    assert outcomes(first) == ["miss"]
    paths = only_entry()
    CORRUPTIONS[case](paths)
    second = compile_and_check(k)
    if "unreadable" in case and os.getuid() == 0:  # root reads a file of mode 0: the entry is still good
        assert outcomes(second) in (["hit"], ["miss"])
    else:
        assert outcomes(second) == ["miss"], [e.message for e in second]
    repaired = only_entry()
    for role in ("sidecar", "library", "source"):
        st = os.lstat(repaired[role])
        assert stat.S_ISREG(st.st_mode), f"{role} is not a regular file after the rebuild"
    assert (tmp_path / "cache" / "outside.txt").exists() or "symlink" not in case
    third = compile_and_check(k)
    assert outcomes(third) == ["hit"]


def test_a_sidecar_of_the_wrong_type_costs_one_rebuild_only():
    compile_and_check(7.25)
    paths = only_entry()
    replace_with(paths["sidecar"], write(b"[]"))
    assert outcomes(compile_and_check(7.25)) == ["miss"]
    assert outcomes(compile_and_check(7.25)) == ["hit"]
