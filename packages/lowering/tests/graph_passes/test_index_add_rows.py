"""index-add-rows: an accumulating index_put of whole rows is an index_add (on CPU graphs)."""

import pytest
import torch
from ember_core import verify
from ember_lowering.graph_passes.index_add_rows import IndexAddRows
from lowering_checks import check, plan_of, trace

V, D = 10, 6


def ops(graph) -> list[str]:
    return [n.op.removeprefix("aten.") for n in graph.nodes]


def embedding_gradient(table, idx, g):
    """What autograd writes for an embedding's gradient: rows of `g` added into zeros at `idx` (repeats add up)."""
    return torch.zeros_like(table).index_put((idx,), g, accumulate=True) * 2


def rows(*index_shape):
    # repeated and negative indices: the negatives count from the end, as index_put reads them
    idx = torch.tensor([3, -1, 3, 0, 9, -10, 3, 7][:torch.Size(index_shape).numel()]).reshape(index_shape)
    return torch.randn(V, D), idx, torch.randn(*index_shape, D)


@pytest.mark.parametrize("index_shape", [(8,), (2, 4)], ids=["1-d index", "2-d index"])
def test_an_accumulating_row_put_is_an_index_add_with_negative_indices_wrapped(index_shape):
    args = rows(*index_shape)
    graph = IndexAddRows().run(trace(embedding_gradient, *args))
    verify(graph)
    assert "index_add.default" in ops(graph) and "index_put.default" not in ops(graph)
    check(embedding_gradient, *args)
    plan = str(plan_of(embedding_gradient, *args))
    # in place into the zero fill, which dies with it; the wrap a kernel of its own
    assert "= aten.index_add_.default(full_like, 0," in plan and "aten.index_put" not in plan


def test_bfloat16_rows_add_as_in_eager():
    args = (lambda t, i, g: (t.bfloat16(), i, g.bfloat16()))(*rows(8))
    assert "index_add.default" in ops(IndexAddRows().run(trace(embedding_gradient, *args)))
    check(embedding_gradient, *args)


def test_an_index_out_of_range_still_raises():
    table, _, g = rows(2)
    compiled = plan_of(embedding_gradient, table, torch.tensor([1, 2]), g)
    from ember_lowering import run_plan
    for bad in (V, -V - 1):
        with pytest.raises((IndexError, RuntimeError)):
            run_plan(compiled, [table, torch.tensor([1, bad]), g])


def test_puts_it_leaves_alone():
    table, idx, g = rows(8)
    cases = {
        "no accumulate": (lambda t, i, v: t.index_put((i,), v), (table, idx, g)),
        "a mask": (lambda t, i, v: t.index_put((i > 0,), v), (table, torch.arange(V) - 5, torch.randn(4, D))),
        "two indices": (lambda t, i, v: t.index_put((i, i.remainder(D)), v, accumulate=True),
                        (table, idx, torch.randn(8))),
        "broadcast values": (lambda t, i, v: t.index_put((i,), v, accumulate=True), (table, idx, torch.randn(D))),
        "integer rows": (lambda t, i, v: t.index_put((i,), v, accumulate=True),
                         (table.long(), idx, g.long())),
    }
    for what, (fn, args) in cases.items():
        graph = trace(fn, *args)
        assert IndexAddRows().run(graph) is graph, what
        check(fn, *args)
    graph = trace(embedding_gradient, *rows(8), mode="symbolic")
    assert IndexAddRows().run(graph) is graph  # symbolic sizes: left as written


def test_a_cuda_graph_keeps_index_put():
    """CUDA's index_add adds with atomics in no fixed order (and raises under deterministic algorithms)."""
    graph = trace(embedding_gradient, *rows(8))
    on_cuda = graph.replace(values={k: v.replace(device="cuda:0") for k, v in graph.values.items()})
    assert IndexAddRows().run(on_cuda) is on_cuda
