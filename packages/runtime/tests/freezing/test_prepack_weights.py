from __future__ import annotations

import contextlib
import importlib

import pytest
import torch
import torch.nn.functional as F
from _freezing_graphs import ops, run_frozen, traced
from ember_core import Ref, verify
from ember_runtime.freezing import freeze

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")
prepack = importlib.import_module("ember_runtime.freezing.prepack_weights")  # the module, not its function


@pytest.fixture(autouse=True)
def any_size(request, monkeypatch):
    """These tests' small ops are rewritten too (but in the test of the size limit itself)."""
    if "size" not in request.node.name:
        monkeypatch.setattr(prepack, "MIN_MACS", dict.fromkeys(prepack.MIN_MACS, 0))

# a packed convolution whose result the graph returns, and the copy of it back to eager's layout
RETURNED_CONV = ["mkldnn._convolution_pointwise.default", "aten.clone.default"]
ACTIVATIONS = {
    "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "relu6": F.relu6, "leaky_relu": lambda t: F.leaky_relu(t, 0.2),
}


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_convolution_with_activation_is_one_onednn_call(act):
    def f(x, w, b):
        return ACTIVATIONS[act](F.conv2d(x, w, b, stride=2, padding=1))

    args = [torch.randn(2, 4, 9, 9), torch.randn(8, 4, 3, 3), torch.randn(8)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    assert ops(result.graph) == RETURNED_CONV
    assert result.counts["fused_epilogues"] == 1
    assert result.graph.constants[result.graph.nodes[0].args[1].name].tensor.is_mkldnn
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["relu", "gelu", "silu"])
def test_linear_with_activation_is_one_onednn_call(act):
    def f(x, w, b):
        return ACTIVATIONS[act](F.linear(x, w, b))

    args = [torch.randn(3, 16), torch.randn(8, 16), torch.randn(8)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    assert ops(result.graph) == ["mkldnn._linear_pointwise.default"]
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_linear_on_3d_input_fuses_the_activation_after_the_view(act):
    """`F.linear` on [B, T, D] is view(addmm(view(x))): the activation reads the view of the result."""
    def f(x, w, b, w2):
        return F.linear(ACTIVATIONS[act](F.linear(x, w, b)), w2)

    args = [torch.randn(2, 3, 16), torch.randn(8, 16), torch.randn(8), torch.randn(4, 8)]
    result = freeze(traced(f, *args, params=(1, 2, 3)), args)
    assert [op for op in ops(result.graph) if "view" not in op] == ["mkldnn._linear_pointwise.default"] * 2
    assert result.counts["fused_epilogues"] == 1
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


def test_an_activation_after_a_view_read_elsewhere_stays():
    def f(x, w):
        y = F.linear(x, w)
        return F.gelu(y), y

    args = [torch.randn(2, 3, 16), torch.randn(8, 16)]
    result = freeze(traced(f, *args, params=(1,)), args)
    assert result.counts["fused_epilogues"] == 0
    torch.testing.assert_close(run_frozen(result, args), list(f(*args)), rtol=1e-4, atol=1e-4)


def test_convolution_output_layout_is_onednns():
    def f(x, w):
        return F.conv2d(x, w).sum(1)

    args = [torch.randn(1, 4, 5, 5), torch.randn(6, 4, 1, 1)]
    result = freeze(traced(f, *args, params=(1,)), args)
    conv = result.graph.nodes[0]
    assert conv.op == "mkldnn._convolution_pointwise.default"
    assert result.graph.values[conv.outputs[0]].stride == (150, 1, 30, 6)  # channels last, as its meta kernel says
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["none", "relu"])
def test_a_convolution_returned_by_the_graph_keeps_eagers_layout(act):
    """oneDNN writes channels-last; a result the graph returns is copied back to the layout eager gives it (a
    contiguous one here), so `out.view(...)` works as in eager."""
    def f(x, w, b):
        y = F.conv2d(x, w, b)
        return torch.relu(y) if act == "relu" else y

    args = [torch.randn(2, 4, 7, 7), torch.randn(6, 4, 3, 3), torch.randn(6)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    assert ops(result.graph) == RETURNED_CONV
    out = run_frozen(result, args)[0]
    assert out.stride() == f(*args).stride() == (150, 25, 5, 1)
    torch.testing.assert_close(out.view(2, -1), f(*args).view(2, -1), rtol=1e-4, atol=1e-4)


def test_nodes_reading_a_returned_convolution_read_onednns_layout():
    """A feature map the graph returns and a next convolution reads (a backbone's stages): the copy to eager's
    layout is only for the output, the next convolution reads oneDNN's channels-last result."""
    def f(x, w, w2):
        y = torch.relu(F.conv2d(x, w))
        return y, F.conv2d(y, w2) + 1

    args = [torch.randn(2, 3, 9, 9), torch.randn(8, 3, 3, 3), torch.randn(4, 8, 3, 3)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    first, copy, second = result.graph.nodes[:3]
    assert [first.op, copy.op, second.op] == [*RETURNED_CONV, "mkldnn._convolution_pointwise.default"]
    assert copy.args[0].name == first.outputs[0] == second.args[0].name
    # the layouts the graph declares, which codegens allocate (the ATen interpreter here keeps ATen's own)
    assert [result.graph.values[o.name].stride for o in result.graph.outputs] == [w.stride() for w in f(*args)]
    torch.testing.assert_close(run_frozen(result, args), list(f(*args)), rtol=1e-4, atol=1e-4)


def test_other_dtypes_and_grouped_activations_stay():
    def f(x, w):
        y = F.conv2d(x, w)
        return torch.relu(y), y

    args = [torch.randn(1, 4, 5, 5, dtype=torch.float64), torch.randn(6, 4, 1, 1, dtype=torch.float64)]
    assert ops(freeze(traced(f, *args, params=(1,)), args).graph)[0] == "aten.convolution.default"
    args = [a.float() for a in args]
    result = freeze(traced(f, *args, params=(1,)), args)
    assert result.counts["fused_epilogues"] == 0  # y is read twice: the relu stays apart
    torch.testing.assert_close(run_frozen(result, args), list(f(*args)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["silu", "hardswish", "hardsigmoid"])
def test_decomposed_activations_are_fused(act):
    decomposed = {"silu": lambda y: y * torch.sigmoid(y),
                  "hardswish": lambda y: y * torch.clamp(torch.clamp(y + 3, 0), None, 6) / 6,
                  "hardsigmoid": lambda y: torch.clamp(torch.clamp(y + 3, 0), None, 6) / 6}[act]

    def f(x, w):
        return decomposed(F.conv2d(x, w))

    args = [torch.randn(1, 4, 6, 6), torch.randn(8, 4, 3, 3)]
    result = freeze(traced(f, *args, params=(1,)), args)
    assert ops(result.graph) == RETURNED_CONV
    assert result.graph.nodes[0].args[7] == {"silu": "swish"}.get(act, act)
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


def test_a_step_read_elsewhere_stops_the_chain():
    def f(x, w):
        y = F.conv2d(x, w)
        s = torch.sigmoid(y)
        return y * s, s

    args = [torch.randn(1, 4, 6, 6), torch.randn(8, 4, 3, 3)]
    result = freeze(traced(f, *args, params=(1,)), args)
    assert result.counts["fused_epilogues"] == 0
    torch.testing.assert_close(run_frozen(result, args), list(f(*args)), rtol=1e-4, atol=1e-4)


def test_activations_after_the_convolution_stay_channels_last():
    """So that the next convolution reads its input without a reorder; a graph output keeps its layout through a
    copy, so that ATen's interpreter (every codegen's fallback) returns eager's layout too."""
    def f(x, w1, w2):
        y = torch.relu(F.conv2d(x, w1, padding=1) + x)
        return F.conv2d(y, w2, padding=1) * 2

    args = [torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3), torch.randn(4, 4, 3, 3)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    g = result.graph
    strides = {n.op: g.values[n.outputs[0]].stride for n in g.nodes}
    assert strides["aten.relu.default"] == (144, 1, 24, 4)
    assert strides["aten.mul.Tensor"] == (144, 1, 24, 4)  # as ATen computes it from the packed result
    copy = g.nodes[-1]
    assert copy.op == "aten.clone.default" and copy.kwargs == {"memory_format": torch.contiguous_format}
    assert copy.outputs[0] == g.outputs[0].name and g.values[copy.outputs[0]].stride == (144, 36, 6, 1)
    verify(g)
    (got,) = run_frozen(result, args)
    assert got.stride() == (144, 36, 6, 1)
    torch.testing.assert_close(got, f(*args), rtol=1e-4, atol=1e-4)


def test_the_nodes_after_a_relaid_output_read_it_before_its_copy():
    def f(x, w1, w2):
        y = torch.relu(F.conv2d(x, w1, padding=1)) + 1
        return y, F.conv2d(y, w2, padding=1)

    args = [torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3), torch.randn(4, 4, 3, 3)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    g = result.graph
    y = g.outputs[0].name
    (copy,) = [n for n in g.nodes if n.outputs == (y,)]
    assert copy.op == "aten.clone.default" and not any(Ref(y) in n.args for n in g.nodes)
    assert g.values[copy.args[0].name].stride == (144, 1, 24, 4)
    verify(g)
    got, want = run_frozen(result, args), list(f(*args))
    assert [t.stride() for t in got] == [t.stride() for t in want]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@contextlib.contextmanager
def threads(n: int):
    """Freeze at `n` threads: which convolutions are worth packing depends on it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def small_conv_and_linear(x, w1, w2):
    return F.linear(torch.relu(F.conv2d(x, w1)).flatten(1), w2)


SMALL_ARGS = [torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(5, 144)]


def test_ops_below_the_size_limit_stay_aten_at_one_thread():
    with threads(1):
        result = freeze(traced(small_conv_and_linear, *SMALL_ARGS, params=(1, 2)), SMALL_ARGS)
    assert result.counts["prepacked_weights"] == 0
    assert "aten.convolution.default" in ops(result.graph)


def test_small_convolutions_are_packed_from_two_threads_on_whatever_their_size():
    with threads(2):
        result = freeze(traced(small_conv_and_linear, *SMALL_ARGS, params=(1, 2)), SMALL_ARGS)
    assert result.counts["prepacked_weights"] == 1
    assert prepack.CONV_POINTWISE in ops(result.graph) and "aten.convolution.default" not in ops(result.graph)
    torch.testing.assert_close(run_frozen(result, SMALL_ARGS)[0], small_conv_and_linear(*SMALL_ARGS), rtol=1e-4,
                               atol=1e-4)


def test_a_depthwise_convolution_is_packed_at_any_size_and_thread_count():
    def f(x, w):
        return F.conv2d(x, w, padding=1, groups=8)

    args = [torch.randn(1, 8, 8, 8), torch.randn(8, 1, 3, 3)]
    with threads(1):
        result = freeze(traced(f, *args, params=(1,)), args)
    assert result.counts["prepacked_weights"] == 1
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 2])
def test_a_linear_layer_with_a_large_weight_is_packed_from_two_rows_on_whatever_its_size(rows):
    """Few multiply-adds, but a weight of 300K elements: reading it is the time, and the packed op reads it faster
    than addmm reads it transposed; on one row addmm runs a GEMV and stays."""
    args = [torch.randn(rows, 300), torch.randn(1024, 300), torch.randn(1024)]
    result = freeze(traced(F.linear, *args, params=(1, 2)), args)
    assert result.counts["prepacked_weights"] == (rows >= 2)
    torch.testing.assert_close(run_frozen(result, args)[0], F.linear(*args), rtol=1e-4, atol=1e-4)


def test_a_convolution_left_to_aten_after_a_packed_one_stays_channels_last(monkeypatch):
    """A 1x1 convolution below the size limit (at one thread) reads the packed one's channels-last result; ATen
    writes channels-last from it, and the graph says so (it declared NCHW, and each call copied the result back)."""
    monkeypatch.setattr(prepack, "MIN_MACS", {**prepack.MIN_MACS, prepack.CONVOLUTION: 50_000})

    def f(x, w1, w2):
        y = torch.relu(F.conv2d(x, w1, padding=1))
        return F.conv2d(y, w2).sigmoid() + 1

    args = [torch.randn(2, 8, 12, 12), torch.randn(8, 8, 3, 3), torch.randn(8, 8, 1, 1)]
    with threads(1):
        result = freeze(traced(f, *args, params=(1, 2)), args)
    strides = {n.op: result.graph.values[n.outputs[0]].stride for n in result.graph.nodes}
    assert result.counts["prepacked_weights"] == 1 and "aten.convolution.default" in strides
    assert strides["aten.convolution.default"] == (1152, 1, 96, 8)
    torch.testing.assert_close(run_frozen(result, args)[0], f(*args), rtol=1e-4, atol=1e-4)


def _bf16_model(x, w, b, w2, b2):
    y = torch.relu(F.conv2d(x, w, b, padding=1))  # NCHW in, channels-last from oneDNN
    return F.gelu(F.linear(y.mean((2, 3)), w2, b2))


def _bf16_args():
    torch.manual_seed(0)
    return [torch.randn(2, 8, 12, 12), torch.randn(16, 8, 3, 3) / 8, torch.randn(16), torch.randn(24, 16) / 4,
            torch.randn(24)]


def test_bfloat16_layers_are_packed_where_torch_runs_onednn_bf16_kernels():
    """bf16 inference (`model.to(torch.bfloat16)`) takes the fused oneDNN ops where torch runs oneDNN's bf16
    kernels (AVX-512 CPUs), and its results are as accurate as eager's against float64 (the contract's 3x); where
    it does not, ATen's ops stay."""
    args64 = [a.double() for a in _bf16_args()]
    args = [a.bfloat16() for a in args64]
    if torch.bfloat16 not in prepack.packable_dtypes():
        pytest.skip("torch runs no oneDNN bf16 kernels on this CPU")  # the test below runs everywhere
    result = freeze(traced(_bf16_model, *args, params=(1, 2, 3, 4)), args)
    assert [op for op in ops(result.graph) if op.startswith("mkldnn")] == [
        "mkldnn._convolution_pointwise.default", "mkldnn._linear_pointwise.default"]
    assert result.counts["fused_epilogues"] == 2
    got, eager, exact = run_frozen(result, args)[0], _bf16_model(*args), _bf16_model(*args64)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, eager, rtol=2e-2, atol=2e-2)
    assert (got.double() - exact).norm() <= 3 * (eager.double() - exact).norm()


def test_bfloat16_layers_stay_aten_where_torch_runs_no_onednn_bf16_kernels(monkeypatch):
    monkeypatch.setattr(prepack, "packable_dtypes", lambda: (torch.float32,))
    args = [a.bfloat16() for a in _bf16_args()]
    result = freeze(traced(_bf16_model, *args, params=(1, 2, 3, 4)), args)
    assert not [op for op in ops(result.graph) if op.startswith("mkldnn")]
    torch.testing.assert_close(run_frozen(result, args)[0], _bf16_model(*args), rtol=2e-2, atol=2e-2)


# ops after a packed convolution that are neither elementwise nor pooling: ATen lays out their results after their
# inputs' layouts too (channels-last in, channels-last out), so the interpreter codegen returns what the graph
# declares only if the pass follows them as well
AFTER_CONV = {
    "cat": lambda y: torch.cat([y, y], 1), "stack": lambda y: torch.stack([y, y], 1),
    "to_float64": lambda y: y.double(), "flip": lambda y: torch.flip(y, [2]), "sort": lambda y: y.sort(1)[0],
    "adaptive_avg_pool": lambda y: F.adaptive_avg_pool2d(y, 3), "group_norm": lambda y: F.group_norm(y, 2),
    "reflect_pad": lambda y: F.pad(y, (1, 1, 1, 1), mode="reflect"), "pad": lambda y: F.pad(y, (1, 1, 1, 1)),
    "matmul": lambda y: y @ y.transpose(2, 3),  # expand and view of ATen's result inside
}


@pytest.mark.parametrize("name", sorted(AFTER_CONV))
def test_any_op_after_a_packed_convolution_returns_eagers_layout(name):
    def f(x, w):
        r = AFTER_CONV[name](torch.relu(F.conv2d(x, w)))
        return r, (r + 1) * 2

    args = [torch.randn(2, 3, 12, 12), torch.randn(8, 3, 3, 3)]
    result = freeze(traced(f, *args, params=(1,)), args)
    verify(result.graph)
    got, want = run_frozen(result, args), list(f(*args))
    assert [t.stride() for t in got] == [t.stride() for t in want]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_views_returned_from_a_packed_result_are_eagers_views():
    """A returned view of a relaid value views the value in its declared layout (a copy of it, or the returned
    value itself): eager's strides, and the storage shared with the returned base as in eager."""
    def f(x, w1, w2):
        y = torch.relu(F.conv2d(x, w1))
        z = F.conv2d(y, w2) + 1
        return y, y.permute(0, 2, 3, 1), y[:, :4].unsqueeze(0), z.transpose(1, 2), z.flatten(1), y.sigmoid()

    args = [torch.randn(2, 3, 12, 12), torch.randn(8, 3, 3, 3), torch.randn(4, 8, 3, 3)]
    result = freeze(traced(f, *args, params=(1, 2)), args)
    verify(result.graph)
    got, want = run_frozen(result, args), list(f(*args))
    assert [t.stride() for t in got] == [t.stride() for t in want]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    y = got[0].untyped_storage().data_ptr()
    assert [t.untyped_storage().data_ptr() == y for t in got] == [True, True, True, False, False, False]
