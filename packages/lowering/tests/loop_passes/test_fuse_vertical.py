"""fuse-vertical alone: reductions take their epilogues and dependent reductions; reads must line up."""

import torch
from ember_lowering import Loop
from ember_lowering.loop_passes.fuse_inline import FuseInline
from ember_lowering.loop_passes.fuse_vertical import FuseVertical
from lowering_checks import before_after, verdicts

X = torch.randn(6, 8)


def loops(kernel):
    return sum(isinstance(s, Loop) for s in kernel.body)


def test_softmax_becomes_one_kernel_of_three_loops():
    _, after, _ = before_after(lambda x: torch.softmax(x, -1), X, passes=[FuseInline(), FuseVertical()])
    (kernel,) = after.kernels
    assert loops(kernel) == 3 and [b.kind for b in after.buffers] == ["input", "output"]


def test_an_epilogue_on_the_reduced_shape_runs_after_the_loop():
    _, after, _ = before_after(lambda x: (x.sum(1) * 2).sqrt(), X, passes=[FuseVertical()])
    (kernel,) = after.kernels
    assert loops(kernel) == 1 and not isinstance(kernel.body[-1], Loop)


def test_a_reduction_over_another_dim_stays_apart():
    _, after, decisions = before_after(lambda x: x - x.sum(0, keepdim=True).amax(1, keepdim=True), X,
                                       passes=[FuseVertical()])
    assert len(after.kernels) >= 2 and ("kept", "spaces-differ") in verdicts(decisions)


def test_a_read_of_another_element_stays_apart():
    _, after, decisions = before_after(lambda x: (lambda y: y + y.flip(1))(x.exp()), X, passes=[FuseVertical()])
    assert ("kept", "other-element") in verdicts(decisions) and len(after.kernels) == 2


def test_nothing_fuses_across_a_step_in_between():
    _, after, decisions = before_after(lambda x: (lambda y: y + y.cumsum(1))(x.exp()), X, passes=[FuseVertical()])
    assert ("kept", "step-between") in verdicts(decisions)


def test_a_sum_over_a_view_that_merges_dims_takes_its_producer():
    """A bias's gradient sums the rows of a (24, 8) view of the (4, 6, 8) values a pointwise kernel computes (a
    linear layer's backward on a batch of sequences): the two spaces differ until the reduction's 24 rows are
    split into 4 x 6, and then the sum reads each value in the iteration that computes it."""
    x = torch.randn(4, 6, 8)

    def fn(t):
        y = torch.nn.functional.gelu(t) * t
        return y, y.view(-1, 8).sum(0)

    _, after, decisions = before_after(fn, x, passes=[FuseInline(), FuseVertical()])
    (kernel,) = after.kernels
    assert ("fused", "same-iteration") in verdicts(decisions) and ("kept", "spaces-differ") not in verdicts(decisions)
    assert loops(kernel) == 1


def test_a_pointwise_step_over_split_dims_takes_the_row_reduction_it_reads():
    """The other way round: a (4, 6, 8) step reads the sums of the rows of a (24, 8) view."""
    x = torch.randn(4, 6, 8)

    def fn(t):
        rows = t.exp().view(-1, 8).sum(1)
        return (t / rows.view(4, 6, 1),)

    _, after, decisions = before_after(fn, x, passes=[FuseInline(), FuseVertical()])
    assert len(after.kernels) == 1 and ("kept", "spaces-differ") not in verdicts(decisions)


def test_symbolic_sizes_split_too():
    """Under dynamic shapes the rows are s0 * s1 and split into s0 x s1: the same kernel, right at other sizes."""
    from lowering_checks import check

    def fn(t):
        y = torch.nn.functional.gelu(t) * t
        return y, y.reshape(-1, t.shape[-1]).sum(0)

    plan = check(fn, torch.randn(4, 6, 8), mode="symbolic", others=[(torch.randn(3, 5, 7),), (torch.randn(2, 9, 16),)])
    assert len(plan.kernels) == 1
