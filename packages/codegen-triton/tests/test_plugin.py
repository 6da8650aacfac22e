"""The plugin: codegen `triton` serves CUDA by default and CPU only by name (and only under the interpreter)."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_triton import TritonCodegen
from ember_core import get_plugin_manager


def test_triton_is_the_default_codegen_for_cuda_and_not_for_cpu():
    registry = get_plugin_manager().registry
    assert registry.find("codegen", device="cuda").name == "triton"
    assert registry.find("codegen", "triton", device="cpu").name == "triton"


def test_cpu_plans_are_served_only_under_the_interpreter(monkeypatch):
    codegen = TritonCodegen()
    assert codegen.serves("cuda:0") and codegen.serves("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not codegen.serves("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_fused_kernel_runs_on_cuda():
    from helpers import trace

    x = torch.randn(64, 100, device="cuda")
    graph = trace(lambda x: (torch.softmax(x, -1) * 2,), x)
    compiled = TritonCodegen().compile(graph, [x], {})
    torch.testing.assert_close(compiled([x])[0], torch.softmax(x, -1) * 2)
