"""Sums written as trees of adds, for the pre-lowering passes that make a whole sum one op (`cat-slice-scatters`,
`cat-matmul-sums`).

Autograd adds up the gradient contributions of a value used many times one add at a time: a chain (or tree) of
`aten.add.Tensor` nodes, each inner one read by the next alone. `rewrite_sums` finds every such tree from its last
add and hands its terms to a pass's `rewrite`, which may put nodes of its own in the tree's place. The new nodes
read the terms' operands where the last add was, later than the nodes they replace: in a graph with a node that
may write in place (`ember_core.may_write`) a write in between could change them, so such a graph is left alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ember_core import Graph, Node, Ref, Value, may_write, node_refs, prune_values

_ADD = "aten.add.Tensor"


@dataclass(frozen=True)
class Sum:
    """A tree of adds: its last add (`top`), every add in it (`adds`, `top` last) and its terms, left to right."""

    top: Node
    adds: tuple[Node, ...]
    terms: tuple[Ref, ...]


@dataclass
class Rewrite:
    """What replaces a sum: `nodes` in the place of its last add (defining its output), the other nodes it makes
    dead (`drop`: what produced the terms), and the metadata of the values the new nodes add."""

    nodes: list[Node]
    drop: list[Node] = field(default_factory=list)
    values: dict[str, Value] = field(default_factory=dict)


class Uses:
    """Who produces each value of a graph and how many times it is read (the graph's outputs count as reads)."""

    def __init__(self, graph: Graph):
        self.producer = {o: n for n in graph.nodes for o in n.outputs}
        self.count = Counter(r for n in graph.nodes for r in node_refs(n))
        self.count.update(o.name for o in graph.outputs)

    def once(self, ref: object) -> Node | None:
        """The node producing `ref`, where `ref` is a value read once; else None."""
        if not isinstance(ref, Ref) or self.count[ref.name] != 1:
            return None
        return self.producer.get(ref.name)


Rewriter = Callable[[Graph, Sum, Uses], "Rewrite | None"]


def rewrite_sums(graph: Graph, rewrite: Rewriter) -> Graph:
    """The graph with each tree of adds `rewrite` accepts replaced by what it returns. The last add of a tree is
    taken first, with the whole tree; a tree inside one already replaced is not offered again. A graph that may
    write in place is returned as it is."""
    if any(may_write(n.op) for n in graph.nodes):
        return graph
    uses = Uses(graph)
    replaced: dict[int, list[Node]] = {}
    dropped: set[int] = set()
    values = dict(graph.values)
    for k in reversed(range(len(graph.nodes))):
        node = graph.nodes[k]
        if not _is_plain_add(node) or id(node) in dropped:
            continue
        adds: list[Node] = []
        terms = _terms(node, uses, adds)
        if len(terms) < 2:
            continue
        done = rewrite(graph, Sum(node, tuple(adds), tuple(terms)), uses)
        if done is None:
            continue
        replaced[k] = done.nodes
        dropped.update(id(n) for n in (*adds, *done.drop))
        values.update(done.values)
    if not replaced:
        return graph
    nodes: list[Node] = []
    for k, n in enumerate(graph.nodes):
        if k in replaced:
            nodes += replaced[k]
        elif id(n) not in dropped:
            nodes.append(n)
    return prune_values(graph.replace(nodes=tuple(nodes), values=values))


def _is_plain_add(node: Node) -> bool:
    return (node.op == _ADD and len(node.args) == 2 and node.kwargs.get("alpha", 1) == 1
            and all(isinstance(a, Ref) for a in node.args))


def _terms(node: Node, uses: Uses, adds: list[Node]) -> list[Ref]:
    """The terms of the tree whose last add is `node`, left to right; its adds go to `adds` (inner ones first)."""
    terms: list[Ref] = []
    for a in node.args:
        inner = uses.once(a)
        if inner is not None and _is_plain_add(inner):
            terms += _terms(inner, uses, adds)
        else:
            terms.append(a)
    adds.append(node)
    return terms
