"""The profiled twin of the Triton wrapper: each launch in a profiler range named after its kernel (on CUDA the
kernel has that name too); results are the normal path's."""

from __future__ import annotations

import pytest
import torch
from helpers import CODEGEN, trace


def softmax_then_matmul(x, w):
    return ((torch.softmax(x, -1) * 2) @ w + 1,)


def profiled_keys(device: str) -> tuple[set[str], list[str]]:
    x, w = torch.randn(6, 10, device=device), torch.randn(10, 3, device=device)
    compiled = CODEGEN.compile(trace(softmax_then_matmul, x, w), [x, w], {})
    compiled([x, w])
    with torch.profiler.profile() as prof:
        got = compiled([x, w])
    torch.testing.assert_close(got[0], softmax_then_matmul(x, w)[0])
    kernels = [line[len("def "):].split("(")[0] for line in compiled.source.splitlines()
               if line.startswith("def ember_k")]
    return {e.key for e in prof.key_averages()}, kernels


def test_profiled_launches_are_ranges_named_after_their_kernels():
    keys, kernels = profiled_keys("cpu")
    assert len(kernels) == 2 and set(kernels) <= keys
    assert any(k.endswith("aten.mm.default") for k in keys) and any(k.startswith("ember:") for k in keys)


@pytest.mark.gpu
def test_profiled_launches_on_cuda():
    keys, kernels = profiled_keys("cuda")
    assert len(kernels) == 2 and set(kernels) <= keys
