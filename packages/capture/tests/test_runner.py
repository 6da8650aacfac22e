"""GraphRunner: mutations written into the caller's tensors, aliases rebuilt as views, autograd kept."""

from __future__ import annotations

import ember_core
import torch
from ember_capture import GraphRunner
from ember_core import Graph, Input, Node, Output, Ref, Value


def graph_with_mutation_and_alias(dim: int | str = 3) -> Graph:
    """y = x + 1 (written back into x); returns y and x.t() (a view of x)."""
    x = Value(shape=(2, dim), stride=(dim, 1))
    return ember_core.verify(Graph(
        inputs=(Input("x", mutated=True),),
        nodes=(Node(("y",), "aten.add.Tensor", (Ref("x"), 1)),
               Node(("t",), "aten.permute.default", (Ref("x"), (1, 0)))),
        outputs=(Output("y"), Output("t", "alias", 0), Output("y", "mutation", 0)),
        values={"x": x, "y": x, "t": Value(shape=(dim, 2), stride=(1, dim))},
        symbols=(ember_core.Symbol("s0", 3, 2),) if isinstance(dim, str) else (),
    ))


def test_mutation_is_written_and_alias_is_a_view_of_the_input():
    graph = graph_with_mutation_and_alias()
    runner = GraphRunner(graph, ember_core.Interpreter(graph).run)
    x = torch.zeros(2, 3)
    y, t = runner([x])
    assert torch.equal(x, torch.ones(2, 3)) and torch.equal(y, torch.ones(2, 3))
    assert t._base is x and t.shape == (3, 2)
    x.fill_(5)
    assert torch.equal(t, torch.full((3, 2), 5.0))


def test_alias_strides_are_evaluated_from_symbols():
    graph = graph_with_mutation_and_alias("s0")
    contiguous_copy = lambda inputs: [o.contiguous() for o in ember_core.interpret(graph, inputs)]  # noqa: E731
    runner = GraphRunner(graph, contiguous_copy)
    x = torch.zeros(2, 5)
    _, t = runner([x])
    assert t.stride() == (1, 5) and t._base is x


def test_mutation_with_grad_is_recorded_by_autograd():
    graph = graph_with_mutation_and_alias()
    graph = graph.replace(values={k: v.replace(requires_grad=True) for k, v in graph.values.items()})
    runner = GraphRunner(graph, ember_core.Interpreter(graph).run)
    w = torch.randn(2, 3, requires_grad=True)
    x = w * 2
    runner([x])
    x.sum().backward()
    assert torch.equal(w.grad, torch.full((2, 3), 2.0))
