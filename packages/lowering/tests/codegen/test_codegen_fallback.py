"""Helpers off the fast path: layouts that address the same elements, and copies into the plan's layout."""

from __future__ import annotations

import pytest
import torch
from ember_lowering.codegen import UseFallback, fix_layout, non_overlapping, same_layout


def test_same_layout_ignores_size_one_and_empty_dims():
    assert same_layout((1, 5), (1, 1), (5, 1))
    assert same_layout((0, 5), (9, 9), (5, 1))
    assert not same_layout((2, 5), (1, 2), (5, 1))


def test_overlapping_layouts_are_detected():
    assert non_overlapping((3, 4), (4, 1)) and non_overlapping((3, 4), (1, 3))
    assert not non_overlapping((3, 4), (0, 1)) and not non_overlapping((3, 4), (2, 1))


def test_fix_layout_views_copies_or_refuses():
    t = torch.randn(4, 3).t()
    fixed = fix_layout(t, (3, 4), (4, 1))
    assert fixed.stride() == (4, 1) and torch.equal(fixed, t)
    assert fix_layout(t, (3, 4), (1, 3)).data_ptr() == t.data_ptr()
    with pytest.raises(UseFallback):
        fix_layout(t, (4, 3), (3, 1))
    with pytest.raises(UseFallback):
        fix_layout(t, (3, 4), (0, 1))
