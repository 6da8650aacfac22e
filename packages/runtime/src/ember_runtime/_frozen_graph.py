"""The runtime side of freezing: when it is on, and the callable that freezes a graph on its first call and keeps
the frozen tensors honest on every later one.

Frontends hand `compile_graph` fake example inputs, so the real parameters are first seen by the compiled callable:
`FrozenGraph` freezes (`ember_runtime.freezing.freeze`) and compiles on its first call. Each call then checks the
frozen inputs (`FreezeResult.guard`: the same tensor objects, the same `_version`, the same storage, and buffers
the same values). A parameter written in place (`load_state_dict`, `p.add_()` under no_grad, an optimizer step)
or replaced (`p.data = ...`, a new module's tensors), or running statistics a training-mode forward updated, fail
it, and the graph is frozen again from the call's tensors (event `graph_frozen`, reason naming the input). After
`MAX_REFREEZES` refreezes the graph runs unfrozen from then on (a `fallback` event, cause `freezing`): freezing
costs more than it gives to parameters that change at every call. A freezing pass that raises does the same.

Not seen: writes to a parameter that bypass its version counter (`p.data.copy_(...)`): compile again after those
(`torch._dynamo.reset()` and a new `ember.compile`), or turn freezing off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember_core import Event, Graph, Stopwatch

from .freezing import FreezeResult, freezable, freeze, frozen_candidates

if TYPE_CHECKING:
    from ._pipeline import Pipeline

MAX_REFREEZES = 8


def freezing_wanted(option: bool | None, graph: Graph, example_inputs: Sequence[Any]) -> bool:
    """Whether an inference graph (one that needs no grad) is frozen: option `freezing` True, or None (default)
    under no_grad / inference mode when no parameter or buffer the graph reads requires grad. Never when the graph
    writes or hands out every parameter and buffer it takes (`frozen_candidates`: nothing could be frozen)."""
    if option is False or not frozen_candidates(graph):
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
        self.state: tuple[FreezeResult, Any] | None = None  # the freeze and its compiled graph, set together
        self.refreezes = 0
        self._unfrozen: Any = None

    @property
    def result(self) -> FreezeResult | None:
        return self.state[0] if self.state is not None else None

    def __call__(self, inputs: Sequence[Any]) -> list:
        state = self.state
        if state is None or not state[0].guard(inputs):
            if self._unfrozen is not None:
                return self._unfrozen(inputs)
            state = self._freeze(inputs)
            if state is None:
                return self._unfrozen(inputs)
        result, compiled = state
        return compiled([inputs[k] for k in result.kept])

    def _freeze(self, inputs: Sequence[Any]) -> tuple[FreezeResult, Any] | None:
        """Freeze and compile from this call's tensors; None (after a fallback event) once it refroze too often,
        or when freezing raised.

        The frozen graph bypasses the in-memory graph cache: a cached build would keep the tensors it closes over
        alive after the model is gone, and share them with another frozen graph of equal values, which a write to
        the parameters (refreezing this one) would silently change under it. Builds still come from the disk
        cache: the generated source does not hold the constants' values."""
        previous = self.result
        reason = "first call" if previous is None else previous.changed(inputs)
        self.refreezes += previous is not None
        graph = self.graph
        can = bool(freezable(graph, inputs))
        if self.refreezes > MAX_REFREEZES or not can:
            return self._give_up(f"frozen tensors changed {self.refreezes} times (last: {reason})" if can
                                 else "no input can be frozen")
        try:
            with Stopwatch() as clock:
                result = freeze(graph, inputs, passes=self.pipeline.options.get("passes"))
        except Exception as e:  # noqa: BLE001 - a pass's bug costs speed, never the call
            return self._give_up(f"freezing raised {type(e).__name__}: {e}")
        counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in result.counts.items())
        self.pipeline.manager.emit(Event(
            "graph_frozen", "freezing", f"graph {graph.name!r} frozen ({reason}): {counts}", graph=result.graph,
            data={**result.counts, "reason": reason, "seconds": clock.seconds}))
        examples = [self.example_inputs[k] for k in result.kept]
        self.state = (result, self.pipeline.codegen_graph(result.graph, examples, cache=False))
        return self.state

    def _give_up(self, why: str) -> None:
        """From now on the graph runs unfrozen (a `fallback` event, cause `freezing`)."""
        graph = self.graph
        self.pipeline.manager.emit(Event("fallback", "freezing", f"graph {graph.name!r} runs unfrozen: {why}",
                                         graph=graph, data={"reason": why, "cause": "freezing"}))
        self.state = None
        self._unfrozen = self.pipeline.codegen_graph(graph, self.example_inputs)
