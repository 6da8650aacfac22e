"""Cut a joint graph in two along a set of saved values (the layouts of `ember_core.Partition`).

The backward graph is what the gradients need, read back until a saved value, a tangent or a primal stops the
walk; a primal it reads is saved too (free: the caller holds it). The forward graph is what the forward outputs
and the saved values need. A node in both is recomputed: the backward's copy is marked `{"recomputed": "1"}`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ember_core import Graph, GraphError, Input, Node, Output, Ref, Sym, marked_for_recompute, rename_reads

from ._joint import JointInfo, ancestors
from ._refs import iter_refs
from ._sizes import parse_dim


@dataclass(frozen=True)
class Placement:
    """Where each node runs for a set of saved values, before any graph is built."""

    saved: tuple[str, ...]  # what the backward reads of the forward, in definition order
    forward: frozenset[int]
    backward: frozenset[int]

    @property
    def recomputed(self) -> tuple[int, ...]:
        return tuple(sorted(self.forward & self.backward))


@dataclass(frozen=True)
class Split:
    forward: Graph
    backward: Graph
    saved: tuple[str, ...]
    recomputed: tuple[int, ...]  # joint node indices run in both graphs


def place(info: JointInfo, saved: Iterable[str]) -> Placement:
    """Which nodes each graph runs when `saved` are kept between them (unused ones dropped, primals added)."""
    graph = info.graph
    stop = frozenset((*saved, *info.tangents, *info.primals, *graph.constants))
    bw = ancestors(info.producer, info.reads, (*(g.name for g in info.grads), *info.backward_effects), stop)
    used = _with_symbol_carriers(info, bw, _used_saved(info, bw, stop))
    fw = ancestors(info.producer, info.reads, (*(o.name for o in info.forward_outputs), *used, *info.forward_effects))
    tainted = sorted(fw & info.tangent_closure)
    if tainted:
        value = graph.nodes[tainted[0]].outputs[0]
        raise GraphError(f"joint graph {graph.name!r}: saved value {value} reads a tangent")
    return Placement(used, frozenset(fw), frozenset(bw))


def split(info: JointInfo, saved: Iterable[str], producer: str) -> Split:
    """The forward and backward graphs when `saved` are the values kept between them (see `place`)."""
    where = place(info, saved)
    copies = _copies_of_mutated_primals(info, where.saved)
    saved = tuple(copies.get(v, v) for v in where.saved)
    recomputed = where.recomputed
    forward = _forward_graph(info, sorted(where.forward), saved, copies, producer)
    order = _checkpointed_late(info, sorted(where.backward), set(recomputed))
    backward = _backward_graph(info, order, saved, set(recomputed), copies, producer)
    return Split(forward, backward, saved, recomputed)


def _used_saved(info: JointInfo, bw: set[int], stop: frozenset[str]) -> tuple[str, ...]:
    """The stopping values the backward reads, minus those it defines itself, in definition order."""
    graph = info.graph
    defined = {o for i in bw for o in graph.nodes[i].outputs}
    read = {r for i in bw for r in info.reads[i]} | {g.name for g in info.grads}
    return _in_definition_order(info, (read & stop) - defined - set(info.tangents) - set(graph.constants))


def _in_definition_order(info: JointInfo, names: set[str]) -> tuple[str, ...]:
    order = (*info.primals, *(o for n in info.graph.nodes for o in n.outputs))
    return tuple(v for v in order if v in names)


def _with_symbol_carriers(info: JointInfo, bw: set[int], saved: tuple[str, ...]) -> tuple[str, ...]:
    """Save (for free) a primal that carries a symbol the backward's arguments use but none of its inputs' shapes
    shows as a bare dimension, so the backward can read every symbol's value off its inputs."""
    graph = info.graph
    used = {s for i in bw for a in (*graph.nodes[i].args, *graph.nodes[i].kwargs.values()) for s in _symbols(a)}
    # and the sizes of what the backward computes: `pad(x, (k, -1))`'s gradient is [n, s1] from a tangent of
    # [n, s1 + k - 1], and nothing showed s1 (its graph ran in the interpreter codegen)
    used |= {s for i in bw for o in graph.nodes[i].outputs for s in _value_symbols(graph.values.get(o))}
    shown = {d for v in (*saved, *info.tangents) for d in graph.values[v].shape if isinstance(d, str)}
    shown |= {v for v in saved if graph.values[v].type == "sym"}  # a saved int carries its own symbol
    carriers = {next((p for p in info.primals if sym in graph.values[p].shape
                      or (p == sym and graph.values[p].type == "sym")), None) for sym in used - shown}
    return _in_definition_order(info, set(saved) | carriers - {None})


