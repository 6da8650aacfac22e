"""Disk caches of what a stage computed for a graph (the runtime's partitions, lowering's kernel plans), so that
a later process compiling the same graph starts warm.

A `ResultCache` keeps one text file per entry in ember's verified `DiskCache` (private directory, atomic writes,
sha256-checked sidecar, least-recently-used pruning, `ember cache info|clear`). The caller names the entry by
its *facts*: every string that decides the result (the graph's fingerprint, the code versions of the stages that
ran, torch's version, the options ...). The key is their sha256, and the facts are also kept in the sidecar, where
a lookup checks them again and where people can read them.

The text is untrusted when it is read back: the caller's `read(text)` parses it with ember's own grammar
(graph JSON, loop-IR text), verifies it and checks that it fits the graph; it never evaluates anything. Whatever
goes wrong (the sidecar's checks, the parse, the verifier, the fit) is a miss: the entry is removed, a warning on
`ember.cache` names the file and what is wrong, and the stage computes the result again. Every lookup is a
`disk_cache_hit` or `disk_cache_miss` event of the caller's stage; a store that fails is logged, never raised.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from .._errors import EmberError
from ..events._events import Event, Reused
from ..graph._schema import Graph
from ..plugins._plugins import emit
from ._disk_cache import DiskCache
from ._sidecar import BadEntry

log = logging.getLogger("ember.cache")

T = TypeVar("T")
MAX_TEXT_BYTES = 256 << 20  # an entry's text; a larger result is not stored (a larger file: `DiskCache` refuses it)
Facts = Mapping[str, str]
# read(text) -> the result, or raises naming what is wrong (the cache adds the file)
Reader = Callable[[str], T]


_caches: list[ResultCache] = []  # every one made in this process, for `clear_result_caches`


def clear_result_caches() -> int:
    """Empty every disk cache of stage results this process has made (not the codegens' build caches): the next
    compile of any graph runs every stage. Returns how many entries were removed."""
    return sum(cache.disk.clear() for cache in list(_caches))


def facts_key(facts: Facts) -> str:
    """The cache key of an entry: the sha256 of its facts."""
    return hashlib.sha256(json.dumps(dict(facts), sort_keys=True).encode()).hexdigest()


class ResultCache(Generic[T]):
    """Entries `<key>.<suffix>` under `<cache root>/<name>`, looked up and stored on behalf of `stage`, which the
    events name; `what` says what an entry holds, for messages ("partition", "kernel plan")."""

    def __init__(self, name: str, suffix: str, stage: str, what: str):
        self.disk = DiskCache(name, (suffix,))
        self.name, self.suffix, self.stage, self.what = name, suffix, stage, what
        _caches.append(self)

    def load(self, facts: Facts, graph: Graph, read: Reader[T],
             describe: Callable[[T], Mapping[str, object]] | None = None) -> T | None:
        """The stored result for `facts`, read and checked by `read`; None (after a miss event) otherwise.
        `describe(result)` adds to the hit event's data what the stage reports of a result it computes (lowering:
        the plan's `steps`), so observers show a reused result as they show a computed one."""
        key = facts_key(facts)
        try:
            found = self.disk.lookup(key, dict(facts))
        except OSError as e:  # the cache directory itself cannot be used
            self._miss(graph, key, f"the cache cannot be read: {e}")
            return None
        if not found.hit:
            self._miss(graph, key, found.reason)
            return None
        path = found.files[self.suffix]
        try:
            result = read(found.data[self.suffix].decode("utf-8"))
        except Exception as e:  # noqa: BLE001 - the boundary of untrusted data: any failure means rebuild
            reason = f"{path}: {_first_line(e)}"
            self.disk.discard(key, reason)
            self._miss(graph, key, reason)
            return None
        # the entry's text as the source: EMBER_DUMP writes it (`NNN-disk_cache_hit-<graph>.src.txt`), so a warm start
        # shows what it reused where a cold one shows what it computed
        where = f"the remote cache {found.origin}" if found.origin else "the disk cache"
        emit(Event("disk_cache_hit", self.stage, f"graph {graph.name!r}: {self.what} from {where} "
                   f"({self.name} {key[:12]})", graph=graph, source=found.data[self.suffix].decode("utf-8"),
                   payload=Reused(result),
                   data={**(describe(result) if describe else {}), "cache": self.name, "key": key, "file": str(path),
                         "origin": found.origin or "local"}))
        return result

    def store(self, facts: Facts, graph: Graph, text: str) -> bool:
        """Keep `text` as the entry of `facts`; False (and a log line) when it cannot be kept."""
        key = facts_key(facts)
        data = text.encode()
        if len(data) > MAX_TEXT_BYTES:
            log.info("cache %s: the %s of graph %r is %d bytes, more than %d: not stored", self.name, self.what,
                     graph.name, len(data), MAX_TEXT_BYTES)
            return False
        try:
            with self.disk.lock(key, wait=False) as free:
                if not free:  # another thread or process is storing the same entry
                    return False
                self.disk.store(key, {self.suffix: data}, dict(facts))
        except (OSError, ValueError) as e:
            log.warning("cache %s: could not store the %s of graph %r: %s", self.name, self.what, graph.name, e)
            return False
        return True

    def _miss(self, graph: Graph, key: str, reason: str) -> None:
        emit(Event("disk_cache_miss", self.stage, f"graph {graph.name!r}: no {self.what} in the disk cache "
                   f"({self.name} {key[:12]}: {reason})", graph=graph,
                   data={"cache": self.name, "key": key, "reason": reason}))


def _first_line(e: Exception) -> str:
    """What is wrong, in one line: an ember error's first line (a verifier's message goes on with the graph's
    text), else the exception's type and message."""
    lines = str(e).strip().splitlines()
    line = lines[0] if lines else ""
    if not isinstance(e, (EmberError, BadEntry)):
        line = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return line if len(line) <= 300 else line[:297] + "..."
