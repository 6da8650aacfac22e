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


# ---------------------------------------------------------------------------------------------- CUDA-only paths


def test_lean_launches_skip_tritons_launch_path_and_match_eager():
    """After its first call a compiled graph launches every kernel through its lean launcher (Triton's
    `JITFunction.run` is never entered), with eager's results; an input at an odd offset takes Triton's path and is
    still right."""
    import triton.runtime.jit as jit

    fn = ember.compile(lambda x, y: (torch.softmax(x, -1) * y).sum(0) + y.sin().mean())
    x, y = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    fn(x, y)
    entered, tritons_run = [], jit.JITFunction.run

    def counted(self, *args, **kwargs):
        entered.append(kwargs.get("warmup"))
        return tritons_run(self, *args, **kwargs)

    jit.JITFunction.run = counted
    try:
        torch.testing.assert_close(fn(x, y), (torch.softmax(x, -1) * y).sum(0) + y.sin().mean())
        assert entered == []
        odd = torch.randn(64 * 128 + 1, device="cuda")[1:].view(64, 128)
        torch.testing.assert_close(fn(odd, y), (torch.softmax(odd, -1) * y).sum(0) + y.sin().mean())
        assert entered  # the unaligned input went through Triton
    finally:
        jit.JITFunction.run = tritons_run


def test_a_cnn_runs_channels_last_on_cuda_and_matches_eager(frontend):
    """Inference and a training step: the convolutions run NHWC (the pass's conversions are in the compiled source),
    outputs in eager's layout, values and gradients as eager's."""
    torch.manual_seed(0)
    cnn = SmallCNN().cuda()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    with ember.record_events() as rec:
        with torch.no_grad():
            out = compiled_on_cuda(copy.deepcopy(cnn).eval(), frontend)(x)
        want = cnn.eval()(x)
        assert out.stride() == want.stride()
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        cnn.train()
        assert_same_training_step(cnn, compiled_on_cuda(copy.deepcopy(cnn), frontend), [x])
    assert any(e.get("pass") == "channels-last" for e in rec.kinds("pass_applied"))
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_an_lm_head_of_odd_width_is_padded_on_cuda_and_matches_eager():
    """bf16 `x @ w.T` with N = 50257 (GPT-2's vocabulary): padded when this GPU measures it faster; eager's values
    and a contiguous output either way."""
    head = torch.nn.Linear(768, 50257, bias=False).cuda().bfloat16()
    x = torch.randn(4, 128, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        got, want = ember.compile(head)(x), head(x)
    assert got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
