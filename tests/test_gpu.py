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
        assert_same_training_step(cnn, compiled_on_cuda(cnn, frontend), [x])  # one model: its grads compared
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


def test_batch_norm_training_runs_split_and_matches_eager(frontend):
    """Batch norm's statistics over 8x64x64 values a channel, 16 channels: the plan splits them into partials and
    their combination (two reduction kernels where one did); outputs, running statistics and gradients as eager's."""
    torch.manual_seed(0)
    bn = torch.nn.Sequential(torch.nn.BatchNorm2d(16), torch.nn.ReLU()).cuda()
    eager = copy.deepcopy(bn)
    x = torch.randn(8, 16, 64, 64, device="cuda") * 3 + 1
    with ember.record_events() as rec:
        assert_same_training_step(bn, compiled_on_cuda(bn, frontend), [x.requires_grad_()], rtol=1e-4, atol=1e-4)
    forward = rec.kinds("kernels_planned")[0].get("steps")
    assert sum(s["name"].startswith("reduce") for s in forward) >= 2, ("the statistics ran unsplit", forward)
    eager(x), eager(x)  # the step's eager and ember forwards both moved the running statistics
    for name, buf in bn.named_buffers():
        torch.testing.assert_close(buf, dict(eager.named_buffers())[name], rtol=1e-4, atol=1e-5, msg=name)
    assert not rec.kinds("fallback")


def test_an_sgd_step_under_a_scheduler_runs_triton_kernels_on_cuda(frontend):
    """`torch.compile(opt.step)` with a scheduler: the learning rate is a 0-d CPU float64 input (Dynamo's, and
    the trace frontend's, form of a float that changed). The graph is still a CUDA one: Triton kernels read a device
    copy of the number (the plan was the CPU's, every CUDA op an ATen call), and parameters and momentum equal
    eager's after 8 steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).cuda()
    twin = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3) for m in (model, twin)]
    schedules = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.8) for o in opts]
    step = ember.compile(opts[0].step, options={"frontend": frontend})
    with ember.record_events() as rec:
        for _ in range(8):
            x = torch.randn(16, 32, device="cuda")
            for m, o, s, schedule in ((model, opts[0], step, schedules[0]), (twin, opts[1], opts[1].step,
                                                                             schedules[1])):
                o.zero_grad()
                m(x).pow(2).mean().backward()
                s()
                schedule.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)
        torch.testing.assert_close(opts[0].state[p]["momentum_buffer"], opts[1].state[q]["momentum_buffer"])
    assert codegens(rec) == {"triton"}
    assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]


def test_column_sums_and_repeated_layers_match_eager():
    """A weight gradient's sum over 4096 rows (64 rows a program) and six identical layers whose kernels share one
    function each."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()) for _ in range(6)])
    layers = layers.cuda()
    x = torch.randn(4096, 256, device="cuda")
    with ember.record_events() as rec:
        assert_same_training_step(layers, ember.compile(layers), [x], rtol=1e-4, atol=1e-4)
    source = "\n".join(e.source for e in rec.kinds("kernels_generated"))
    assert "# the same kernel" in source
    fn = ember.compile(lambda g, h: ((g * h).sum(0), g.t().sum(1)))
    g, h = torch.randn(4096, 300, device="cuda"), torch.randn(4096, 300, device="cuda")
    for got, want in zip(fn(g, h), ((g * h).sum(0), g.t().sum(1))):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_a_warm_process_binds_every_kernel_without_tritons_jit(tmp_path):
    """A second process on the caches a first one left launches every kernel from the build's binaries manifest:
    Triton's JIT is never entered, and the results are eager's."""
    import subprocess
    import sys

    script = '''
import sys, torch, ember
import triton.runtime.jit as jit
entered = []
run = jit.JITFunction.run
jit.JITFunction.run = lambda self, *a, **k: (entered.append(self.__name__), run(self, *a, **k))[1]
torch.manual_seed(0)
x = torch.randn(64, 300, device="cuda")
fn = ember.compile(lambda x: (torch.softmax(x, -1) * 2).sum(0) + x.sin().mean())
torch.testing.assert_close(fn(x), (torch.softmax(x, -1) * 2).sum(0) + x.sin().mean())
print("entered", len(entered))
'''
    env = {**__import__("os").environ, "EMBER_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-3000:]
    assert runs[1].stdout.split()[-1] == "0", (runs[0].stdout, runs[1].stdout)


@pytest.mark.parametrize("dtype", ["float32", "autocast"])
def test_matmul_templates_under_max_autotune_match_eager(dtype, monkeypatch):
    """Under max-autotune a linear and its GELU, a linear and its residual add, run as Triton matmul templates
    (`triton.gemm_templates="always"`: every tile configuration is launched while tuning), forward and backward,
    in float32 and under bfloat16 autocast; then measured against the extern calls, as by default. Two tile
    configurations (a small one and a Hopper-sized one) keep the compiles inside `./dev gpu`'s time."""
    from ember_codegen_triton import _gemm

    monkeypatch.setattr(_gemm, "CONFIGS", ((64, 64, 32, 4, 4), (128, 128, 32, 8, 3)))
    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    model = Mlp().cuda()
    x = torch.randn(512, 256, device="cuda", requires_grad=True)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=2e-2, atol=2e-2)
    for choice in ("always", "measure"):
        compiled = ember.compile(model, mode="max-autotune-no-cudagraphs", options={"triton.gemm_templates": choice})
        with ember.record_events() as rec, torch.autocast("cuda", torch.bfloat16, enabled=dtype == "autocast"):
            assert_same_training_step(model, compiled, [x], **tol)
        tuned = [e for e in rec.kinds("kernel_tuned") if e.get("kernel").endswith(("_mm", "_addmm"))]
        assert tuned, "no matmul template was offered"
        if choice == "always":
            assert all(e.get("choice") != [0, 0, 0, 0, 0] for e in tuned)
        assert not rec.kinds("fallback"), [e.message for e in rec.kinds("fallback")]
        torch._dynamo.reset()


