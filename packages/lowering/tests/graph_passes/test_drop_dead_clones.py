"""Graph rewrites before lowering: a clone nothing else needs is dropped; results stay the graph's."""

import torch
from ember_lowering.graph_passes.drop_dead_clones import drop_dead_clones
from lowering_checks import check, trace

X, W = torch.randn(6, 8), torch.randn(8, 5)


def clones(graph) -> int:
    return sum(n.op == "aten.clone.default" for n in graph.nodes)


def test_a_clone_of_a_value_read_by_nothing_else_is_dropped():
    fn = lambda x, w: torch.nn.functional.dropout(torch.relu(x @ w).exp(), 0.5, training=False) @ w.t()  # noqa: E731
    graph = trace(lambda x, w: (x @ w).clone() @ w.t(), X, W)
    assert clones(graph) == 1 and clones(drop_dead_clones(graph)) == 0
    check(lambda x, w: (x @ w).clone() @ w.t(), X, W)
    check(fn, X, W)


def test_a_clone_of_a_dropped_clone_reads_the_original():
    fn = lambda x, w: (x @ w).clone().clone() @ w.t()  # noqa: E731
    graph = trace(fn, X, W)
    assert clones(graph) == 2 and clones(drop_dead_clones(graph)) == 0
    check(fn, X, W)


def test_a_clone_of_a_reshape_of_a_private_value_is_dropped():
    """Eval-mode dropout after a linear layer on 3-d input: clone(view(addmm))."""
    fn = lambda x, w: (x @ w).view(3, 2, 5).clone().view(6, 5) @ w.t()  # noqa: E731
    graph = trace(fn, X, W)
    assert clones(graph) == 1 and clones(drop_dead_clones(graph)) == 0
    check(fn, X, W)


def test_clones_that_are_observable_are_kept():
    cases = {
        "of an input": lambda x, w: x.clone(),
        "of a value read again": lambda x, w: (lambda m: (m.clone() @ w.t(), m.sum()))(x @ w),
        "changing the layout": lambda x, w: (x @ w).t().clone(memory_format=torch.contiguous_format) @ x,
        "of a view": lambda x, w: (x @ w).t().clone() @ x,
        "returned": lambda x, w: (x @ w).clone(),
        "of a reshape of an input": lambda x, w: x.view(8, 6).clone() @ x,
        "of a reshape of a value read again": lambda x, w: (lambda m: (m.view(5, 6).clone(), m.sum()))(x @ w),
        "of a reshape that is returned": lambda x, w: (lambda v: (v.clone() @ w.t(), v))((x @ w).view(6, 5)),
    }
    for what, fn in cases.items():
        graph = trace(fn, X, W)
        assert clones(graph) >= 1, what
        assert clones(drop_dead_clones(graph)) == clones(graph), what
        check(fn, X, W)