def _value_symbols(value) -> set[str]:
    if value is None or value.type != "tensor":
        return set()
    dims = (*value.shape, *value.stride, value.storage_offset)
    return {s.name for d in dims if isinstance(d, str) for s in parse_dim(d).free_symbols}


def _symbols(arg) -> set[str]:
    if isinstance(arg, Sym):
        return {s.name for s in parse_dim(arg.expr).free_symbols}
    if isinstance(arg, (list, tuple)):
        return set().union(*(_symbols(a) for a in arg)) if arg else set()
    return set()


def _copies_of_mutated_primals(info: JointInfo, saved: tuple[str, ...]) -> dict[str, str]:
    """A saved primal that the forward mutates is saved as a copy taken before the mutation lands."""
    mutated = {i.name for i in info.graph.inputs if i.mutated}
    taken = set(info.graph.values)
    copies = {}
    for p in saved:
        if p in mutated:
            name = f"{p}_saved"
            while name in taken:
                name += "_"
            copies[p] = name
            taken.add(name)
    return copies


def _forward_graph(info: JointInfo, nodes: list[int], saved: tuple[str, ...], copies: dict[str, str],
                   producer: str) -> Graph:
    graph = info.graph
    body = [_with_meta(graph.nodes[i], region="forward") for i in nodes]
    body += [Node((c,), "aten.clone.default", (Ref(p),), {}, {"region": "forward"}) for p, c in copies.items()]
    values = {c: graph.values[p].replace(base=None) for p, c in copies.items()}
    outputs = (*info.forward_outputs, *(Output(v, "saved") for v in saved))
    return _graph(info, "forward", graph.inputs[:len(info.primals)], body, outputs, producer, values)


def _checkpointed_late(info: JointInfo, nodes: list[int], recomputed: set[int]) -> list[int]:
    """The backward's nodes in joint order, except that a recomputed node of a checkpointed region runs just before
    the first node that needs it (as eager's checkpoint runs a region again when the backward reaches it): in joint
    order every recomputation comes first, so the backward would hold every region's values at once."""
    late = {i for i in recomputed if marked_for_recompute(info.graph.nodes[i].meta)}
    if not late:
        return nodes
    order: list[int] = []
    placed: set[int] = set()

    def place_with_inputs(i: int) -> None:
        stack = [(i, False)]
        while stack:
            j, ready = stack.pop()
            if j in placed:
                continue
            if ready:
                placed.add(j)
                order.append(j)
                continue
            stack.append((j, True))
            deps = {info.producer.get(r) for r in info.reads[j]} & late
            stack.extend((d, False) for d in sorted(deps - placed, reverse=True))

    for i in nodes:
        if i not in late:
            place_with_inputs(i)
    for i in nodes:  # one only the backward's outputs read (a gradient that is a forward value)
        place_with_inputs(i)
    return order


def _backward_graph(info: JointInfo, nodes: list[int], saved: tuple[str, ...], recomputed: set[int],
                    copies: dict[str, str], producer: str) -> Graph:
    graph = info.graph
    body = [_with_meta(graph.nodes[i], region="backward", recomputed=i in recomputed) for i in nodes]
    if copies:
        body = [rename_reads(n, copies) for n in body]
    inputs = (*(Input(v, "saved") for v in saved), *(Input(t, "tangent") for t in info.tangents))
    values = {c: graph.values[p].replace(base=None) for p, c in copies.items()}
    grads = tuple(Output(copies.get(g.name, g.name), g.kind, g.input) for g in info.grads)
    return _graph(info, "backward", inputs, body, grads, producer, values)


def _graph(info: JointInfo, part: str, inputs, body: list[Node], outputs, producer: str, extra_values) -> Graph:
    graph = info.graph
    names = [i.name for i in inputs] + [o for n in body for o in n.outputs]
    values = {**graph.values, **extra_values}
    refs = {r for n in body for r in (*iter_refs(n.args), *iter_refs(n.kwargs))} | {o.name for o in outputs}
    return Graph(
        name=f"{graph.name}_{part}",
        inputs=tuple(inputs),
        nodes=tuple(body),
        outputs=tuple(outputs),
        values={n: values[n] for n in names},
        symbols=graph.symbols,
        constants={k: c for k, c in graph.constants.items() if k in refs},
        producer=producer,
        version=graph.version,
    )


def _with_meta(node: Node, region: str, recomputed: bool = False) -> Node:
    meta = {**node.meta, "region": region}
    meta.pop("recomputed", None)
    if recomputed:
        meta["recomputed"] = "1"
    return node.replace(meta=meta)
