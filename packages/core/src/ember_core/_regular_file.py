"""Reading a file that a user named or that a folder listing found: only a regular file, only up to a limit.

A fifo would block a read forever, a device would never end it, and a name checked with `stat` may be swapped for
either before it is opened. So the file is opened first, without blocking (opening a fifo with `O_NONBLOCK` returns
at once), and the open descriptor is checked (`fstat`) and read; nothing is read by name twice.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ._errors import EmberError

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 20


class FileRefused(EmberError):
    """A file that is not read: missing, not a regular file, a symbolic link where none is taken, or too large.
    The message says which, without the path (callers name the file their own way)."""


@contextlib.contextmanager
def regular_file(path: str | os.PathLike, *, follow_links: bool = True) -> Iterator[tuple[int, os.stat_result]]:
    """(an open descriptor, its `fstat`) of a regular file, closed afterwards; `FileRefused` for anything else.
    `follow_links=False` refuses a symbolic link (for files found by listing a folder: the user did not name them)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow_links else _NOFOLLOW))
    except OSError as e:
        raise FileRefused(_why(path, e, follow_links)) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileRefused("not a regular file: a folder")
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused("not a regular file (a fifo, socket or device is never read)")
        yield fd, st
    finally:
        os.close(fd)


def read_regular_file(path: str | os.PathLike, limit: int, *, follow_links: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `FileRefused` otherwise."""
    with regular_file(path, follow_links=follow_links) as (fd, st):
        if st.st_size > limit:
            raise FileRefused(f"{st.st_size} bytes, larger than the limit of {limit} bytes")
        data = read_at_most(fd, limit + 1)
    if len(data) > limit:  # it grew while being read
        raise FileRefused(f"larger than the limit of {limit} bytes")
    return data


def read_at_most(fd: int, n: int) -> bytes:
    """Up to n bytes from an open file (fewer at its end)."""
    chunks, total = [], 0
    while total < n:
        try:
            chunk = os.read(fd, min(_CHUNK, n - total))
        except OSError as e:
            raise FileRefused(f"cannot read it: {e.strerror or e}") from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _why(path: str | os.PathLike, e: OSError, follow_links: bool) -> str:
    if not follow_links and Path(path).is_symlink():
        return "a symbolic link (links found in a folder are not followed)"
    if isinstance(e, FileNotFoundError):
        return "no such file"
    return f"cannot open it: {e.strerror or e}"
