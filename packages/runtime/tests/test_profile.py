"""`profile` reads ember's ranges from torch.profiler: a row per kernel of each graph with its median time and
what the plan says it costs, a fraction of the machine's measured limits, and the table it prints. Here a
function opens the ranges a compiled graph's profiled twin would (no codegen needed)."""

from __future__ import annotations

import io
import time

import pytest
import torch
from ember_core import KernelCost, profile_range, profiler_active, register_costs
from ember_runtime import Profiler, machine_limits

COSTS = register_costs("fake_graph", "toy", "cpu", [
    KernelCost("k0_mul_pointwise_1024", "kernel", 8192),
    KernelCost("e1_aten.mm.default", "extern", 3072, flops=2 * 16 * 16 * 16, op="aten.mm.default", dtype="float32"),
])


def fake_compiled(x):
    """What a compiled graph does: ranges only while a profiler records."""
    if not profiler_active():
        return x * 2
    with profile_range(COSTS.label):
        with profile_range("k0_mul_pointwise_1024"):
            time.sleep(1e-4)
        with profile_range("e1_aten.mm.default"):
            time.sleep(2e-4)
        with profile_range("unknown_range"):
            pass
    return x * 2


def test_rows_follow_the_ranges_and_the_plans_costs():
    out = io.StringIO()
    report = Profiler(warmup=1, runs=4, file=out)(fake_compiled, torch.ones(3))
    assert [k.name for k in report.kernels] == ["k0_mul_pointwise_1024", "e1_aten.mm.default"]
    k0, mm = report.kernels
    assert k0.graph == "fake_graph" and k0.calls == 1 and k0.seconds >= 1e-4 and k0.bytes == 8192
    assert k0.bandwidth == pytest.approx(8192 / k0.seconds) and k0.flops == 0
    assert mm.flop_rate == pytest.approx(mm.flops / mm.seconds) and mm.seconds > k0.seconds
    limits = machine_limits("cpu")
    assert k0.fraction == pytest.approx(k0.bandwidth / limits.bandwidth)
    assert mm.fraction == pytest.approx(mm.flop_rate / limits.flops("float32"))
    [graph] = report.graphs
    assert graph.graph == "fake_graph" and graph.codegen == "toy" and graph.seconds >= k0.seconds + mm.seconds
    table = out.getvalue()
    assert "k0_mul_pointwise_1024" in table and "e1_aten.mm.default" in table and "unknown_range" not in table
    assert "limits of cpu" in table and not report.compiled
    torch.testing.assert_close(report.result, torch.ones(3) * 2)


def test_limits_are_measured_once_per_process():
    limits = machine_limits("cpu")
    assert machine_limits(torch.device("cpu")) is limits
    assert limits.bandwidth > 0 and limits.flops("float32") > 0
    assert limits.measured_flops()["float32"] == limits.flops("float32")


def test_settings_are_checked():
    with pytest.raises(ValueError):
        Profiler(runs=0)
