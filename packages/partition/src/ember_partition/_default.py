"""The `default` partitioner: the forward graph computes what the forward outputs need, the backward graph the
rest; every forward value the backward reads is saved. Nothing is recomputed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember_core import JointGraph, Partition

from ._assemble import assemble
from ._joint import analyze


class DefaultPartitioner:
    """Saves every forward value the backward needs; never recomputes."""

    name = "default"

    def partition(self, joint: JointGraph, options: Mapping[str, Any] | None = None) -> Partition:
        info = analyze(joint)
        forward_values = [o for i in sorted(info.forward) for o in info.graph.nodes[i].outputs]
        return assemble(info, forward_values, self.name)
