"""Fuzzing every disk cache's entries as a neighbour or a damaged disk would leave them: a file's bytes mutated and
its sidecar's sha256 brought up to date, consistent in everything but the signature (plans, partitions, C++
libraries, Triton modules), or signed too (plans and partitions: text the stage parses, as this user's own older
ember could have left it). Counted over every case: code run (the payload canary, or a planted library's marker),
lookups that raise, cases past 2 s, and unsigned entries accepted; each must be 0. `EMBER_FUZZ_EXAMPLES` sets the
number of cases (`nox -s fuzz`)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import ember
import ember_codegen_cpp
import ember_codegen_cpp._cache
import ember_codegen_triton._build
import ember_lowering
import ember_runtime
import pytest
import torch
from ember_core import record_events
from ember_core.caches import _directory as _cache_dir
from ember_core.testing import PAYLOADS, assert_no_code_ran, fuzz_settings, restamp
from ember_lowering import read_plan
from ember_runtime._partition_cache import PARTITIONS, read_partition
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(ember_codegen_cpp.compiler() is None, reason="no C++ compiler")

# cache → (its DiskCache, the suffix fuzzed, whether a signed change is parsed by a stage rather than run)
CACHES = {
    "plans": (ember_lowering.PLANS.disk, "plan"),
    "partitions": (PARTITIONS.disk, "graphs"),
    "cpp": (ember_codegen_cpp._cache.CACHE, "so"),
    "triton": (ember_codegen_triton._build.CACHE, "py"),
}
PARSED = {"plans": (ember_lowering.PLANS, read_plan), "partitions": (PARTITIONS, read_partition)}


class Entry:
    """One cache's pristine entry: its files' bytes, its facts (the sidecar's meta), the graph it belongs to."""

    def __init__(self, cache: str, key: str, graph):
        self.cache, self.key, self.graph = cache, key, graph
        disk, self.suffix = CACHES[cache]
        self.disk = disk
        self.files = {p.name: p.read_bytes() for p in disk.directory.glob(f"{key}.*")}
        self.meta = json.loads(self.files[f"{key}.json"])["meta"]

    @property
    def path(self) -> Path:
        return self.disk.path(self.key, self.suffix)

    def restore(self) -> None:
        for name, data in self.files.items():
            target = self.disk.directory / name
            tmp = target.with_name(f".{name}.fuzz.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)


TRITON_SOURCE = """import triton
import triton.language as tl


@triton.jit
def k0_add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
"""


def training_step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).square().mean()
    loss.backward()
    return loss


@pytest.fixture(scope="module")
def entries(tmp_path_factory) -> dict[str, Entry]:
    """A cache of this module's own holding an entry of each cache, made by compiling a training step (plans,
    partition, libraries) and building a Triton module (its lookups are fuzzed, never its kernels run)."""
    saved = {k: os.environ.get(k) for k in ("EMBER_CACHE_DIR",)}
    os.environ["EMBER_CACHE_DIR"] = str(tmp_path_factory.mktemp("fuzzed-cache"))
    _cache_dir.forget_opened()
    graphs = {}
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        with record_events() as rec:
            ember.compile(lambda x: training_step(model, x))(torch.randn(5, 8))
        ember_codegen_triton._build.module_build(TRITON_SOURCE).future.result()
        for e in rec.events:
            if e.kind == "disk_cache_miss":
                graphs[e.data["key"]] = e.graph
        found = {}
        for cache, (disk, suffix) in CACHES.items():
            keys = sorted(p.stem for p in disk.directory.glob(f"*.{suffix}"))
            assert keys, f"compiling made no {cache} entry"
            found[cache] = Entry(cache, keys[0], graphs.get(keys[0]))
        yield found
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        _cache_dir.forget_opened()
        ember_runtime.clear_cache()


def _flip(data: bytes, at: int, byte: int) -> bytes:
    if not data:
        return bytes([byte])
    i = at % len(data)
    return data[:i] + bytes([data[i] ^ (byte or 1)]) + data[i + 1:]


def _insert(data: bytes, at: int, text: bytes) -> bytes:
    i = at % (len(data) + 1)
    return data[:i] + text + data[i:]


def _truncate(data: bytes, at: int, _: int) -> bytes:
    return data[: at % (len(data) + 1)]


def _number(data: bytes, at: int, value: bytes) -> bytes:
    """One number of the text replaced (a size, a constant, an index)."""
    numbers = list(re.finditer(rb"-?\d+(\.\d+)?(e-?\d+)?", data))
    if not numbers:
        return data + value
    m = numbers[at % len(numbers)]
    return data[:m.start()] + value + data[m.end():]


def _word(data: bytes, at: int, word: bytes) -> bytes:
    """One identifier of the text replaced (an op, a buffer, a dtype, a field)."""
    words = list(re.finditer(rb"[A-Za-z_][A-Za-z0-9_.]*", data))
    if not words:
        return data + word
    m = words[at % len(words)]
    return data[:m.start()] + word + data[m.end():]


NUMBERS = st.sampled_from([b"0", b"-1", b"1e308", b"nan", b"9223372036854775808", b"99999999999", b"1/3", b"-0.0",
                           b"3", b"s0", b"s9"])
WORDS = st.sampled_from([b"aten.repdat.default", b"aten.mm.default", b"float16", b"_inductor", b"onnx", b"store",
                         b"load", b"__import__", b"torch", b"cuda", b"s0", b"buf0", b"exec", b"x"])
TEXTS = st.sampled_from([p.encode() for p in PAYLOADS] + [b"\n", b"\x00", b"\xff\xfe", b"\x1b[31m", b"{", b"]"])
MUTATIONS = st.one_of(
    st.tuples(st.just(_flip), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just(_insert), st.integers(0, 1 << 20), TEXTS),
    st.tuples(st.just(_truncate), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just(_number), st.integers(0, 1 << 12), NUMBERS),
    st.tuples(st.just(_word), st.integers(0, 1 << 12), WORDS),
)
COUNTS = {"cases": 0, "refused": 0, "read": 0}


@fuzz_settings(300)
@given(cache=st.sampled_from(sorted(CACHES)), mutation=MUTATIONS, signed=st.booleans())
def test_fuzzed_cache_entries_never_run_code_and_are_refused_unless_signed(entries, cache, mutation, signed):
    entry = entries[cache]
    change, at, arg = mutation
    data = change(entry.files[entry.path.name], at, arg)
    signed = signed and cache in PARSED  # a signed library or module is this user's own code
    entry.restore()
    restamp(entry.path, data, signed=signed)
    start = time.monotonic()
    if signed:
        stage, reader = PARSED[cache]
        result = stage.load(entry.meta, entry.graph, lambda text: reader(text, entry.graph))  # never raises
        COUNTS["read" if result is not None else "refused"] += 1
    else:
        found = entry.disk.lookup(entry.key, entry.meta)
        if data != entry.files[entry.path.name]:
            assert not found.hit, f"an unsigned change of a {cache} entry was accepted"
            assert "not signed" in found.reason
        COUNTS["refused"] += 1
    assert time.monotonic() - start < 2.0, f"reading a fuzzed {cache} entry took past 2 s"
    assert_no_code_ran()
    COUNTS["cases"] += 1


def test_fuzzed_cache_entries_leave_a_cache_that_still_compiles(entries, monkeypatch):
    """After the fuzzing (the last case may have left anything), every entry is rebuilt as needed: eager's results."""
    print(f"\nfuzzed cache entries: {COUNTS}")
    for entry in entries.values():
        entry.restore()
    restamp(entries["cpp"].path, b"garbage", signed=False)
    torch._dynamo.reset()
    ember_runtime.clear_cache()
    monkeypatch.setenv("EMBER_CACHE_DIR", str(entries["cpp"].disk.directory.parent))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    torch.testing.assert_close(ember.compile(model)(x), model(x))
