"""A training graph compiled once per value of the symbols its joint trace fixed.

A backward formula may read a symbolic size as a plain int (`cumprod`'s backward asks whether the dim has one
element): the joint trace then holds the size's value, and is right at that value only. The autograd stage says so
with `SpecializationNeeded` (the symbols and their traced values). `SpecializedGraph` compiles the graph with those
symbols replaced by the values of the call at hand (`specialize_symbols`), keeps each build by those values, and
reads them from every call's arguments to pick its build: the other symbols stay symbolic, so a new batch size
does not compile again. Each new build is a `graph_specialized` event; past `MAX_SPECIALIZATIONS` values, calls
with new ones run the graph under eager autograd (a `fallback` event, cause `autograd`).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember_core import Event, Graph, GraphError, SpecializationNeeded, specialize_symbols, sym_inputs

if TYPE_CHECKING:
    from ._pipeline import Pipeline

MAX_SPECIALIZATIONS = 8
# set while a specialized graph is compiled: a specialization asked for inside one is refused (`SpecializedGraph`)
_BUILDING: contextvars.ContextVar[bool] = contextvars.ContextVar("ember_specializing", default=False)


def symbol_reader(graph: Graph, symbol: str) -> Callable[[Sequence[Any]], int]:
    """How to read `symbol`'s value from the graph's arguments: the `sym` input of its name, else the first
    input size, stride or offset that is exactly the symbol. GraphError when none is."""
    for k, inp in enumerate(graph.inputs):
        v = graph.values[inp.name]
        if v.type == "sym" and inp.name == symbol:
            return lambda args, k=k: int(args[k])
        if v.type != "tensor":
            continue
        for d, size in enumerate(v.shape):
            if size == symbol:
                return lambda args, k=k, d=d: args[k].shape[d]
        for d, stride in enumerate(v.stride):
            if stride == symbol:
                return lambda args, k=k, d=d: args[k].stride(d)
        if v.storage_offset == symbol:
            return lambda args, k=k: args[k].storage_offset()
    raise GraphError(f"graph {graph.name!r}: no input carries symbol {symbol!r} on its own, so its value cannot "
                     "be read at a call")


def _example_value(x: Any) -> Any:
    """A frontend's symbolic example (a SymInt) as the value it was traced with."""
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        return hint if isinstance(hint, int) else x
    return x


class SpecializedGraph:
    """`specialized(inputs) -> outputs`, as the graph's compiled callable: one build per value of `symbols`."""

    def __init__(self, pipeline: Pipeline, autograd: Any, graph: Graph, example_inputs: Sequence[Any],
                 needed: SpecializationNeeded):
        self.pipeline, self.autograd, self.graph = pipeline, autograd, graph
        self.symbols = tuple(sorted(needed.values))
        if _BUILDING.get():  # a specialized graph asked for it again: specializing again might never end
            raise GraphError(f"graph {graph.name!r}, compiled at given values of some of its symbols, needs "
                             f"{', '.join(self.symbols)} fixed too")
        known = {s.name for s in graph.symbols} | set(sym_inputs(graph))
        if not set(self.symbols) <= known:
            raise GraphError(f"graph {graph.name!r}: the joint trace fixed "
                             f"{', '.join(sorted(set(self.symbols) - known))}, which the graph does not declare")
        self.readers = [symbol_reader(graph, s) for s in self.symbols]
        self.builds: dict[tuple[int, ...], Any] = {}
        self.reason = str(needed)
        self._eager: Any = None
        self._lock = threading.Lock()
        self._build(tuple(needed.values[s] for s in self.symbols), example_inputs)

    def __call__(self, inputs: Sequence[Any]) -> list:
        key = tuple(read(inputs) for read in self.readers)
        build = self.builds.get(key)
        if build is None:
            with self._lock:
                build = self.builds.get(key) or self._new_values(key, inputs)
        return build(inputs)

    def _new_values(self, key: tuple[int, ...], inputs: Sequence[Any]) -> Any:
        if len(self.builds) < MAX_SPECIALIZATIONS:
            return self._build(key, inputs)
        if self._eager is None:
            why = (f"graph {self.graph.name!r} was compiled for {len(self.builds)} values of "
                   f"{', '.join(self.symbols)}; new values run under eager autograd")
            self.pipeline.manager.emit(Event("fallback", "autograd", why, graph=self.graph,
                                             data={"reason": why, "cause": "autograd"}))
            self._eager = self.pipeline.eager_autograd(self.graph, inputs)
        return self._eager

    def _build(self, key: tuple[int, ...], inputs: Sequence[Any]) -> Any:
        values = dict(zip(self.symbols, key))
        graph = specialize_symbols(self.graph, values)
        what = ", ".join(f"{s} = {v}" for s, v in values.items())
        self.pipeline.manager.emit(Event(
            "graph_specialized", "runtime", f"graph {self.graph.name!r} compiled at {what}", graph=graph,
            data={"values": values, "builds": len(self.builds) + 1, "reason": self.reason}))
        building = _BUILDING.set(True)
        try:
            with self.pipeline.dumping():
                build = self.pipeline.train(self.autograd, graph, [_example_value(x) for x in inputs])
        finally:
            _BUILDING.reset(building)
        self.builds[key] = build
        return build
