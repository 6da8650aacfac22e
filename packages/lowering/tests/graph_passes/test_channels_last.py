"""Pass `channels-last`: a graph with convolutions runs them and the work between them in NHWC, converted once at
its edges, its user outputs in their old layouts. Checked on CUDA graphs without a GPU (and on CPU graphs): the
rewritten graph's text and layouts, verification, and its outputs and gradients (run on the CPU by ember-core's
interpreter) against the original's; and the layout's choice, timed on the CPU with the backward where the graph
trains."""

from __future__ import annotations

import collections
import dataclasses

import torch
import torch.nn.functional as F
from ember_core import get_plugin_manager, interpret, memory_format_of, verify
from ember_core.testing import graph_to_device
from ember_lowering.graph_passes import ChannelsLast
from ember_lowering.graph_passes import _conv_layouts as layouts
from ember_lowering.graph_passes._conv_layouts import Conv, worth_channels_last
from lowering_checks import trace
from torch.utils._python_dispatch import TorchDispatchMode

ALWAYS = ChannelsLast(decide=lambda convs: True)


def small_cnn(x, w1, w2, scale, wl):
    y = F.relu(F.conv2d(x, w1, padding=1) * scale[None, :, None, None])
    y = F.max_pool2d(F.conv2d(y, w2, padding=1) + y, 2)
    return (F.linear(y.flatten(1), wl), y)


def cnn_args():
    return (torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6, 6, 3, 3), torch.randn(6),
            torch.randn(5, 6 * 4 * 4))


def on_cuda(graph):
    return graph_to_device(graph, "cuda:0")


def relaid(fn, args):
    graph = on_cuda(trace(fn, *args))
    after = ALWAYS.run(graph)
    verify(after)
    return graph, after


def run_both(before, after, args, grad=False):
    results = []
    for graph in (before, after):
        inputs = [a.clone().requires_grad_(grad) for a in args]
        outs = interpret(graph_to_device(graph, "cpu"), inputs)
        if grad:
            sum(o.float().square().sum() for o in outs).backward()
        results.append(([o.detach() for o in outs], [i.grad for i in inputs] if grad else []))
    return results


def test_a_cnn_converts_its_input_and_weights_once_and_keeps_its_outputs_layouts():
    before, after = relaid(small_cnn, cnn_args())
    clones = [n for n in after.nodes if n.op == "aten.clone.default"]
    converted = [n.args[0].name for n in clones if n.kwargs["memory_format"] == torch.channels_last]
    assert converted == ["arg0_1", "arg1_1", "arg2_1"]  # the input, both weights; not the first conv's output
    convs = [n for n in after.nodes if n.op == "aten.convolution.default"]
    for n in convs:
        v = after.values[n.outputs[0]]
        assert memory_format_of(v) == torch.channels_last, n.outputs[0]
    for old, new in zip(before.outputs, after.outputs):  # same layouts; the 4-d one copied back to NCHW
        assert after.values[new.name].stride == before.values[old.name].stride
    assert "memory_format=torch.channels_last" in str(after)
    (want, _), (got, _) = run_both(before, after, cnn_args())
    for w, g in zip(want, got):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1.3e-6, atol=1e-5)


def test_gradients_through_the_channels_last_graph_are_as_accurate_as_eagers():
    """Against a float64 run of the original graph: NHWC convolutions sum in another order, so the float32 results
    differ from NCHW's in the last bits; each error is at most 3x the original's (the accuracy rule)."""
    before, after = relaid(small_cnn, cnn_args())
    args = cnn_args()
    (ref, ref_grads), _ = run_both(before, before, [a.double() for a in args], grad=True)
    (want, want_grads), (got, got_grads) = run_both(before, after, args, grad=True)
    for r, w, g in zip([*ref, *ref_grads], [*want, *want_grads], [*got, *got_grads]):
        floor = 1e-6 * r.abs().max()
        assert (g - r).abs().max() <= 3 * (w - r).abs().max() + floor


def test_a_flatten_the_new_layout_cannot_view_becomes_a_reshape():
    def flat(x, w):
        return (F.conv2d(x, w).view(2, -1) * 2,)  # (a returned view views a copy in the declared layout: below)
    args = (torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3))
    before, after = relaid(flat, args)
    assert [n.op for n in after.nodes if "view" in n.op or "reshape" in n.op] == ["aten.reshape.default"]
    (want, _), (got, _) = run_both(before, after, args)
    torch.testing.assert_close(got[0], want[0], rtol=1.3e-6, atol=1e-5)


