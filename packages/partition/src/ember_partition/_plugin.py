"""ember-partition's plugin, found by entry point like any other: partitioners `default` and `mincut`, and the
joint-graph diagrams written through ember-core's dump writer when `EMBER_DUMP=dir` is set."""

from __future__ import annotations

from ember_core import DumpWriter, Event, Partitioned, hookimpl

from ._default import DefaultPartitioner
from ._diagram import joint_diagram, render_svg
from ._mincut import OPTION, MinCutPartitioner, budget_problem


@hookimpl
def ember_register(registry) -> None:
    registry.add("partition", "default", DefaultPartitioner(), priority=0)
    registry.add("partition", "mincut", MinCutPartitioner(), priority=10)
    registry.add_option(OPTION, (float, int), 1.0,
                        "mincut partitioner's memory budget in (0, 1]: 1 saves the fewest bytes that recomputing "
                        "cheap ops allows; lower saves fewer by recomputing reductions too", check=budget_problem)


@hookimpl
def ember_event(event: Event, dump: DumpWriter) -> None:
    """A `partitioned` event becomes a diagram of its joint graph beside the event's other dump files:
    `NNN-partitioned-<forward graph>.dot`, and `.svg` when Graphviz is installed."""
    if not dump.enabled or event.kind != "partitioned" or not isinstance(event.payload, Partitioned):
        return
    text = joint_diagram(event.payload.joint, event.payload.partition)
    if dump.write(event, ".dot", text) is None:
        return  # the folder cannot be written: the writer has warned
    svg = render_svg(text)
    if svg is not None:
        dump.write(event, ".svg", svg)
