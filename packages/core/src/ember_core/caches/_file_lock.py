"""A lock file that processes (and threads) take around the work on one cache key: `<key>.lock`, `fcntl.flock`.

The holder removes the file before it lets go, so no lock file outlives a build. A waiter may then hold a lock on
a file that no longer has a name; it notices (the open file and the path are not the same file any more) and
tries again on the new one. Where flock is not available (some network file systems) the work goes on without
a lock: the worst that happens is that two processes build the same entry.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("ember.cache")

WAIT_SECONDS = 900.0  # longer than any build (the compiler's own time limit is 600 s)
_held = threading.local()  # the lock paths this thread holds


@contextmanager
def file_lock(path: Path, *, wait: bool = True, timeout: float = WAIT_SECONDS) -> Iterator[bool]:
    """Hold the lock at `path` inside the block; yields whether it is held (False: not waited for, or no flock)."""
    fd = _acquire(path, timeout if wait else 0.0)
    if fd is None:
        yield False
        return
    held = _held_paths()
    held.add(str(path))
    try:
        yield True
    finally:
        held.discard(str(path))
        _release(path, fd)


def holds(path: Path) -> bool:
    """Whether this thread holds the lock at `path`."""
    return str(path) in _held_paths()


def _held_paths() -> set[str]:
    if not hasattr(_held, "paths"):
        _held.paths = set()
    return _held.paths


def _acquire(path: Path, timeout: float) -> int | None:
    """A descriptor holding the lock, or None (busy past the timeout, or no way to lock)."""
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        fd = _open(path)
        if fd is None:
            return None
        outcome = _try_flock(fd)
        if outcome == "held" and _names(fd, path):
            return fd
        os.close(fd)
        if outcome == "unsupported":
            return None
        if time.monotonic() >= deadline:
            if timeout > 0:
                log.warning("gave up waiting for %s after %.0f s; going on without it", path, timeout)
            return None
        if outcome == "busy":
            time.sleep(pause)
            pause = min(pause * 2, 0.1)


def _open(path: Path) -> int | None:
    """An open regular file at path (created if missing); anything else found there is removed once first."""
    for attempt in range(2):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if attempt == 0 and _remove_odd(path):
                continue
            log.warning("cannot open lock file %s (%s); going on without it", path, e)
            return None
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        if attempt == 0 and _remove_odd(path):
            continue
        return None
    return None


def _remove_odd(path: Path) -> bool:
    """Remove what is at path when it is not a regular file (a directory, symlink, fifo); True if removed."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        log.warning("removed a non-file at lock path %s", path)
        return True
    except OSError:
        return False


def _try_flock(fd: int) -> str:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return "held"
    except BlockingIOError:
        return "busy"
    except OSError as e:
        log.warning("flock is not available here (%s); going on without a lock", e)
        return "unsupported"


def _names(fd: int, path: Path) -> bool:
    """Whether path still names the open file fd (the last holder may have removed it)."""
    try:
        st, now = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def _release(path: Path, fd: int) -> None:
    try:
        if _names(fd, path):
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)  # closing the last descriptor lets go of the flock
