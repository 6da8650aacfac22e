"""Node groups and alias facts of a joint graph, and the layout errors `analyze` raises."""

import pytest
import torch
from ember_core import GraphError, Input, JointGraph, Output
from ember_partition import analyze


def names(info, nodes) -> set[str]:
    return {info.graph.nodes[i].outputs[0] for i in nodes}


def test_groups_of_cos_cos(block):
    info = analyze(block("cos_cos").joint)
    assert names(info, info.forward) == {"cos", "cos_1"}
    assert names(info, info.tangent_closure) == {"mul", "mul_1"}
    assert names(info, info.needed - info.forward - info.tangent_closure) == {"sin", "neg", "sin_1", "neg_1"}


def test_layout_is_read_from_the_joint(block):
    traced = block("gelu_mlp")
    info = analyze(traced.joint)
    assert len(info.primals) == 5 and len(info.tangents) == 1
    assert [g.input for g in info.grads] == [1, 2, 3, 4]


def test_views_of_primals_are_input_views(block):
    info = analyze(block("gelu_mlp").joint)
    of_primals = {n.outputs[0] for n in info.graph.nodes if n.op == "aten.t.default" and n.args[0].name in info.primals}
    assert of_primals and of_primals <= info.input_views
    assert "addmm" not in info.input_views


def test_in_place_writes_mark_their_storage_mutated(trace):
    def fn(x):
        y = x * 2
        y.mul_(3)
        return y.sin()

    info = analyze(trace(fn, [torch.randn(4, requires_grad=True)], functional=False).joint)
    writers = [i for i, n in enumerate(info.graph.nodes) if n.op == "aten.mul_.Tensor"]
    assert writers and info.touches_mutated(writers[0])
    assert "mul" in info.mutated and "primals_1" not in info.mutated


def test_functional_joint_has_nothing_mutated(block):
    assert analyze(block("inplace").joint).mutated == frozenset()


def test_tangents_must_follow_the_primals(block):
    graph = block("cos_cos").joint.graph
    bad = graph.replace(inputs=(graph.inputs[0], Input(graph.inputs[1].name, "user")))
    with pytest.raises(GraphError, match="must be tangents"):
        analyze(JointGraph(bad, 1, 1))


def test_gradients_must_name_their_primal(block):
    graph = block("cos_cos").joint.graph
    bad = graph.replace(outputs=(graph.outputs[0], Output(graph.outputs[1].name, "user")))
    with pytest.raises(GraphError, match="kind='grad'"):
        analyze(JointGraph(bad, 1, 1))


def test_forward_output_reading_a_tangent_is_refused(block):
    graph = block("cos_cos").joint.graph
    with pytest.raises(GraphError, match="reads a tangent"):
        analyze(JointGraph(graph, 1, 2))  # the gradient counted as a forward output
