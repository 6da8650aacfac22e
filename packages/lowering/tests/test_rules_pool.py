"""max_pool2d_with_indices lowered to one reduction kernel: eager's values and indices exactly, ties to the first
position, the last NaN of a window, all -inf windows and windows over the padding included."""

from __future__ import annotations

import pytest
import torch
from ember_lowering import Extern
from lowering_checks import check, plan_of


def pool(kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    def fn(x):
        return torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    return fn


def externs(plan) -> list[str]:
    return [s.op for s in plan.steps if isinstance(s, Extern)]


CASES = {
    "resnet": (pool([3, 3], [2, 2], [1, 1]), (2, 4, 12, 12)),
    "halving": (pool([2, 2]), (1, 3, 8, 8)),
    "dilated": (pool([3, 2], [1, 2], [1, 0], [2, 1]), (2, 3, 9, 7)),
    "ceil_mode": (pool([3, 3], [2, 2], [1, 1], 1, True), (1, 2, 10, 10)),
    "3d": (pool([2, 3], [1, 2], [1, 1]), (3, 7, 9)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values_and_indices_are_eagers(name):
    fn, shape = CASES[name]
    x = torch.randn(shape)
    ties = torch.randn(shape).relu().round()  # many equal values in a window: the first one's index
    plan = check(fn, x, others=[(ties,), (x.to(memory_format=torch.channels_last),) if len(shape) == 4 else (x,)])
    assert externs(plan) == []


def test_nans_minus_infinities_and_bfloat16():
    x = torch.randn(2, 3, 10, 10)
    x[0, 0, 2:4, 2:5] = float("nan")  # several NaNs in a window: eager's index is the last one's
    x[0, 1, 1, 1] = float("nan")
    x[1, 0, :4, :4] = float("-inf")  # windows of -inf only, some over the padding: the first position inside
    x[1, 2] = float("-inf")
    x[1, 1, 5, 5] = float("inf")
    fn = pool([3, 3], [2, 2], [1, 1])
    check(fn, x)
    check(pool([3, 3], [1, 1], [1, 1]), x)
    check(fn, x.bfloat16())


def test_integer_nhwc_and_large_window_inputs_stay_aten_calls():
    """ATen's NHWC kernel is vectorized over channels (faster than the unrolled taps); windows over 25 taps."""
    for fn, x in ((pool([2, 2]), torch.arange(64.0).reshape(1, 1, 8, 8).long()),
                  (pool([3, 3], [2, 2], [1, 1]), torch.randn(1, 8, 8, 8).contiguous(memory_format=torch.channels_last)),
                  (pool([6, 6]), torch.randn(1, 2, 12, 12))):
        assert externs(plan_of(fn, x)) == ["aten.max_pool2d_with_indices.default"]
