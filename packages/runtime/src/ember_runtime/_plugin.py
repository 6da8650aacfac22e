"""ember-runtime's plugin, found by entry point like any other: the options the runtime reads, and the freezing
passes (graph passes at `freeze`)."""

from __future__ import annotations

from ember_core import hookimpl

from ._options import register_options
from .freezing import DropDead, FoldBatchNorm, FoldConstants, PrepackWeights


@hookimpl
def ember_register(registry) -> None:
    register_options(registry)
    # in this order (priority): constants folded first expose batch norms to fold, folded weights are packed, and
    # what all three left unread goes last
    for priority, pass_ in ((40, FoldConstants()), (30, FoldBatchNorm()), (20, PrepackWeights()), (10, DropDead())):
        registry.add("pass", pass_.id, pass_, point="freeze", priority=priority)
