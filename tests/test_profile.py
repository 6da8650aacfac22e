"""`ember.profile` and torch.profiler see ember's kernels by name: a row per kernel and extern call with its time,
the bytes its plan says it moves and the FLOPs of matmuls; forward and backward graphs of a training step; the
profiled function's results equal eager's."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ember
import ember_core
import pytest
import torch
import torch.nn.functional as F
from ember_runtime import Profiler
from models import MLP

QUIET = Profiler(warmup=1, runs=3, show=False)


def softmax_layer_norm(x, w, b):
    return F.layer_norm(torch.softmax(x, -1), (x.shape[-1],), w, b)


def kernel_names_of(events) -> list[str]:
    """The kernels and extern calls of each compiled graph, as the codegen registered them."""
    names = []
    for e in events.kinds("kernels_generated"):
        names += [k.name for k in ember_core.costs_of(e.get("range")).kernels]
    return names


def test_table_lists_each_kernel_of_softmax_and_layer_norm(capsys):
    x, w, b = torch.randn(64, 128), torch.randn(128), torch.randn(128)
    with ember.record_events() as ev:
        report = ember.profile(ember.compile(softmax_layer_norm), x, w, b)
    expected = kernel_names_of(ev)
    assert expected and [k.name for k in report.kernels] == expected
    assert all(k.seconds > 0 and k.calls == 1 and k.bytes > 0 for k in report.kernels)
    assert any("softmax" in k.name for k in report.kernels)
    printed = capsys.readouterr().out
    assert all(name in printed for name in expected) and "GB/s" in printed and "limits of cpu" in printed
    torch.testing.assert_close(report.result, softmax_layer_norm(x, w, b))


def test_bytes_of_a_pointwise_kernel_are_what_it_reads_and_writes():
    x = torch.randn(1 << 20)
    report = QUIET(ember.compile(lambda x: x * 2 + 1), x)
    [kernel] = report.kernels
    assert kernel.kind == "kernel" and kernel.bytes == 2 * 4 * (1 << 20)  # 4 MB read, 4 MB written
    assert kernel.bandwidth == pytest.approx(kernel.bytes / kernel.seconds) and 0 < kernel.fraction
    torch.testing.assert_close(report.result, x * 2 + 1)


def test_matmul_extern_counts_flops_from_its_shapes():
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    report = QUIET(ember.compile(lambda a, b: (a @ b).relu()), a, b)
    [mm] = [k for k in report.kernels if k.kind == "extern"]
    assert mm.op == "aten.mm.default" and mm.name.endswith("aten.mm.default")
    assert mm.flops == 2 * 64 * 32 * 48 and mm.bytes == 4 * (64 * 32 + 32 * 48 + 64 * 48)
    assert mm.flop_rate > 0 and mm.fraction > 0
    torch.testing.assert_close(report.result, (a @ b).relu())


def test_training_step_shows_forward_and_backward_graphs():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(16, 16)
    eager = copy.deepcopy(model)
    compiled = ember.compile(model)

    def step(model, net):
        model.zero_grad(set_to_none=True)
        loss = net(x).pow(2).mean()
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in model.parameters()]

    report = QUIET(step, model, compiled)
    graphs = {k.graph for k in report.kernels}
    assert any("_forward" in g for g in graphs) and any("_backward" in g for g in graphs)
    assert {"addmm", "mm"} <= {k.op.split(".")[1] for k in report.kernels if k.kind == "extern"}
    assert all(k.seconds > 0 for k in report.kernels) and not report.compiled
    torch.testing.assert_close(report.result, step(eager, eager))


def test_torch_profiler_shows_ember_kernel_names():
    x, w, b = torch.randn(8, 32), torch.randn(32), torch.randn(32)
    compiled = ember.compile(softmax_layer_norm)
    with ember.record_events() as ev:
        compiled(x, w, b)
    with torch.profiler.profile() as prof:
        out = compiled(x, w, b)
    keys = {e.key for e in prof.key_averages()}
    names = kernel_names_of(ev)
    assert names and set(names) <= keys
    assert any(k.startswith("ember:") for k in keys)
    torch.testing.assert_close(out, softmax_layer_norm(x, w, b))


def test_a_plain_function_is_compiled_by_profile():
    x = torch.randn(32, 64)
    report = QUIET(lambda x: torch.softmax(x, -1) * 3, x)
    assert report.compiled and report.kernels and report.graphs
    torch.testing.assert_close(report.result, torch.softmax(x, -1) * 3)


def test_a_function_compiled_by_ember_is_not_compiled_again():
    compiled = ember.compile(lambda x: x.sum(-1))
    with ember.record_events() as ev:
        report = QUIET(compiled, torch.randn(4, 8))
    assert not report.compiled and len(ev.kinds("graph_captured")) == 1


def test_triton_codegen_in_its_interpreter_profiles(tmp_path):
    """The Triton codegen's kernels (TRITON_INTERPRET=1, set before Triton loads) appear in the table by name."""
    script = textwrap.dedent("""
        import ember, torch
        from ember_runtime import Profiler
        f = ember.compile(lambda x: torch.softmax(x, -1) + 1, options={"codegen.cpu": "triton"})
        x = torch.randn(8, 32)
        report = Profiler(warmup=1, runs=2)(f, x)
        torch.testing.assert_close(report.result, torch.softmax(x, -1) + 1)
        assert report.kernels and all(k.seconds > 0 for k in report.kernels), report
        assert report.graphs[0].codegen == "triton"
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1", "EMBER_CACHE_DIR": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ember_k0_softmax_reduce_8x32" in done.stdout


@pytest.mark.gpu
def test_cuda_kernels_have_gpu_times():
    model = MLP().cuda()
    x = torch.randn(256, 16, device="cuda")
    report = QUIET(ember.compile(model), x)
    assert report.kernels and all(k.device.startswith("cuda") and k.seconds > 0 for k in report.kernels)
    assert any(k.name.startswith("ember_k") for k in report.kernels)
    torch.testing.assert_close(report.result, model(x))
    with torch.profiler.profile() as prof:
        report.result = ember.compile(model)(x)
        torch.cuda.synchronize()
    assert any(e.key.startswith("ember_k") for e in prof.key_averages())
