"""`record_events()`: collect the events of a block of code (tests, tools), through the same hook as any observer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..events._events import Event
from ._plugins import get_plugin_manager
from .hookspecs import hookimpl


class _Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    @hookimpl
    def ember_event(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[Event]:
        """The events of one kind, in order."""
        return [e for e in self.events if e.kind == kind]

    def kinds_of(self, stage: str) -> list[str]:
        """The kinds one stage emitted, in order (`codegen-cpp` → ["build_cache_miss", "kernels_generated"])."""
        return [e.kind for e in self.events if e.stage == stage]


@contextlib.contextmanager
def record_events() -> Iterator[_Recorder]:
    """Yields a recorder whose `.events` fills with every event emitted inside the block."""
    pm = get_plugin_manager().pm
    recorder = _Recorder()
    name = pm.register(recorder, name=f"ember-recorder-{id(recorder)}")
    try:
        yield recorder
    finally:
        pm.unregister(name=name)
