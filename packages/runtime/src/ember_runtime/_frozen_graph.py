"""The runtime side of freezing: when it is on, and the callable that freezes a graph on its first call and keeps
the frozen tensors honest on every later one.

Frontends hand `compile_graph` fake example inputs, so the real parameters are first seen by the compiled callable:
`FrozenGraph` freezes (`ember_runtime.freezing.freeze`) and compiles on its first call. Each call then checks the
frozen inputs (`FreezeResult.guard`: the same tensor objects, the same `_version`, the same storage, and buffers
the same values). A parameter written in place (`load_state_dict`, `p.add_()` under no_grad, an optimizer step)
or replaced (`p.data = ...`, a new module's tensors), or running statistics a training-mode forward updated, fail
it, and the graph is frozen again from the call's tensors (event `graph_frozen`, reason naming the input). After
`MAX_REFREEZES` refreezes the graph runs unfrozen from then on (a `fallback` event, cause `freezing`): freezing
costs more than it gives to parameters that change at every call.

Not seen: writes to a parameter that bypass its version counter (`p.data.copy_(...)`): compile again after those
(`torch._dynamo.reset()` and a new `ember.compile`), or turn freezing off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember_core import Event, Graph, Stopwatch

from .freezing import FreezeResult, freezable, freeze

if TYPE_CHECKING:
    from ._pipeline import Pipeline

MAX_REFREEZES = 8


def freezing_wanted(option: bool | None, graph: Graph, example_inputs: Sequence[Any]) -> bool:
    """Whether an inference graph (one that needs no grad) is frozen: option `freezing` True, or None (default)
    under no_grad / inference mode when no parameter or buffer the graph reads requires grad."""
    if option is False or not any(i.kind in ("param", "buffer") for i in graph.inputs):
        return False
    if option:
        return True
    if torch.is_grad_enabled():
        return False
    for inp, x in zip(graph.inputs, example_inputs):
        if inp.kind in ("param", "buffer") and (graph.values[inp.name].requires_grad
                                                 or getattr(x, "requires_grad", False)):
            return False
    return True


class FrozenGraph:
    """`frozen(inputs) -> outputs`, as the graph's compiled callable; frozen on the first call, refrozen when a
    frozen tensor changed."""

    def __init__(self, pipeline: Pipeline, graph: Graph, example_inputs: Sequence[Any]):
        self.pipeline, self.graph, self.example_inputs = pipeline, graph, list(example_inputs)
        self.result: FreezeResult | None = None
        self.compiled: Any = None
        self.refreezes = 0
        self._unfrozen: Any = None

    def __call__(self, inputs: Sequence[Any]) -> list:
        result = self.result
        if result is None or not result.guard(inputs):
            if self._unfrozen is not None:
                return self._unfrozen(inputs)
            result = self._freeze(inputs)
            if result is None:
                return self._unfrozen(inputs)
        return self.compiled([inputs[k] for k in result.kept])

    def _freeze(self, inputs: Sequence[Any]) -> FreezeResult | None:
        """Freeze and compile from this call's tensors; None (after a fallback event) once it refroze too often."""
        reason = "first call" if self.result is None else self.result.changed(inputs)
        if self.result is not None:
            self.refreezes += 1
        manager, graph = self.pipeline.manager, self.graph
        if self.refreezes > MAX_REFREEZES or not freezable(graph, inputs):
            why = (f"frozen tensors changed {self.refreezes} times (last: {reason})" if freezable(graph, inputs)
                   else "no input can be frozen")
            manager.emit(Event("fallback", "freezing", f"graph {graph.name!r} runs unfrozen: {why}", graph=graph,
                               data={"reason": why, "cause": "freezing"}))
            self.result = self.compiled = None
            self._unfrozen = self.pipeline.codegen_graph(graph, self.example_inputs)
            return None
        with Stopwatch() as clock:
            result = freeze(graph, inputs)
        counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in result.counts.items())
        manager.emit(Event("graph_frozen", "freezing", f"graph {graph.name!r} frozen ({reason}): {counts}",
                           graph=result.graph, data={**result.counts, "reason": reason, "seconds": clock.seconds}))
        examples = [self.example_inputs[k] for k in result.kept]
        # a refrozen graph skips the in-memory cache: it would keep every earlier version's constants alive
        self.compiled = self.pipeline.codegen_graph(result.graph, examples, cache=self.refreezes == 0)
        self.result = result
        return result