def test_returned_views_of_a_relaid_value_view_it_in_its_declared_layout():
    """A view the graph returns of a value that became channels-last views the value's copy in its declared layout
    (the copy the graph returns, when it returns the value too): eager's strides, and storage shared as eager's
    views share it. Before, no copy gave such a view its strides back and the graph stayed NCHW."""
    def heads(x, w1, w2):
        y = F.relu(F.conv2d(x, w1, padding=1))
        z = F.conv2d(y, w2, padding=1)
        return y, y.unsqueeze(0), y.permute(0, 2, 3, 1), y[:, :2], z.transpose(1, 2)

    args = (torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6, 6, 3, 3))
    before, after = relaid(heads, args)
    assert after is not before
    convs = [n for n in after.nodes if n.op == "aten.convolution.default"]
    assert all(memory_format_of(after.values[n.outputs[0]]) == torch.channels_last for n in convs)
    copies = [n for n in after.nodes if n.op == "aten.clone.default"
              and n.kwargs["memory_format"] == torch.contiguous_format]
    assert len(copies) == 2  # y's, which its views read, and z's, which its transpose reads
    for copy in copies:  # on the GPU the graph was declared on, in its source's dtype (the interpreter cannot tell)
        made, source = after.values[copy.outputs[0]], after.values[copy.args[0].name]
        assert (made.device, made.dtype) == ("cuda:0", source.dtype)
        assert memory_format_of(made) == torch.contiguous_format
    (want, _), (got, _) = run_both(before, after, args)
    assert [g.stride() for g in got] == [w.stride() for w in want]
    ptrs = [[a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in outs] for outs in (got, want)
            for a in outs]
    assert ptrs[:5] == ptrs[5:]
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5)


def test_graphs_without_convolutions_on_other_devices_or_declined_are_left_alone():
    args = cnn_args()
    cpu = trace(small_cnn, *args)
    assert ChannelsLast(decide=lambda convs: True, device_types=("cuda",)).run(cpu) is cpu
    assert ALWAYS.run(cpu) is not cpu
    plain = on_cuda(trace(lambda x: (x.relu() * 2,), torch.randn(4, 4)))
    assert ALWAYS.run(plain) is plain
    seen = []
    cuda = on_cuda(cpu)
    assert ChannelsLast(decide=lambda convs: seen.extend(convs) or False).run(cuda) is cuda
    assert seen == [Conv(1, 4, 6, 2 * 6 * 8 * 8 * 4 * 9), Conv(1, 6, 6, 2 * 6 * 8 * 8 * 6 * 9)]


def test_mostly_depthwise_graphs_stay_nchw():
    dense = Conv(1, 64, 64, 10_000)
    depthwise = Conv(64, 1, 1, 12_000)
    assert worth_channels_last([dense]) and not worth_channels_last([dense, depthwise])
    assert worth_channels_last([Conv(1, 3, 64, 100), Conv(64, 1, 1, 50)])


def test_the_layout_is_measured_once_and_kept_where_a_gpu_can_measure(monkeypatch, tmp_path):
    """`measure_layouts` times the graph's convolutions in both layouts (here on the CPU, as it would on the GPU) and
    keeps the faster; a second graph with the same convolutions reads the choice from disk. Without a GPU the rule
    decides a CUDA graph's layout."""
    monkeypatch.setattr(layouts, "TUNER", layouts.Tuner("channels_last_test", "test", repeats=1))
    gpu = f"stand-in {tmp_path.name}"  # a name no earlier run has stored a choice under
    seen = []
    graph = on_cuda(trace(small_cnn, *cnn_args()))
    ChannelsLast(decide=lambda convs: seen.extend(convs) or False).run(graph)
    assert seen[0].x == (2, 4, 8, 8) and seen[0].w == (6, 4, 3, 3) and seen[0].padding == (1, 1)
    assert layouts.measured(seen) is worth_channels_last(seen) is True  # no GPU here: the rule
    as_if_gpu = [dataclasses.replace(c, device="cpu") for c in seen]
    timed = []

    def fake_time(launch, choice, *rest):
        launch(choice)  # the convolutions run, in that layout
        timed.append(choice)
        return 1.0 if choice == layouts.NHWC else 0.5  # NCHW faster here

    monkeypatch.setattr(layouts.TUNER, "_time", fake_time)
    monkeypatch.setattr(layouts, "CPU_TUNER", layouts.TUNER)
    assert layouts.measure_layouts(as_if_gpu, torch.device("cpu"), gpu) is False
    assert sorted(timed) == [layouts.NCHW, layouts.NHWC]
    timed.clear()
    assert layouts.measure_layouts(as_if_gpu, torch.device("cpu"), gpu) is False and timed == []
    assert layouts.measure_layouts(as_if_gpu, torch.device("cpu"), gpu + " 2") is False and len(timed) == 2


