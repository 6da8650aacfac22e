"""cat-slice-scatters: a sum of slice scatters into zeros that tile one dim is a cat; a cat of many pieces is ATen's."""

import torch
from ember_core import verify
from ember_lowering.graph_passes.cat_slice_scatters import cat_slice_scatters
from lowering_checks import check, plan_of, trace

STEPS = 12
G = [torch.randn(3, 4) for _ in range(STEPS)]


def ops(graph) -> list[str]:
    return [n.op.removeprefix("aten.").removesuffix(".default") for n in graph.nodes]


def unbind_gradient(*gs):
    """What autograd writes for the gradient of x when x[t] is read at each step t: one scatter per step into
    zeros, added up, the last step first."""
    total = None
    for t in reversed(range(len(gs))):
        part = torch.slice_scatter(torch.zeros(len(gs), 3, 4), gs[t].unsqueeze(0), 0, t, t + 1)
        total = part if total is None else total + part
    return total * 2


def test_a_sum_of_scatters_that_tile_a_dim_is_one_cat_in_order():
    graph = cat_slice_scatters(trace(unbind_gradient, *G))
    verify(graph)  # the cat's arguments fit its schema
    assert ops(graph).count("cat") == 1 and not {"slice_scatter", "full", "zeros", "add.Tensor"} & set(ops(graph))
    check(unbind_gradient, *G)


def test_pieces_of_several_rows_along_an_inner_dim():
    def fn(a, b, c):
        z = lambda: torch.zeros(3, 9, 4)  # noqa: E731
        return (torch.slice_scatter(z(), b, 1, 2, 7) + torch.slice_scatter(z(), a, 1, 0, 2)) + \
            torch.slice_scatter(z(), c, 1, 7, 9)
    args = torch.randn(3, 2, 4), torch.randn(3, 5, 4), torch.randn(3, 2, 4)
    assert ops(cat_slice_scatters(trace(fn, *args))).count("cat") == 1
    check(fn, *args)


def test_sums_that_are_not_a_tiling_are_left_alone():
    z = lambda: torch.zeros(4, 3)  # noqa: E731
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    cases = {
        "a gap": lambda a, b: torch.slice_scatter(z(), a, 0, 0, 2) + torch.slice_scatter(z(), b[:1], 0, 3, 4),
        "an overlap": lambda a, b: torch.slice_scatter(z(), a, 0, 0, 2) + torch.slice_scatter(z(), b, 0, 1, 3),
        "into ones": lambda a, b: torch.slice_scatter(torch.ones(4, 3), a, 0, 0, 2) +
        torch.slice_scatter(z(), b, 0, 2, 4),
        "a step of 2": lambda a, b: torch.slice_scatter(z(), a, 0, 0, 4, 2) + torch.slice_scatter(z(), b, 0, 1, 4, 2),
        "a scatter read again": lambda a, b: (lambda s: (s + torch.slice_scatter(z(), b, 0, 2, 4), s))(
            torch.slice_scatter(z(), a, 0, 0, 2)),
        "alpha": lambda a, b: torch.add(torch.slice_scatter(z(), a, 0, 0, 2), torch.slice_scatter(z(), b, 0, 2, 4),
                                        alpha=2),
    }
    for what, fn in cases.items():
        graph = trace(fn, a, b)
        assert "cat" not in ops(cat_slice_scatters(graph)), what
        check(fn, a, b)


def test_a_cat_of_many_pieces_is_atens_and_of_few_a_kernel():
    many = plan_of(lambda *gs: torch.cat(gs) * 2, *G)
    few = plan_of(lambda *gs: torch.cat(gs) * 2, *G[:3])
    extern_cats = lambda plan: [ln for ln in str(plan).splitlines() if ln.strip().startswith("extern") and "cat" in ln]  # noqa: E731
    assert len(extern_cats(many)) == 1 and extern_cats(few) == []
    check(lambda *gs: torch.cat(gs) * 2, *G)


def test_a_zero_fill_is_known_by_its_value_given_by_position_or_by_name():
    """A graph file may name full's value (`fill_value=0`): the passes read it there too (they indexed the
    second positional argument and raised IndexError)."""
    from ember_core import Node
    from ember_lowering.graph_passes._fills import is_zero_fill

    assert is_zero_fill(Node(("f",), "aten.full.default", ([2, 3], 0.0), {}))
    assert is_zero_fill(Node(("f",), "aten.full.default", ([2, 3],), {"fill_value": 0}))
    assert is_zero_fill(Node(("f",), "aten.zeros.default", ([2, 3],), {}))
    assert not is_zero_fill(Node(("f",), "aten.full.default", ([2, 3],), {"fill_value": 1.5}))
    assert not is_zero_fill(Node(("f",), "aten.full.default", ([2, 3],), {}))
    assert not is_zero_fill(Node(("f",), "aten.ones.default", ([2, 3],), {}))
    assert not is_zero_fill(None)

