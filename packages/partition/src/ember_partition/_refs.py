"""The values a node reads, each once, in argument order (ember-core's `node_refs`, deduplicated), and the values
a joint graph's backward region reads."""

from __future__ import annotations

from ember_core import Graph, Node, iter_refs, node_refs

__all__ = ["backward_reads", "iter_refs", "node_reads"]


def node_reads(node: Node) -> tuple[str, ...]:
    """Names read by `node`, each once, in argument order."""
    return tuple(dict.fromkeys(node_refs(node)))


def backward_reads(graph: Graph) -> frozenset[str]:
    """Names read by the nodes of `graph`'s backward region (`meta["region"]`: the joint trace's record of what
    eager's backward ran, so what eager's autograd saved for it)."""
    return frozenset(r for n in graph.nodes if n.meta.get("region") == "backward" for r in node_reads(n))
