"""insert_grad_boundaries(): detach where the metadata says grad stops."""

from __future__ import annotations

import torch
from _support import capture
from ember_autograd import insert_grad_boundaries
from ember_autograd._grad_boundaries import boundaries, has_grad_facts


def f(x, w):
    y = x * w
    with torch.no_grad():
        s = y * 2
    return y + s, s


def stamped(graph, facts):
    return graph.replace(values={k: v.replace(requires_grad=facts.get(k, False)) for k, v in graph.values.items()})


def test_graph_without_grad_facts_is_returned_unchanged():
    graph = capture(f, torch.randn(3), torch.randn(3))
    assert not has_grad_facts(graph)
    assert insert_grad_boundaries(graph) is graph


def test_value_computed_without_grad_from_a_grad_value_is_a_boundary():
    graph = capture(f, torch.randn(3), torch.randn(3))
    mul, mul_1, add = (n.outputs[0] for n in graph.nodes)
    graph = stamped(graph, {**{i.name: True for i in graph.inputs}, mul: True, add: True})
    assert boundaries(graph) == [mul_1]
    g = insert_grad_boundaries(graph)
    detach = g.nodes[2]
    assert (detach.op, detach.args[0].name) == ("aten.detach.default", mul_1)
    assert g.nodes[3].args[1].name == detach.outputs[0]
    assert g.outputs[1].name == detach.outputs[0]
    assert g.values[detach.outputs[0]].base == mul_1


def test_integer_values_and_existing_detaches_are_not_boundaries():
    def h(x):
        return x.argmax(), x.detach() * 2, x * 3

    graph = capture(h, torch.randn(4))
    argmax, detach, mul, mul_1 = (n.outputs[0] for n in graph.nodes)
    graph = stamped(graph, {graph.inputs[0].name: True, mul_1: True})
    assert has_grad_facts(graph)
    assert boundaries(graph) == []


def test_a_custom_function_call_stops_grad_only_at_its_non_differentiable_output():
    """Its differentiable outputs get their gradient from the backward subgraph; the mask it marked
    non-differentiable is a boundary, as in eager."""
    from ember_core.testing import gate_graph

    graph = gate_graph()
    sin, call, mul, add = graph.nodes
    y, mask = call.outputs
    grads = {i.name: True for i in graph.inputs} | {sin.outputs[0]: True, y: True, mul.outputs[0]: True,
                                                    add.outputs[0]: True}
    assert boundaries(stamped(graph, grads)) == [mask]
