"""ember's compile caches for people who ship compiled models: portable artifacts, and what they hold.

    with ember.cache.recording() as entries:    # optional: only what this block compiles
        model(x)
    ember.cache.save("model.ember-cache")        # default: everything this process compiled or reused
    ...
    ember.cache.load("model.ember-cache")        # on another machine of the same kind, before the first compile

`save` writes one file of packed, verified cache entries (partitions, kernel plans, C++ libraries, Triton modules,
tuning choices), each with the facts of the machine that built it. `load` checks every entry (sha256s, fields, the
machine: CPU features, GPU model, Python, torch, Triton and ember versions) and puts the usable ones in the local
caches, so that the next compile starts warm; its report says why it skipped any. A file that is not the user's
own (or that others may write) is trusted as a shared cache is: code in it only when signed with the team key
(`EMBER_CACHE_KEY`). The shell's `ember cache save|load PATH` do the same for every entry of the local caches.

A cache many machines share is a remote cache instead: `EMBER_REMOTE_CACHE=redis://host:6379/0` (see docs/caching.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ember_core import get_plugin_manager
from ember_core.caches import ArtifactError, ArtifactReport, load_artifact, recording, save_artifact

__all__ = ["ArtifactError", "ArtifactReport", "load", "recording", "save"]


def save(path: str | os.PathLike, entries: Iterable[tuple[str, str]] | None = None) -> ArtifactReport:
    """Write the cache entries this process compiled or reused (or `entries`, as a `recording()` block collects
    them) to the file `path`; returns what was written and what was skipped, with reasons."""
    get_plugin_manager()  # every installed stage declares its caches
    return save_artifact(path, entries)


def load(path: str | os.PathLike) -> ArtifactReport:
    """Put each usable entry of the artifact at `path` in the local caches; returns what was loaded and what was
    skipped, with reasons. ArtifactError when the file is not an artifact at all."""
    get_plugin_manager()
    return load_artifact(path)
