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
