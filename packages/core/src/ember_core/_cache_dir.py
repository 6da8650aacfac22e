"""Where ember's disk caches live, and keeping each place private and tidy.

Root: `$EMBER_CACHE_DIR`, else `$XDG_CACHE_HOME/ember`, else `~/.cache/ember`. Each cache (the C++ codegen's is
`cpp`) is a subdirectory of it, created with mode 0700 and marked by a `CACHEDIR.TAG` (the tag backup tools know;
`ember cache` uses it to find ember's subdirectories). One that another user owns, that is a symlink or not a
directory is refused: the process then works in a fresh temporary directory `ember-cache-<name>-*`, which it
removes at exit (and which a later process removes after a day, if its owner died without cleaning up).

The first use of a subdirectory in a process tidies it: work folders (`.build-*`), temporary files (`.*.tmp`),
lock files and files of half-written entries that are older than `STALE_SECONDS` and not held by a live build are
removed, and the caches are pruned to the size limit.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

from ._cache_files import (
    ENTRY_FILE,
    LOCK,
    SIDECAR,
    is_temporary,
    is_work_folder,
    remove_any,
    remove_entry,
    remove_work_folder,
    scan,
    write_atomic,
)
from ._file_lock import file_lock
from ._sidecar import BadEntry, read_regular

log = logging.getLogger("ember.cache")

STALE_SECONDS = 300.0  # a work folder or temporary file untouched this long belongs to no running build
STALE_TEMP_SECONDS = 86400.0  # a fallback temporary directory this old whose owner is gone is removed
TAG_NAME = "CACHEDIR.TAG"
TAG = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
       b"# This file is a cache directory tag created by ember.\n"
       b"# For information about cache directory tags see https://bford.info/cachedir/\n")
FALLBACK_PREFIX = "ember-cache-"
_LEGACY_FALLBACK = re.compile(r"ember-cpp-[A-Za-z0-9_]{8}")  # what ember-codegen-cpp 0.1 made
_ALIVE = ".alive.lock"  # flocked by the process that made a fallback directory, for its whole life

_lock = threading.Lock()
_opened: dict[tuple[str, str], Path] = {}
_alive_fds: list[int] = []
_swept_temp = False


def cache_root() -> Path:
    """Where ember's disk caches live for this user."""
    env = os.environ.get("EMBER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ember"


def open_subdir(name: str) -> Path:
    """The checked, private, tidied directory of cache `name` under the current root (once per root and process)."""
    root = cache_root()
    with _lock:
        hit = _opened.get((str(root), name))
        if hit is None:
            hit = _opened[str(root), name] = _private(root / name, name)
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
    with _lock:
        _opened.clear()


def _private(path: Path, name: str) -> Path:
    """path as a directory only this user can use; a fresh temporary one when it cannot be made so."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        problem = check_private(path)
    except OSError as e:
        problem = f"cannot create it: {e}"
    if problem is None:
        _tag(path)
        return path
    fresh = _fallback(name)
    log.warning("ember cache directory %s is not safe to use (%s); using %s for this process", path, problem, fresh)
    return fresh


def check_private(path: Path) -> str | None:
    """None if path is a real directory this user owns with mode 0700 (narrowed if it was wider), else why not."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not {os.getuid()}"
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
        if os.lstat(path).st_mode & 0o077:
            return f"its mode {oct(st.st_mode & 0o777)} cannot be narrowed to 0o700"
        log.info("narrowed the mode of %s from %s to 0o700", path, oct(st.st_mode & 0o777))
    return None


def is_tagged(path: Path) -> bool:
    """Whether path holds ember's cache-directory tag (a regular file, read without following a symlink)."""
    try:
        return read_regular(path / TAG_NAME, len(TAG) + 1) == TAG
    except (OSError, BadEntry):
        return False


def _tag(path: Path) -> None:
    if is_tagged(path):
        return
    try:
        remove_any(path / TAG_NAME)
        write_atomic(path / TAG_NAME, TAG)
    except OSError as e:
        log.info("could not tag %s as a cache directory: %s", path, e)


def _fallback(name: str) -> Path:
    """A fresh private temporary directory, kept alive by a flock and removed when this process exits."""
    fresh = Path(tempfile.mkdtemp(prefix=f"{FALLBACK_PREFIX}{name}-"))
    try:
        fd = os.open(fresh / _ALIVE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _alive_fds.append(fd)
    except OSError:
        pass
    atexit.register(_remove_fallback, fresh, os.getpid())
    return fresh


def _remove_fallback(path: Path, creator: int) -> None:
    if os.getpid() == creator:  # a forked child that exits normally leaves its parent's directory alone
        shutil.rmtree(path, ignore_errors=True)


def _start_up(directory: Path, cache: str) -> None:
    """Tidy a cache directory on its first use in this process; never raises."""
    from ._cache_usage import prune  # _cache_usage reads this module's names

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
            if entry.name.startswith(FALLBACK_PREFIX) or _LEGACY_FALLBACK.fullmatch(entry.name):
                _sweep_one(temp / entry.name, before)


def _sweep_one(path: Path, before: float) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mtime >= before:
        return
    with file_lock(path / _ALIVE, wait=False) as free:
        if free:
            shutil.rmtree(path, ignore_errors=True)
