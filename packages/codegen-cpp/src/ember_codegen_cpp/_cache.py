"""The disk cache of built libraries: a private per-user directory, atomic writes, entries verified before use.

Directory: `$EMBER_CACHE_DIR/cpp`, else `$XDG_CACHE_HOME/ember/cpp`, else `~/.cache/ember/cpp`. It is created with
mode 0700; one that another user owns, or that is a symlink, is refused (this process then uses a fresh private
temporary directory); one of ours with a wider mode is narrowed to 0700.

Entry `<key>`: `<key>.so`, `<key>.cpp` (the source, for people) and `<key>.json`, the sidecar written last:
the key, the source's sha256 and the library's sha256. `lookup` trusts an entry only when the sidecar parses,
names the same key and source, and the library's bytes hash to what it says; anything else is removed and
rebuilt. Every file is written to a temporary name in the same directory and moved into place (`os.replace`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("ember.kernels")

_lock = threading.Lock()
_dirs: dict[str, Path] = {}


def cache_root() -> Path:
    """Where ember's caches live for this user (the cpp codegen uses its `cpp` subdirectory)."""
    env = os.environ.get("EMBER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ember"


def cache_dir() -> Path:
    """The checked, private directory of built libraries (created on first use)."""
    root = cache_root()
    with _lock:
        hit = _dirs.get(str(root))
        if hit is None:
            hit = _dirs[str(root)] = _private(root / "cpp")
        return hit


def _private(path: Path) -> Path:
    """path as a directory only this user can use; a fresh temporary one when path cannot be made so."""
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
        return path
    fresh = Path(tempfile.mkdtemp(prefix="ember-cpp-"))
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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@dataclass(frozen=True)
class Entry:
    """One cache entry's files."""

    directory: Path
    key: str

    @property
    def library(self) -> Path:
        return self.directory / f"{self.key}.so"

    @property
    def sidecar(self) -> Path:
        return self.directory / f"{self.key}.json"

    @property
    def source(self) -> Path:
        return self.directory / f"{self.key}.cpp"

    def lookup(self, source_sha: str) -> tuple[Path | None, str]:
        """(library, "") when the entry is there and verified; (None, why) otherwise, removing a bad entry."""
        try:
            meta = json.loads(self.sidecar.read_text())
        except FileNotFoundError:
            return None, "not cached"
        except (OSError, ValueError) as e:
            self.remove()
            return None, f"unreadable sidecar ({e})"
        if meta.get("key") != self.key or meta.get("source_sha256") != source_sha:
            self.remove()
            return None, "sidecar names another build"
        try:
            actual = sha256_file(self.library)
        except OSError as e:
            self.remove()
            return None, f"library unreadable ({e})"
        if actual != meta.get("library_sha256"):
            self.remove()
            return None, "library does not match its recorded sha256 (corrupt or truncated)"
        return self.library, ""

    def store(self, built: Path, source: str, source_sha: str, extra: dict) -> Path:
        """Move a freshly built library into place, then write its sidecar (the mark of a complete entry)."""
        digest = sha256_file(built)
        write_atomic(self.source, source.encode())
        os.replace(built, self.library)
        meta = {"key": self.key, "source_sha256": source_sha, "library_sha256": digest, **extra}
        write_atomic(self.sidecar, json.dumps(meta, indent=1, sort_keys=True).encode())
        return self.library

    def remove(self) -> None:
        for p in (self.sidecar, self.library, self.source):
            _unlink(p)
