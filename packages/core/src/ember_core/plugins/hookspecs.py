"""ember's hooks. Plugins implement them with `@ember_core.hookimpl` and are found by the entry-point group `ember`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ..events._dump import DumpWriter
    from ..events._events import Event
    from ._plugins import PluginRegistry

PROJECT = "ember"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ember_register(registry: PluginRegistry) -> None:
    """Called once when the plugin manager starts. Register named implementations with `registry.add(...)` and
    plugin options with `registry.add_option(...)`. Return nothing."""


@hookspec(historic=True)
def ember_configure(config: Mapping[str, Any]) -> None:
    """Called once with ember's start-up configuration (environment knobs, defaults). Historic: a plugin
    registered later still gets the call. Return nothing."""


@hookspec
def ember_event(event: Event, dump: DumpWriter) -> None:
    """Called for every stage result: graph captured, pass applied, compiled, guard failed, recompiled, cache hit
    (the kinds and their typed payloads: `ember_core.EVENT_KINDS`). Observers must not change the event or its
    objects. `dump` is the manager's `DumpWriter` (EMBER_DUMP): write extra files for the event through it, under
    the event's number; take the argument only when needed (`def ember_event(event)` is fine). Return nothing."""
