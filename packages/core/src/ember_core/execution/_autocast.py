"""Autocast is applied once: by the frontend's capture, which records autocast's casts into the graph.

Autocast is a dispatcher key, so every ATen call made while it is on is cast again: tracing the joint graph, an
extern call of the compiled wrapper, the interpreter. A region the model runs with `autocast(enabled=False)` would be
cast to bf16 after all, and an extern's result would come back in another dtype than the plan's. So everything after
capture runs with autocast off (`autocast_disabled`), and so does every call of a graph captured under it
(`without_autocast`); the frontends guard on the state (`autocast_state`), so a graph captured under autocast is only
called under the same autocast.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

_CANDIDATES = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu", "privateuseone")


def _available(device_type: str) -> bool:
    try:
        torch.is_autocast_enabled(device_type)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


DEVICE_TYPES = tuple(d for d in _CANDIDATES if _available(d))


def autocast_on() -> tuple[str, ...]:
    """The device types autocast is on for in this thread (empty, in tens of nanoseconds, when it is off)."""
    if not torch._C._is_any_autocast_enabled():
        return ()
    return tuple(d for d in DEVICE_TYPES if torch.is_autocast_enabled(d))


def autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """(device type, dtype) of each device type autocast is on for: what a graph captured now depends on."""
    return tuple((d, torch.get_autocast_dtype(d)) for d in autocast_on())


@contextlib.contextmanager
def autocast_disabled() -> Iterator[bool]:
    """Autocast off inside (for every device type it is on for), back on after; yields whether it was on."""
    on = autocast_on()
    for d in on:
        torch.set_autocast_enabled(d, False)
    try:
        yield bool(on)
    finally:
        for d in on:
            torch.set_autocast_enabled(d, True)


def without_autocast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, each call of it run with autocast off (a flag read when it is off already)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not torch._C._is_any_autocast_enabled():
            return fn(*args, **kwargs)
        with autocast_disabled():
            return fn(*args, **kwargs)

    return call
