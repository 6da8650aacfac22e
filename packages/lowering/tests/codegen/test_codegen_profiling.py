"""What a program's steps cost for profilers (bytes from the plan, FLOPs of matmuls and convolutions), and the
wrapper's profiled twin: the normal path only checks for a profiler; the twin puts each step in a named range."""

from __future__ import annotations

import pytest
import torch
from ember_core import costs_of, record_events
from ember_lowering import lower
from ember_lowering.codegen import _wrapper, flop_rules, plan_program, program_costs
from lowering_checks import trace
from test_codegen_layer import ToyCodegen


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))


def costs_of_fn(fn, *args):
    program = plan_program(lower(trace(fn, *args), emit_event=False), ToyCodegen().print_kernel)
    return {c.name: c for c in program_costs(program)}


def test_a_pointwise_kernel_moves_what_it_reads_and_writes():
    [cost] = costs_of_fn(lambda x: (x * 2 + 1,), torch.randn(1024, 256)).values()
    assert cost.kind == "kernel" and cost.name.startswith("k0_") and cost.bytes == 2 * 4 * 1024 * 256
    assert cost.flops == 0


def test_a_broadcast_input_counts_its_elements_once():
    [cost] = costs_of_fn(lambda x, b: (x + b,), torch.randn(64, 32), torch.randn(32)).values()
    assert cost.bytes == 4 * (64 * 32 + 32 + 64 * 32)


def test_matmul_and_convolution_flops_come_from_shapes():
    mm = costs_of_fn(lambda a, b: (a @ b,), torch.randn(8, 16), torch.randn(16, 4))
    [ext] = mm.values()
    assert ext.kind == "extern" and ext.name == "e0_aten.mm.default" and ext.flops == 2 * 8 * 16 * 4
    assert ext.bytes == 4 * (8 * 16 + 16 * 4 + 8 * 4) and ext.dtype == "float32"
    conv = costs_of_fn(lambda x, w: (torch.nn.functional.conv2d(x, w, padding=1),), torch.randn(2, 3, 5, 5),
                       torch.randn(6, 3, 3, 3))
    [ext] = [c for c in conv.values() if c.kind == "extern"]
    assert ext.op == "aten.convolution.default" and ext.flops == 2 * (2 * 6 * 5 * 5) * (3 * 3 * 3)
    assert {"aten.mm.default", "aten.addmm.default", "aten.convolution_backward.default"} <= set(flop_rules)


def test_the_normal_path_only_checks_and_the_twin_ranges_each_step(monkeypatch):
    opened = []
    monkeypatch.setattr(_wrapper, "profile_range", lambda name: opened.append(name) or torch.no_grad())
    x, w = torch.randn(6, 10), torch.randn(10, 3)
    with record_events() as ev:
        compiled = ToyCodegen().compile(trace(lambda x, w: ((x.exp() @ w).relu(),), x, w))
    fast, twin = compiled.source.split("# ---- wrapper (Python) ----\n")[1].split("\ndef graph_graph_profiled")
    assert fast.count("_profiling()") == 1 and "_range" not in fast
    assert twin.count("with _range(") == 4  # the graph, two segments (the toy's default: one range each), the mm
    torch.testing.assert_close(compiled([x, w])[0], (x.exp() @ w).relu())
    assert opened == []
    with torch.profiler.profile():
        torch.testing.assert_close(compiled([x, w])[0], (x.exp() @ w).relu())
    [generated] = ev.kinds("kernels_generated")
    assert opened == [generated.data["range"], "ember_seg0", "e1_aten.mm.default", "ember_seg1"]
    assert [k.name for k in costs_of(generated.data["range"]).kernels][1] == "e1_aten.mm.default"
