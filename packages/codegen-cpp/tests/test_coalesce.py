"""Coalescing: adjacent dims that every access walks as one become one dim."""

from __future__ import annotations

import torch
from ember_codegen_cpp._coalesce import coalesce
from ember_lowering import lower
from helpers import check, trace


def _plan(fn, *args):
    return lower(trace(fn, *args), emit_event=False)


def test_contiguous_dims_merge_and_broadcast_ones_do_not():
    plan = _plan(lambda x, s: (x * s.view(1, 4, 1, 1) + 1,), torch.randn(2, 4, 8, 8), torch.randn(4))
    merged = coalesce(plan.kernels[0], plan.buffer_map)
    assert [str(d.size) for d in merged.dims] == ["2", "4", "64"]


def test_reduction_dims_merge_in_row_major_order():
    plan = _plan(lambda x: (x.mean((2, 3)), x.argmax(-1)), torch.randn(2, 3, 4, 5))
    for k in plan.kernels:
        assert len(coalesce(k, plan.buffer_map).reduce_dims) == 1


def test_coalesced_kernels_match_eager():
    x = torch.randn(3, 4, 6, 10)
    check(lambda x: (x.mean((2, 3)), x.amax((0, 2, 3)), x.permute(0, 2, 3, 1) * 2, x.argmin(-1), x.flatten(1).sum(1)),
          x)
