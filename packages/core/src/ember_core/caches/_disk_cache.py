"""A verified disk cache that any codegen (or the runtime) can keep its builds in.

`DiskCache(name, suffixes)` lives in the subdirectory `name` of the cache root (see `_cache_dir`). Entry `<key>` is
one file per suffix (`<key>.so`, `<key>.cpp` ...) and the sidecar `<key>.json`, written last, that holds the
sha256 of each file and the builder's own metadata, signed with the user's cache key (see `_sidecar`). Every file
is written under a temporary name and moved into place.

`lookup` trusts an entry only when its directory and every file of it are the user's and nobody else may write them
(see `_trust`), its sidecar reads back with a valid signature, matches what the caller expects, and every file's
bytes hash to what the sidecar says. Each file is opened once, relative to the directory's descriptor, and what was
checked is what the caller gets: the verified bytes (`CacheLookup.data`) or, for the suffixes the cache names
`loaded` (a native library), the verified open file itself (`CacheLookup.opened`, an `EntryFile`), which a loader
opens by descriptor. `lookup` never raises for what it finds on disk: anything else is a miss with the reason, and
the bad entry is removed (a directory or fifo at an entry path too; a symlink is unlinked, never followed), so that
the caller rebuilds it. A hit refreshes the entry's recency. A caller that finds a verified entry unusable (a
library that does not bind) discards it the same way (`discard`).

Builders hold `lock(key)` while they build: a second process waits, looks up again and finds the entry.

Where a remote cache is configured (`_remote`), a lookup that finds nothing here asks it, and an entry it hands over
(verified by it: sha256s, fields, the team key's signature on code) is stored here like a local build, then looked
up as one (`CacheLookup.origin` names the remote); `store` also puts each new entry there. A cache says which of its
files are code that runs (`code`: shared only when signed) and what of the machine its entries depend on
(`machine`, see `_machine`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import _sidecar
from ._backends import BackendUnavailable
from ._directory import open_subdir
from ._entry_files import (
    ENTRY_FILE,
    KEY,
    LOCK,
    SIDECAR,
    declare,
    remove_any,
    remove_entry,
    sha256_bytes,
    sha256_file,
    write_atomic,
)
from ._file_lock import file_lock, holds
from ._machine import MACHINE_PARTS, machine_facts
from ._packed import PackedEntry
from ._registry import lock as registry_lock
from ._registry import note_lookup, note_used, register, remote_missed
from ._remote import remote_cache
from ._root import signing_key
from ._sidecar import BadEntry, MetaValue, Sidecar
from ._team_key import TeamKeyError, team_key
from ._trust import Untrusted, open_directory, open_file
from ._usage import entry_keys, prune

log = logging.getLogger("ember.cache")

MAX_DATA_BYTES = 256 << 20  # a file whose bytes a lookup hands over (not a `loaded` one)

class EntryFile:
    """A verified file of an entry, open read-only: `fd` until `close()` (or until it is garbage)."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    @property
    def loadable(self) -> str:
        """A path that opens this very file (`/proc/self/fd/N`) for a loader that takes a path, such as dlopen."""
        return f"/proc/self/fd/{self.fd}"

    def close(self) -> None:
        self._finalizer()


@dataclass(frozen=True)
class CacheLookup:
    """A lookup's outcome: `files` (suffix → path) on a hit, else None and `reason`; `meta` as stored; the verified
    contents: `data` (suffix → bytes) and `opened` (suffix → `EntryFile`, for the cache's `loaded` suffixes)."""

    files: dict[str, Path] | None
    reason: str = ""
    meta: dict[str, MetaValue] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    opened: dict[str, EntryFile] = field(default_factory=dict)
    origin: str = ""  # where a hit came from before it was stored here: "" (this cache), else the remote cache

    @property
    def hit(self) -> bool:
        return self.files is not None


