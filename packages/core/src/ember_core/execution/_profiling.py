"""Where a profiler meets compiled code: the check a generated wrapper makes on each call, the ranges it opens
while a profiler records, and the table of what each profiled graph's kernels cost.

A codegen's wrapper asks `profiler_active()` once per call (torch's own flag: about 30 ns). Only when it is true
does the wrapper run its profiled twin, which opens a `profile_range` (a `torch.profiler.record_function` range)
around the whole graph, named by its `GraphCosts.label` (`ember:<graph>`), and one around each kernel and extern
call, named after the kernel (`k0_softmax_reduce_8x32`, `e2_aten.mm.default`). `torch.profiler` traces then show
ember's kernels by name; `ember.profile` reads the same ranges and divides each kernel's time into the bytes and
FLOPs registered here.

The table is a meeting point, like the event stream: a codegen registers each graph it compiles
(`register_costs`) and keeps the returned object alive as long as its compiled graph; a profiler looks a graph's
range up by label (`costs_of`). Entries go when the compiled graph does.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# The wrapper's check: is a profiler recording on this thread (the autograd engine's threads inherit it)?
profiler_active: Callable[[], bool] = torch._C._autograd._profiler_enabled

_fast_range = getattr(torch._C._profiler, "_RecordFunctionFast", None)


def profile_range(name: str) -> contextlib.AbstractContextManager:
    """A range named `name` in the running profiler's trace (a no-op when none records)."""
    if _fast_range is not None:
        return _fast_range(name)
    return torch.autograd.profiler.record_function(name)


@dataclass(frozen=True)
class KernelCost:
    """What one step of a compiled graph moves and computes per call, sizes taken at their traced hints.

    kind: `kernel` (generated code), `interpreted` (a kernel run by the loop-IR interpreter) or `extern` (an ATen
    call, `op`). bytes: reads + writes, each buffer it touches counted once over its distinct elements. flops:
    counted for matmul, convolution and attention externs from their shapes (0 elsewhere); dtype: the dtype the
    FLOPs are in (the first input's)."""

    name: str
    kind: str
    bytes: int
    flops: int = 0
    op: str = ""
    dtype: str = ""


@dataclass(frozen=True, eq=False)
class GraphCosts:
    """One compiled graph's steps as profiled: `label` is its range's name, unique among live graphs."""

    label: str
    graph: str
    codegen: str
    device: str
    kernels: tuple[KernelCost, ...]

    def kernel(self, name: str) -> KernelCost | None:
        for k in self.kernels:
            if k.name == name:
                return k
        return None

    def same(self, other: GraphCosts) -> bool:
        return (self.graph, self.codegen, self.device, self.kernels) == \
            (other.graph, other.codegen, other.device, other.kernels)


_table: weakref.WeakValueDictionary[str, GraphCosts] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def register_costs(graph: str, codegen: str, device: str, kernels: Sequence[KernelCost]) -> GraphCosts:
    """The entry of a graph about to be compiled, labelled `ember:<graph>` (`ember:<graph>~2` ... when a live
    graph of that name costs something else). Keep it referenced for as long as the compiled graph lives."""
    with _lock:
        n = 1
        while True:
            label = f"ember:{graph}" + (f"~{n}" if n > 1 else "")
            entry = GraphCosts(label, graph, codegen, device, tuple(kernels))
            old = _table.get(label)
            if old is None:
                _table[label] = entry
                return entry
            if old.same(entry):
                return old
            n += 1


def costs_of(label: str) -> GraphCosts | None:
    """The live graph whose range is named `label`, if any."""
    return _table.get(label)
