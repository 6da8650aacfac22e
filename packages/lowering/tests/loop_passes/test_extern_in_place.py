"""extern-in-place (a scatter extern writes into its dead `self`) and the graph fold before lowering
(`a + index_put(zeros, idx, v, True)` scatters into `a`): results as the graph's, copies only where needed. On the
CPU `index-add-rows` makes a scatter of whole rows an index_add before lowering: both are scatters this pass takes."""

import torch
from ember_lowering import Extern
from ember_lowering.graph_passes.fold_scatter_adds import fold_scatter_adds
from ember_lowering.loop_passes.extern_in_place import ExternInPlace
from lowering_checks import before_after, check, trace

IDX1 = torch.tensor([3, 1, 3, 0, 7, 3])  # repeated rows: the scatter must accumulate
IDX2 = torch.tensor([2, 3, 3, 9])
V1, V2 = torch.randn(6, 5), torch.randn(4, 5)


def two_embedding_grads(i1, i2, v1, v2):
    """The backward of a table used twice: two scatters into zeros, then their sum."""
    g1 = torch.zeros(10, 5).index_put((i1,), v1, accumulate=True)
    g2 = torch.zeros(10, 5).index_put((i2,), v2, accumulate=True)
    return g1 + g2


def externs(plan) -> list[Extern]:
    return [s for s in plan.steps if isinstance(s, Extern)]


def test_two_scatters_into_zeros_and_their_sum_become_one_fill_and_two_in_place_scatters():
    plan = check(two_embedding_grads, IDX1, IDX2, V1, V2)
    assert [e.op for e in externs(plan)] == ["aten.index_add_.default"] * 2
    assert len(plan.kernels) == 3  # the one zero fill and each index's wrap; the add is gone


def test_a_scatter_of_elements_into_zeros_is_written_in_place():
    def fn(i, j, v):
        return torch.zeros(10, 5).index_put((i, j), v, accumulate=True)

    plan = check(fn, IDX1, IDX1.remainder(5), V1[:, 0])
    assert [e.op for e in externs(plan)] == ["aten.index_put_.default"]


def test_the_fold_keeps_the_graph_as_it_is_where_it_does_not_apply():
    cases = [
        lambda i, v, a: a + torch.ones(10, 5).index_put((i,), v, accumulate=True),  # not zeros
        lambda i, v, a: a + torch.zeros(10, 5).index_put((i,), v),  # no accumulate: a replaces, not adds
        lambda i, v, a: torch.add(a, torch.zeros(10, 5).index_put((i,), v, accumulate=True), alpha=2),
        lambda i, v, a: a[:1] + torch.zeros(10, 5).index_put((i,), v, accumulate=True),  # broadcast
    ]
    for fn in cases:
        graph = trace(fn, IDX1, V1, torch.randn(10, 5))
        assert fold_scatter_adds(graph) is graph
        check(fn, IDX1, V1, torch.randn(10, 5))


def test_a_scatter_read_twice_is_not_folded():
    def fn(i, v, a):
        g = torch.zeros(10, 5).index_put((i,), v, accumulate=True)
        return a + g, g * 2

    graph = trace(fn, IDX1, V1, torch.randn(10, 5))
    assert fold_scatter_adds(graph) is graph


def test_an_input_is_never_written_in_place():
    x = torch.randn(10, 5)
    plan = check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, IDX1, V1)
    assert [e.op for e in externs(plan)] == ["aten.index_add.default"]


def test_a_self_read_after_the_scatter_is_copied():
    def fn(x, i, v):
        s = x.sin()
        return s.index_put((i,), v, accumulate=True) + s

    _, after, decisions = before_after(fn, torch.randn(10, 5), IDX1, V1, passes=[ExternInPlace()])
    assert [e.op for e in externs(after)] == ["aten.index_add.default"]
    assert {(d.verdict, d.reason) for d in decisions} == {("kept", "self-read-later")}


def test_the_fresh_result_of_an_aten_call_is_written_in_place():
    def fn(a, b, i, v):
        return (a @ b).index_put((i,), v, accumulate=True).sin()

    args = (torch.randn(10, 4), torch.randn(4, 5), IDX1, V1)
    _, after, decisions = before_after(fn, *args, passes=[ExternInPlace()])
    assert [e.op for e in externs(after)] == ["aten.mm.default", "aten.index_add_.default"]
    assert {(d.verdict, d.reason) for d in decisions} == {("reused", "dead-self")}
    check(fn, *args)

