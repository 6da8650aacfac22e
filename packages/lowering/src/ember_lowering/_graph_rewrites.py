"""Rewrites of the ATen graph before it is lowered: identities that save whole passes over memory.

`rewrite_graph` applies them all; each is exact (or changes only the order of additions, as said).

`fold_scatter_adds`: `a + index_put(zeros, idx, v, accumulate=True)` is `index_put(a, idx, v, accumulate=True)`.
Autograd writes the gradient of an embedding as a scatter into a zero tensor of the table's size, and when the
table is used twice (T5's encoder and decoder share one; GPT-2's output layer reuses it) it adds the two
gradients. Each zero fill, scatter copy and add moves the whole table (64 MB for t5-small) to place a few rows.
Scattering into the other addend leaves one fill (or none) and, with `extern-in-place`, no copy. Only the order
of the additions changes (a + (0 + v) becomes a + v), as when ATen accumulates in place.

`drop_dead_clones`: `y = clone(x)` where nothing else reads `x` is `x` itself. Eval-mode dropout leaves such
clones (timm's MLP: `drop1` between the activation and the second layer); where an extern call (a convolution
or matmul with the activation fused in) makes `x` and another reads `y`, no kernel absorbs the clone and it
copies the whole activation (7 ms of convnext_atto's 38 ms).
"""

from __future__ import annotations

import logging
from collections import Counter

from ember_core import Graph, Node, Ref, node_refs, rename_reads, returns_new_storage

log = logging.getLogger("ember.kernels")

_ZERO_FILLS = {"aten.full.default", "aten.zeros.default"}


def rewrite_graph(graph: Graph) -> Graph:
    return drop_dead_clones(fold_scatter_adds(graph))


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
    return graph.replace(nodes=nodes)


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
    if fill is None or fill.op not in _ZERO_FILLS or (fill.op == "aten.full.default" and fill.args[1] != 0):
        return None
    va, vb, vo = (graph.values.get(n) for n in (a.name, b.name, out))
    if va is None or vb is None or vo is None:
        return None
    if not (va.shape == vb.shape == vo.shape and va.dtype == vb.dtype == vo.dtype and va.stride == vo.stride):
        return None
    return scatter


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
    return graph.replace(nodes=nodes)


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
