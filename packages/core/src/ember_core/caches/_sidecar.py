"""The JSON sidecar of a disk-cache entry: what it must hold, and a reader that trusts nothing it reads.

    {"ember_cache": 2, "key": "<key>", "files": {"<suffix>": "<sha256 hex>", ...}, "meta": {"<name>": value},
     "mac": "<hmac-sha256 hex>"}

`mac` signs the rest (its canonical JSON) with the cache's signing key, a secret of the user's (see
`_cache_dir.signing_key`): an entry whose files were changed and whose sha256s were brought up to date by anyone who
cannot read that key is refused, however consistent it looks.

Reading is bounded: at most `MAX_BYTES`, UTF-8, nesting at most `MAX_DEPTH`, parsed by `json` (no NaN or Infinity)
and then checked field by field. Nothing in it is evaluated. Every problem is a `BadEntry` naming it; the caller
treats it as a miss.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

FORMAT = 2  # 2: signed (`mac`)
MAX_BYTES = 64 * 1024
MAX_DEPTH = 4
SHA256 = re.compile(r"[0-9a-f]{64}")
MetaValue = str | int | float | bool | None | list[str]


class BadEntry(Exception):
    """Why an entry cannot be used; the message is the reason logged with the miss."""


@dataclass(frozen=True)
class Sidecar:
    key: str
    files: dict[str, str]  # suffix → sha256 hex
    meta: dict[str, MetaValue]


def encode(sidecar: Sidecar, signing_key: bytes) -> bytes:
    data = {"ember_cache": FORMAT, "key": sidecar.key, "files": sidecar.files, "meta": sidecar.meta}
    return json.dumps(sign(data, signing_key), indent=1, sort_keys=True, allow_nan=False).encode()


def sign(data: dict[str, Any], signing_key: bytes) -> dict[str, Any]:
    """`data` (a sidecar's fields but `mac`) with its `mac`."""
    return {**data, "mac": _mac(data, signing_key)}


def parse(data: bytes, key: str, suffixes: tuple[str, ...], signing_key: bytes) -> Sidecar:
    """The checked sidecar in `data` (a file's bytes) for entry `key` with files `suffixes`."""
    if len(data) > MAX_BYTES:
        raise BadEntry(f"sidecar is more than {MAX_BYTES} bytes")
    return _check(read_json(data, "sidecar"), key, suffixes, signing_key)


def read_json(data: bytes, what: str) -> Any:
    """The JSON value in `data`, read as untrusted: UTF-8, nesting at most `MAX_DEPTH`, no NaN or Infinity; a
    `BadEntry` naming `what` ("sidecar", "entry's header") otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadEntry(f"{what} is not UTF-8 text") from None
    if _depth(text) > MAX_DEPTH:
        raise BadEntry(f"{what} nests deeper than {MAX_DEPTH}")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise BadEntry(f"{what} is not JSON ({_short(e)})") from None


def _mac(data: dict[str, Any], signing_key: bytes) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    return hmac.new(signing_key, canonical, hashlib.sha256).hexdigest()


def _depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (a scan that stops as soon as it passes MAX_DEPTH)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return depth
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) <= 120 else text[:117] + "..."


def _check(data: Any, key: str, suffixes: tuple[str, ...], signing_key: bytes) -> Sidecar:
    if not isinstance(data, dict):
        raise BadEntry(f"sidecar holds a JSON {type(data).__name__}, not an object")
    version = data.get("ember_cache")
    if type(version) is not int or version != FORMAT:
        raise BadEntry(f"sidecar format {_shown(version)} is not {FORMAT}")
    mac = data.pop("mac", None)
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(data, signing_key)):
        raise BadEntry("sidecar is not signed with this user's cache key (written by someone else, or altered)")
    if data.get("key") != key or not isinstance(data.get("key"), str):
        raise BadEntry(f"sidecar names key {_shown(data.get('key'))}, not this entry's")
    return Sidecar(key, _check_files(data.get("files"), suffixes), _check_meta(data.get("meta")))


def _check_files(files: Any, suffixes: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(files, dict) or sorted(files) != sorted(suffixes):
        raise BadEntry(f"sidecar lists files {_shown(files)}, not {list(suffixes)}")
    for suffix, digest in files.items():
        if not isinstance(digest, str) or not SHA256.fullmatch(digest):
            raise BadEntry(f"sidecar's sha256 of .{suffix} is {_shown(digest)}")
    return dict(files)


def _check_meta(meta: Any, where: str = "sidecar") -> dict[str, MetaValue]:
    if not isinstance(meta, dict):
        raise BadEntry(f"{where}'s meta is {_shown(meta)}, not an object")
    for name, value in meta.items():
        if not _is_meta_value(value):
            raise BadEntry(f"{where}'s meta {name!r} is {_shown(value)}")
    return dict(meta)


def _is_meta_value(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _shown(value: Any) -> str:
    """A short, safe picture of a value read from disk, for a log line."""
    try:
        text = repr(value) if isinstance(value, str | int | float | bool | type(None)) else type(value).__name__
    except ValueError:  # an int too long to print
        text = "a huge int"
    return text if len(text) <= 60 else text[:57] + "..."
