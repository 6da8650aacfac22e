"""Events of the capture stage. Only compile and recompile paths call these: a guarded hit emits nothing."""

from __future__ import annotations

from typing import Any

import ember_core


def report(kind: str, message: str, *, graph: Any = None, source: str | None = None, **data: Any) -> None:
    """Emit one `ember_core.Event` of stage `capture` to every `ember_event` observer."""
    event = ember_core.Event(kind=kind, stage="capture", message=message, graph=graph, source=source, data=data)
    ember_core.emit(event)


def qualname(fn: Any) -> str:
    """A readable name for a function, bound method or module: `MLP.forward`, `step`."""
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        return f"{type(fn.__self__).__name__}.{fn.__func__.__name__}"
    if hasattr(fn, "__qualname__"):
        return fn.__qualname__.rsplit("<locals>.", 1)[-1]
    return type(fn).__name__
