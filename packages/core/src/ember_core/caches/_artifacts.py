"""Portable cache artifacts: the entries a process compiled (or a chosen set), as one file that a deployment ships
beside its model, so that the first compile on another machine of the same kind starts warm.

    b"ember-artifact 1\\n" | for each entry: its length (8 bytes, big-endian) | the packed entry (`_packed`)

`save_artifact` writes the entries this process used (`used_entries`), or those a `recording()` block saw
(`_registry.recording`), or all
that the local caches hold; each entry carries the facts of the machine that built it and, where a team key is
configured, its signature. `load_artifact` reads one back into the local caches entry by entry, and says of each
entry it skips why: not an entry (bytes changed, truncated), built for another machine or version (which fact
differs), a cache this process does not know, or code it may not trust.

Trust: a file the current user owns and nobody else may write is trusted as the user's own cache files are (its
entries verified: sha256s, fields, machine facts). Any other file's entries are trusted as a shared cache's: where
they hold code (a C++ library, a Triton module), only with a valid signature of the team key (`_team_key`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import EmberError
from .._regular_file import FileRefused, read_at_most, regular_file
from ._backends import LocalBackend
from ._disk_cache import DiskCache
from ._entry_files import write_atomic
from ._packed import PackedEntry, pack, unpack
from ._registry import disk_caches, used_entries
from ._remote import facts_mismatch
from ._sidecar import BadEntry
from ._team_key import TeamKeyError, team_key
from ._usage import entry_keys

MAGIC = b"ember-artifact 1\n"
LOCAL = LocalBackend()
MAX_ENTRIES = 100_000
MAX_FILE_BYTES = 8 << 30


class ArtifactError(EmberError):
    """An artifact file that cannot be read at all (not one, unreadable); a bad entry in it is skipped instead."""


@dataclass
class ArtifactReport:
    """What a save wrote or a load took: (cache, key) of each entry; (cache, key, reason) of each one skipped."""

    path: Path
    entries: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    signed: bool = False  # save: the entries carry the team key's signature

    def __str__(self) -> str:
        lines = [f"{self.path}: {len(self.entries)} entries, {len(self.skipped)} skipped"]
        lines += [f"  skipped {cache} {key[:12]}: {reason}" for cache, key, reason in self.skipped]
        return "\n".join(lines)


def all_local_entries() -> list[tuple[str, str]]:
    """Every complete entry of every cache this process knows, in its local directories."""
    return [(name, key) for name, cache in sorted(disk_caches().items()) for key in entry_keys(cache.directory, name)]


def save_artifact(path: str | os.PathLike, entries: Iterable[tuple[str, str]] | None = None) -> ArtifactReport:
    """Write `entries` ((cache, key) pairs; default: every entry this process used) to `path` (mode 0600)."""
    report = ArtifactReport(Path(path))
    key = team_key()
    report.signed = key is not None
    caches = disk_caches()
    blobs = []
    for name, entry_key in dict.fromkeys(used_entries() if entries is None else entries):
        cache = caches.get(name)
        entry = LOCAL.get(cache, entry_key) if cache is not None else BadEntry(f"no cache named {name!r} here")
        if not isinstance(entry, PackedEntry):
            report.skipped.append((name, entry_key, str(entry) if entry else "not in the local cache any more"))
            continue
        blob = pack(entry, key)
        blobs += [struct.pack(">Q", len(blob)), blob]
        report.entries.append((name, entry_key))
    write_atomic(report.path, MAGIC + b"".join(blobs))  # mkstemp's mode: 0600
    return report


def load_artifact(path: str | os.PathLike) -> ArtifactReport:
    """Verify each entry of the artifact at `path` and store the usable ones in the local caches (an entry already
    there counts as loaded). ArtifactError when the file is not an artifact at all."""
    report = ArtifactReport(Path(path))
    data, trusted = _read(report.path)
    try:
        key = None if trusted else team_key()
    except TeamKeyError as e:
        raise ArtifactError(f"{path}: {e}") from None
    caches = disk_caches()
    for blob in _blobs(report.path, data):
        try:
            entry = unpack(blob, key)
        except BadEntry as e:
            report.skipped.append(("?", "?", str(e)))
            continue
        reason = _unusable(entry, caches.get(entry.cache), trusted)
        if reason:
            report.skipped.append((entry.cache, entry.key, reason))
            continue
        try:
            LOCAL.put(caches[entry.cache], entry)
        except OSError as e:
            report.skipped.append((entry.cache, entry.key, f"the local cache cannot take it: {e}"))
            continue
        report.entries.append((entry.cache, entry.key))
    return report


def _read(path: Path) -> tuple[bytes, bool]:
    """The file's bytes, and whether it is trusted (the user's own, writable by nobody else)."""
    try:
        with regular_file(path) as (fd, st):
            if st.st_size > MAX_FILE_BYTES:
                raise ArtifactError(f"{path} is {st.st_size} bytes, more than {MAX_FILE_BYTES}")
            data = read_at_most(fd, MAX_FILE_BYTES + 1)
    except FileRefused as e:
        raise ArtifactError(f"{path}: {e}") from None
    if not data.startswith(MAGIC):
        raise ArtifactError(f"{path} is not an ember cache artifact (its first bytes are not 'ember-artifact 1')")
    return data, st.st_uid == os.getuid() and not st.st_mode & 0o022


def _blobs(path: Path, data: bytes) -> Iterator[bytes]:
    at, count = len(MAGIC), 0
    while at < len(data):
        count += 1
        if at + 8 > len(data) or count > MAX_ENTRIES:
            raise ArtifactError(f"{path}: entry {count} at byte {at}: the file ends inside its length, or holds more "
                                f"than {MAX_ENTRIES} entries (truncated?)")
        (size,) = struct.unpack(">Q", data[at:at + 8])
        if at + 8 + size > len(data):
            raise ArtifactError(f"{path}: entry {count} at byte {at} says {size} bytes, more than the file has left "
                                "(truncated?)")
        yield data[at + 8:at + 8 + size]
        at += 8 + size


def _unusable(entry: PackedEntry, cache: DiskCache | None, trusted: bool) -> str:
    """Why this process cannot use `entry` ("" when it can)."""
    if cache is None:
        return f"no cache named {entry.cache!r} in this process (is the ember package that makes it installed?)"
    if sorted(entry.files) != sorted(cache.suffixes):
        return f"its files are {sorted(entry.files)}, the {cache.name} cache's are {sorted(cache.suffixes)}"
    mismatch = facts_mismatch(entry.machine, cache.machine_facts())
    if mismatch:
        return f"built for {mismatch}"
    if not trusted and cache.code & set(entry.files) and not entry.signed:
        return ("it holds code, and neither is the file this user's own (writable by nobody else) nor is the entry "
                "signed with the team key")
    return ""
