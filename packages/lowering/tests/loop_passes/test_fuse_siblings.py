"""fuse-siblings alone: independent kernels over one space that share an input read it once."""

import torch
from ember_lowering import Loop, Op
from ember_lowering.loop_passes.fuse_siblings import FuseSiblings
from lowering_checks import before_after

X = torch.randn(6, 8)


def test_max_and_argmax_share_one_loop():
    _, after, decisions = before_after(lambda x: x.max(1), X, passes=[FuseSiblings()])
    (kernel,) = after.kernels
    (loop,) = [s for s in kernel.body if isinstance(s, Loop)]
    assert sum(i.op is Op.LOAD for i in loop.body) == 1
    assert [(d.verdict, d.reason, d.subjects[-1]) for d in decisions] == [("fused", "shared-input", "arg0_1")]


def test_independent_pointwise_outputs_of_one_input_merge():
    _, after, _ = before_after(lambda x: (x + 1, x * 2, x.t().exp()), X, passes=[FuseSiblings()])
    assert len(after.kernels) == 2


def test_kernels_without_a_shared_input_stay_apart():
    _, after, _ = before_after(lambda x, y: (x.sum(1), y.sum(1)), X, X + 1, passes=[FuseSiblings()])
    assert len(after.kernels) == 2
