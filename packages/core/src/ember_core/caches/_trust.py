"""Who could have written what ember loads from its caches: ownership and mode checks, made on open descriptors.

A cache file is trusted only when nobody but the current user could have put its bytes there:
- the cache root is a directory the user owns that neither group nor others may write, and every directory above
  it is owned by the user or by root and may be written by nobody else, unless it is sticky (`/tmp`: others may
  then add names but not rename or remove ours). A group that is the user's private group (named after the user,
  no other members: what `umask 002` systems give every user) counts as the user: its write bit is allowed;
- the cache's subdirectory is the user's, mode 0700 (see `_cache_dir.check_private`);
- the file is a regular file the user owns that neither group nor others may write.

`open_directory` and `open_file` check what they opened (`fstat` on the descriptor, never a second lookup by
name), and a file is opened relative to its directory's descriptor, so a directory renamed or replaced between the
check and the read cannot hand ember someone else's file. Any failure is `Untrusted`, naming what and why.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

_NOT_SHARED = 0o022  # group or others may write
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Untrusted(Exception):
    """A cache directory or file that someone other than the current user could have written."""


def unsafe_root(root: Path) -> str | None:
    """Why the cache root (a resolved path to an existing directory) is not safe to use, or None."""
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a directory"
    if st.st_uid != os.getuid():
        return f"{root} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if _others_may_write(st):
        return f"{root} has mode {oct(stat.S_IMODE(st.st_mode))}: other users may write to it"
    for parent in root.parents:
        problem = _unsafe_parent(parent)
        if problem is not None:
            return problem
    return None


def _unsafe_parent(path: Path) -> str | None:
    st = os.stat(path)
    if st.st_uid not in (0, os.getuid()):
        return f"{path}, above it, is owned by uid {st.st_uid}"
    if _others_may_write(st) and not st.st_mode & stat.S_ISVTX:
        return f"{path}, above it, has mode {oct(stat.S_IMODE(st.st_mode))}: other users may rename what it holds"
    return None


def _others_may_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & 0o002 or st.st_mode & 0o020 and not _private_group(st.st_gid))


def _private_group(gid: int) -> bool:
    """Whether group `gid` is the user's own: their primary group, named after them, with no other members."""
    if gid != os.getgid():
        return False
    try:
        group, user = grp.getgrgid(gid), pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def open_directory(path: Path, private: bool = True) -> int:
    """A descriptor of the directory at path (not through a symlink) that this user owns and nobody else may write
    (`private`: nobody else may enter either)."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        _check(os.fstat(fd), path.name or str(path), 0o077 if private else _NOT_SHARED)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(directory: int, name: str) -> int:
    """A read-only descriptor of the regular file `name` in the open directory `directory` (not through a symlink,
    never blocking on a fifo) that this user owns and nobody else may write. FileNotFoundError if there is none."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{name} is not a regular file")
        _check(st, name, _NOT_SHARED)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check(st: os.stat_result, name: str, forbidden: int) -> None:
    if st.st_uid != os.getuid():
        raise Untrusted(f"{name} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})")
    if st.st_mode & forbidden and (forbidden != _NOT_SHARED or _others_may_write(st)):
        raise Untrusted(f"{name} has mode {oct(stat.S_IMODE(st.st_mode))}: other users may write to it")
