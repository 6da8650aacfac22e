"""cat-slice-scatters, a graph pass at `pre_lowering` (an identity): a sum of `slice_scatter(zeros, piece, d, start,
end)` whose pieces tile dimension d exactly is `cat(pieces, d)`.

Autograd writes the gradient of a tensor read one slice at a time (an RNN's input projection, computed for every
time step at once and read step by step) as one scatter of each slice's gradient into zeros, added up. Lowered as
written, every element of the sum tests every piece (32 masked loads and selects at each element of a GRU's
32-step gradient: two kernels took 45% of its training step); as a cat of many pieces it is one copy of each
(`_rules_index._cat` leaves a cat of more than `MAX_CAT_PIECES` pieces to ATen). Adding the zeros changes nothing
but the sign of a zero (-0.0 + 0.0 is +0.0).
"""

from __future__ import annotations

import logging
from collections import Counter

from ember_core import Graph, Node, Ref, contiguous_stride, node_refs, prune_values

from ._fills import is_zero_fill

log = logging.getLogger("ember.kernels")

_ADD = "aten.add.Tensor"


class CatSliceScatters:
    id = "cat-slice-scatters"

    def run(self, graph: Graph) -> Graph:
        return cat_slice_scatters(graph)


def cat_slice_scatters(graph: Graph) -> Graph:
    """The graph with each such sum (a tree of adds, each but the last read by the next alone) made one `cat`."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    uses = Counter(r for n in graph.nodes for r in node_refs(n))
    uses.update(o.name for o in graph.outputs)
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    for k in reversed(range(len(graph.nodes))):  # the last add of a tree first: it takes the whole tree
        node = graph.nodes[k]
        if node.op != _ADD or id(node) in dropped:
            continue
        inner: list[Node] = []
        leaves = _leaves(node, producer, uses, inner, top=True)
        cat = _as_cat(graph, node, leaves, producer, uses) if leaves and len(leaves) > 1 else None
        if cat is None:
            continue
        replaced[k] = cat
        fills = [producer[leaf.kwargs.get("self", leaf.args[0]).name] for leaf in leaves]
        dropped.update(id(n) for n in inner + leaves + fills)
        log.debug("cat %s: a sum of %d slice scatters into zeros", node.outputs[0], len(leaves))
    if not replaced:
        return graph
    nodes = tuple(replaced.get(k, n) for k, n in enumerate(graph.nodes) if id(n) not in dropped)
    return prune_values(graph.replace(nodes=nodes))


def _leaves(node: Node, producer: dict[str, Node], uses: Counter, inner: list[Node], top: bool) -> list[Node] | None:
    """The slice_scatter nodes a tree of adds sums, or None where a part is something else. `inner` collects the
    adds below the top one."""
    if node.op == "aten.slice_scatter.default":
        return [node]
    if node.op != _ADD or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    if not top:
        inner.append(node)
    found: list[Node] = []
    for a in node.args:
        part = producer.get(a.name) if isinstance(a, Ref) else None
        if part is None or uses[a.name] != 1:
            return None
        below = _leaves(part, producer, uses, inner, top=False)
        if below is None:
            return None
        found += below
    return found


def _as_cat(graph: Graph, node: Node, leaves: list[Node], producer: dict[str, Node], uses: Counter) -> Node | None:
    """`cat(pieces, d)` in place of `node`, if its leaves scatter into zeros of its own shape and dtype, along one
    dim, with step 1, and their slices tile that dim from 0 to its end in order; else None."""
    out = graph.values.get(node.outputs[0])
    if out is None or not out.shape or not all(isinstance(s, int) for s in out.shape):
        return None  # symbolic sizes: left as written
    if tuple(out.stride) != tuple(contiguous_stride(out.shape)):
        return None
    rank, spans, dims = len(out.shape), [], set()
    for leaf in leaves:
        args = list(leaf.args) + [None] * (6 - len(leaf.args))
        base, piece, d, start, end, step = (leaf.kwargs.get(k, a) for k, a in
                                            zip(("self", "src", "dim", "start", "end", "step"), args))
        d, start, step = (0 if d is None else d), (0 if start is None else start), (1 if step is None else step)
        if not (isinstance(base, Ref) and isinstance(piece, Ref) and isinstance(d, int)) or uses[base.name] != 1:
            return None
        fill = producer.get(base.name)
        if not is_zero_fill(fill):
            return None
        d %= rank
        size = out.shape[d]
        end = size if end is None else end
        v, p = graph.values.get(leaf.outputs[0]), graph.values.get(piece.name)
        if not all(isinstance(x, int) for x in (size, start, end, step)) or step != 1 or v is None or p is None:
            return None
        if v.shape != out.shape or v.dtype != out.dtype or p.dtype != out.dtype or len(p.shape) != rank:
            return None
        start, end = max(0, start + size if start < 0 else start), min(size, end + size if end < 0 else end)
        expected = tuple(end - start if j == d else s for j, s in enumerate(out.shape))
        if tuple(p.shape) != expected:
            return None
        spans.append((start, end, piece))
        dims.add(d)
    if len(dims) != 1:
        return None
    d = dims.pop()
    spans.sort(key=lambda s: s[0])
    at = 0
    for start, end, _ in spans:
        if start != at or end <= start:
            return None
        at = end
    if at != out.shape[d]:
        return None
    return Node(node.outputs, "aten.cat.default", (tuple(p for _, _, p in spans), d), {}, node.meta)
