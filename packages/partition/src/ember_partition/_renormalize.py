"""Normalizations whose output the backward can take again from their statistics, with pointwise ops only.

Layer norm and batch norm in training mode return their statistics (mean, 1/std) next to their output, and the
output is a pointwise function of the input and those statistics: `(x - mean) * rstd * weight + bias`.
`renormalize(joint)` writes that function as a chain of pointwise nodes right after each such op and points every
reader of the output at the chain's end. The min-cut then sees a cheap way to give the backward the normalized
output (from the input and the small statistics, which the norm's own backward reads anyway) where the op itself
is a reduction it would not run again. `Renormalized.collapse` takes the chain back out of the forward graph, which
reads the op's own output as before; only a backward that recomputes the output runs the chain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ember_core import Graph, Input, JointGraph, Node, Output, Ref, Value, rename_reads

from ._refs import iter_refs, node_reads
from ._split import Split


@dataclass(frozen=True)
class NormParts:
    """Where a norm node keeps what its output is computed from. `channels`: statistics are per channel (dim 1)."""

    x: str
    mean: str
    rstd: str
    weight: str | None
    bias: str | None
    channels: bool


def _arg(node: Node, k: int, name: str):
    return node.args[k] if k < len(node.args) else node.kwargs.get(name)


def _ref(a) -> str | None:
    return a.name if isinstance(a, Ref) else None


def _layer_norm(node: Node) -> NormParts | None:
    out, mean, rstd = node.outputs
    return NormParts(_ref(node.args[0]), mean, rstd, _ref(_arg(node, 2, "weight")), _ref(_arg(node, 3, "bias")), False)


def _batch_norm(node: Node, training_at: int = 5) -> NormParts | None:
    if _arg(node, training_at, "training") is not True:
        return None  # in eval mode the statistics outputs are empty
    mean, rstd = node.outputs[1:3]
    return NormParts(_ref(node.args[0]), mean, rstd, _ref(_arg(node, 1, "weight")), _ref(_arg(node, 2, "bias")), True)


renormalize_rules: dict[str, Callable[[Node], NormParts | None]] = {
    "aten.native_layer_norm.default": _layer_norm,
    "aten._native_batch_norm_legit_functional.default": _batch_norm,
    "aten.native_batch_norm.default": _batch_norm,
    "aten._native_batch_norm_legit.no_stats": lambda node: _batch_norm(node, training_at=3),
}


@dataclass(frozen=True)
class Renormalized:
    """A joint graph with renormalization chains, and how to take them back out of a forward graph."""

    joint: JointGraph
    stands_for: Mapping[str, str]  # chain end → the norm output it stands for
    chain_values: frozenset[str]  # every value a chain node defines

    def collapse(self, cut: Split) -> Split:
        """The forward reads each norm's own output again and drops the chain; a saved chain end takes the norm
        output's name. (A chain is left alone when the backward recomputes the norm itself and saves its end.)"""
        fw_defined = {o for n in cut.forward.nodes for o in n.outputs}
        bw_defined = {o for n in cut.backward.nodes for o in n.outputs}
        names = {end: out for end, out in self.stands_for.items()
                 if end in fw_defined and not (end in cut.saved and out in bw_defined)}
        if not names:
            return cut
        forward = cut.forward.replace(nodes=tuple(n for n in cut.forward.nodes if not set(n.outputs) & names.keys()))
        forward = _drop_dead_chains(_rename(forward, names), self.chain_values)
        saved_names = {end: out for end, out in names.items() if end in cut.saved}
        backward = _rename(cut.backward, saved_names)
        saved = tuple(saved_names.get(v, v) for v in cut.saved)
        return dataclasses.replace(cut, forward=forward, backward=backward, saved=saved)


def renormalize(joint: JointGraph) -> Renormalized:
    """The joint graph with a pointwise renormalization chain after every norm whose output someone reads."""
    graph = joint.graph
    nodes, values, stands_for, chain_values = [], dict(graph.values), {}, set()
    read = {r for n in graph.nodes for r in node_reads(n)} | {o.name for o in graph.outputs}
    for node in graph.nodes:
        node = _rename_node(node, stands_for)  # a norm of a norm reads the first one's chain
        nodes.append(node)
        rule = renormalize_rules.get(node.op)
        parts = rule(node) if rule is not None and node.outputs[0] in read else None
        if parts is None or not _fits(parts, node.outputs[0], values):
            continue
        chain, new_values = _chain(node, parts, values)
        nodes += chain
        values.update(new_values)
        chain_values.update(new_values)
        stands_for[chain[-1].outputs[0]] = node.outputs[0]
    if not stands_for:
        return Renormalized(joint, {}, frozenset())
    ends = {out: end for end, out in stands_for.items()}
    outputs = tuple(dataclasses.replace(o, name=ends.get(o.name, o.name)) for o in graph.outputs)
    new = graph.replace(nodes=tuple(nodes), values=values, outputs=outputs)
    return Renormalized(dataclasses.replace(joint, graph=new), stands_for, frozenset(chain_values))


