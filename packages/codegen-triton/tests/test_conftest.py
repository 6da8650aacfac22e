"""The suite's own switch: a run of gpu tests alone compiles real kernels, whatever TRITON_INTERPRET says."""

from __future__ import annotations

import pytest
from conftest import selects_only_gpu_tests


@pytest.mark.parametrize("markexpr, gpu_only", [
    ("gpu", True), (" gpu ", True), ("gpu and not slow", True), ("(gpu)", True),
    ("", False), ("not gpu", False), ("gpu or not gpu", False), ("slow", False), ("gpu or slow", False),
])
def test_gpu_only_runs_are_told_from_mixed_ones(markexpr, gpu_only):
    assert selects_only_gpu_tests(markexpr) is gpu_only
