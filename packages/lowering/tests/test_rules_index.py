"""cat, padding, gathers, scatters and factories against the reference interpreter."""

import pytest
import torch
import torch.nn.functional as F
from ember_lowering import lower, run_plan
from lowering_checks import check, trace

torch.manual_seed(0)
X = torch.randn(5, 6)


def test_cat_along_each_dim_with_mixed_dtypes_and_empty_parts():
    y, i = torch.randn(5, 6), torch.randint(0, 4, (5, 2))
    check(lambda x, y, i: (torch.cat([x, y, x]), torch.cat([x, y.t().contiguous().t(), i], 1),
                           torch.cat([x[:0], y]), torch.cat([x]), torch.stack([x, y], 1),
                           torch.cat([x, torch.empty(0)])),
          X, y, i)


def test_cat_is_one_kernel_with_its_producers_fused():
    plan = check(lambda x, y: torch.cat([x.sin(), y * 2], 1), X, X + 1)
    assert len(plan.kernels) == 1


def test_constant_padding_positive_negative_and_valued():
    check(lambda x: (F.pad(x, (1, 2)), F.pad(x, (2, 1, 1, 3), value=1.5), F.pad(x, (-1, 2, 0, -2)),
                     F.pad(x.int(), (1, 1), value=7)), X)


def test_gather_index_select_embedding():
    idx = torch.randint(0, 6, (5, 3))
    rows = torch.tensor([4, 0, 2, 2])
    check(lambda x, idx, rows: (torch.gather(x, 1, idx), torch.gather(x, 0, rows.view(4, 1).expand(4, 6)),
                                x.index_select(0, rows), x.index_select(1, rows), F.embedding(idx, x.t()),
                                x.index_select(0, rows[0])), X, idx, rows)


def test_advanced_indexing_with_negative_and_several_indices():
    i, j = torch.tensor([0, -1, 2]), torch.tensor([[1], [-2]])
    check(lambda x, i, j: (x[i], x[:, i], x[i, i], x[j, i], x[j], x.view(5, 2, 3)[:, i.abs().clamp(max=1), j.abs()]),
          X, i, j)


def test_slice_and_select_scatter():
    check(lambda x, s, r: (torch.slice_scatter(x, s, 1, 1, 5, 2), torch.slice_scatter(x, r, 0, 2, 3),
                           torch.select_scatter(x, r[0], 0, -1)), X, torch.randn(5, 2), torch.randn(1, 6))


def test_slice_scatter_with_a_start_before_the_dim_begins():
    """A negative start further back than the dim is long counts from the dim's first element, as slicing does
    (`x[:, -3:]` of 2 columns is both): autograd writes such a slice's gradient with that start."""
    check(lambda x, s, t: (torch.slice_scatter(x, s, 1, -9, 2**62), torch.slice_scatter(x, t, 1, -8, -1),
                           torch.slice_scatter(x, t[:, :2], 1, -20, 4, 3)),
          X, torch.randn(5, 6), torch.randn(5, 5))
    check(lambda x, s: torch.slice_scatter(torch.zeros_like(x), s, 1, -3, 2**62) * 2, torch.randn(4, 2),
          torch.randn(4, 2))


def test_factories():
    check(lambda x: (torch.arange(7), torch.arange(2, 11, 3), torch.arange(0.5, 3, 0.25), torch.zeros_like(x),
                     torch.ones_like(x, dtype=torch.int64), torch.full((2, 3), 1.5), torch.full((2,), True),
                     torch.zeros(3, dtype=torch.bool), x.new_ones(2), torch.empty_like(x).fill_(2.0),
                     torch.scalar_tensor(3.0) + x, torch.arange(6) * x, torch.zeros_like(x.t())), X)


def test_factories_with_symbolic_sizes():
    check(lambda x: (torch.arange(x.shape[0]), x.new_zeros(x.shape[0] * 2), torch.full_like(x, 3.0),
                     torch.arange(x.shape[1]) + x, torch.cat([x, x]), F.pad(x, (1, 1))),
          torch.randn(6, 7), mode="symbolic", others=[(torch.randn(4, 9),)])


def test_a_fresh_buffer_copied_into_is_no_extern_call():
    """Compiled autograd's gradient layout step is `copy(new_empty_strided(g, ...), g)`: the fresh buffer is only
    a destination, so it must lower to nothing at all (once an extern allocation per gradient per backward)."""
    plan = check(lambda x: torch.ops.aten.copy.default(
        torch.ops.aten.new_empty_strided.default(x, [6, 5], [1, 6]), x.t() * 2), X)
    assert not plan.externs


