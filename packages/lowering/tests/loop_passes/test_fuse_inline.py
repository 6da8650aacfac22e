"""fuse-inline alone: chains collapse, cheap values are recomputed, expensive shared ones are stored."""

import pytest
import torch
from ember_lowering import Op, run_plan
from ember_lowering.loop_passes.fuse_inline import FuseInline
from lowering_checks import before_after, count_ops, verdicts

X = torch.randn(6, 8)


def test_a_chain_inlines_into_its_last_kernel():
    before, after, decisions = before_after(lambda x: (x * 2 + 1).exp().neg().abs(), X, passes=[FuseInline()])
    assert len(before.kernels) == 5 and len(after.kernels) == 1
    assert verdicts(decisions) == {("fused", "single-consumer")} and len(decisions) == 4


def test_a_pointwise_prologue_inlines_into_a_reduction():
    _, after, _ = before_after(lambda x: (x * x).sum(1), X, passes=[FuseInline()])
    (kernel,) = after.kernels
    assert kernel.reduce_dims and count_ops(after, Op.MUL) == 1


def test_an_expensive_value_read_twice_is_kept():
    _, after, decisions = before_after(lambda x: (lambda y: (y + 1, y.sum(0)))(x.sin().exp().tanh()), X,
                                       passes=[FuseInline()])
    assert count_ops(after, Op.SIN) == 1 and ("kept", "expensive") in verdicts(decisions)


def test_a_cheap_value_read_twice_is_recomputed():
    _, after, decisions = before_after(lambda x: (lambda y: (y + 1, y.sum(0)))(x * 3), X, passes=[FuseInline()])
    assert count_ops(after, Op.MUL) == 2 and ("fused", "cheap") in verdicts(decisions)


def test_broadcast_reads_inline_only_trivial_values():
    v = torch.randn(8)
    _, after, _ = before_after(lambda x, v: (x + v * 2, x * v.sin().exp()), X, v, passes=[FuseInline()])
    assert count_ops(after, Op.EXP) == 1 and any(b.name == "exp" for b in after.buffers)
    assert not any(b.name == "mul" for b in after.buffers)


def test_inlining_under_a_mask_masks_the_producers_loads():
    _, after, _ = before_after(lambda x, y: torch.cat([x.sin(), y.cos()], 0), X, X.t().contiguous().t(),
                               passes=[FuseInline()])
    loads = [i for k in after.kernels for i in k.instrs() if i.op is Op.LOAD]
    assert len(after.kernels) == 1 and all(i.srcs for i in loads)


def test_the_taps_of_a_pooling_window_recompute_and_keep_a_costly_value_stored():
    """A max pool's nine masked taps each read nearly all of the value: inlined, batch norm's affine and ReLU would
    run 9 x 1/4 of the times. A single masked read (padding) still inlines."""
    x, scale = torch.randn(2, 4, 12, 12), torch.randn(4)

    def pool(x, scale):
        y = (x * scale[:, None, None] + 1).relu()
        return torch.ops.aten.max_pool2d_with_indices(y, [3, 3], [2, 2], [1, 1])

    _, after, decisions = before_after(pool, x, scale, passes=[FuseInline()])
    assert ("kept", "broadcast") in verdicts(decisions) and len(after.kernels) == 2
    _, after, decisions = before_after(lambda x, s: (torch.nn.functional.pad((x * s[:, None, None] + 1).relu(),
                                                                             [1, 1, 1, 1]),), x, scale,
                                       passes=[FuseInline()])
    assert len(after.kernels) == 1 and ("fused", "single-consumer") in verdicts(decisions)


def test_an_extern_reader_keeps_the_value_stored():
    _, after, decisions = before_after(lambda x: (x * 2).cumsum(0), X, passes=[FuseInline()])
    (kept,) = [d for d in decisions if d.reason == "extern-reader"]
    assert kept.verdict == "kept" and kept.subjects[1] == "mul" and len(after.kernels) == 1


def test_a_gather_of_generated_values_keeps_them_stored_so_its_index_is_checked():
    """`arange(5)[i]`, `zeros(5)[i]`, a broadcast `x.expand(5)[i]`: inlined, no load would check `i` against 5 and
    an index out of range would read a value that was never there (eager raises IndexError)."""
    i, x = torch.tensor([2]), torch.randn(1)
    for fn in (lambda i, x: torch.arange(5.0)[i] + x, lambda i, x: torch.zeros(5).index_select(0, i) + x,
               lambda i, x: (x.expand(5) * 2)[i]):
        _, after, decisions = before_after(fn, i, x, passes=[FuseInline()])
        assert ("kept", "unchecked-index") in verdicts(decisions)
        with pytest.raises(IndexError):
            run_plan(after, [torch.tensor([7]), x], {})


def test_a_gather_of_an_elementwise_value_still_inlines():
    """`embedding(w.sin(), i)`: the sine's load of w takes the index, checked against w's rows."""
    w = torch.randn(5, 3)
    _, after, decisions = before_after(lambda w, i: torch.nn.functional.embedding(i, w.sin()) * 2, w,
                                       torch.tensor([4, 0]), passes=[FuseInline()])
    assert len(after.kernels) == 1 and ("kept", "unchecked-index") not in verdicts(decisions)
