"""ember-core's own plugin, found by entry point like any other: the interpreter codegen and the observers behind
`EMBER_LOGS`, `EMBER_DUMP` and `EMBER_REPORT`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .events._dump import DumpWriter
from .events._events import Event
from .events._logging import EventLogger
from .execution._grad_rules import grad_rules
from .execution._pycode import python_function
from .graph._schema import Graph
from .plugins._stages import CompiledGraph
from .plugins.hookspecs import hookimpl


class InterpreterCodegen:
    """Runs graphs op by op with torch.ops, as straight-line Python: every device, lowest priority.

    The same calls as the reference `Interpreter` (the oracle in tests), without its per-node dispatch. Ops whose
    ATen derivative is missing or wrong run with `grad_rules`' (a graph may run here under eager autograd)."""

    name = "interpreter"

    def compile(self, graph: Graph, example_inputs: Sequence[Any], options: Mapping[str, Any]) -> CompiledGraph:
        fn, source = python_function(graph, grad_rules)
        return CompiledGraph(fn, graph, self.name, source=source)


_INTERPRETER = InterpreterCodegen()
_logger = EventLogger()
_report = None  # the EMBER_REPORT observer: made (and the report's modules imported) once a folder is named


def interpreter_codegen() -> InterpreterCodegen:
    """ember-core's interpreter codegen: what a codegen falls back to for a graph it cannot build. The object the
    `interpreter` registration holds, reached without the registry, so no plugin state (EMBER_DISABLE_PLUGINS, a
    manager built without entry points) can hide it. `interpreter_codegen().compile(graph, None, {})`."""
    return _INTERPRETER


@hookimpl
def ember_register(registry) -> None:
    registry.add("codegen", "interpreter", _INTERPRETER, priority=-1000)


@hookimpl
def ember_configure(config: Mapping[str, Any]) -> None:
    global _report
    _logger.configure(config.get("logs", ""))
    folder = config.get("report")
    if _report is None:
        if folder:
            from .report import ReportWriter  # noqa: PLC0415 - off by default: ember_core imports without it

            _report = ReportWriter(folder)
    elif folder != (str(_report.folder) if _report.folder else None):
        _report.configure(folder)


@hookimpl
def ember_event(event: Event, dump: DumpWriter) -> None:
    _logger(event)
    dump.write_event(event)
    if _report is not None:
        _report.ember_event(event)
