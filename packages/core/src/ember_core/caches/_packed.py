"""One cache entry as a single string of bytes, for the places entries travel: a shared remote cache and portable
artifacts. What reads it back trusts nothing it reads.

    b"ember-entry 1\\n" | header length (4 bytes, big-endian) | header (JSON) | the files' bytes, in header order

    header = {"cache": "<name>", "key": "<key>", "files": [["<suffix>", <size>, "<sha256 hex>"], ...],
              "meta": {<the sidecar's meta>}, "machine": {<machine facts, `_machine`>},
              "signature": {"key_id": "<16 hex>", "mac": "<hmac-sha256 hex>"} or null}

`mac` is the HMAC, with the team's key (`_team_key`), of the header without its signature (canonical JSON); the
header holds every file's sha256, so the signature covers the files too. Reading (`unpack`) is bounded (the header
at most `MAX_HEADER` bytes and nesting `MAX_DEPTH`, the whole at most `MAX_BYTES`), parses JSON without NaN or
Infinity, checks every field's type and form, the files' sizes and sha256s, and the signature: where a team key is
configured every entry must carry its valid signature; where none is, an entry that holds code is refused (a
shared cache's code runs only when someone the user trusts signed it). Every problem is a `BadEntry` naming it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._entry_files import KEY, sha256_bytes
from ._sidecar import SHA256, BadEntry, MetaValue, _check_meta, _shown, read_json
from ._team_key import TeamKey

MAGIC = b"ember-entry 1\n"
MAX_HEADER = 256 * 1024
MAX_BYTES = 1 << 30
_SUFFIX = re.compile(r"[a-z0-9]{1,16}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_FACT = re.compile(r"[A-Za-z0-9_]{1,32}")
_HEADER_FIELDS = {"cache", "key", "files", "meta", "machine", "signature"}


@dataclass(frozen=True)
class PackedEntry:
    """An entry of cache `cache`: its files' bytes by suffix, its meta, the facts of the machine that built it, and
    whether a team key's signature was checked on it."""

    cache: str
    key: str
    files: dict[str, bytes]
    meta: dict[str, MetaValue]
    machine: dict[str, str] = field(default_factory=dict)
    signed: bool = False


def pack(entry: PackedEntry, key: TeamKey | None) -> bytes:
    """The entry's bytes, signed with `key` when there is one."""
    header: dict[str, Any] = {
        "cache": entry.cache, "key": entry.key, "meta": entry.meta, "machine": entry.machine,
        "files": [[suffix, len(data), sha256_bytes(data)] for suffix, data in sorted(entry.files.items())]}
    header["signature"] = None if key is None else {"key_id": key.id, "mac": _mac(header, key.secret)}
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    return b"".join([MAGIC, struct.pack(">I", len(text)), text, *(entry.files[s] for s, _, _ in header["files"])])


def unpack(data: bytes, key: TeamKey | None, *, code: frozenset[str] | set[str] = frozenset(),
           expect: tuple[str, str] | None = None, suffixes: tuple[str, ...] | None = None) -> PackedEntry:
    """The checked entry in `data`. `code`: the suffixes whose files run (an entry with one needs a signature);
    `expect`: the (cache, key) it must be; `suffixes`: the files it must have."""
    if len(data) > MAX_BYTES:
        raise BadEntry(f"entry is more than {MAX_BYTES} bytes")
    if not data.startswith(MAGIC):
        raise BadEntry("not an ember cache entry (its first bytes are not 'ember-entry 1')")
    start = len(MAGIC) + 4
    if len(data) < start:
        raise BadEntry("entry ends inside its header's length")
    (length,) = struct.unpack(">I", data[len(MAGIC):start])
    if length > MAX_HEADER or start + length > len(data):
        raise BadEntry(f"entry's header length {length} is more than {MAX_HEADER} or than what follows")
    header = _header(data[start:start + length])
    entry = _checked(header, data[start + length:], suffixes)
    if expect is not None and (entry.cache, entry.key) != expect:
        raise BadEntry(f"entry names cache {entry.cache!r} key {entry.key[:12]}, not {expect[0]!r} {expect[1][:12]}")
    signed = _check_signature(header, key, needs=bool(code & set(entry.files)))
    return PackedEntry(entry.cache, entry.key, entry.files, entry.meta, entry.machine, signed)