class DiskCache:
    """Entries of files with the given suffixes, under `<cache root>/<name>`."""

    def __init__(self, name: str, suffixes: tuple[str, ...], loaded: tuple[str, ...] = (),
                 code: tuple[str, ...] = (), machine: tuple[str, ...] = ()):
        if not KEY.fullmatch(name):
            raise ValueError(f"cache name {name!r} must be letters, digits or underscores")
        bad = [s for s in suffixes if not _sidecar_safe(s)]
        if bad or not suffixes:
            raise ValueError(f"suffixes {list(suffixes)} must be 1-16 lowercase letters or digits, not json or lock")
        if not set(loaded) <= set(suffixes) or not set(code) <= set(suffixes):
            raise ValueError(f"loaded {list(loaded)} and code {list(code)} suffixes must be among {list(suffixes)}")
        if not set(machine) <= set(MACHINE_PARTS):
            raise ValueError(f"machine {list(machine)} must be among {list(MACHINE_PARTS)}")
        self.name = name
        self.suffixes = tuple(suffixes)
        self.loaded = frozenset(loaded)
        self.code = frozenset(code) | self.loaded  # a loaded file is native code
        self.machine = tuple(machine)
        declare(name, self.suffixes)
        register(self)

    def machine_facts(self) -> dict[str, str]:
        """What an entry of this cache depends on beyond its key, when it travels (see `_machine`)."""
        return machine_facts(self.machine)

    @property
    def directory(self) -> Path:
        """The checked, private directory (tidied on its first use in this process)."""
        return open_subdir(self.name)

    def path(self, key: str, suffix: str) -> Path:
        if not KEY.fullmatch(key):
            raise ValueError(f"cache key {key!r} must be 1-128 letters, digits or underscores")
        return self.directory / f"{key}.{suffix}"

    def lookup(self, key: str, expect: Mapping[str, MetaValue] | None = None, *, remote: bool = True) -> CacheLookup:
        """The entry's verified contents if it is there, trusted and verified (and its meta has `expect`'s values),
        else (`remote`) the remote cache's, else a miss."""
        found = self._lookup_here(key, expect)
        if not found.hit and found.reason == "not cached" and remote:
            found = self._from_remote(key, expect or {})
        if found.hit:
            note_used(self.name, key)
        note_lookup(self.name, key)
        return found

    def _lookup_here(self, key: str, expect: Mapping[str, MetaValue] | None) -> CacheLookup:
        self.path(key, SIDECAR)  # a malformed key is the caller's error: ValueError
        directory = self.directory
        try:
            folder = open_directory(directory)
        except (OSError, Untrusted) as e:  # the directory itself: nothing in it is removed
            return CacheLookup(None, f"the cache directory {directory} cannot be used: {e}")
        try:
            sidecar = _sidecar.parse(_read(folder, f"{key}.{SIDECAR}", _sidecar.MAX_BYTES), key, self.suffixes,
                                     signing_key(directory))
            _check_expected(sidecar, expect or {})
            found = self._verified(folder, key, sidecar)
        except FileNotFoundError as e:
            if e.filename is not None and str(e.filename).endswith(f".{SIDECAR}"):
                return CacheLookup(None, "not cached")
            return self.discard(key, f"a file is missing ({os.path.basename(str(e.filename))})")
        except (BadEntry, Untrusted) as e:
            return self.discard(key, str(e))
        except (OSError, ValueError, RecursionError) as e:
            return self.discard(key, f"unreadable ({type(e).__name__}: {e})")
        finally:
            os.close(folder)
        _touch(directory / f"{key}.{SIDECAR}")
        return found

    def _verified(self, folder: int, key: str, sidecar: Sidecar) -> CacheLookup:
        """Each file of the entry opened once, checked against its sha256; what the caller gets is what was read."""
        data: dict[str, bytes] = {}
        opened: dict[str, EntryFile] = {}
        try:
            for suffix in self.suffixes:
                name = f"{key}.{suffix}"
                fd = open_file(folder, name)
                if suffix in self.loaded:
                    opened[suffix] = EntryFile(self.directory / name, fd)
                    _check_digest(name, _sha256_fd(fd), sidecar.files[suffix])
                else:
                    data[suffix] = _read_fd(fd, name, MAX_DATA_BYTES)
                    _check_digest(name, sha256_bytes(data[suffix]), sidecar.files[suffix])
        except BaseException:
            for f in opened.values():
                f.close()
            raise
        files = {s: self.directory / f"{key}.{s}" for s in self.suffixes}
        return CacheLookup(files, "", sidecar.meta, data, opened)

    def discard(self, key: str, reason: str) -> CacheLookup:
        """Remove a bad entry (unless another build holds its lock: that build rewrites it), log why with the
        entry's files, and return the miss. A caller whose own check of a verified entry fails uses it too."""
        where = self.directory / f"{key}.*"
        log.warning("cache %s: entry %s is bad (%s); removing it to rebuild", self.name, where, reason)
        try:
            lock = self.path(key, LOCK)
            if holds(lock):
                remove_entry(self.directory, self.name, key)
            else:
                with file_lock(lock, wait=False) as free:
                    if free:
                        remove_entry(self.directory, self.name, key)
        except OSError as e:
            log.warning("cache %s: could not remove entry %s: %s", self.name, key, e)
        return CacheLookup(None, reason)

    def _from_remote(self, key: str, expect: Mapping[str, MetaValue]) -> CacheLookup:
        """The remote cache's entry, verified, stored here and looked up again; a miss ("not cached", or why the
        remote entry is not used) otherwise."""
        remote = remote_cache()
        if remote is None or not remote.available():
            return CacheLookup(None, "not cached")
        with registry_lock:
            if (self.name, key) in remote_missed:
                return CacheLookup(None, "not cached")
        try:
            got = remote.get(self, key)
        except BackendUnavailable:
            return CacheLookup(None, "not cached")
        usable = isinstance(got, PackedEntry) and all(got.meta.get(n) == v for n, v in expect.items())
        if not usable:
            with registry_lock:  # asked once per process: the build that follows replaces a bad one
                remote_missed.add((self.name, key))
        if got is None:
            return CacheLookup(None, "not cached")
        if not usable:
            reason = f"the remote cache's entry is bad ({got if isinstance(got, BadEntry) else 'another build'})"
            log.warning("cache %s: entry %s from %s is not used: %s; rebuilding it", self.name, key[:12],
                        remote.where, reason)
            return CacheLookup(None, reason)
        try:
            self.keep(key, got.files, got.meta)
        except OSError as e:
            log.info("cache %s: could not keep entry %s from %s here: %s", self.name, key[:12], remote.where, e)
            return CacheLookup(None, "not cached")
        found = self._lookup_here(key, expect)
        log.info("cache %s: entry %s from %s (%s)", self.name, key[:12], remote.where,
                 "its signature checked" if got.signed else "verified")
        return replace(found, origin=remote.where) if found.hit else found

    def keep(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, MetaValue]) -> None:
        """Store an entry that came from elsewhere, under the key's lock (unless this process holds it: a build
        that looks up first); another process that holds it is building the same entry, which it will store."""
        if holds(self.path(key, LOCK)):
            self.store(key, files, meta, share=False)
            return
        with self.lock(key, wait=False) as free:
            if free:
                self.store(key, files, meta, share=False)

    def entry(self, key: str) -> PackedEntry | BadEntry | None:
        """The local entry `key`, verified, as it travels (its files' bytes, meta and this machine's facts); None
        when there is none, a BadEntry (returned) naming what is wrong with it."""
        found = self._lookup_here(key, None)
        if not found.hit:
            return None if found.reason == "not cached" else BadEntry(found.reason)
        files = dict(found.data)
        for suffix, opened in found.opened.items():
            files[suffix] = _pread_all(opened.fd)
            opened.close()
        return PackedEntry(self.name, key, files, dict(found.meta), self.machine_facts())

    def share(self, key: str) -> None:
        """Put the local entry `key` in the remote cache, if one is configured and may take it (code needs the
        team key); never raises."""
        remote = remote_cache()
        if remote is None or not remote.available():
            return
        try:
            if self.code and team_key() is None:
                return  # unsigned code would be refused by every reader
        except TeamKeyError as e:
            log.warning("cache %s: not sharing entry %s: %s", self.name, key[:12], e)
            return
        entry = self.entry(key)
        if not isinstance(entry, PackedEntry):
            return
        try:
            remote.put(self, entry)
        except BackendUnavailable:
            pass
        except TeamKeyError as e:
            log.warning("cache %s: not sharing entry %s: %s", self.name, key[:12], e)

    def store(self, key: str, files: Mapping[str, Path | bytes], meta: Mapping[str, MetaValue], *,
              share: bool = True) -> dict[str, Path]:
        """Put the entry's files in place (a Path is moved, bytes are written), then its sidecar; prune the caches;
        then (`share`) put it in the remote cache. Raises OSError when the directory cannot take the entry."""
        if sorted(files) != sorted(self.suffixes):
            raise ValueError(f"cache {self.name} stores files {list(self.suffixes)}, not {list(files)}")
        remove_any(self.path(key, SIDECAR))  # the entry is incomplete from here until its sidecar is back
        digests = {suffix: self._put(self.path(key, suffix), content) for suffix, content in files.items()}
        record = Sidecar(key, digests, dict(meta))
        write_atomic(self.path(key, SIDECAR), _sidecar.encode(record, signing_key(self.directory)))
        try:
            prune(keep=(self.directory, key))
        except OSError as e:
            log.info("cache %s: pruning stopped early: %s", self.name, e)
        note_used(self.name, key)
        with registry_lock:
            remote_missed.discard((self.name, key))
        if share:
            self.share(key)
        return {s: self.path(key, s) for s in self.suffixes}

    @staticmethod
    def _put(target: Path, content: Path | bytes) -> str:
        remove_any(target)
        if isinstance(content, bytes):
            write_atomic(target, content)
            return sha256_bytes(content)
        digest = sha256_file(content)
        try:
            os.replace(content, target)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            write_atomic(target, Path(content).read_bytes())  # another file system: copy instead
        return digest

    def lock(self, key: str, *, wait: bool = True) -> AbstractContextManager[bool]:
        """Hold `<key>.lock` while building key; yields whether it is held (see `_file_lock`)."""
        return file_lock(self.path(key, LOCK), wait=wait)

    @contextmanager
    def work_folder(self, key: str) -> Iterator[Path]:
        """A fresh folder `.build-<key>-*` in the cache directory for one build, removed at the end (one left by a
        process that died is removed by a later one, see `_cache_dir`)."""
        self.path(key, LOCK)  # checks the key
        folder = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".build-{key}-"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def clear(self) -> int:
        """Remove every entry of this cache but those being built; returns how many were removed."""
        removed = 0
        for key in entry_keys(self.directory, self.name):
            with file_lock(self.path(key, LOCK), wait=False) as free:
                if free:
                    remove_entry(self.directory, self.name, key)
                    removed += 1
        return removed

    def remove(self, key: str) -> None:
        self.path(key, SIDECAR)  # checks the key
        remove_entry(self.directory, self.name, key)


