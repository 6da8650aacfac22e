"""What the generated wrapper does off its fast path: inputs or extern results in another layout than the plan
assumes, a kernel's error flag, a failed build. Each ends in a correct result or torch's own error.

- `relayout`: inputs whose strides differ from the plan's are re-viewed (when only size-1 dims differ) or
  copied into the plan's layout (when no output aliases them), then the fast path runs; otherwise the graph
  runs in ember-core's interpreter codegen.
- `fix_layout`: the same for an extern's result that kernels read.
- `wrong_dtype`: an extern's result in another dtype than the plan's raises `ExternDtypeError` (never read on).
- `UseFallback`: raised inside the wrapper to run the whole graph in the interpreter codegen instead.
- `report_fallback`: the log line and `fallback` event (with its cause) of a graph (or kernel) that a codegen
  does not run natively, and a `FallbackWarning` for the causes that warn (`ember_core.WARNED_CAUSES`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember_core import (
    FALLBACK_CAUSES,
    CompiledGraph,
    Event,
    Graph,
    InputsConsumed,
    emit,
    interpreter_codegen,
    warn_fallback,
)

from ._errors import ExternDtypeError

log = logging.getLogger("ember.kernels")


class UseFallback(Exception):
    """Run this call in the interpreter codegen (the fast path cannot)."""


def same_layout(shape: Sequence[int], actual: Sequence[int], wanted: Sequence[int]) -> bool:
    """Strides that address the same elements: equal wherever the dim has more than one element."""
    if any(n == 0 for n in shape):
        return True
    return all(n == 1 or a == w for n, a, w in zip(shape, actual, wanted))


def non_overlapping(shape: Sequence[int], stride: Sequence[int]) -> bool:
    dims = sorted((s, n) for n, s in zip(shape, stride) if n != 1)
    reach = 0
    for s, n in dims:
        if s < reach or s <= 0:
            return False
        reach = s * n
    return True


def fix_layout(t: torch.Tensor, shape: tuple, stride: tuple) -> torch.Tensor:
    """t in exactly (shape, stride), by a view or a copy; UseFallback if it has another shape."""
    if tuple(t.shape) != tuple(shape):
        raise UseFallback(f"tensor of shape {tuple(t.shape)}, expected {tuple(shape)}")
    if same_layout(shape, t.stride(), stride):
        return t.as_strided(shape, stride)
    if not non_overlapping(shape, stride):
        raise UseFallback(f"cannot copy into the overlapping layout {stride}")
    out = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def wrong_dtype(op: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    """An extern returned another dtype than the plan has: kernels would read its bytes as the wrong type (a bf16
    result read as float gave NaN). Raised, never run on."""
    raise ExternDtypeError(f"extern {op} returned {t.dtype} where the kernel plan has {dtype}: the graph's dtypes "
                           "disagree with ATen's (an autocast still on when the graph runs, or a wrong dtype rule)")


def relayout(inputs: Sequence[Any], layouts: Callable, fast: Callable, fallback: Callable) -> list:
    """Bring inputs into the plan's layouts and run the fast path, or run the fallback."""
    try:
        in_range, wanted = layouts(inputs)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return fallback(inputs)
    if not in_range:
        return fallback(inputs)
    new = list(inputs)
    for k, shape, stride, may_copy in wanted:
        x = inputs[k]
        if tuple(x.shape) != tuple(shape):
            return fallback(inputs)
        if same_layout(shape, x.stride(), stride):
            new[k] = x.as_strided(shape, stride)
        elif may_copy and non_overlapping(shape, stride):
            new[k] = torch.empty_strided(shape, stride, dtype=x.dtype, device=x.device)
            new[k].copy_(x)
        else:
            return fallback(inputs)
        if tuple(new[k].stride()) != tuple(stride):  # the fast path checks exactly this: never loop
            return fallback(inputs)
    return fast(new)


class InterpreterFallback:
    """The graph in ember-core's interpreter codegen, compiled on first use; logs why it runs the first time."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._compiled: CompiledGraph | None = None
        self._lock = threading.Lock()
        self._told: set[str] = set()

    def compiled(self) -> CompiledGraph:
        with self._lock:
            if self._compiled is None:
                self._compiled = interpreter_codegen().compile(self.graph, None, {})
            return self._compiled

    def fn(self) -> Callable:
        return self.compiled().fn

    def __call__(self, inputs: Sequence[Any], why: str = "") -> list:
        if len(inputs) != len(self.graph.inputs):  # a consuming call (`CompiledGraph.consume`) let them go
            raise InputsConsumed(f"graph {self.graph.name!r} cannot fall back to the interpreter codegen"
                                 f"{': ' + why if why else ''}: it was called through `consume` and has let its "
                                 f"inputs go ({len(inputs)} of {len(self.graph.inputs)} left)")
        if why and why not in self._told:
            self._told.add(why)
            log.info("graph %r runs in the interpreter codegen: %s", self.graph.name, why)
        return self.fn()(inputs)

    def on_error(self, inputs: Sequence[Any], code: int = 1) -> list:
        """A kernel flagged an error (integer division by zero, index out of bounds): torch raises its own."""
        return self(inputs, "a kernel flagged an integer division by zero or an index out of bounds")


def report_fallback(stage: str, graph: Graph, reason: str, cause: str, source: str | None = None) -> None:
    """`stage` names the codegen (`codegen-cpp`); the reason says what runs where instead, and why; `cause` is
    one of `ember_core.FALLBACK_CAUSES` (`build`, `lowering`, `print`, `kernel`, `device`). Each graph reports a
    cause once (a build failure on the wrapper's first call, the others when it is compiled), so the warning of a
    warned cause comes once per graph too; `where` is the user's line of the graph's first node, when known."""
    if cause not in FALLBACK_CAUSES:
        raise ValueError(f"unknown fallback cause {cause!r}; causes: {', '.join(FALLBACK_CAUSES)}")
    log.warning("%s: graph %r: %s", stage, graph.name, reason)
    where = next((n.meta["source"] for n in graph.nodes if n.meta.get("source")), None)
    emit(Event(kind="fallback", stage=stage, message=f"graph {graph.name!r}: {reason}", graph=graph,
               source=source, data={"reason": reason, "cause": cause, "where": where}))
    at = f" (the graph starting at {where})" if where else ""
    warn_fallback(f"ember: {stage}: graph {graph.name!r}{at}: {reason}", cause, where, stacklevel=2)
