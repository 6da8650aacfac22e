"""ember-autograd's plugin, found by entry point like any other: autograd implementation `aot`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember_core import CompiledGraph, Graph, JointGraph, Partition, hookimpl

from ._joint import joint
from ._wrapper import wrap


class AOTAutograd:
    """The `ember_core` Autograd stage: `joint` traces forward+backward ahead of time, `wrap` runs the halves."""

    name = "aot"

    def joint(self, graph: Graph, example_inputs: Sequence[Any]) -> JointGraph:
        return joint(graph, example_inputs)

    def wrap(self, partition: Partition, forward: CompiledGraph,
             compile_backward: Callable[[], CompiledGraph]) -> Callable[[Sequence[Any]], list]:
        return wrap(partition, forward, compile_backward)


@hookimpl
def ember_register(registry) -> None:
    registry.add("autograd", "aot", AOTAutograd())
