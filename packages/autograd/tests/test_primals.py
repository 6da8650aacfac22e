"""Which inputs require grad, and the fake primals built from the graph's metadata."""

from __future__ import annotations

import pytest
import torch
from _support import capture
from ember_autograd._primals import FakePrimals, requires_grad
from ember_core import GraphError
from torch._subclasses.fake_tensor import FakeTensor


def f(x, idx, w):
    return x[idx] * w


def test_requires_grad_from_example_inputs_or_metadata_floats_only():
    x, idx, w = torch.randn(5), torch.tensor([1, 2]), torch.randn(2)
    graph = capture(f, x, idx, w)
    assert requires_grad(graph, [x.requires_grad_(), idx, w]) == [True, False, False]
    w_name = graph.inputs[2].name
    flagged = graph.replace(values={**graph.values, w_name: graph.values[w_name].replace(requires_grad=True)})
    assert requires_grad(flagged, [x, idx, w]) == [True, False, True]


def test_example_count_must_match_the_inputs():
    graph = capture(f, torch.randn(5), torch.tensor([1]), torch.randn(1))
    with pytest.raises(GraphError, match="takes 3 inputs, got 2"):
        requires_grad(graph, [1, 2])


def test_fake_primals_follow_the_values_with_symbolic_sizes():
    x = torch.randn(4, 6).t()
    graph = capture(lambda a: a * 2, x, tracing_mode="symbolic")
    fake = FakePrimals(graph, [x], [True])
    [p] = fake.values
    assert isinstance(p, FakeTensor) and p.requires_grad
    assert p.stride() == (1, p.shape[0])
    assert [str(d) for d in p.shape] != ["6", "4"]  # symbolic, not the example's sizes
    assert fake.symbols.symints.keys() == {s.name for s in graph.symbols}
