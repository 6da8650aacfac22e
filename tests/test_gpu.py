"""On CUDA, with no options, ember compiles through the Triton codegen: real models forward and backward against
eager, in float32 and bfloat16, with no fallback, and kernels named for what they compute in profiler traces.
Marked `gpu`: skipped without a CUDA device (CI); on a GPU machine `nox -s gpu` runs them."""

from __future__ import annotations

import copy

import ember
import pytest
import torch
from conftest import assert_same_training_step
from models import MLP, Block, SmallCNN, TinyGPT

pytestmark = pytest.mark.gpu  # ember-core's pytest plugin skips these without CUDA


def compiled_on_cuda(model, frontend):
    return ember.compile(model, options={"frontend": frontend})


def codegens(rec) -> set[str]:
    return {e.get("codegen") for e in rec.events if e.kind == "graph_compiled"}


@pytest.mark.parametrize("make, shape", [(MLP, (4, 16)), (Block, (2, 8, 32))], ids=["mlp", "block"])
def test_training_step_on_cuda_runs_triton_kernels(make, shape, frontend):
    model = make().cuda()
    with ember.record_events() as rec:
        compiled = compiled_on_cuda(model, frontend)
        assert_same_training_step(model, compiled, [torch.randn(*shape, device="cuda", requires_grad=True)])
    assert codegens(rec) == {"triton"}
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_cnn_and_tiny_gpt_on_cuda(frontend):
    cnn = SmallCNN().cuda().eval()
    x = torch.randn(2, 3, 8, 8, device="cuda")
    gpt = TinyGPT().cuda()
    idx, targets = (torch.randint(0, 64, (2, 16), device="cuda") for _ in range(2))
    with ember.record_events() as rec:
        with torch.no_grad():
            torch.testing.assert_close(compiled_on_cuda(copy.deepcopy(cnn), frontend)(x), cnn(x))
        loss = compiled_on_cuda(gpt, frontend)(idx, targets)
    torch.testing.assert_close(loss, gpt(idx, targets))
    assert codegens(rec) == {"triton"}
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_bfloat16_block_forward():
    model = Block().cuda().bfloat16()
    x = torch.randn(2, 8, 32, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(ember.compile(model)(x), model(x), rtol=2e-2, atol=2e-2)


def test_kernel_names_appear_in_profiler_traces():
    fn = ember.compile(lambda x: torch.softmax(x, -1) * 2)
    x = torch.randn(64, 128, device="cuda")
    fn(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages()}
    assert any(n.startswith("ember_") and "softmax" in n for n in names), sorted(names)


# ---------------------------------------------------------------------------------------------- reduce-overhead


def test_reduce_overhead_replays_cuda_graphs_and_matches_eager(frontend):
    """Inference and a training loop under mode="reduce-overhead": after a warm-up call each graph is recorded and
    replayed (events), values and gradients equal eager's, and an output kept across calls is never overwritten."""
    torch.manual_seed(0)
    model = MLP().cuda()
    twin = copy.deepcopy(model)
    compiled = ember.compile(model, mode="reduce-overhead", options={"frontend": frontend})
    kept = []
    with ember.record_events() as rec:
        for _ in range(6):
            x = torch.randn(4, 16, device="cuda")
            with torch.no_grad():
                out = compiled(x)
                kept.append((out, twin(x)))
        for out, want in kept:
            torch.testing.assert_close(out, want)
        for _ in range(4):
            x = torch.randn(4, 16, device="cuda", requires_grad=True)
            assert_same_training_step(model, compiled, [x])
    assert rec.kinds("cuda_graph_recorded")
    assert {e.get("codegen") for e in rec.kinds("graph_compiled")} == {"triton+cudagraphs"}
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_reduce_overhead_records_each_shape():
    def f(x, y):
        return (x * 2 + y.sum()).relu()

    compiled = ember.compile(f, mode="reduce-overhead", dynamic=True)
    with ember.record_events() as rec:
        for n in (4, 4, 4, 8, 8, 8):
            x, y = torch.randn(n, device="cuda"), torch.randn(3, device="cuda")
            torch.testing.assert_close(compiled(x, y), f(x, y))
    assert len(rec.kinds("cuda_graph_recorded")) == 2
