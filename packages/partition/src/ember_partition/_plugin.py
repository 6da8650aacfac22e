"""ember-partition's plugin, found by entry point like any other: partitioners `default` and `mincut`, and the
joint-graph diagrams written through ember-core's dump writer when `EMBER_DUMP=dir` is set."""

from __future__ import annotations

from ember_core import DumpWriter, Event, Partition, Partitioned, Reused, hookimpl

from ._default import DefaultPartitioner
from ._diagram import joint_diagram, partition_diagram, render_svg
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
    `NNN-partitioned-<forward graph>.dot`, and `.svg` when Graphviz is installed. A partition a warm start took from
    the disk cache (a `disk_cache_hit` whose payload is the `Partition`) is drawn from its two halves, titled as
    reused: `NNN-disk_cache_hit-<forward graph>.dot`."""
    if not dump.enabled:
        return
    if event.kind == "partitioned" and isinstance(event.payload, Partitioned):
        text = joint_diagram(event.payload.joint, event.payload.partition)
    elif event.kind == "disk_cache_hit" and isinstance(event.payload, Reused) and isinstance(event.payload.result,
                                                                                              Partition):
        origin = event.data.get("origin", "local")
        where = "the disk cache" if origin == "local" else f"the remote cache {origin}"
        text = partition_diagram(event.payload.result, f"partition from {where} (warm start: no joint graph traced)")
    else:
        return
    if dump.write(event, ".dot", text) is None:
        return  # the folder cannot be written: the writer has warned
    svg = render_svg(text)
    if svg is not None:
        dump.write(event, ".svg", svg)
