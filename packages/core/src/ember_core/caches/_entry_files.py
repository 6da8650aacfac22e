"""The files of a cache directory, by name: which ones ember made, and removing or writing them safely.

Names ember makes in a cache subdirectory, and the only ones it ever removes there:
- `<key>.<suffix>`: an entry's files, for the suffixes its cache declared; `<key>.json` is the entry's sidecar,
  `<key>.lock` the lock held while it is built (a file beside a sidecar, `<key>.*`, belongs to that entry too);
- `.build-<key>-*`: the work folder of one build;
- `.<name>.*.tmp`: a file being written, before it is moved into place.
A key is 1-128 letters, digits or underscores; a suffix 1-16 lowercase letters or digits. Removal never follows a
symlink: a symlink is unlinked itself, a directory is removed with what it holds (`shutil.rmtree` does not follow
symlinks inside it either).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from .._regular_file import read_at_most, regular_file
from ._file_lock import file_lock

KEY = re.compile(r"[A-Za-z0-9_]{1,128}")
ENTRY_FILE = re.compile(r"(?P<key>[A-Za-z0-9_]{1,128})\.(?P<suffix>[a-z0-9]{1,16})")
SIDECAR, LOCK = "json", "lock"
_suffixes: dict[str, frozenset[str]] = {}  # cache name → the suffixes of its entries' files


def declare(name: str, suffixes: tuple[str, ...]) -> None:
    """Record the suffixes of cache `name`'s files, so that its directory's files are recognized."""
    _suffixes[name] = _suffixes.get(name, frozenset()) | frozenset(suffixes)


def is_work_folder(name: str) -> bool:
    return name.startswith(".build-")


def work_folder_key(name: str) -> str | None:
    """The key in a work folder's name `.build-<key>-*`, or None (a folder of an older ember has none)."""
    key = name[len(".build-"):].split("-", 1)[0]
    return key if "-" in name[len(".build-"):] and KEY.fullmatch(key) else None


def is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp") and not is_work_folder(name)


def scan(directory: Path, cache: str) -> dict[str, os.stat_result]:
    """name → lstat of every name in directory that cache `cache` makes (nothing else is looked at)."""
    with os.scandir(directory) as it:
        listing = {entry.name: entry for entry in it}
    matches = {name: ENTRY_FILE.fullmatch(name) for name in listing}
    with_sidecar = {m["key"] for m in matches.values() if m is not None and m["suffix"] == SIDECAR}
    allowed = {SIDECAR, LOCK} | _suffixes.get(cache, frozenset())
    found = {}
    for name, entry in listing.items():
        m = matches[name]
        ours = m is not None and (m["suffix"] in allowed or m["key"] in with_sidecar)
        if ours or is_work_folder(name) or is_temporary(name):
            try:
                found[name] = entry.stat(follow_symlinks=False)
            except OSError:
                pass
    return found


def remove_any(path: Path) -> None:
    """Remove whatever is at path without following it; nothing there is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def remove_entry(directory: Path, cache: str, key: str) -> int:
    """Remove every file of entry `key` but its lock file (its holder removes that); returns the bytes freed."""
    freed = 0
    for name, st in scan(directory, cache).items():
        m = ENTRY_FILE.fullmatch(name)
        if m is None or m["key"] != key or m["suffix"] == LOCK:
            continue
        try:
            remove_any(directory / name)
            freed += st.st_size if stat.S_ISREG(st.st_mode) else 0
        except OSError:
            pass
    return freed


def write_atomic(path: Path, data: bytes) -> None:
    """Write data to a temporary name beside path, then move it into place in one step."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def sha256_file(path: Path) -> str:
    """The sha256 of the regular file at path, read without following a symlink or blocking on a fifo."""
    with regular_file(path, follow_links=False) as (fd, _):
        h = hashlib.sha256()
        while block := read_at_most(fd, 1 << 20):
            h.update(block)
        return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def remove_work_folder(directory: Path, name: str) -> None:
    """Remove a work folder unless a build of its key holds the key's lock (an older ember's: age decides)."""
    key = work_folder_key(name)
    if key is None:
        shutil.rmtree(directory / name, ignore_errors=True)
        return
    with file_lock(directory / f"{key}.{LOCK}", wait=False) as free:
        if free:
            shutil.rmtree(directory / name, ignore_errors=True)
