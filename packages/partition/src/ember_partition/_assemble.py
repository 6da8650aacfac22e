"""The last steps every partitioner shares: split along the saved values, report, verify both graphs.

The runtime announces the result (event `partitioned`); a partitioner used alone just returns it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ember_core import Partition, verify

from ._joint import JointInfo
from ._report import make_report
from ._split import Split, split

VERSION = "0.1.0"


def assemble(info: JointInfo, saved: Iterable[str], partitioner: str, memory_budget: float | None = None,
             notes: tuple[str, ...] = (), finish: Callable[[Split], Split] | None = None) -> Partition:
    """A verified `Partition` saving `saved` (unused ones dropped, primals the backward reads added); `finish`
    gets the last word on the two graphs before they are reported and verified."""
    cut = split(info, saved, producer=f"ember-partition {VERSION} ({partitioner})")
    cut = finish(cut) if finish is not None else cut
    report = make_report(info, cut, partitioner, memory_budget, notes)
    partition = Partition(verify(cut.forward), verify(cut.backward), cut.saved, report,
                          extra={"recomputed": tuple(o for i in cut.recomputed for o in info.graph.nodes[i].outputs)})
    return partition
