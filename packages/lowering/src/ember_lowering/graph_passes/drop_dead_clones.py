"""drop-dead-clones, a graph pass at `pre_lowering` (before lowering, an identity that saves passes over memory):
`y = clone(x)` where nothing else reads `x` is `x` itself. Eval-mode dropout leaves such
clones (timm's MLP: `drop1` between the activation and the second layer); where an extern call (a convolution
or matmul with the activation fused in) makes `x` and another reads `y`, no kernel absorbs the clone and it
copies the whole activation (7 ms of convnext_atto's 38 ms).
"""

from __future__ import annotations

import logging
from collections import Counter

from ember_core import Graph, Node, Ref, node_refs, prune_values, rename_reads, returns_new_storage

log = logging.getLogger("ember.kernels")


class DropDeadClones:
    id = "drop-dead-clones"

    def run(self, graph: Graph) -> Graph:
        return drop_dead_clones(graph)


def drop_dead_clones(graph: Graph) -> Graph:
    """The graph with each `y = clone(x)` removed and `y` read as `x`, where that is unobservable: `x` is read by
    the clone alone, made by an op that returns storage of its own (not an input, a constant or a view), with
    `y`'s layout; `y` is not a graph output."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    uses = Counter(r for n in graph.nodes for r in node_refs(n))
    outputs = {o.name for o in graph.outputs}
    renamed: dict[str, str] = {}
    for node in graph.nodes:
        if node.op != "aten.clone.default" or not node.args or not isinstance(node.args[0], Ref):
            continue
        x, y = node.args[0].name, node.outputs[0]
        vx, vy = graph.values.get(x), graph.values.get(y)
        if (uses[x] != 1 or y in outputs or vx is None or vy is None or not _private(x, graph, producer, uses, outputs)
                or (vx.shape, vx.stride, vx.dtype) != (vy.shape, vy.stride, vy.dtype)):
            continue
        renamed[y] = renamed.get(x, x)  # a clone of a dropped clone reads what that one read
        log.debug("drop %s = clone(%s): nothing else reads %s", y, x, x)
    if not renamed:
        return graph
    nodes = tuple(rename_reads(n, renamed) for n in graph.nodes if n.outputs[0] not in renamed)
    return prune_values(graph.replace(nodes=nodes))


_RESHAPES = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"})


def _private(x: str, graph: Graph, producer: dict[str, Node], uses: Counter, outputs: set[str]) -> bool:
    """Is `x` storage of its own that nothing but its one reader sees: made by an op that returns new storage, or
    a reshape of such a value read by that reshape alone (eval-mode dropout after a linear layer on 3-d input is
    `clone(view(addmm))`), and no graph output on the way?"""
    while x not in outputs:
        made_by, value = producer.get(x), graph.values.get(x)
        if made_by is None or value is None:
            return False
        if made_by.op not in _RESHAPES:
            return value.base is None and returns_new_storage(made_by.op)
        if not isinstance(made_by.args[0], Ref):
            return False
        x = made_by.args[0].name
        if uses[x] != 1:
            return False
    return False
