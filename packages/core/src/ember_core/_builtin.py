"""ember-core's own plugin, found by entry point like any other: the interpreter codegen and the log/dump observer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._events import Event
from ._interpreter import Interpreter
from ._logging import EventLogger
from ._schema import Graph
from ._stages import CompiledGraph
from .hookspecs import hookimpl


class InterpreterCodegen:
    """Runs graphs node by node with torch.ops: every device, lowest priority, and the oracle in tests."""

    name = "interpreter"

    def compile(self, graph: Graph, example_inputs: Sequence[Any], options: Mapping[str, Any]) -> CompiledGraph:
        interp = Interpreter(graph)
        return CompiledGraph(interp.run, graph, self.name, source=str(graph))


_logger = EventLogger()


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "interpreter", InterpreterCodegen(), priority=-1000)


@hookimpl
def ember_configure(config: Mapping[str, Any]) -> None:
    _logger.configure(config.get("logs", ""), config.get("dump"))


@hookimpl
def ember_event(event: Event) -> None:
    _logger(event)
