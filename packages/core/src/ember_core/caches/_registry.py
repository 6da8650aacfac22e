"""Which disk caches and entries this process has used: every cache made (by name), every entry found or stored
(first use first), what `recording()` blocks saw, and the entries the remote cache did not have (asked once).
Portable artifacts read it (`_artifacts`); `DiskCache` writes it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._disk_cache import DiskCache

_registry: dict[str, DiskCache] = {}  # every cache made in this process, by name (portable artifacts load into them)
_used: dict[tuple[str, str], None] = {}  # (cache, key) of each entry this process found or stored, in order
remote_missed: set[tuple[str, str]] = set()  # entries the remote cache did not have (asked once per process)
lock = threading.Lock()


def disk_caches() -> dict[str, DiskCache]:
    """Every disk cache made in this process, by name."""
    return dict(_registry)


def used_entries() -> list[tuple[str, str]]:
    """(cache, key) of every entry this process found or stored, first use first."""
    with lock:
        return list(_used)


def note_used(cache: str, key: str) -> None:
    with lock:
        _used[(cache, key)] = None
        for seen in _recordings:
            seen[(cache, key)] = None


_recordings: list[dict[tuple[str, str], None]] = []


@contextmanager
def recording() -> Iterator[list[tuple[str, str]]]:
    """The entries compiles look up or store while the block runs (in any thread), for a portable artifact of a
    chosen set of compiled functions: the list is filled, first use first, when the block ends."""
    seen: dict[tuple[str, str], None] = {}
    out: list[tuple[str, str]] = []
    with lock:
        _recordings.append(seen)
    try:
        yield out
    finally:
        with lock:
            _recordings.remove(seen)
        out.extend(seen)


def note_lookup(cache: str, key: str) -> None:
    with lock:
        for seen in _recordings:
            seen[(cache, key)] = None


def register(cache: DiskCache) -> None:
    _registry[cache.name] = cache
