"""max_pool2d_with_indices as ember-lowering lowers it (unrolled taps, constant sizes as index values), printed by
this codegen and run in Triton's interpreter: eager's values and indices, NaNs and ties included. Its build for
sm_90 on the lowest supported Triton is `test_gpu_compile.py`'s (a constant index printed as a broadcast of a
constexpr did not compile there)."""

from __future__ import annotations

import torch
from helpers import check


def pool(x):
    return torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])


def test_values_and_indices_are_eagers():
    x = torch.randn(2, 3, 9, 10)
    x[0, 0, 1:3, 1:4] = float("nan")
    x[1, 1, :4, :4] = float("-inf")
    check(pool, x, others=[(torch.randn(2, 3, 9, 10).relu().round(),)], rtol=0, atol=0)
