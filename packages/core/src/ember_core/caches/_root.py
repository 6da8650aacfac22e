"""The cache root and the trust ember gives it: where it is, whether it is safe to use, the key that signs its
entries, and what makes a directory in it private, or, refused, a fresh temporary one instead.

Root: `$EMBER_CACHE_DIR`, else `$XDG_CACHE_HOME/ember`, else `~/.cache/ember`, created with mode 0700 if missing.
A root another user owns or may write to, or one below a directory another user may write to (not sticky), is
refused (see `_trust.unsafe_root`): whoever can rename what a directory holds can swap a cache's files between
ember's checks. Each cache (the C++ codegen's is `cpp`) is a subdirectory of the root, created with mode 0700 and
marked by a `CACHEDIR.TAG` (the tag backup tools know; `ember cache` uses it to find ember's subdirectories). One
that another user owns, that is a symlink or not a directory is refused. Refused, the process works in a fresh
temporary directory `ember-cache-<name>-*` instead, with a warning saying why, which it removes at exit (and which
a later process removes after a day, if its owner died without cleaning up: see `_directory`).
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
from pathlib import Path

from .._regular_file import FileRefused, read_regular_file
from ._entry_files import remove_any, write_atomic
from ._trust import Untrusted, open_directory, open_file, unsafe_root

log = logging.getLogger("ember.cache")

TAG_NAME = "CACHEDIR.TAG"
TAG = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
       b"# This file is a cache directory tag created by ember.\n"
       b"# For information about cache directory tags see https://bford.info/cachedir/\n")
FALLBACK_PREFIX = "ember-cache-"
LEGACY_FALLBACK = re.compile(r"ember-cpp-[A-Za-z0-9_]{8}")  # what ember-codegen-cpp 0.1 made
ALIVE = ".alive.lock"  # flocked by the process that made a fallback directory, for its whole life

lock = threading.RLock()  # guards the verdicts and keys below, and `_directory`'s opened directories
_roots: dict[str, tuple[Path | None, str]] = {}  # root as configured → (resolved root, or None and why not)
_keys: dict[str, bytes] = {}  # resolved root → its signing key
_PROCESS_KEY = os.urandom(32)  # signs the entries of temporary directories, which live as long as this process
KEY_NAME = "signing.key"
KEY_BYTES = 32
_alive_fds: list[int] = []


def forget_roots() -> None:
    """Decide each root's trust and read its key again on their next use (tests)."""
    with lock:
        _roots.clear()
        _keys.clear()


def cache_root() -> Path:
    """Where ember's disk caches live for this user."""
    env = os.environ.get("EMBER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ember"


def root_problem(root: Path) -> str | None:
    """Why the cache root is not safe to use (see `_trust.unsafe_root`), or None; it is made if missing."""
    with lock:
        return _trusted_root(root)[1] or None


def _trusted_root(root: Path) -> tuple[Path | None, str]:
    """(the resolved root, "") when it is safe to use, else (None, why not); decided once per root and process."""
    known = _roots.get(str(root))
    if known is None:
        known = _roots[str(root)] = _check_root(root)
    return known


def _check_root(root: Path) -> tuple[Path | None, str]:
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        root.mkdir(mode=0o700, exist_ok=True)
        resolved = Path(os.path.realpath(root))
        problem = unsafe_root(resolved)
    except OSError as e:
        return None, f"cannot use it: {e}"
    return (resolved, "") if problem is None else (None, problem)


def signing_key(directory: Path) -> bytes:
    """The key that signs the sidecars of the cache in `directory` (see `_sidecar`): its trusted root's, a secret
    file of the user's (`signing.key`, mode 0600, made on first use); for a temporary directory, or where the root's
    key cannot be read or made, this process's own."""
    with lock:
        root = _trusted_root(directory.parent)[0]
        if root is None or root != Path(os.path.realpath(directory.parent)):
            return _PROCESS_KEY
        key = _keys.get(str(root))
        if key is None:
            key = _keys[str(root)] = _root_key(root)
        return key


def _root_key(root: Path) -> bytes:
    for _ in range(3):
        try:
            return _read_key(root)
        except FileNotFoundError:
            _make_key(root)
        except (OSError, Untrusted, ValueError) as e:
            log.warning("ember cache key %s cannot be used (%s); entries this process writes are its own",
                        root / KEY_NAME, e)
            return _PROCESS_KEY
    return _PROCESS_KEY


def _read_key(root: Path) -> bytes:
    directory = open_directory(root, private=False)
    try:
        fd = open_file(directory, KEY_NAME)
    finally:
        os.close(directory)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise ValueError("other users may read it")
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise ValueError(f"it holds {len(key)} bytes, not {KEY_BYTES}")
    return key


def _make_key(root: Path) -> None:
    """A new random key at `root/signing.key`, unless another process made one first (link, never overwrite)."""
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{KEY_NAME}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES))
        try:
            os.link(tmp, root / KEY_NAME)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def private(path: Path, name: str) -> Path:
    """path as a directory only this user can use; a fresh temporary one when it cannot be made so."""
    try:
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
    fresh = fallback(name)
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
        return read_regular_file(path / TAG_NAME, len(TAG), follow_links=False) == TAG
    except (OSError, FileRefused):
        return False


def _tag(path: Path) -> None:
    if is_tagged(path):
        return
    try:
        remove_any(path / TAG_NAME)
        write_atomic(path / TAG_NAME, TAG)
    except OSError as e:
        log.info("could not tag %s as a cache directory: %s", path, e)


def fallback(name: str) -> Path:
    """A fresh private temporary directory, kept alive by a flock and removed when this process exits."""
    fresh = Path(tempfile.mkdtemp(prefix=f"{FALLBACK_PREFIX}{name}-"))
    try:
        fd = os.open(fresh / ALIVE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _alive_fds.append(fd)
    except OSError:
        pass
    atexit.register(_remove_fallback, fresh, os.getpid())
    return fresh


def _remove_fallback(path: Path, creator: int) -> None:
    if os.getpid() == creator:  # a forked child that exits normally leaves its parent's directory alone
        shutil.rmtree(path, ignore_errors=True)
