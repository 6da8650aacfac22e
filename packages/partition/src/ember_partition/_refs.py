"""The values a node reads, each once, in argument order (ember-core's `node_refs`, deduplicated)."""

from __future__ import annotations

from ember_core import Node, iter_refs, node_refs

__all__ = ["iter_refs", "node_reads"]


def node_reads(node: Node) -> tuple[str, ...]:
    """Names read by `node`, each once, in argument order."""
    return tuple(dict.fromkeys(node_refs(node)))