def cpu_tuner(monkeypatch, tmp_path, nhwc: float, nchw: float = 1.0) -> list:
    """A fresh CPU tuner whose timings are `nhwc` and `nchw` (after running each launch, whose ATen calls the
    returned list gets: one list per timing)."""
    monkeypatch.setattr(layouts, "CPU_TUNER", layouts.Tuner(f"channels_last_cpu_{tmp_path.name}", "test", repeats=1,
                                                            margin=layouts.CPU_MARGIN))
    calls = []

    def fake_time(launch, choice, *rest):
        with AtenCalls() as seen:
            launch(choice)
        calls.append((choice, seen.ops))
        return nhwc if choice == layouts.NHWC else nchw

    monkeypatch.setattr(layouts.CPU_TUNER, "_time", fake_time)
    return calls


class AtenCalls(TorchDispatchMode):
    def __enter__(self):
        self.ops = collections.Counter()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def test_a_cpu_graph_runs_nhwc_only_where_that_is_timed_clearly_faster(monkeypatch, tmp_path):
    """On the CPU NCHW is the default: NHWC must be `CPU_MARGIN` faster (the timing leaves out the graph's other
    kernels). The pass's default decision on a CPU graph is that timing."""
    graph = trace(small_cnn, *cnn_args())
    cpu_tuner(monkeypatch, tmp_path, nhwc=0.95)
    assert ChannelsLast().run(graph) is graph  # 5% faster: not enough
    cpu_tuner(monkeypatch, tmp_path / "again", nhwc=0.8)
    after = ChannelsLast().run(graph)
    assert after is not graph and "memory_format=torch.channels_last" in str(after)


def needing_grad(graph, inputs):
    """The graph's values marked as capture marks them when `inputs` require grad."""
    values = {n: v.replace(requires_grad=n in inputs) for n, v in graph.values.items()}
    for node in graph.nodes:
        reads = any(a.name in values and values[a.name].requires_grad for a in node.args if hasattr(a, "name"))
        values.update({o: values[o].replace(requires_grad=reads) for o in node.outputs})
    return graph.replace(values=values)


def test_a_training_graphs_timing_runs_the_backward_and_converts_weights_as_the_graph_would(monkeypatch, tmp_path):
    """Where the graph trains, each convolution's backward is timed with the gradients it needs (here: no input
    gradient for the first convolution, whose input does not require grad), and NHWC converts each weight twice
    (forward and backward) as the rewritten graph does; under no_grad only the forwards run."""
    graph = needing_grad(trace(small_cnn, *cnn_args()), ["arg1_1", "arg2_1", "arg3_1", "arg4_1"])
    seen = []
    ChannelsLast(decide=lambda convs: seen.extend(convs) or False).run(graph)
    assert [c.grads for c in seen] == [(False, True, False), (True, True, False)]
    calls = cpu_tuner(monkeypatch, tmp_path, nhwc=0.5)
    assert layouts.measured(seen) is True
    ops = dict(calls)
    assert ops[layouts.NCHW]["aten.convolution_backward"] == 2 and ops[layouts.NHWC]["aten.convolution_backward"] == 2
    assert ops[layouts.NCHW]["aten.clone"] == 0
    assert ops[layouts.NHWC]["aten.clone"] == 2 * 2 + 1  # each weight twice, the graph's input once

    with torch.no_grad():
        seen.clear()
        ChannelsLast(decide=lambda convs: seen.extend(convs) or False).run(graph)
    assert [c.grads for c in seen] == [(False, False, False)] * 2
    calls = cpu_tuner(monkeypatch, tmp_path / "inference", nhwc=0.5)
    layouts.measured(seen)
    assert all("aten.convolution_backward" not in ops for _, ops in calls)


def test_the_plugin_registers_it_after_capture_for_cuda_and_cpu_graphs():
    """It moved here from ember-codegen-triton: a registration that lost CUDA would leave GPU CNNs NCHW with no
    test on a CPU machine failing. Without a GPU a CUDA graph is decided by the rule (NHWC for this CNN)."""
    (registered,) = [p for p in get_plugin_manager().registry.passes("post_capture") if p.name == ChannelsLast.id]
    assert registered.plugin == "lowering" and set(registered.devices) == {"cuda", "cpu"}
    graph = on_cuda(trace(small_cnn, *cnn_args()))
    after = registered.impl.run(graph)
    assert after is not graph and verify(after) is not None
    assert {v.device for v in after.values.values() if v.type == "tensor"} == {"cuda:0"}