def _sidecar_safe(suffix: str) -> bool:
    return bool(ENTRY_FILE.fullmatch(f"k.{suffix}")) and suffix not in (SIDECAR, LOCK)


def _check_expected(sidecar: Sidecar, expect: Mapping[str, MetaValue]) -> None:
    for name, want in expect.items():
        if sidecar.meta.get(name) != want:
            raise BadEntry(f"sidecar names another build (its {name} differs)")


def _read(folder: int, name: str, limit: int) -> bytes:
    return _read_fd(open_file(folder, name), name, limit)


def _read_fd(fd: int, name: str, limit: int) -> bytes:
    """The bytes of the open file fd (closed after), at most `limit`: a longer file is a `BadEntry`."""
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BadEntry(f"{name} is more than {limit} bytes")
    return data


def _pread_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while block := os.pread(fd, 1 << 20, offset):
        chunks.append(block)
        offset += len(block)
    return b"".join(chunks)


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    offset = 0
    while block := os.pread(fd, 1 << 20, offset):
        h.update(block)
        offset += len(block)
    return h.hexdigest()


def _check_digest(name: str, digest: str, recorded: str) -> None:
    if digest != recorded:
        raise BadEntry(f"{name} does not match its recorded sha256 (corrupt or truncated)")


def _touch(path: Path) -> None:
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:
        pass
