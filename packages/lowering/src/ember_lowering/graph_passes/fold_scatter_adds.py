"""fold-scatter-adds, a graph pass at `pre_lowering` (before lowering, an identity that saves passes over memory):
`a + index_put(zeros, idx, v, accumulate=True)` is `index_put(a, idx, v, accumulate=True)`.
Autograd writes the gradient of an embedding as a scatter into a zero tensor of the table's size, and when the
table is used twice (T5's encoder and decoder share one; GPT-2's output layer reuses it) it adds the two
gradients. Each zero fill, scatter copy and add moves the whole table (64 MB for t5-small) to place a few rows.
Scattering into the other addend leaves one fill (or none) and, with `extern-in-place`, no copy. Only the order
of the additions changes (a + (0 + v) becomes a + v), as when ATen accumulates in place.
"""

from __future__ import annotations

import logging
from collections import Counter

from ember_core import Graph, Node, Ref, node_refs, prune_values

from ._fills import is_zero_fill

log = logging.getLogger("ember.kernels")



class FoldScatterAdds:
    id = "fold-scatter-adds"

    def run(self, graph: Graph) -> Graph:
        return fold_scatter_adds(graph)


def fold_scatter_adds(graph: Graph) -> Graph:
    """The graph with each `add(a, index_put(zeros, idx, v, True))` made `index_put(a, idx, v, True)` where that
    changes nothing but the order of the additions (same shape, dtype and strides; the scatter and its zeros
    read by the add alone)."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    uses = Counter(r for n in graph.nodes for r in node_refs(n))
    uses.update(o.name for o in graph.outputs)
    swapped: dict[int, Node] = {}
    dropped: set[int] = set()
    for k, node in enumerate(graph.nodes):
        if node.op != "aten.add.Tensor" or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
            continue
        for a, b in (node.args, node.args[::-1]):
            scatter = _zero_scatter(graph, producer, uses, a, b, node.outputs[0])
            if scatter is not None:
                _, indices, values = scatter.args[:3]
                swapped[k] = Node(node.outputs, "aten.index_put.default", (a, indices, values, True), {}, node.meta)
                dropped.add(id(scatter))
                log.debug("fold %s = %s + %s: scatter into %s", node.outputs[0], a.name, b.name, a.name)
                break
    if not swapped:
        return graph
    nodes = tuple(swapped.get(k, n) for k, n in enumerate(graph.nodes) if id(n) not in dropped)
    return prune_values(graph.replace(nodes=nodes))


def _zero_scatter(graph: Graph, producer: dict[str, Node], uses: Counter, a, b, out: str) -> Node | None:
    """The `index_put(zeros, ..., accumulate=True)` node that makes `b`, if `a + b` may scatter into `a`."""
    if not (isinstance(a, Ref) and isinstance(b, Ref)) or a.name == b.name or uses[b.name] != 1:
        return None
    scatter = producer.get(b.name)
    if scatter is None or scatter.op != "aten.index_put.default" or len(scatter.args) < 3:
        return None
    accumulate = scatter.args[3] if len(scatter.args) > 3 else scatter.kwargs.get("accumulate", False)
    base = scatter.args[0]
    if accumulate is not True or not isinstance(base, Ref) or uses[base.name] != 1:
        return None
    fill = producer.get(base.name)
    if not is_zero_fill(fill):
        return None
    va, vb, vo = (graph.values.get(n) for n in (a.name, b.name, out))
    if va is None or vb is None or vo is None:
        return None
    if not (va.shape == vb.shape == vo.shape and va.dtype == vb.dtype == vo.dtype and va.stride == vo.stride):
        return None
    return scatter
