"""Golden snapshots of generated Triton source (kernels and wrapper, without the prelude) for a few fused graphs.
Rewrite with EMBER_ACCEPT=1 and review the diff like code."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ember_core.testing import assert_golden
from helpers import check

SNAPSHOTS = Path(__file__).parent / "snapshots"
W, B = torch.randn(16, 32), torch.randn(32)
LN_W, LN_B = torch.randn(32), torch.randn(32)

CASES = {
    "softmax": (lambda x: (torch.softmax(x, -1),), (torch.randn(8, 32),), "fake"),
    "layer_norm": (lambda x: (torch.nn.functional.layer_norm(x, (32,), LN_W, LN_B),), (torch.randn(8, 32),), "fake"),
    "gelu_mlp_epilogue": (lambda x: (torch.nn.functional.gelu(x @ W + B),), (torch.randn(8, 16),), "fake"),
    "looped_row_sum": (lambda x: (x.sum(1), x.amax(1)), (torch.randn(4, 50),), "symbolic"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_generated_source(name):
    fn, args, mode = CASES[name]
    source = check(fn, *args, mode=mode).source
    assert_golden(source[source.index("@triton.jit\ndef ember_"):], SNAPSHOTS / f"{name}.txt")
