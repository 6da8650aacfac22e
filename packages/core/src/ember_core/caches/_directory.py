"""Opening a cache's directory, and keeping it tidy.

`open_subdir(name)` is a cache's checked, private directory under the root (see `_root`): made and tagged on first
use, or a fresh temporary directory where the root or the directory is refused. The first use of a subdirectory in
a process tidies it: work folders (`.build-*`), temporary files (`.*.tmp`), lock files and files of half-written
entries that are older than `STALE_SECONDS` and not held by a live build are removed, the caches are pruned to the
size limit, and this user's temporary fallback directories whose owners died are removed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from ._entry_files import (
    ENTRY_FILE,
    LOCK,
    SIDECAR,
    is_temporary,
    is_work_folder,
    remove_any,
    remove_entry,
    remove_work_folder,
    scan,
)
from ._file_lock import file_lock
from ._root import (
    ALIVE,
    FALLBACK_PREFIX,
    LEGACY_FALLBACK,
    _trusted_root,
    cache_root,
    fallback,
    forget_roots,
    lock,
    private,
)
from ._usage import prune

log = logging.getLogger("ember.cache")

STALE_SECONDS = 300.0  # a work folder or temporary file untouched this long belongs to no running build
STALE_TEMP_SECONDS = 86400.0  # a fallback temporary directory this old whose owner is gone is removed

_opened: dict[tuple[str, str], Path] = {}
_swept_temp = False


def open_subdir(name: str) -> Path:
    """The checked, private, tidied directory of cache `name` under the current root (once per root and process)."""
    root = cache_root()
    with lock:
        hit = _opened.get((str(root), name))
        if hit is None:
            trusted, problem = _trusted_root(root)
            if trusted is None:
                hit = _opened[str(root), name] = fallback(name)
                log.warning("ember cache root %s is not safe to use (%s); cache %r uses %s for this process", root,
                            problem, name, hit)
                return hit
            hit = _opened[str(root), name] = private(trusted / name, name)
            _start_up(hit, name)
        return hit


def private_cache_dir(name: str) -> Path:
    """A private directory (0700, owned by this user, tagged) under ember's cache root for a tool that keeps its
    own files there, such as Triton's compiler cache. ember's tidying and `ember cache clear` touch only names of
    its own entries, never such a tool's files."""
    if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", name):
        raise ValueError(f"cache directory name {name!r} must be 1-64 letters, digits or underscores")
    return open_subdir(name)


def forget_opened() -> None:
    """Let the next use of each cache check and tidy its directory again (tests)."""
    with lock:
        _opened.clear()
    forget_roots()


def _start_up(directory: Path, cache: str) -> None:
    """Tidy a cache directory on its first use in this process; never raises."""
    try:
        _remove_stale(directory, cache, time.time() - STALE_SECONDS)
        prune()
        _sweep_temp_once()
    except OSError as e:
        log.info("tidying %s stopped early: %s", directory, e)


def _remove_stale(directory: Path, cache: str, before: float) -> None:
    """Remove leftovers of builds that died: work folders, temporary files, lock files, half-written entries."""
    names = scan(directory, cache)
    for name, st in names.items():
        if st.st_mtime >= before:
            continue
        m = ENTRY_FILE.fullmatch(name)
        if is_work_folder(name) and stat.S_ISDIR(st.st_mode):
            remove_work_folder(directory, name)
        elif is_temporary(name):
            remove_any(directory / name)
        elif m is not None and m["suffix"] == LOCK:
            with file_lock(directory / name, wait=False):
                pass  # taking a free lock and letting go of it removes the file
        elif m is not None and f"{m['key']}.{SIDECAR}" not in names:
            _remove_orphan(directory, cache, m["key"])


def _remove_orphan(directory: Path, cache: str, key: str) -> None:
    """Files of an entry that never got its sidecar (its build died), unless a build of it is running."""
    with file_lock(directory / f"{key}.{LOCK}", wait=False) as free:
        if free:
            remove_entry(directory, cache, key)


def _sweep_temp_once() -> None:
    """Remove this user's fallback directories in the system temp directory whose owners are gone (once)."""
    global _swept_temp
    if _swept_temp:
        return
    _swept_temp = True
    temp = Path(tempfile.gettempdir())
    before = time.time() - STALE_TEMP_SECONDS
    with os.scandir(temp) as it:
        for entry in it:
            if entry.name.startswith(FALLBACK_PREFIX) or LEGACY_FALLBACK.fullmatch(entry.name):
                _sweep_one(temp / entry.name, before)


def _sweep_one(path: Path, before: float) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mtime >= before:
        return
    with file_lock(path / ALIVE, wait=False) as free:
        if free:
            shutil.rmtree(path, ignore_errors=True)
