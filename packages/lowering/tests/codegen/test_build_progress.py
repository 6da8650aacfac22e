"""The progress line of the build pool: shown on a terminal while builds run, counted across pools, quiet when stderr
is not a terminal or when EMBER_PROGRESS says so."""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid

import pytest
from ember_core import DiskCache
from ember_lowering.codegen import BuildPool
from ember_lowering.codegen._progress import PROGRESS, noun_count, progress_setting


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Gate:
    """A maker that blocks until `open()`: the build stays running while the test looks at stderr."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self, work):
        assert self.event.wait(30)
        return {"txt": b"built"}, {}

    def open(self) -> None:
        self.event.set()


POOL = BuildPool(DiskCache("progress_test", ("txt",)), "toy", workers=4, what="toy library")


def build(gate: Gate, pool: BuildPool = POOL):
    return pool.get(uuid.uuid4().hex, {"v": "1"}, gate)


@pytest.fixture
def stderr(monkeypatch, request):
    """The line's stream (sys.stderr, which pytest's capture sets again for each test phase) replaced by a terminal
    or a plain stream (parametrized); EMBER_PROGRESS unset."""
    monkeypatch.delenv("EMBER_PROGRESS", raising=False)
    stream = FakeTerminal() if getattr(request, "param", "terminal") == "terminal" else io.StringIO()
    monkeypatch.setattr(PROGRESS, "stream", stream)
    yield stream
    assert not PROGRESS.active, "a batch of builds was left open"


def eventually(stream, text: str) -> bool:
    """`text` appears in `stream` within a few seconds (a build's end is counted in its worker thread)."""
    deadline = time.monotonic() + 10
    while text not in stream.getvalue():
        if time.monotonic() > deadline:
            return False
        PROGRESS.refresh()
        time.sleep(0.01)
    return True


def settle(builds, gate: Gate) -> None:
    gate.open()
    for b in builds:
        b.future.result(timeout=30)
    PROGRESS.wait_idle(timeout=30)


def test_a_terminal_sees_the_builds_running_and_done(stderr):
    first, second = Gate(), Gate()
    a, b = build(first), build(second)
    assert "ember: building 2 toy libraries" in stderr.getvalue()
    first.open()
    a.future.result(timeout=30)
    assert eventually(stderr, "ember: building 2 toy libraries (1 done)…")
    settle([b], second)


def test_the_line_is_cleared_when_the_builds_are_done(stderr):
    gate = Gate()
    settle([build(gate)], gate)
    assert stderr.getvalue().endswith("\x1b[2K") or "\x1b[2K" in stderr.getvalue().splitlines()[-1]


@pytest.mark.parametrize("stderr", ["pipe"], indirect=True)
def test_no_line_when_stderr_is_not_a_terminal(stderr):
    gate = Gate()
    settle([build(gate)], gate)
    assert stderr.getvalue() == ""


def test_no_line_on_a_terminal_when_turned_off(stderr, monkeypatch):
    monkeypatch.setenv("EMBER_PROGRESS", "0")
    gate = Gate()
    settle([build(gate)], gate)
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("stderr", ["pipe"], indirect=True)
def test_forced_on_shows_the_line_without_a_terminal(stderr, monkeypatch):
    monkeypatch.setenv("EMBER_PROGRESS", "1")
    gate = Gate()
    b = build(gate)
    assert "ember: building 1 toy library…" in stderr.getvalue()
    settle([b], gate)


def test_a_failed_build_is_counted(stderr):
    def fails(work):
        gate.event.wait(30)
        raise OSError("no compiler")

    gate, other = Gate(), Gate()
    a = POOL.get(uuid.uuid4().hex, {"v": "1"}, fails)
    b = build(other)
    gate.open()
    with pytest.raises(OSError):
        a.future.result(timeout=30)
    assert eventually(stderr, "ember: building 2 toy libraries (1 done, 1 failed)…")
    settle([b], other)


def test_pools_share_one_line(stderr):
    other_pool = BuildPool(DiskCache("progress_test_other", ("txt",)), "other", what="kernel module")
    gate = Gate()
    builds = [build(gate), build(gate), build(gate, other_pool)]
    assert "ember: building 2 toy libraries, 1 kernel module…" in stderr.getvalue()
    settle(builds, gate)


def test_a_cache_hit_shows_nothing(stderr):
    gate = Gate()
    gate.open()
    key = uuid.uuid4().hex
    POOL.get(key, {"v": "1"}, gate).future.result(timeout=30)
    PROGRESS.wait_idle(timeout=30)
    stderr.seek(0)
    stderr.truncate()
    assert POOL.get(key, {"v": "1"}, gate).hit
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("value, expected", [
    (None, "auto"), ("", "auto"), ("auto", "auto"), ("1", "on"), ("on", "on"), ("TRUE", "on"), ("yes", "on"),
    ("0", "off"), ("off", "off"), ("false", "off"), ("no", "off"),
])
def test_progress_setting(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("EMBER_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("EMBER_PROGRESS", value)
    assert progress_setting() == expected


def test_an_unknown_setting_is_named_once_and_taken_as_auto(monkeypatch, caplog):
    monkeypatch.setenv("EMBER_PROGRESS", "sometimes")
    with caplog.at_level(logging.WARNING, logger="ember"):
        assert progress_setting() == "auto"
        assert progress_setting() == "auto"
    warned = [r.getMessage() for r in caplog.records if "EMBER_PROGRESS" in r.getMessage()]
    assert len(warned) == 1 and "EMBER_PROGRESS='sometimes'" in warned[0] and "0, 1, auto" in warned[0]


@pytest.mark.parametrize("noun, n, expected", [
    ("C++ library", 1, "1 C++ library"), ("C++ library", 3, "3 C++ libraries"),
    ("Triton module", 2, "2 Triton modules"), ("toy build", 0, "0 toy builds"),
])
def test_noun_count(noun, n, expected):
    assert noun_count(n, noun) == expected
