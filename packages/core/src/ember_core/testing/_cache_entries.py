"""Changing a disk-cache entry as someone else could: its file rewritten and its sidecar's sha256 brought up to
date, signed with this user's cache key (what this user's own ember, an older one say, could have written) or not
(what anyone without the key could write: `signed=False`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..caches._root import signing_key
from ..caches._sidecar import sign


def restamp(path: Path, content: bytes, *, signed: bool = True) -> None:
    """Put `content` in the entry file at `path` (a new file moved into place, as any writer would: rewriting a
    loaded library in place would crash the process that maps it) and make its sidecar (`<key>.json`) agree."""
    new = path.with_name(f".{path.name}.restamp.tmp")
    new.write_bytes(content)
    new.replace(path)
    sidecar = path.with_suffix(".json")
    data = json.loads(sidecar.read_text())
    data["files"][path.suffix[1:]] = hashlib.sha256(content).hexdigest()
    data.pop("mac", None)
    if signed:
        data = sign(data, signing_key(path.parent))
    sidecar.write_text(json.dumps(data))
