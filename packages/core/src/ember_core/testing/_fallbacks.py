"""Fallbacks counted by cause, and build failures made test failures.

A `fallback` event keeps a program running a slower way, so nothing fails when one is sent. Most causes are
expected somewhere (an op without a kernel, a function a frontend cannot capture); a build failure is not: with a
compiler installed, generated code that does not build is a codegen bug, and the graph silently runs in the
interpreter codegen, many times slower. Tests use:

- `FallbackRecorder`: an `ember_event` observer (a context manager) that keeps every `fallback` event, counts them
  by cause (`counts()`) and fails (`check()`) on a build failure, or on any cause outside those allowed;
- the pytest fixture `no_build_failures` (ember-core's pytest plugin): the same for one whole test, failing the
  test unless it is marked `allow_build_failure` (a test that breaks a build on purpose).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Iterable

from ..events._events import Event
from ..plugins._plugins import get_plugin_manager
from ..plugins.hookspecs import hookimpl

BUILD = "build"


def fallback_cause(event: Event) -> str:
    """The cause of a `fallback` event (`FALLBACK_CAUSES`); `unspecified` when its sender gave none."""
    return str(event.data.get("cause") or "unspecified")


def count_fallbacks(events: Iterable[Event]) -> Counter[str]:
    """The `fallback` events among `events`, counted by cause."""
    return Counter(fallback_cause(e) for e in events if e.kind == "fallback")


def describe_fallbacks(events: Iterable[Event]) -> str:
    """One line per `fallback` event (cause, stage and the first line of its message, the compiler's errors after
    it), for failure messages."""
    lines = []
    for e in events:
        if e.kind != "fallback":
            continue
        first, *rest = e.message.splitlines() or [""]
        errors = [line.strip() for line in rest if "error" in line.lower()][:3]
        lines.append(f"[{fallback_cause(e)}] {e.stage}: {first}" + "".join(f"\n    {x}" for x in errors))
    return "\n".join(lines)


class FallbackRecorder:
    """Keeps the `fallback` events sent while registered (from any thread): `with FallbackRecorder() as rec:`."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._pm = None  # the pluggy manager registered with (a test may reset the process-wide one meanwhile)

    @hookimpl
    def ember_event(self, event: Event) -> None:
        if event.kind == "fallback":
            with self._lock:
                self.events.append(event)

    def __enter__(self) -> FallbackRecorder:
        self._pm = get_plugin_manager().pm
        self._pm.register(self, name=f"ember-fallback-recorder-{id(self)}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pm is not None and self._pm.is_registered(self):
            self._pm.unregister(self)
        self._pm = None

    def counts(self) -> Counter[str]:
        return count_fallbacks(self.events)

    def build_failures(self) -> list[Event]:
        return [e for e in self.events if fallback_cause(e) == BUILD]

    def check(self, where: str = "", allowed: Collection[str] | None = None) -> None:
        """AssertionError on a build failure, or on a fallback whose cause is not in `allowed` (None: any cause but
        `build`). The message counts the fallbacks by cause and describes each."""
        bad = [e for e in self.events if fallback_cause(e) == BUILD or
               (allowed is not None and fallback_cause(e) not in allowed)]
        if not bad:
            return
        counts = ", ".join(f"{cause} {n}" for cause, n in sorted(self.counts().items()))
        what = "a build failed (generated code that does not build is a codegen bug)" if self.build_failures() \
            else f"fallbacks of causes not allowed here (allowed: {', '.join(sorted(allowed or ())) or 'none'})"
        raise AssertionError(f"{where + ': ' if where else ''}{what}; fallbacks by cause: {counts}\n"
                             f"{describe_fallbacks(bad)}")
