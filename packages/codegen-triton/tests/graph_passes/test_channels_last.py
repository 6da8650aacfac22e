"""Pass `channels-last`: a CUDA graph with convolutions runs them and the work between them in NHWC, converted once
at its edges, its user outputs in their old layouts. Checked without a GPU: the rewritten graph's text and layouts,
verification, and its outputs and gradients (run on the CPU by ember-core's interpreter) against the original's."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from ember_codegen_triton.graph_passes import ChannelsLast
from ember_codegen_triton.graph_passes.channels_last import Conv, worth_channels_last
from ember_core import interpret, memory_format_of, record_events, verify
from helpers import CODEGEN, on_cuda, on_device, trace

ALWAYS = ChannelsLast(decide=lambda convs: True)


def small_cnn(x, w1, w2, scale, wl):
    y = F.relu(F.conv2d(x, w1, padding=1) * scale[None, :, None, None])
    y = F.max_pool2d(F.conv2d(y, w2, padding=1) + y, 2)
    return (F.linear(y.flatten(1), wl), y)


def cnn_args():
    return (torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6, 6, 3, 3), torch.randn(6),
            torch.randn(5, 6 * 4 * 4))


def relaid(fn, args):
    graph = on_cuda(trace(fn, *args))
    after = ALWAYS.run(graph)
    verify(after)
    return graph, after


def run_both(before, after, args, grad=False):
    results = []
    for graph in (before, after):
        inputs = [a.clone().requires_grad_(grad) for a in args]
        outs = interpret(on_device(graph, "cpu"), inputs)
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


def test_graphs_without_convolutions_on_the_cpu_or_declined_are_left_alone():
    args = cnn_args()
    cpu = trace(small_cnn, *args)
    assert ALWAYS.run(cpu) is cpu
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


def test_the_nhwc_graphs_kernels_match_eager_in_tritons_interpreter():
    """The rewritten graph through the Triton codegen (its kernels over NHWC values, run by Triton's interpreter on
    the CPU): eager's outputs, in their layouts, and no fallback."""
    args = cnn_args()
    _, after = relaid(small_cnn, args)
    with record_events() as rec:
        compiled = CODEGEN.compile(on_device(after, "cpu"), list(args), {})
        got = compiled([a.clone() for a in args])
    assert not rec.kinds("fallback"), [e.data["reason"] for e in rec.kinds("fallback")]
    for g, w in zip(got, small_cnn(*args)):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_the_layout_is_measured_once_and_kept_where_a_gpu_can_measure(monkeypatch, tmp_path):
    """`measured` times the graph's convolutions in both layouts (here on the CPU, as it would on the GPU) and keeps
    the faster; a second graph with the same convolutions reads the choice from disk. Without a GPU the rule
    decides."""
    from ember_codegen_triton.graph_passes import channels_last
    from ember_lowering.codegen import Tuner

    monkeypatch.setattr(channels_last, "TUNER", Tuner("channels_last_test", "test", repeats=1))
    gpu = f"stand-in {tmp_path.name}"  # a name no earlier run has stored a choice under
    seen = []
    graph = on_cuda(trace(small_cnn, *cnn_args()))
    ChannelsLast(decide=lambda convs: seen.extend(convs) or False).run(graph)
    assert seen[0].x == (2, 4, 8, 8) and seen[0].w == (6, 4, 3, 3) and seen[0].padding == (1, 1)
    assert channels_last.measured(seen) is worth_channels_last(seen) is True  # no GPU here: the rule
    cpu = [dataclasses.replace(c, device="cpu") for c in seen]
    timed = []

    def fake_time(launch, choice, *rest):
        launch(choice)  # the convolutions run, in that layout
        timed.append(choice)
        return 1.0 if choice == channels_last.NHWC else 0.5  # NCHW faster here

    monkeypatch.setattr(channels_last.TUNER, "_time", fake_time)
    assert channels_last.measure_layouts(cpu, torch.device("cpu"), gpu) is False
    assert sorted(timed) == [channels_last.NCHW, channels_last.NHWC]
    timed.clear()
    assert channels_last.measure_layouts(cpu, torch.device("cpu"), gpu) is False and timed == []
    assert channels_last.measure_layouts(cpu, torch.device("cpu"), gpu + " 2") is False and len(timed) == 2
