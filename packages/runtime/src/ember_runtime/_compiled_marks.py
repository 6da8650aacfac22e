"""What `ember.compile` returned, so that `profile` runs it as it is rather than compiling it again."""

from __future__ import annotations

import weakref
from typing import Any

_compiled: weakref.WeakSet = weakref.WeakSet()  # what ember.compile returned, so profile never compiles it again


def mark_compiled(obj: Any) -> Any:
    """Note that `obj` came from `ember.compile` (profile runs it as it is)."""
    try:
        _compiled.add(obj)
    except TypeError:  # an object without weak references: profile will look for its kernels instead
        pass
    return obj


def is_compiled(obj: Any) -> bool:
    try:
        return obj in _compiled
    except TypeError:  # not hashable
        return False
