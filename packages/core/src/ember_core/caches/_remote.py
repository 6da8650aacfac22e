"""A cache shared by many machines: entries as packed bytes (`_packed`) in a blob store, Redis by default.

`EMBER_REMOTE_CACHE=redis://host:port/db` (or `rediss://` for TLS) turns it on. Each disk cache then consults it
after its own directory misses and fills it after a cold build (`DiskCache.lookup`, `DiskCache.store`): partitions,
kernel plans, C++ libraries, Triton modules, tuning choices.

- **Keys.** An entry's remote name hashes its cache, its local key (which already names the source, flags and
  code versions that decide it) and the facts of the machine that built it (`_machine`: Python, architecture,
  torch, Triton and ember-core versions, and for a cache that says so the CPU's features or the GPU's model), so
  that a machine only ever finds entries built by one like it.
- **Trust.** What comes back is checked as a local entry is: sha256 of every file, every field parsed; the cache's
  own reader then parses and verifies plans and partitions. Code (a C++ library, a Triton module) is used only with
  a valid signature of the team's key (`EMBER_CACHE_KEY` or `EMBER_CACHE_KEY_FILE`); where one is configured every
  entry must carry it. A bad entry is a miss, logged with its reason, and rebuilt; the rebuilt entry replaces it.
- **A server that is down or slow** costs at most one timeout (`EMBER_REMOTE_CACHE_TIMEOUT` seconds, default 1) and
  one warning: the cache is then left alone for `RETRY_SECONDS`, and compiles go on with the local cache alone. A
  remote cache never makes a compile fail.

Another store plugs in by URL scheme: `register_blob_store("s3", factory)`, `factory(url, timeout) -> BlobStore`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

from ._backends import BackendUnavailable
from ._packed import PackedEntry, pack, unpack
from ._sidecar import BadEntry
from ._team_key import TeamKeyError, team_key

if TYPE_CHECKING:
    from ._disk_cache import DiskCache

log = logging.getLogger("ember.cache")

RETRY_SECONDS = 60.0
DEFAULT_TIMEOUT = 1.0


class BlobStore(Protocol):
    """Bytes by name in shared storage. Errors reaching it are BackendUnavailable."""

    def get(self, name: str) -> bytes | None: ...
    def put(self, name: str, data: bytes) -> None: ...
    def close(self) -> None: ...


BlobFactory = Callable[[str, float], BlobStore]
_stores: dict[str, BlobFactory] = {}


def register_blob_store(scheme: str, factory: BlobFactory) -> None:
    """Make `EMBER_REMOTE_CACHE=<scheme>://...` open `factory(url, timeout)`."""
    _stores[scheme] = factory


def _redis(url: str, timeout: float) -> BlobStore:
    from ._redis import RedisBlobs

    return RedisBlobs(url, timeout)


register_blob_store("redis", _redis)
register_blob_store("rediss", _redis)


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class RemoteCache:
    """Verified entries in a blob store (the `CacheBackend` interface), with the down-server policy above."""

    def __init__(self, store: BlobStore, where: str):
        self.store, self.where = store, where
        self._down_until = 0.0
        self._warned = False
        self._lock = threading.Lock()

    @staticmethod
    def name(cache: DiskCache, key: str) -> str:
        facts = json.dumps(cache.machine_facts(), sort_keys=True)
        return f"ember:{cache.name}:" + hashlib.sha256(f"{cache.name}\0{key}\0{facts}".encode()).hexdigest()[:48]

    def get(self, cache: DiskCache, key: str) -> PackedEntry | None | BadEntry:
        data = self._call(lambda: self.store.get(self.name(cache, key)))
        if data is None:
            return None
        try:
            entry = unpack(data, team_key(), code=cache.code, expect=(cache.name, key), suffixes=cache.suffixes)
            mismatch = facts_mismatch(entry.machine, cache.machine_facts())
            if mismatch:
                raise BadEntry(f"entry was built for {mismatch}")
        except (BadEntry, TeamKeyError) as e:
            return BadEntry(str(e))
        return entry

    def put(self, cache: DiskCache, entry: PackedEntry) -> None:
        data = pack(entry, team_key())
        self._call(lambda: self.store.put(self.name(cache, entry.key), data))

    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _call(self, op: Callable[[], bytes | None]) -> bytes | None:
        if not self.available():
            raise BackendUnavailable(f"{self.where} is left alone after an error")
        try:
            return op()
        except BackendUnavailable as e:
            with self._lock:
                self._down_until = time.monotonic() + RETRY_SECONDS
                first, self._warned = not self._warned, True
            (log.warning if first else log.info)(
                "remote cache %s cannot be used (%s); compiling with the local cache alone for %.0f s",
                self.where, e, RETRY_SECONDS)
            raise


def facts_mismatch(built: dict[str, str], here: dict[str, str]) -> str:
    """What differs between the machine an entry was built for and this one ("" when nothing), for a reason."""
    diffs = [f"{name} {built.get(name, 'unknown')!s} (this machine: {value})"
             for name, value in sorted(here.items()) if built.get(name) != value]
    return "; ".join(diffs)


_lock = threading.Lock()
_opened: dict[str, RemoteCache | None] = {}


def remote_cache() -> RemoteCache | None:
    """The remote cache `EMBER_REMOTE_CACHE` names (opened once per URL and process), or None. A URL ember cannot
    use is logged once and ignored: the compile goes on with the local cache."""
    url = os.environ.get("EMBER_REMOTE_CACHE", "").strip()
    if not url:
        return None
    with _lock:
        if url not in _opened:
            _opened[url] = _open(url)
        return _opened[url]


def _open(url: str) -> RemoteCache | None:
    scheme = urlsplit(url).scheme
    factory = _stores.get(scheme)
    if factory is None:
        log.warning("EMBER_REMOTE_CACHE=%s: no store for scheme %r (known: %s); not using a remote cache",
                    shown_url(url), scheme, ", ".join(sorted(_stores)))
        return None
    try:
        team_key()  # a key set and unusable: said once here, not once per entry
        timeout = float(os.environ.get("EMBER_REMOTE_CACHE_TIMEOUT", DEFAULT_TIMEOUT))
        if not 0 < timeout <= 60:
            raise ValueError("EMBER_REMOTE_CACHE_TIMEOUT must be above 0 and at most 60 seconds")
        return RemoteCache(factory(url, timeout), shown_url(url))
    except (ValueError, ImportError, BackendUnavailable, TeamKeyError) as e:
        log.warning("EMBER_REMOTE_CACHE=%s cannot be used (%s); not using a remote cache", shown_url(url), e)
        return None


def forget_remote_caches() -> None:
    """Open the remote cache again on its next use (tests)."""
    with _lock:
        for cache in _opened.values():
            if cache is not None:
                cache.store.close()
        _opened.clear()
