"""The C++ codegen's disk cache: ember-core's verified `DiskCache` named `cpp`, one entry per built library.

Entry `<key>`: `<key>.so` (the library), `<key>.cpp` (its source, for people) and the sidecar, which records
their sha256 and the build's source hash, flags and compiler. Everything generic (where the cache lives, the
owner and mode checks, verification, self-repair, locks, pruning) is ember-core's; see `ember_core.caches._disk_cache`.
"""

from __future__ import annotations

from pathlib import Path

from ember_core import DiskCache, cache_root

# the library is loaded by its verified descriptor; built with -march=native, it is only for CPUs like this one
CACHE = DiskCache("cpp", ("so", "cpp"), loaded=("so",), machine=("cpu",))


def cache_dir() -> Path:
    """The checked, private directory of built libraries (created and tidied on first use)."""
    return CACHE.directory


__all__ = ["CACHE", "cache_dir", "cache_root"]
