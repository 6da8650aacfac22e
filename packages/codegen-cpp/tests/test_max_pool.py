"""max_pool2d_with_indices as a C++ kernel (ember-lowering's rule): eager's values and indices exactly on NCHW and
NHWC inputs (ties, NaNs, -inf windows, padding), fused with the batch norm and ReLU before it; and a training step
whose backward scatters the gradient through those indices."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers import Events, check, check_training, compile_fn


def pool(x):
    return torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])


def relu_pool(x, scale):
    return pool((x * scale[:, None, None]).relu())


def test_values_and_indices_are_eagers_in_either_layout():
    x = torch.randn(2, 16, 20, 20)
    x[0, 0, 2:4, 2:5] = float("nan")
    x[1, 0, :5, :5] = float("-inf")
    ties = torch.randn(2, 16, 20, 20).relu().round()
    check(pool, x, others=[(ties,), (x.contiguous(memory_format=torch.channels_last),)], rtol=0, atol=0)
    check(relu_pool, x, torch.randn(16), others=[(ties, torch.rand(16))], rtol=0, atol=0)


def test_the_pooling_is_no_aten_call_and_fuses_with_what_computes_its_input():
    with Events() as ev:
        compiled = compile_fn(relu_pool, torch.randn(2, 16, 20, 20), torch.randn(16))
    assert "aten.max_pool2d_with_indices" not in compiled.source
    assert not ev.kinds("fallback")


def test_a_training_step_through_the_pooling_matches_eager():
    def net(x, w):
        return (F.max_pool2d(F.conv2d(x, w, padding=1).relu(), 3, 2, 1) * 2,)
    check_training(net, torch.randn(2, 3, 12, 12), torch.randn(8, 3, 3, 3))
