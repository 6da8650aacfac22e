"""Wrapping a method of another library in place, once per process.

ember mends a few faults of the libraries it drives by wrapping one of their methods: Triton parsing source in
several threads at once on Python 3.11, a Dynamo release that builds class constants without a guard, torch 2.11's
tracer dropping the frames ember anchors. The code that needs such a wrapper runs many times (each compile), in
threads, and a wrapper must go on once: `wrap_once` holds one lock, and marks each wrapper with its name, so that
a second call finds it there, and a later wrapper over the same method (ember's or anyone's that copies the
function's `__dict__`, as `functools.wraps` does) keeps the marks of those below it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

_LOCK = threading.RLock()
_MARKS = "_ember_wrappers"


def wrap_once(owner: type, name: str, wrap: Callable[[Callable], Callable], mark: str) -> bool:
    """Replace the function `owner` itself defines as `name` (not one it inherits) by `wrap(function)`, unless a
    wrapper marked `mark` is there already. The new function takes the old one's name, docs and marks, and `mark`.
    True when `owner.name` is wrapped (now or before), False where `owner` defines no `name` (a release without
    the method keeps what it has)."""
    with _LOCK:
        current = vars(owner).get(name)
        if current is None:
            return False
        if mark in wrapped_by(current):
            return True
        wrapper = functools.update_wrapper(wrap(current), current)
        setattr(wrapper, _MARKS, wrapped_by(current) | {mark})
        setattr(owner, name, wrapper)
        return True


def wrapped_by(function: Callable) -> frozenset[str]:
    """The marks of the ember wrappers around `function` (empty for one ember never wrapped)."""
    return frozenset(getattr(function, _MARKS, ()))
