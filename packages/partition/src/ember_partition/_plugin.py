"""ember-partition's plugin, found by entry point like any other: partitioners `default` and `mincut`, and the
joint-graph diagrams written next to the other dumps when `EMBER_DUMP=dir` is set."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember_core import Event, Partitioned, hookimpl

from ._default import DefaultPartitioner
from ._diagram import write_diagram
from ._mincut import OPTION, MinCutPartitioner

_dump_dir: Path | None = None
_counter = itertools.count()
_warned: set[Path] = set()  # dump folders already reported as unwritable
log = logging.getLogger("ember.partition")


@hookimpl
def ember_register(registry) -> None:
    registry.add("partition", "default", DefaultPartitioner(), priority=0)
    registry.add("partition", "mincut", MinCutPartitioner(), priority=10)
    registry.add_option(OPTION, (float, int), 1.0,
                        "mincut partitioner's memory budget in (0, 1]: 1 saves the fewest bytes that recomputing "
                        "cheap ops allows; lower saves fewer by recomputing reductions too")


@hookimpl
def ember_configure(config: Mapping[str, Any]) -> None:
    global _dump_dir
    _dump_dir = Path(config["dump"]) if config.get("dump") else None


@hookimpl
def ember_event(event: Event) -> None:
    """A `partitioned` event (its `Partitioned` payload) becomes `partition-NNN-<name>.dot` (and `.svg`)."""
    if _dump_dir is None or event.kind != "partitioned" or not isinstance(event.payload, Partitioned):
        return
    joint = event.payload.joint
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", joint.graph.name)
    try:
        write_diagram(_dump_dir / f"partition-{next(_counter):03d}-{name}.dot", joint, event.payload.partition)
    except OSError as e:  # a diagram is a debugging aid: never a reason for a compile to fail
        if _dump_dir not in _warned:
            _warned.add(_dump_dir)
            log.warning("EMBER_DUMP: cannot write diagrams to %s (%s); compiling goes on without them", _dump_dir, e)
