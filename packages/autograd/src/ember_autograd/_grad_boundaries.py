"""Where gradients stop: `torch.no_grad()` regions and detached values, made explicit before the joint is traced.

An ATen graph is replayed under autograd to trace its backward, and an op recorded inside `torch.no_grad()` looks
like any other op. A frontend that knows where grad stops says so in the values' metadata: a floating value with
`requires_grad=False` computed from an argument with `requires_grad=True`. This pass puts an `aten.detach` after
each such value, so the replay stops there too.

Graphs whose metadata carries no grad facts (no value past the inputs requires grad, as make_fx leaves them) are
returned unchanged: their gradients flow through every differentiable op.
"""

from __future__ import annotations

from ember_core import Graph, Node, Ref, node_refs, rename_reads, to_dtype

from ._primals import differentiable_dtype

DETACH = "aten.detach.default"


def has_grad_facts(graph: Graph) -> bool:
    """Whether the metadata says which values require grad: some value past the inputs does."""
    inputs = set(graph.input_names)
    return any(v.requires_grad for name, v in graph.values.items() if name not in inputs)


def boundaries(graph: Graph) -> list[str]:
    """The values where grad stops although an argument of their node requires grad, in graph order."""
    if not has_grad_facts(graph):
        return []
    found = []
    for node in graph.nodes:
        if node.op == DETACH or not any(graph.values[r].requires_grad for r in node_refs(node) if r in graph.values):
            continue
        for name in node.outputs:
            v = graph.values[name]
            if v.type == "tensor" and not v.requires_grad and differentiable_dtype(to_dtype(v.dtype)):
                found.append(name)
    return found


def insert_grad_boundaries(graph: Graph) -> Graph:
    """The graph with `aten.detach` after every boundary value, its later uses and outputs reading the detached
    value instead."""
    stops = boundaries(graph)
    if not stops:
        return graph
    taken = set(graph.values) | set(graph.constants)
    renamed: dict[str, str] = {}
    for name in stops:
        new = f"{name}_nograd"
        while new in taken:
            new += "_"
        taken.add(new)
        renamed[name] = new
    values = dict(graph.values)
    nodes: list[Node] = []
    for node in graph.nodes:
        nodes.append(rename_reads(node, renamed))
        for name in node.outputs:
            if name in renamed:
                nodes.append(Node((renamed[name],), DETACH, (Ref(name),), meta=dict(node.meta)))
                values[renamed[name]] = values[name].replace(base=name)
    outputs = tuple(o.__class__(renamed.get(o.name, o.name), o.kind, o.input) for o in graph.outputs)
    return graph.replace(nodes=tuple(nodes), values=values, outputs=outputs)