def _fits(parts: NormParts, out: str, values: Mapping[str, Value]) -> bool:
    """Same dtype everywhere (no casts in the chain) and the input laid out like the output."""
    if parts.x is None:
        return False
    names = [n for n in (parts.x, parts.mean, parts.rstd, parts.weight, parts.bias) if n is not None]
    vo, vx = values[out], values[parts.x]
    same_dtype = all(values[n].type == "tensor" and values[n].dtype == vo.dtype for n in names)
    return same_dtype and vx.shape == vo.shape and vx.stride == vo.stride


def _chain(node: Node, parts: NormParts, values: Mapping[str, Value]) -> tuple[list[Node], dict[str, Value]]:
    """`(x - mean) * rstd [* weight] [+ bias]`, statistics and affine parameters unsqueezed for per-channel norms."""
    out = node.outputs[0]
    like, ndim = values[out], len(values[out].shape)
    chain: list[Node] = []
    new_values: dict[str, Value] = {}
    meta = {**{k: v for k, v in node.meta.items() if k != "name"}, "renormalizes": out}  # "name": fx tuple name

    def emit(op: str, args: tuple, value: Value) -> str:
        name = _fresh(f"{out}_renorm{len(chain)}", values, new_values)
        chain.append(Node((name,), op, args, {}, dict(meta)))
        new_values[name] = value
        return name

    def per_channel(name: str) -> str:
        for _ in range(ndim - 2 if parts.channels else 0):
            v = new_values.get(name) or values[name]
            unsqueezed = v.replace(shape=(*v.shape, 1), stride=(*v.stride, 1))  # a new last dim has stride 1
            name = emit("aten.unsqueeze.default", (Ref(name), -1), unsqueezed)
        return name

    y = emit("aten.sub.Tensor", (Ref(parts.x), Ref(per_channel(parts.mean))), like)
    y = emit("aten.mul.Tensor", (Ref(y), Ref(per_channel(parts.rstd))), like)
    if parts.weight is not None:
        y = emit("aten.mul.Tensor", (Ref(y), Ref(per_channel(parts.weight))), like)
    if parts.bias is not None:
        y = emit("aten.add.Tensor", (Ref(y), Ref(per_channel(parts.bias))), like)
    return chain, new_values


def _fresh(name: str, *taken: Mapping[str, Value]) -> str:
    while any(name in t for t in taken):
        name += "_"
    return name


def _rename_node(node: Node, stands_for: Mapping[str, str]) -> Node:
    """`node` reading the chain end wherever it read a norm output (`stands_for`: chain end → norm output)."""
    return rename_reads(node, {out: end for end, out in stands_for.items()}) if stands_for else node


def _rename(graph: Graph, names: Mapping[str, str]) -> Graph:
    """Inputs, reads and outputs of the values in `names` renamed (nothing in `graph` may define them)."""
    if not names:
        return graph
    inputs = tuple(Input(names.get(i.name, i.name), i.kind, i.mutated) for i in graph.inputs)
    outputs = tuple(Output(names.get(o.name, o.name), o.kind, o.input) for o in graph.outputs)
    values = {k: v for k, v in graph.values.items() if k not in names}
    for old, new in names.items():
        values.setdefault(new, graph.values[old])
    nodes = tuple(rename_reads(n, names) for n in graph.nodes)
    return graph.replace(inputs=inputs, nodes=nodes, outputs=outputs, values=values)


def _drop_dead_chains(graph: Graph, chain_values: frozenset[str]) -> Graph:
    """Remove chain nodes nothing reads any more (the forward reads the norm's own output instead)."""
    used = {o.name for o in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if set(node.outputs) <= chain_values and not set(node.outputs) & used:
            continue
        kept.append(node)
        used.update(iter_refs((node.args, tuple(node.kwargs.values()))))
    kept.reverse()
    defined = {*graph.input_names, *(o for n in kept for o in n.outputs)}
    return graph.replace(nodes=tuple(kept), values={k: v for k, v in graph.values.items() if k in defined})
