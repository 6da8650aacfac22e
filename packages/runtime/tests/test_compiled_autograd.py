"""The captured backward's gradient sums, before ember compiles it: a gradient a node gives as None adds as nothing."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from ember_runtime._compiled_autograd import _accumulate_missing_as_nothing


def _summing_graph() -> fx.GraphModule:
    """Two gradients flowing into one tensor, as the engine traces their sum (`torch.add`, taking both to exist)."""
    graph = fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    graph.output(graph.call_function(torch.add, (a, b)))
    return fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("given", ["both", "first", "second", "neither"])
def test_a_missing_gradient_adds_as_nothing(given):
    gm = _summing_graph()
    _accumulate_missing_as_nothing(gm)
    a, b = torch.ones(3), torch.full((3,), 2.0)
    args = {"both": (a, b), "first": (a, None), "second": (None, b), "neither": (None, None)}[given]
    want = {"both": a + b, "first": a, "second": b, "neither": None}[given]
    got = gm(*args)
    assert got is None if want is None else torch.equal(got, want)


def test_other_calls_are_left_as_they_are():
    graph = fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    graph.output(graph.call_function(torch.add, (a, b), {"alpha": 2}))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    _accumulate_missing_as_nothing(gm)
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.add]
