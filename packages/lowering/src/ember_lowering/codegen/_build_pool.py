"""Builds of kernel binaries through a verified disk cache, in a pool of worker threads.

`BuildPool.get(key, expect, make)` gives a `Build`: either a verified cache entry (`hit`), or a future of one
that a worker thread is making (`make` typically runs a compiler as a subprocess, so builds of several graphs
overlap on several cores). Threads of one process share the build of a key (`_inflight`); processes share one
through the cache entry's lock: a worker holds it while it builds, and one that waited for it looks up again.
The future resolves to the entry's verified lookup (`CacheLookup`: its bytes, or its open library file; a new
build is looked up again once stored, so a binary is always loaded from what was checked) or raises `BuildError`.
`Build.rebuild(reason)` discards the entry and makes it again: for an entry that verified but cannot be bound.

Every build started here is counted by `_progress.PROGRESS`, which shows them on a terminal as one line
(`ember: building 3 C++ libraries (2 done)…`; `EMBER_PROGRESS`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember_core import CacheLookup, DiskCache, Event, Graph, Stopwatch, emit

from ._errors import BuildError
from ._progress import PROGRESS

# make(work folder) -> (files to keep {suffix: path or bytes}, extra sidecar metadata)
Maker = Callable[[Path], tuple[Mapping[str, Path | bytes], Mapping[str, Any]]]


@dataclass
class Build:
    """A binary being made: `hit` says it came from the cache; `future` resolves to its files or `BuildError`."""

    key: str
    future: Future
    hit: bool
    reason: str = ""  # why it was not a hit
    clock: Stopwatch = field(default_factory=Stopwatch)  # from the request to the future's result
    remake: Callable[[str], Build] | None = field(default=None, repr=False)  # see `rebuild`
    origin: str = ""  # a hit that came from a remote cache: where (`CacheLookup.origin`)

    def __post_init__(self) -> None:
        self.seconds: float | None = None  # the build's time, once its future is done
        self.future.add_done_callback(self._done)

    def _done(self, _future: Future) -> None:
        self.seconds = self.clock.seconds

    def rebuild(self, reason: str) -> Build | None:
        """A new build of this one's key, its cache entry discarded first (`reason` is logged); None if it cannot
        be made again."""
        return self.remake(reason) if self.remake is not None else None

    @classmethod
    def failed(cls, error: Exception, reason: str) -> Build:
        future: Future = Future()
        future.set_exception(error)
        return cls("", future, False, reason)


def report_build(stage: str, graph: Graph, build: Build, what: str, hit: bool | None = None) -> None:
    """The `build_cache_hit` or `build_cache_miss` event of `graph`'s build (`what`: "library", "module"); `hit`
    overrides the build's own (a library this process has loaded already is a hit too)."""
    if build.hit if hit is None else hit:
        where = f"the remote cache {build.origin}" if build.origin else "the cache"
        emit(Event(kind="build_cache_hit", stage=stage, graph=graph,
                   message=f"graph {graph.name!r}: {what} {build.key[:12]} from {where}",
                   data={"origin": build.origin or "local"}))
    else:
        emit(Event(kind="build_cache_miss", stage=stage, graph=graph,
                   message=f"graph {graph.name!r}: building {what} {build.key[:12]} ({build.reason})",
                   data={"reason": build.reason}))


class BuildPool:
    """One worker thread per core (created on first use); concurrent requests of one key share a build. `what` names
    one thing built, for the progress line ("C++ library"; default "<name> build")."""

    def __init__(self, cache: DiskCache, name: str, workers: int | None = None, what: str | None = None):
        self.cache, self.name = cache, name
        self.what = what or f"{name} build"
        self.workers = workers or max(os.cpu_count() or 1, 1)
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: dict[str, Future] = {}
        self._lock = threading.RLock()

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"ember-{self.name}-build")
            return self._pool

    def get(self, key: str, expect: Mapping[str, str], make: Maker) -> Build:
        """The entry `key` whose sidecar holds `expect`, from the cache or made by `make` in a worker."""
        remake = lambda reason: self._remake(key, expect, make, reason)  # noqa: E731
        with self._lock:
            running = self._inflight.get(key)
            if running is not None:
                return Build(key, running, False, "being built", remake=remake)
            found = self.cache.lookup(key, dict(expect))
            if found.hit:
                done: Future = Future()
                done.set_result(found)
                return Build(key, done, True, remake=remake, origin=found.origin)
            return Build(key, self._submit(key, expect, make, lookup_first=True), False, found.reason, remake=remake)

    def _remake(self, key: str, expect: Mapping[str, str], make: Maker, reason: str) -> Build:
        with self._lock:
            running = self._inflight.get(key)
            if running is None:
                self.cache.discard(key, reason)
                running = self._submit(key, expect, make, lookup_first=False)
        return Build(key, running, False, reason)

    def _submit(self, key: str, expect: Mapping[str, str], make: Maker, lookup_first: bool) -> Future:
        """A worker's future of the build (called with `_lock` held)."""
        PROGRESS.started(self.what)
        try:
            future = self.pool().submit(self._build, key, dict(expect), make, lookup_first)
        except BaseException:
            PROGRESS.finished(self.what, failed=True)
            raise
        self._inflight[key] = future
        future.add_done_callback(lambda _f, key=key: self._forget(key))
        future.add_done_callback(lambda f: PROGRESS.finished(self.what, failed=f.cancelled() or bool(f.exception())))
        return future

    def _forget(self, key: str) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def _build(self, key: str, expect: dict[str, str], make: Maker, lookup_first: bool) -> CacheLookup:
        """Make the entry under the key's lock, unless the process we waited for has made it meanwhile; the result
        is the stored entry looked up (verified) again."""
        with self.cache.lock(key):
            found = self.cache.lookup(key, expect) if lookup_first else None
            if found is not None and found.hit:
                return found
            with self.cache.work_folder(key) as work:
                files, meta = make(work)
                try:
                    self.cache.store(key, files, {**expect, **meta})
                except OSError as e:
                    raise BuildError(f"the {self.name} cache could not keep the build of {key}: {e}") from e
            found = self.cache.lookup(key, expect)
            if not found.hit:
                raise BuildError(f"the {self.name} cache's new entry {key} does not verify: {found.reason}")
            return found