def _mac(header: Mapping[str, Any], secret: bytes) -> str:
    unsigned = {k: v for k, v in header.items() if k != "signature"}
    canonical = json.dumps(unsigned, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    return hmac.new(secret, b"ember-entry\0" + canonical, hashlib.sha256).hexdigest()


def _header(raw: bytes) -> dict[str, Any]:
    header = read_json(raw, "entry's header")
    if not isinstance(header, dict) or set(header) != _HEADER_FIELDS:
        raise BadEntry(f"entry's header has fields {_shown(sorted(header)) if isinstance(header, dict) else '?'}, "
                       f"not {sorted(_HEADER_FIELDS)}")
    return header


def _checked(header: dict[str, Any], body: bytes, suffixes: tuple[str, ...] | None) -> PackedEntry:
    cache, key = header["cache"], header["key"]
    if not isinstance(cache, str) or not KEY.fullmatch(cache):
        raise BadEntry(f"entry's cache name {_shown(cache)} is not a name")
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise BadEntry(f"entry's key {_shown(key)} is not a key")
    listed = header["files"]
    if not isinstance(listed, list) or not listed or not all(_is_file_record(r) for r in listed):
        raise BadEntry("entry's files are not a list of [suffix, size, sha256]")
    names = [r[0] for r in listed]
    if len(set(names)) != len(names) or (suffixes is not None and sorted(names) != sorted(suffixes)):
        raise BadEntry(f"entry has files {names}, not {sorted(suffixes or names)}")
    if sum(r[1] for r in listed) != len(body):
        raise BadEntry(f"entry's files add up to {sum(r[1] for r in listed)} bytes but {len(body)} follow (truncated?)")
    files, at = {}, 0
    for suffix, size, digest in listed:
        files[suffix] = body[at:at + size]
        at += size
        if sha256_bytes(files[suffix]) != digest:
            raise BadEntry(f"entry's .{suffix} does not match its recorded sha256 (corrupt or altered)")
    machine = header["machine"]
    if not isinstance(machine, dict) or len(machine) > 32 or not all(
            isinstance(k, str) and _FACT.fullmatch(k) and isinstance(v, str) and len(v) <= 512
            for k, v in machine.items()):
        raise BadEntry(f"entry's machine facts are {_shown(machine)}, not names and strings")
    return PackedEntry(cache, key, files, _check_meta(header["meta"], "entry"), dict(machine))


def _is_file_record(r: Any) -> bool:
    return (isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and bool(_SUFFIX.fullmatch(r[0]))
            and type(r[1]) is int and 0 <= r[1] <= MAX_BYTES and isinstance(r[2], str) and bool(SHA256.fullmatch(r[2])))


def _check_signature(header: dict[str, Any], key: TeamKey | None, needs: bool) -> bool:
    """Whether the entry carries a valid signature of `key`; BadEntry when it must and does not."""
    signature = header["signature"]
    if signature is not None and not (isinstance(signature, dict) and set(signature) == {"key_id", "mac"}
                                      and isinstance(signature["key_id"], str)
                                      and _KEY_ID.fullmatch(signature["key_id"])
                                      and isinstance(signature["mac"], str) and SHA256.fullmatch(signature["mac"])):
        raise BadEntry("entry's signature is not {key_id, mac}")
    if key is None:
        if needs:
            raise BadEntry("entry holds code and no team key is configured to check its signature "
                           "(set EMBER_CACHE_KEY or EMBER_CACHE_KEY_FILE on every machine that shares the cache)")
        return False
    if signature is None:
        raise BadEntry(f"entry is not signed, and this process requires the team key's signature ({key.origin})")
    if signature["key_id"] != key.id:
        raise BadEntry(f"entry is signed with another key (id {signature['key_id']}; {key.origin} is {key.id})")
    if not hmac.compare_digest(signature["mac"], _mac(header, key.secret)):
        raise BadEntry("entry's signature does not match its contents (altered after it was signed)")
    return True
