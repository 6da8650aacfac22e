"""How much the disk caches hold, pruning them to a size limit, and clearing them (`ember cache info|clear`).

The limit, `EMBER_CACHE_SIZE_MB` (default 1024; 0 turns pruning off), covers every cache under the root together.
An entry's recency is its sidecar's modification time, which a hit refreshes; pruning removes the least recently
used entries first, skips entries being built, and never removes the entry just stored.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ._entry_files import (
    ENTRY_FILE,
    LOCK,
    SIDECAR,
    is_work_folder,
    remove_any,
    remove_entry,
    remove_work_folder,
    scan,
)
from ._file_lock import file_lock
from ._root import TAG_NAME, cache_root, check_private, is_tagged, root_problem

log = logging.getLogger("ember.cache")

DEFAULT_LIMIT_MB = 1024.0


def cache_size_limit() -> int | None:
    """The size limit of the disk caches in bytes (`EMBER_CACHE_SIZE_MB`), or None for no limit."""
    text = os.environ.get("EMBER_CACHE_SIZE_MB", "").strip()
    try:
        mb = float(text) if text else DEFAULT_LIMIT_MB
    except ValueError:
        log.warning("EMBER_CACHE_SIZE_MB=%r is not a number; using %g", text, DEFAULT_LIMIT_MB)
        mb = DEFAULT_LIMIT_MB
    if not mb > 0:  # 0, a negative number or NaN
        return None
    return int(mb * 1024 * 1024)


@dataclass(frozen=True)
class CacheUsage:
    """One cache subdirectory: its name, path, entries and bytes, or why it was not looked into."""

    name: str
    path: Path
    entries: int = 0
    bytes: int = 0
    problem: str | None = None


@dataclass(frozen=True)
class _Entry:
    directory: Path
    cache: str
    key: str
    used: float  # the sidecar's mtime
    size: int


def subdirectories(root: Path | None = None) -> list[tuple[str, Path, str | None]]:
    """(name, path, problem) of ember's cache subdirectories under root (those holding ember's CACHEDIR.TAG)."""
    root = cache_root() if root is None else root
    try:
        names = sorted(e.name for e in os.scandir(root))
    except OSError:
        return []
    unsafe = root_problem(root)
    found = []
    for name in names:
        path = root / name
        if not is_tagged(path):  # only what ember tagged: never a folder that merely has a cache's name
            continue
        if unsafe is not None:  # left alone: its files may be anybody's
            found.append((name, path, f"the cache root is not safe to use: {unsafe}"))
            continue
        try:
            found.append((name, path, check_private(path)))
        except OSError as e:
            found.append((name, path, str(e)))
    return found


def _entries(directory: Path, cache: str) -> list[_Entry]:
    names = scan(directory, cache)
    sizes: dict[str, int] = {}
    for name, st in names.items():
        m = ENTRY_FILE.fullmatch(name)
        if m is not None and m["suffix"] != LOCK and stat.S_ISREG(st.st_mode):
            sizes[m["key"]] = sizes.get(m["key"], 0) + st.st_size
    return [_Entry(directory, cache, key, names[f"{key}.{SIDECAR}"].st_mtime, size) for key, size in sizes.items()
            if f"{key}.{SIDECAR}" in names]


def entry_keys(directory: Path, cache: str) -> list[str]:
    """The keys of the complete entries (those with a sidecar) of cache `cache` in directory."""
    return sorted(e.key for e in _entries(directory, cache))


def _all_entries(root: Path) -> list[_Entry]:
    return [e for name, path, problem in subdirectories(root) if problem is None for e in _entries(path, name)]


def prune(keep: tuple[Path, str] | None = None) -> int:
    """Remove least recently used entries until the caches fit the limit; returns how many were removed."""
    limit = cache_size_limit()
    if limit is None:
        return 0
    entries = sorted(_all_entries(cache_root()), key=lambda e: e.used)
    total = sum(e.size for e in entries)
    removed = 0
    for e in entries:
        if total <= limit:
            break
        if (e.directory, e.key) == keep:
            continue
        with file_lock(e.directory / f"{e.key}.{LOCK}", wait=False) as free:
            if free:
                total -= remove_entry(e.directory, e.cache, e.key)
                removed += 1
    if removed:
        log.info("pruned %d least recently used cache entries to stay under %d bytes", removed, limit)
    return removed


def disk_cache_usage() -> list[CacheUsage]:
    """What each cache subdirectory holds."""
    rows = []
    for name, path, problem in subdirectories():
        if problem is not None:
            rows.append(CacheUsage(name, path, problem=problem))
            continue
        rows.append(CacheUsage(name, path, len(_entries(path, name)), _bytes(path, name)))
    return rows


def _bytes(directory: Path, cache: str) -> int:
    return sum(st.st_size for st in scan(directory, cache).values() if stat.S_ISREG(st.st_mode))


def clear_disk_cache() -> list[CacheUsage]:
    """Remove every entry, work folder and temporary file ember made in its cache subdirectories (the directories
    and their tags stay; a subdirectory failing the owner check is left alone). Returns what was removed."""
    removed = []
    for name, path, problem in subdirectories():
        if problem is not None:
            removed.append(CacheUsage(name, path, problem=problem))
            continue
        entries, freed = len(_entries(path, name)), _bytes(path, name)
        for item in scan(path, name):
            _clear_one(path, item)
        removed.append(CacheUsage(name, path, entries, freed))
    return removed


def _clear_one(directory: Path, name: str) -> None:
    m = ENTRY_FILE.fullmatch(name)
    try:
        if m is not None and m["suffix"] == LOCK:
            with file_lock(directory / name, wait=False):
                pass  # a free lock is removed when let go of; a held one belongs to a running build
        elif is_work_folder(name):
            remove_work_folder(directory, name)
        elif name != TAG_NAME:
            remove_any(directory / name)
    except OSError as e:
        log.warning("could not remove %s: %s", directory / name, e)
