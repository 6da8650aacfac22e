"""What every partitioner needs to know about a joint graph, worked out once from its structure.

Nodes fall in three groups: `forward` (the forward outputs need them: they run in the forward graph),
`tangent_closure` (they read a tangent: they run in the backward graph), and the rest, which the gradients need
but which may run on either side. Values also carry alias facts: which ones view a primal (never saved: the caller
holds the primal), which share storage with a value an in-place op writes (never recomputed), and which forward
outputs eager's autograd keeps for its backward too (`held_outputs`: a node of the joint's backward region reads
them).

An effectful node (`ember_core.has_effect`: `aten._linalg_check_errors` raising on a failed factorization) has
no output anyone reads, but it is a root like an output: one that reads no tangent runs in the forward graph,
where eager runs it (so a forward call raises as eager does), one that does runs in the backward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ember_core import Graph, GraphError, JointGraph, Output, has_effect

from ._cost_model import op_class, written_args
from ._refs import backward_reads, node_reads


@dataclass(frozen=True)
class JointInfo:
    """A joint graph's layout, producers and readers, node groups and alias facts."""

    joint: JointGraph
    primals: tuple[str, ...]
    tangents: tuple[str, ...]
    forward_outputs: tuple[Output, ...]
    grads: tuple[Output, ...]
    producer: Mapping[str, int]  # value → index of the node that defines it
    reads: tuple[tuple[str, ...], ...]  # node index → the values it reads
    forward: frozenset[int]  # nodes the forward outputs need
    tangent_closure: frozenset[int]  # nodes that read a tangent, directly or through other nodes
    needed: frozenset[int]  # nodes any output needs (the others are dead)
    input_views: frozenset[str]  # values that view a primal
    mutated: frozenset[str]  # values sharing storage with a value some in-place op writes
    forward_effects: tuple[str, ...] = ()  # outputs of effectful nodes that read no tangent: forward roots
    backward_effects: tuple[str, ...] = ()  # outputs of effectful nodes that read a tangent: backward roots
    held_outputs: frozenset[str] = frozenset()  # forward outputs the backward region reads, not `mutated` (`_held`)

    @property
    def graph(self) -> Graph:
        return self.joint.graph

    def touches_mutated(self, i: int) -> bool:
        node = self.graph.nodes[i]
        return any(v in self.mutated for v in (*self.reads[i], *node.outputs))


def analyze(joint: JointGraph) -> JointInfo:
    """Work out a joint graph's groups; `GraphError` when its layout breaks the `JointGraph` contract."""
    graph = joint.graph
    primals, tangents = _split_inputs(joint)
    fwd_outs, grads = _split_outputs(joint)
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    reads = tuple(node_reads(n) for n in graph.nodes)
    closure = _tangent_closure(graph, reads, set(tangents))
    effects = [i for i, n in enumerate(graph.nodes) if has_effect(n.op)]
    fw_effects = tuple(o for i in effects if i not in closure for o in graph.nodes[i].outputs)
    bw_effects = tuple(o for i in effects if i in closure for o in graph.nodes[i].outputs)
    forward = ancestors(producer, reads, (*(o.name for o in fwd_outs), *fw_effects))
    both = sorted(forward & closure)
    if both:
        node = graph.nodes[both[0]]
        raise GraphError(f"joint graph {graph.name!r}: forward output needs node {node.outputs[0]} "
                         f"({node.op}), which reads a tangent")
    needed = ancestors(producer, reads, (*(o.name for o in graph.outputs), *fw_effects, *bw_effects))
    mutated = _mutated(graph, reads)
    return JointInfo(joint, primals, tangents, fwd_outs, grads, producer, reads, frozenset(forward),
                     frozenset(closure), frozenset(needed), _input_views(graph, reads, set(primals)),
                     mutated, fw_effects, bw_effects, _held(graph, fwd_outs) - mutated)


