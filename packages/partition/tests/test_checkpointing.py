"""Activation checkpointing's marks (`checkpoint`, `checkpoint_policy` node meta, as the joint trace gives them to a
checkpointed region's forward nodes) in the min-cut: a region's values are recomputed, not saved, matmuls included;
a value between two regions is saved; random masks and values marked for saving are never recomputed; the backward
runs each region again only when it reaches it."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
from ember_core import format_graph, node_refs, verify
from ember_core.testing import JointCase
from ember_partition import MinCutPartitioner, op_class


def marked(case: JointCase, region_of, policy_of=lambda node: "prefer_recompute") -> JointCase:
    """The case with its forward nodes marked: `region_of(node, graph)` gives a region number or None."""
    graph = case.joint.graph
    nodes = []
    for node in graph.nodes:
        region = region_of(node, graph) if node.meta.get("region") == "forward" else None
        if region is not None:
            node = node.replace(meta={**node.meta, "checkpoint": str(region), "checkpoint_policy": policy_of(node)})
        nodes.append(node)
    joint = dataclasses.replace(case.joint, graph=verify(graph.replace(nodes=tuple(nodes))))
    return dataclasses.replace(case, joint=joint)


def reads_from(graph, node, name: str) -> bool:
    """Whether `node` depends on the value `name` (through any chain of nodes)."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        for a in node_refs(n):
            if a == name:
                return True
            if a in producer and a not in seen:
                seen.add(a)
                todo.append(producer[a])
    return False


def activations(part) -> list[str]:
    return [s.name for s in part.report.saved if not s.free]


def recomputed_ops(part) -> list[str]:
    return [n.op for n in part.backward.nodes if n.meta.get("recomputed")]


def two_layers(x, w1, w2):
    h = nn.functional.gelu(x @ w1)
    return nn.functional.gelu(h @ w2).sum(dim=1)


def _two_layer_case(trace):
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 32, requires_grad=True), torch.randn(32, 16, requires_grad=True)
    return trace(two_layers, [x, w1, w2], name="two_layers")


def _layer(node, graph) -> int:
    """Region 2 for what reads the second weight (primals_3), region 1 for the rest."""
    return 2 if reads_from(graph, node, "primals_3") else 1


def test_without_marks_the_matmul_is_saved(trace):
    part = MinCutPartitioner().partition(_two_layer_case(trace).joint)
    assert activations(part), "the unmarked graph saves activations: the marked tests below would prove nothing"
    assert "aten.mm.default" not in recomputed_ops(part)


def test_a_checkpointed_region_saves_nothing_and_recomputes_its_matmuls(trace, check):
    case = marked(_two_layer_case(trace), lambda node, graph: 1)
    part = MinCutPartitioner().partition(case.joint)
    assert activations(part) == [], format_graph(part.forward)
    assert recomputed_ops(part).count("aten.mm.default") == 2
    assert "activation checkpointing: 1 region(s)" in part.report.notes[0]
    check(case, part)


def test_the_value_between_two_regions_is_saved_and_each_region_runs_again_from_its_input(trace, check):
    case = marked(_two_layer_case(trace), _layer)
    part = MinCutPartitioner().partition(case.joint)
    graph = case.joint.graph
    # the first region's output (the gelu that the second matmul reads) is the one activation kept
    (kept,) = activations(part)
    producer = {o: n for n in graph.nodes for o in n.outputs}
    assert producer[kept].op == "aten.gelu.default" and producer[kept].meta["checkpoint"] == "1"
    assert "reads 1 value(s) between regions" in part.report.notes[0]
    # each region runs again, the second from the saved value, which the backward does not compute again
    again = [n for n in part.backward.nodes if n.meta.get("recomputed") and n.op == "aten.mm.default"]
    assert sorted(n.meta["checkpoint"] for n in again) == ["1", "2"]
    assert kept not in {o for n in part.backward.nodes for o in n.outputs}
    check(case, part)


def test_the_backward_runs_a_region_again_when_it_reaches_it(trace, check):
    """Recomputed nodes of region 2 come before the backward's first node, region 1's only after the backward of
    region 2 has run: in joint order both regions would run again first, and their values would live at once."""
    case = marked(_two_layer_case(trace), _layer)
    part = MinCutPartitioner().partition(case.joint)
    tags = [n.meta.get("checkpoint") if n.meta.get("recomputed") else "." for n in part.backward.nodes]
    ones = [k for k, t in enumerate(tags) if t == "1"]
    twos = [k for k, t in enumerate(tags) if t == "2"]
    assert twos and (not ones or max(twos) < min(ones)), "".join(tags)
    if ones:
        assert any(t == "." for t in tags[max(twos):min(ones)]), "".join(tags)
    check(case, part)


def test_a_value_marked_for_saving_is_saved_not_recomputed(trace, check):
    """Selective checkpointing: the matmuls marked `must_save`, the rest for recompute."""
    policy = lambda node: "must_save" if op_class(node.op) == "expensive" else "prefer_recompute"  # noqa: E731
    case = marked(_two_layer_case(trace), lambda node, graph: 1, policy)
    part = MinCutPartitioner().partition(case.joint)
    producer = {o: n for n in case.joint.graph.nodes for o in n.outputs}
    assert sorted(producer[v].op for v in activations(part)) == ["aten.mm.default", "aten.mm.default"]
    assert "aten.mm.default" not in recomputed_ops(part)
    assert "and 2 marked for saving" in part.report.notes[0]
    check(case, part)


def test_a_dropout_mask_in_a_region_is_saved_not_drawn_again(block, check):
    case = marked(block("dropout"), lambda node, graph: 1)
    part = MinCutPartitioner().partition(case.joint)
    assert not [n for n in part.backward.nodes if op_class(n.op) == "random"]
    assert "bool" in [part.forward.values[s].dtype for s in activations(part)]
    check(case, part)


def test_every_zoo_block_checkpointed_whole_keeps_its_gradients(block, block_name, decompose, check):
    case = marked(block(block_name, decompose), lambda node, graph: 1)
    part = MinCutPartitioner().partition(case.joint)
    plain = MinCutPartitioner().partition(block(block_name, decompose).joint)
    assert part.report.saved_bytes <= plain.report.saved_bytes
    check(case, part)


def test_marks_of_a_joint_graph_survive_its_text_and_json(trace):
    from ember_core import graph_from_json, graph_to_json, parse_graph

    graph = marked(_two_layer_case(trace), _layer).joint.graph
    assert parse_graph(format_graph(graph)) == graph
    assert graph_from_json(graph_to_json(graph)) == graph
