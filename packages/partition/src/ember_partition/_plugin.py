"""ember-partition's plugin, found by entry point like any other: partitioners `default` and `mincut`."""

from __future__ import annotations

from ember_core import hookimpl

from ._default import DefaultPartitioner
from ._mincut import OPTION, MinCutPartitioner


@hookimpl
def ember_register(registry) -> None:
    registry.add("partition", "default", DefaultPartitioner(), priority=0)
    registry.add("partition", "mincut", MinCutPartitioner(), priority=10)
    registry.add_option(OPTION, (float, int), 1.0,
                        "mincut partitioner's memory budget in (0, 1]: 1 saves the fewest bytes that recomputing "
                        "cheap ops allows; lower saves fewer by recomputing reductions too")