def ancestors(producer: Mapping[str, int], reads: tuple[tuple[str, ...], ...], names: Iterable[str],
              stop: frozenset[str] = frozenset()) -> set[int]:
    """Indices of the nodes that the named values need, not looking past the values in `stop`."""
    seen: set[int] = set()
    todo = [n for n in names if n not in stop]
    while todo:
        i = producer.get(todo.pop())
        if i is None or i in seen:
            continue
        seen.add(i)
        todo.extend(r for r in reads[i] if r not in stop)
    return seen


def _split_inputs(joint: JointGraph) -> tuple[tuple[str, ...], tuple[str, ...]]:
    inputs = joint.graph.inputs
    if not 0 <= joint.num_primals <= len(inputs):
        raise GraphError(f"joint graph {joint.graph.name!r}: num_primals={joint.num_primals} "
                         f"but it has {len(inputs)} inputs")
    bad = [i.name for i in inputs[joint.num_primals:] if i.kind != "tangent"]
    if bad:
        raise GraphError(f"joint graph {joint.graph.name!r}: inputs after the {joint.num_primals} primals must be "
                         f"tangents; {', '.join(bad)} are not (kind 'tangent')")
    return tuple(i.name for i in inputs[:joint.num_primals]), tuple(i.name for i in inputs[joint.num_primals:])


def _split_outputs(joint: JointGraph) -> tuple[tuple[Output, ...], tuple[Output, ...]]:
    outputs, n = joint.graph.outputs, joint.num_forward_outputs
    if not 0 <= n <= len(outputs):
        raise GraphError(f"joint graph {joint.graph.name!r}: num_forward_outputs={n} but it has {len(outputs)} outputs")
    bad = [o.name for o in outputs[n:] if o.kind != "grad" or o.input is None or not 0 <= o.input < joint.num_primals]
    if bad:
        raise GraphError(f"joint graph {joint.graph.name!r}: outputs after the {n} forward outputs must be "
                         f"Output(kind='grad', input=<primal index>); {', '.join(bad)} are not")
    return outputs[:n], outputs[n:]


def _tangent_closure(graph: Graph, reads: tuple[tuple[str, ...], ...], tangents: set[str]) -> set[int]:
    tainted, closure = set(tangents), set()
    for i, node in enumerate(graph.nodes):
        if any(r in tainted for r in reads[i]):
            closure.add(i)
            tainted.update(node.outputs)
    return closure


def _input_views(graph: Graph, reads: tuple[tuple[str, ...], ...], primals: set[str]) -> frozenset[str]:
    """Values that view a primal: results of view ops on one, and values whose `base` is one, transitively."""
    aliases = set()
    for i, node in enumerate(graph.nodes):
        bases = {graph.values[o].base for o in node.outputs} - {None}
        if op_class(node.op) == "view" and reads[i]:
            bases.add(reads[i][0])
        if bases & (primals | aliases):
            aliases.update(node.outputs)
    return frozenset(aliases)


def _held(graph: Graph, outputs: tuple[Output, ...]) -> frozenset[str]:
    """Forward outputs the joint's backward region reads: eager's autograd saves them for its backward too (tanh's
    and sigmoid's results, say), so the backward holding them keeps nothing alive that eager would not, and an
    in-place change of one after the call fails the backward in eager as it does here."""
    return backward_reads(graph) & {o.name for o in outputs}


def _mutated(graph: Graph, reads: tuple[tuple[str, ...], ...]) -> frozenset[str]:
    """Values in the same storage as a value an in-place op writes (views and in-place results share storage)."""
    parent: dict[str, str] = {}

    def find(v: str) -> str:
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    written: set[str] = set()
    for i, node in enumerate(graph.nodes):
        cls = op_class(node.op)
        if cls not in ("view", "mutating") or not reads[i]:
            continue
        targets = written_args(node) if cls == "mutating" else reads[i][:1]
        written.update(targets if cls == "mutating" else ())
        for o in node.outputs:
            for t in targets[:1]:
                parent[find(o)] = find(t)
    roots = {find(w) for w in written}
    return frozenset(v for v in (*graph.input_names, *(o for n in graph.nodes for o in n.outputs)) if find(v) in roots)
