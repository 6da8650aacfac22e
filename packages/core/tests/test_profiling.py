"""The profiling meeting point: the wrappers' check follows torch's profiler, ranges show in its trace, and the
table of graph costs labels each live graph uniquely."""

from __future__ import annotations

import gc

import torch
from ember_core import KernelCost, costs_of, profile_range, profiler_active, register_costs


def test_the_check_is_true_only_while_a_profiler_records():
    assert not profiler_active()
    with torch.profiler.profile():
        assert profiler_active()
    assert not profiler_active()


def test_ranges_appear_in_the_trace_by_name():
    with torch.profiler.profile() as prof:
        with profile_range("ember:g"), profile_range("k0_softmax_reduce_8x32"):
            torch.ones(2)
    events = {e.name: e for e in prof.events()}
    assert events["k0_softmax_reduce_8x32"].cpu_parent.name == "ember:g"


def test_graphs_of_one_name_with_other_costs_get_other_labels():
    a = register_costs("g_test", "cpp", "cpu", [KernelCost("k0", "kernel", 8)])
    b = register_costs("g_test", "cpp", "cpu", [KernelCost("k0", "kernel", 16)])
    again = register_costs("g_test", "cpp", "cpu", [KernelCost("k0", "kernel", 8)])
    assert a.label == "ember:g_test" and b.label == "ember:g_test~2" and again is a
    assert costs_of(b.label) is b and b.kernel("k0").bytes == 16 and b.kernel("k1") is None


def test_an_entry_goes_with_its_graph():
    entry = register_costs("g_gone", "cpp", "cpu", [])
    label = entry.label
    del entry
    gc.collect()
    assert costs_of(label) is None