def test_a_slice_from_before_the_start_and_a_clamp_at_zero_match_eager_on_cuda(frontend):
    """On CUDA, what the CPU's tests of two lowering rules check (tests/test_training.py, tests/test_semantics.py):
    the gradient of `x[:, -3:]` of 2 columns (its slice_scatter once started writing at -1) and `1 / relu(x)` at
    -0.0 and NaN (relu keeps x where it equals the bound, as eager does)."""
    fn = lambda x: x[:, -3:].sin()  # noqa: E731
    x = torch.randn(4, 2, device="cuda")
    got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = compiled_on_cuda(fn, frontend)(got_x), fn(want_x)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(got_x.grad, want_x.grad)
    z = torch.tensor([-0.0, 0.0, float("nan"), -1.0, 2.0] * 8, device="cuda")
    for clamp in (torch.relu, lambda t: t.clamp(0, 1)):
        reciprocal = lambda t, clamp=clamp: 1 / clamp(t)  # noqa: E731
        torch.testing.assert_close(compiled_on_cuda(reciprocal, frontend)(z), reciprocal(z), equal_nan=True)


def test_sizes_of_a_fractional_scale_match_eager_on_cuda(frontend):
    """On CUDA, what tests/test_dynamic_shapes.py checks on the CPU: `F.interpolate(scale_factor=0.29)` and
    `x[:math.floor(n * 0.29)]` of symbolic sizes, whose sizes Triton computes in float64 (0.29 * 100 is
    28.999999999999996: 28 rows, as eager; in float32 or exact arithmetic it would be 29), forward and backward.
    The Triton kernels must run: no fallback to the interpreter codegen."""
    import math

    import torch.nn.functional as F

    def fn(x):
        return F.interpolate(x, scale_factor=0.29, mode="nearest"), x[:, :, :math.floor(x.shape[2] * 0.29)] * 2

    compiled = ember.compile(fn, dynamic=True, options={"frontend": frontend})
    with ember.record_events() as rec:
        for rows in (100, 37):
            x = torch.randn(2, 3, rows, 10, device="cuda")
            got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
            got, want = compiled(got_x), fn(want_x)
            torch.testing.assert_close(got, want)
            sum(t.sum() for t in got).backward()
            sum(t.sum() for t in want).backward()
            torch.testing.assert_close(got_x.grad, want_x.grad)
    assert "triton" in codegens(rec)
    assert not [e.message for e in rec.kinds("fallback") if "interpreter codegen" in e.message
                and "appear in no input's shape" not in e.message]