def test_a_scatter_with_one_index_per_line_is_a_select_in_one_kernel():
    """scatter / scatter_add with one index along `dim` per line (how autograd writes cross-entropy's gradient:
    `scatter_add(zeros, 1, target[:, None], g)`) is `where(position == index, ...)`: no ATen call, no zero fill,
    and a sum over it fuses with it."""
    idx, src = torch.randint(0, 6, (5, 1)), torch.randn(5, 3)
    cols = torch.randint(0, 5, (1, 6))
    plan = check(lambda x, idx, src, cols: (
        torch.zeros_like(x).scatter_add(1, idx, src[:, :1]).sum(1, keepdim=True),
        x.scatter_add(1, idx, src), x.scatter(1, idx, src), x.scatter(1, idx, -2.5),
        x.scatter_add(0, cols, x * 3), x.int().scatter(0, cols, 7), x.half().scatter_add(1, idx, src.half())),
        X, idx, src, cols)
    assert not plan.externs
    assert len(plan.kernels) <= 8


def test_a_scatter_with_negative_zero_keeps_its_sign_as_aten_adds_it():
    idx, src = torch.tensor([[2], [0]]), torch.tensor([[-0.0], [-0.0]])
    check(lambda idx, src: (torch.zeros(2, 4).scatter_add(1, idx, src), torch.zeros(2, 4).scatter(1, idx, src)),
          idx, src)


def test_a_scatter_with_several_indices_per_line_stays_an_aten_call():
    idx = torch.tensor([[0, 0, 2], [1, 5, 1], [3, 3, 3], [0, 1, 2], [5, 4, 3]])
    plan = check(lambda x, idx: (x.scatter_add(1, idx, x * 2), x[:, :3].scatter(0, idx[:2] % 5, 1.0)), X, idx)
    assert [e.op for e in plan.externs] == ["aten.scatter_add.default", "aten.scatter.value"]


def test_a_scatter_into_an_aten_result_or_a_reduction_stays_an_aten_call_done_in_place():
    """A select reads and writes the whole tensor; ATen's scatter, made in place where its `self` dies, writes a
    few elements. So the select is taken only where `self` is fused into it (a fill, a pointwise kernel) or would
    be copied anyway (an input)."""
    idx, src = torch.randint(0, 6, (5, 1)), torch.randn(5, 1)
    plan = check(lambda x, w, idx, src: ((x @ w).scatter_add(1, idx, src), x.sum(1, True).scatter(1, idx * 0, 0.0),
                                         (x * 2).scatter(1, idx, src), x.scatter(1, idx, src),
                                         torch.softmax(x, 1).scatter(1, idx, 0.0)),  # its last step is pointwise
                 X, torch.randn(6, 6), idx, src)
    assert sorted(e.op for e in plan.externs) == ["aten.mm.default", "aten.scatter_.value", "aten.scatter_add_.default"]


def test_a_scattered_index_out_of_range_is_an_error_not_a_missing_element():
    graph = trace(lambda x, idx: (torch.zeros_like(x).scatter_add(1, idx, x[:, :1]).sum(1),), X,
                  torch.zeros(5, 1, dtype=torch.int64))
    plan = lower(graph, check=True, emit_event=False)
    assert not plan.externs
    for bad in (6, -1):
        with pytest.raises(IndexError):
            run_plan(plan, [X, torch.full((5, 1), bad)], {})


def test_a_slice_scatter_over_a_whole_dim_is_its_source():
    """slice_scatter(x, src, d, 0, END) (backward graphs write a gradient so) is `src` everywhere: lowered without
    the position test and the masked load, which keep loads from being forwarded and loops from folding."""
    plan = check(lambda x, s: (torch.slice_scatter(torch.zeros_like(x), s.sin(), 1, 0, 2**62) * 2,
                               torch.slice_scatter(x, s, 0)), X, torch.randn(5, 6))
    symbolic = check(lambda x, s: torch.slice_scatter(x, s, 1, 0, 2**62) + x, torch.randn(4, 7), torch.randn(4, 7),
                     mode="symbolic", others=[(torch.randn(3, 9), torch.randn(3, 9))])
    for p in (plan, symbolic):
        assert " where " not in str(p) and " if " not in str(p), p
