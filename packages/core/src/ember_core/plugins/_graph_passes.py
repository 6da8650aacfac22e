"""Running graph passes: the one runner for every point of the pipeline (`PASS_POINTS`), whoever runs it.

`run_graph_passes(graph, point)` runs the passes the registry has at `point` (those the `passes` option names, or
the defaults) in order. A pass that changes the graph sends a `pass_applied` event (its id, plugin, point, node
counts before and after, its `summary` if it has one, seconds); one that raises becomes a `PluginError` naming the
pass and its plugin.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import PluginError
from ..events._events import Event, Stopwatch
from ..graph._schema import Graph
from ._plugins import Implementation, get_plugin_manager


def run_graph_passes(graph: Graph, point: str, chosen: Sequence[str] | None = None,
                     impls: Sequence[Implementation] | None = None, summaries: dict[str, int] | None = None) -> Graph:
    """`graph` through the passes at `point` (`impls`, else the registry's: `chosen` ids, else the defaults); the
    numbers each pass's `summary` gives are added into `summaries` when given."""
    manager = get_plugin_manager()
    for impl in manager.registry.passes(point, chosen) if impls is None else impls:
        before = graph
        try:
            with Stopwatch() as clock:
                graph = impl.impl.run(graph)
        except Exception as e:
            raise PluginError(f"pass {impl.name!r} of plugin {impl.plugin!r} raised {type(e).__name__}: {e}") from e
        if graph is not before:
            summary = impl.impl.summary(before, graph) if hasattr(impl.impl, "summary") else {}
            if summaries is not None:
                for key, n in summary.items():
                    summaries[key] = summaries.get(key, 0) + n
            manager.emit(Event("pass_applied", "passes", f"pass {impl.name} ({impl.plugin})", graph=graph,
                               data={"pass": impl.name, "plugin": impl.plugin, "point": point,
                                     "nodes_before": len(before.nodes), "nodes_after": len(graph.nodes),
                                     "summary": summary, "seconds": clock.seconds}))
    return graph
