"""What the freezing passes share: who reads a value, fresh names, dropping dead nodes and constants."""

from __future__ import annotations

from collections import defaultdict

import torch
from ember_core import Constant, Graph, Node, Ref, has_effect, node_refs


def readers(graph: Graph) -> dict[str, list[int]]:
    """Value name → the indices of the nodes that read it (once per node)."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(graph.nodes):
        for name in dict.fromkeys(node_refs(node)):
            out[name].append(i)
    return out


def output_names(graph: Graph) -> set[str]:
    return {o.name for o in graph.outputs}


def constant_of(graph: Graph, arg: object) -> torch.Tensor | None:
    """The tensor of a constant `arg` refers to, else None."""
    if isinstance(arg, Ref) and arg.name in graph.constants:
        return graph.constants[arg.name].tensor
    return None


def add_constant(constants: dict[str, Constant], name: str, tensor: torch.Tensor) -> Ref:
    """Store `tensor` as constant `name` (a constant's metadata is its tensor's: it has no entry in `values`)."""
    constants[name] = Constant(name, tensor)
    return Ref(name)


class DropDead:
    """The graph pass (point `freeze`, last): `drop_dead`."""

    id = "drop-dead"

    def run(self, graph: Graph) -> Graph:
        return drop_dead(graph)


def drop_dead(graph: Graph) -> Graph:
    """The graph without nodes whose results nothing reads (an effectful node stays) and unread constants."""
    live = output_names(graph)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs) or has_effect(node.op):
            kept.append(node)
            live.update(node_refs(node))
    kept.reverse()
    defined = set(graph.input_names)
    defined.update(o for n in kept for o in n.outputs)
    return graph.replace(nodes=tuple(kept), constants={k: c for k, c in graph.constants.items() if k in live},
                         values={k: v for k, v in graph.values.items() if k in defined})
