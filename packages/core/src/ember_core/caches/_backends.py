"""Where a cache's entries can come from: the interface every cache backend implements, and the local disk cache
as one implementation (the remote one is `_remote.RemoteCache`).

A backend hands out and takes *verified* entries (`PackedEntry`): whatever it reads from its storage it checks
before `get` returns it (sha256 of every file, parsed fields, signatures where its storage is shared), and `get`
never raises for what it finds there: a bad entry is a miss with its reason. A backend that cannot reach its
storage raises `BackendUnavailable`; its caller carries on without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ._packed import PackedEntry
from ._sidecar import BadEntry

if TYPE_CHECKING:
    from ._disk_cache import DiskCache


class BackendUnavailable(OSError):
    """The backend's storage cannot be reached now (refused, timed out, closed)."""


class CacheBackend(Protocol):
    """get/put of verified entries by (cache, key)."""

    where: str  # for messages: a directory, a URL without its password

    def get(self, cache: DiskCache, key: str) -> PackedEntry | None | BadEntry:
        """The verified entry of `cache` at `key`; None when there is none; a BadEntry (returned, not raised)
        naming what is wrong with a stored one. Raises BackendUnavailable."""
        ...

    def put(self, cache: DiskCache, entry: PackedEntry) -> None:
        """Keep `entry` (one of `cache`'s). Raises BackendUnavailable."""
        ...


class LocalBackend:
    """The local disk cache seen through the backend interface: an entry is what `DiskCache.lookup` verified.
    Portable artifacts move entries between it and a file (`_artifacts`)."""

    where = "the local disk cache"

    def get(self, cache: DiskCache, key: str) -> PackedEntry | None | BadEntry:
        return cache.entry(key)

    def put(self, cache: DiskCache, entry: PackedEntry) -> None:
        """Keep `entry` here unless a verified one is here already (not shared on: it came from elsewhere)."""
        if not cache.lookup(entry.key, remote=False).hit:
            cache.keep(entry.key, entry.files, entry.meta)

