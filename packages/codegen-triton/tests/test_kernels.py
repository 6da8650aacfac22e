"""Kernels the Triton codegen prints, run in Triton's interpreter and compared with eager."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from ember_core import Output
from helpers import CODEGEN, check, trace


def test_pointwise_chain():
    compiled = check(lambda x, y: (torch.sigmoid(x) * y + 1.5, (x - y).abs().sqrt()), torch.randn(33, 7),
                     torch.randn(33, 7))
    assert "@triton.jit" in compiled.source and "tl.load" in compiled.source


def test_broadcast_and_strided_inputs():
    x = torch.randn(8, 6)
    check(lambda a, b: (a.t() * b + a.t().exp(),), x, torch.randn(6, 1))


def test_symbolic_sizes_are_kernel_arguments():
    check(lambda x: (torch.tanh(x) * 2,), torch.randn(5, 3), mode="symbolic",
          others=[(torch.randn(9, 3),), (torch.randn(1, 3),)])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtypes(dtype):
    x = torch.randn(16, 10).to(dtype)
    check(lambda x: (torch.relu(x) + x * 2,), x)


def test_a_bfloat16_chain_rounds_once_at_its_store_and_a_threshold_keeps_eagers_rounding():
    """In a graph that trains nothing, lowering's keep-float32 lets a fused bf16 chain read its own results in
    float32 and round once, where it stores; a rounding a comparison reads stays, so `>` sees eager's bf16 value.
    (The interpreter truncates float32 -> bf16 where CUDA rounds, so values are checked at one bf16 step; the
    rounding itself is checked bit for bit by the loop-IR interpreter in lowering's tests.)"""
    x = torch.randn(16, 10, generator=torch.Generator().manual_seed(0)).bfloat16()
    compiled = CODEGEN.compile(trace(bf16_chain, x), [x], {})
    kernel = compiled.source[compiled.source.index("def ember_k"):compiled.source.index("def graph_")]
    assert kernel.count(".to(tl.bfloat16)") == 1, kernel
    once = bf16_chain(x.float())[0].bfloat16()
    torch.testing.assert_close(compiled([x])[0], once, atol=2 ** -7, rtol=2 ** -7)

    compiled = check(lambda x: ((x * 3 + 1 > 1) * x.exp(),), x)
    kernel = compiled.source[compiled.source.index("def ember_k"):compiled.source.index("def graph_")]
    # x * 3 and + 1 (`>` reads the sum, made from the product: both rounded as eager rounds them), and the store's
    assert kernel.count(".to(tl.bfloat16)") == 3, kernel
    compared = re.search(r"= \((t\d+) >", kernel).group(1)  # the value `>` reads: x * 3 + 1 rounded to bf16
    rounded = re.search(rf"\s(t\d+) = t\d+\.to\(tl\.bfloat16\)\n\s+{compared} = \1\.to\(tl\.float32\)", kernel)
    assert rounded, kernel


def test_a_bfloat16_chain_in_half_of_a_training_step_rounds_every_result_as_eager():
    """A forward whose backward may compute its values again rounds each op's result to bf16, as eager stores it
    (a value left in float32 here and rounded where the backward stores something made from it could meet its
    rounded self: see lowering's keep-float32)."""
    x = torch.randn(16, 10).bfloat16()
    graph = trace(bf16_chain, x)
    forward = graph.replace(outputs=(*graph.outputs, Output(graph.nodes[0].outputs[0], "saved")))
    compiled = CODEGEN.compile(forward, [x], {})
    kernel = compiled.source[compiled.source.index("def ember_k"):compiled.source.index("def graph_")]
    assert kernel.count(".to(tl.bfloat16)") == 6, kernel  # sigmoid, tanh, mul, exp, mul, add
    # the interpreter truncates each of the six roundings where eager rounds to nearest: up to a step each
    torch.testing.assert_close(compiled([x])[0], bf16_chain(x)[0], atol=2 ** -5, rtol=2 ** -5)


def bf16_chain(x):
    return (torch.sigmoid(x) * torch.tanh(x) + torch.exp(x) * 0.5,)


def test_integer_and_bool_ops():
    a, b = torch.randint(-9, 9, (20,)), torch.randint(1, 5, (20,))
    check(lambda a, b: (a // b, a % b, torch.fmod(a, b), (a > 0) & (b < 3), a.clamp(-3, 3)), a, b)


def test_softmax_is_one_persistent_kernel():
    compiled = check(lambda x: (torch.softmax(x, -1),), torch.randn(6, 50))
    assert compiled.source.count("@triton.jit\ndef ember_") == 1 and "tl.max(" in compiled.source


def test_layer_norm_and_rms_norm():
    w, b = torch.randn(40), torch.randn(40)
    check(lambda x: (torch.nn.functional.layer_norm(x, (40,), w, b),
                     x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)), torch.randn(12, 40))


def test_reductions_max_min_with_nan_and_argmax():
    x = torch.randn(5, 9)
    x[1, 3] = float("nan")
    check(lambda x: (x.amax(1), x.amin(0), x.argmax(1), x.argmin(0), x.sum(), x.prod(1)), x)


def test_var_mean_of_a_row_with_an_infinity_is_nan_as_eager_says():
    """Triton's row moments took the mean as sum / n: inf for a row holding an infinity, where eager's Welford says
    NaN (its running mean meets inf - inf). The corrected two-pass mean, m + sum(x - m) / n, says NaN too, and the
    variance of a NaN row stays NaN (the clamp at 0 does not turn it into 0)."""
    x = torch.randn(4, 8)
    x[0, 3], x[1, 0], x[2, 5] = float("inf"), -float("inf"), float("nan")
    (var, mean), want = CODEGEN.compile(trace(lambda x: torch.var_mean(x, 1), x), [x])([x]), torch.var_mean(x, 1)
    torch.testing.assert_close(mean, want[1], equal_nan=True)
    torch.testing.assert_close(var, want[0], equal_nan=True)
    assert mean[:3].isnan().all() and var[:3].isnan().all() and mean[3].isfinite()



def test_a_row_variance_that_overflows_is_inf_as_eager_says_not_nan():
    """Rows holding one -3.4e38 (or 3.4e38, or 1e30): the squared deviations overflow, eager's variance is inf. The
    deviations' sum s1 holds the first pass's rounding (~1e31), so s1 * s1 / n overflowed as well and the
    variance came out inf - inf = NaN; the correction is capped at float32's largest value now."""
    for n in (10, 64):
        x = torch.linspace(-2.5, 7.0, 3 * n).reshape(3, n)
        x[0, 3], x[1, 6], x[2, 0] = -3.4e38, 3.4e38, 1e30
        var, want = CODEGEN.compile(trace(lambda x: torch.var_mean(x, 1), x), [x])([x])[0], torch.var_mean(x, 1)[0]
        torch.testing.assert_close(var, want, equal_nan=False)


def test_row_moments_of_offset_data_keep_the_variance():
    """Values around 1e4 with unit spread: the corrected two-pass variance is within float32 of float64's."""
    torch.manual_seed(0)
    x = torch.randn(64, 300) + 1e4
    var, _ = CODEGEN.compile(trace(lambda x: torch.var_mean(x, 1), x), [x])([x])
    exact = torch.var_mean(x.double(), 1)[0]
    eager = torch.var_mean(x, 1)[0]
    assert (var.double() - exact).abs().max() <= 4 * max((eager.double() - exact).abs().max().item(), 1e-7)


def test_reduction_over_an_inner_dim_and_var_mean():
    check(lambda x: (x.sum(1), *torch.var_mean(x, dim=(0, 2))), torch.randn(4, 6, 5))


def test_any_all():
    x = torch.randn(6, 7) > 0.5
    check(lambda x: (x.any(1), x.all(0)), x)


def test_looped_reductions_over_symbolic_rows():
    x = torch.randn(3, 1500)
    x[1, 700] = float("nan")
    check(lambda x: (torch.softmax(x, -1), x.amax(1), x.argmax(1), x.argmin(1), x.prod(1) * 0,
                     *torch.var_mean(x, 1), (x > 0).any(1), (x > -9).all(1)),
          x, mode="symbolic", others=[(torch.randn(5, 2100),)], atol=1e-5, rtol=1e-4)


def test_looped_reduction_over_a_long_static_row():
    check(lambda x: (x.sum(1), torch.var_mean(x, 1)), torch.randn(2, 40000), atol=1e-4, rtol=1e-4)


def test_argmax_of_rows_of_minus_infinity_is_their_first_index():
    x = torch.full((2, 3000), float("-inf"))
    check(lambda x: (x.argmax(1), x.argmin(1)), x, mode="symbolic")


def test_gather_and_embedding_through_indirect_loads():
    table, idx = torch.randn(10, 4), torch.tensor([[1, 9], [0, 3]])
    check(lambda t, i: (torch.nn.functional.embedding(i, t) * 2, t[i[0]] + 1), table, idx)


def test_a_gather_proven_in_bounds_is_not_tested():
    """F.interpolate gathers with indices computed from arange, inside the input for every input (lowering's
    bound-indices): no test, no error flag, no device assert; the same values."""
    compiled = check(lambda x: (F.interpolate(x, scale_factor=0.5, mode="nearest") * 2,), torch.randn(2, 3, 9, 13))
    assert "ember_err" not in compiled.source and "device_assert" not in compiled.source


def test_an_index_out_of_range_raises_torchs_own_error():
    table, idx = torch.randn(10, 4), torch.tensor([1, 12])
    compiled = check(lambda t, i: (t[i] * 2,), table, torch.tensor([1, 2]))
    with pytest.raises(IndexError):
        compiled([table, idx])
    assert "ember_err" in compiled.source


@pytest.mark.parametrize("fn", [lambda i, x: (torch.arange(5.0)[i] + x,), lambda i, x: ((x.expand(5) * 2)[i],),
                                lambda i, x: (torch.zeros(5, 2).index_select(0, i) + x,)], ids=["arange", "broadcast",
                                                                                              "zeros"])
def test_an_index_out_of_range_into_generated_values_raises(fn):
    """Values no load reads (an arange, a fill, a broadcast) are stored for a gather, so that its index is checked:
    inlined, an index out of range read a value that was never there."""
    x = torch.randn(1)
    compiled = check(fn, torch.tensor([4, 0]), x)
    with pytest.raises(IndexError):
        compiled([torch.tensor([1, 7]), x])


def test_in_debug_mode_an_index_out_of_range_fails_a_device_assert(monkeypatch):
    # `triton.debug` (or TRITON_DEBUG=1) launches with debug=True, which compiles the kernels' device asserts in:
    # the kernel itself stops, naming the buffer, before the error flag would send the graph to torch. Triton's
    # interpreter ignores a launch's debug flag (its options are fixed when it is imported), so here they are set.
    from triton.runtime import interpreter

    monkeypatch.setattr(interpreter.interpreter_builder, "options", interpreter.InterpreterOptions(debug=True))
    table, idx = torch.randn(10, 4), torch.tensor([1, 12])
    graph = trace(lambda t, i: (t[i] * 2,), table, torch.tensor([1, 2]))
    compiled = CODEGEN.compile(graph, None, {"triton.debug": True})
    torch.testing.assert_close(compiled([table, torch.tensor([3, 9])])[0], table[torch.tensor([3, 9])] * 2)
    with pytest.raises(Exception, match="index out of range for b_arg0_1"):  # InterpreterError; on a GPU, CUDA's
        compiled([table, idx])
    assert "debug=True" in compiled.source and "tl.device_assert(" in compiled.source


def test_scatter_style_ops_run_as_aten_externs_between_kernels():
    # lowering keeps index_put / index_add as extern calls; the kernels around them are Triton
    x, idx, src = torch.zeros(8, 3), torch.tensor([5, 1, 6]), torch.randn(3, 3)
    compiled = check(lambda x, i, s: (x.index_put((i,), s * 2), torch.zeros(10).index_add(0, i, s[:, 0])), x, idx,
                     src)
    assert "# aten.index_put.default" in compiled.source and "@triton.jit" in compiled.source


def test_reductions_across_rows_take_many_rows_a_program():
    """A sum over the rows of [300, 70] (a weight's gradient) and statistics of NHWC data read along the kept dim:
    64 rows a program, looped in steps of 64 along the reduction (`_reads_columns`)."""
    g, h = torch.randn(300, 70), torch.randn(300, 70)
    nhwc = torch.randn(2, 6, 10, 10).to(memory_format=torch.channels_last)
    compiled = check(lambda g, h, x: ((g * h).sum(0), g.var(0), torch.var_mean(x, (0, 2, 3))), g, h, nhwc,
                     atol=1e-5, rtol=1e-4)
    launches = re.findall(r"(ember_k\w+)\[.*XBLOCK=64, num_warps=\d+, RBLOCK=64\)", compiled.source)
    assert len(set(launches)) == 2, compiled.source


def test_long_reductions_with_few_results_run_split():
    """Batch norm's statistics over 8x32x32 values a channel, 4 channels: partials a channel and image, then the
    channel's (ember_lowering `SplitPolicy`); a sum of a whole tensor and of a column cut their leading dim."""
    x = torch.randn(8, 4, 32, 32) * 3 + 100
    w, b = torch.randn(4), torch.randn(4)
    compiled = check(lambda x: (F.batch_norm(x, None, None, w, b, training=True), x.sum(), x.reshape(-1, 4).amax(0)),
                     x, atol=1e-4, rtol=1e-4)
    assert compiled.source.count("@triton.jit") >= 5


def test_nhwc_batch_norm_statistics_split_and_read_channels_side_by_side():
    """Batch norm in training over channels-last data: split into partials (a channel and a stretch of rows each),
    whose rows the printer flattens channel-last (the plan's order is the partials' store's), so that they read
    across rows: 64 channels a program (`_streaming_order`, `_reads_columns`)."""
    x = (torch.randn(8, 4, 32, 32) * 2 + 5).to(memory_format=torch.channels_last)
    w, b = torch.randn(4), torch.randn(4)
    compiled = check(lambda x: (F.batch_norm(x, None, None, w, b, training=True),), x, atol=1e-4, rtol=1e-4)
    launches = re.findall(r"(ember_k\w+)\[.*XBLOCK=64, num_warps=\d+, RBLOCK=64\)", compiled.source)
    assert launches and compiled.source.count("@triton.jit\ndef ember_") >= 3, compiled.source


def test_float_floor_division_rounds_as_torch_does():
    # floor(1.0 / 0.1) is 10.0, but 0.1f is a little more than 0.1: torch (and Python) give 9.0
    a = torch.tensor([1.0, -1.0, 7.5, -7.5, 0.0, -0.0, 3.0, 5.0, float("inf")])
    b = torch.tensor([0.1, 0.1, 2.0, 2.0, -3.0, 3.0, 0.0, -0.0, 2.0])
    check(lambda a, b: (a // b, torch.remainder(a, b), torch.div(a, b, rounding_mode="trunc")), a, b)


def test_sign_of_nan_is_zero_as_in_torch():
    x = torch.tensor([float("nan"), -0.0, 0.0, -2.5, 3.0, float("inf"), float("-inf")])
    check(lambda x: (torch.sign(x), torch.sign(x.double()), torch.sign(x.to(torch.int32))), x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_argmax_of_a_looped_row_compares_in_the_values_dtype(dtype):
    """A looped row's argmax lanes used to be declared float32 whatever the values (their dtype was not known yet
    where the lanes are declared): 2^40 and 2^40 + 1 tied, and an int64 argmax over 20000 elements gave 100 where
    eager gives 5000."""
    x = torch.full((2, 20000), 2 ** 40, dtype=dtype)
    x[0, 5000] += 1
    x[1, 7] -= 1
    compiled = check(lambda x: (x.argmax(1), x.argmin(1)), x)
    assert "tl.float32" not in compiled.source


@pytest.mark.parametrize("dim", [0, 1], ids=["outer", "row"])
def test_a_reduction_result_read_as_an_index_after_its_loop(dim):
    """An argmax read back as a gather's index in the same kernel (cumprod's backward scatters at one)."""
    def f(x):
        at = x.argmax(dim, keepdim=True)
        return x.gather(dim, at) * 2, torch.zeros(x.shape, dtype=torch.bool).scatter(dim, at, True)

    check(f, torch.randn(6, 7))



def test_a_size_of_a_fractional_scale_is_computed_in_doubles():
    """`F.interpolate(x, scale_factor=0.7)` of symbolic sizes: the output's size `TruncToInt(0.7*ToFloat(s2))`
    is computed in float64 in the kernel, the constant an explicit float64 (in float32, 0.7 * 10 is 6 rows where
    eager's doubles give 7). The interpreter computes a bare constant in float64 anyway, so the text is checked;
    the rows of 10, 20, 37 and 100 match eager; the build for sm_90 is test_gpu_compile.py's."""
    import math

    import sympy
    from ember_codegen_triton._exprs import TritonIndexPrinter
    from torch.utils._sympy.functions import ToFloat, TruncToInt

    s0 = sympy.Symbol("s0", integer=True)
    text = TritonIndexPrinter({"s0": "s0"})(TruncToInt(sympy.Float(0.29) * ToFloat(s0)))
    assert text == "tl.cast((tl.full([], 0.29, tl.float64) * tl.cast(s0, tl.float64)), tl.int64)"
    check(lambda x: (F.interpolate(x, scale_factor=0.7, mode="nearest"), x[:, :, :math.floor(x.shape[2] * 0.3)] * 2,
                     x[:, :, :math.ceil(x.shape[2] * 0.3)] * 3), torch.randn(2, 3, 10, 20),
          mode="symbolic", others=[(torch.randn(1, 3, 37, 100),), (torch.randn(2, 2, 20, 10),)])


def test_on_a_cuda_graph_a_cat_assembled_in_place_is_allocated_once_on_the_graphs_device():
    """What the interpreter (CPU tensors) cannot show: lowering's cat-in-place makes each state of a recurrence a
    part of the cat's buffer; on a CUDA graph that buffer is allocated on the graph's device, and its parts are not
    allocated at all (compiled only; no GPU). Run under the interpreter, the same graph matches eager."""
    from ember_codegen_triton import TritonCodegen
    from helpers import on_cuda

    def states(x, w):
        h, out = x, [x]
        for _ in range(10):
            h = torch.tanh(h @ w) + h
            out.append(h)
        return (torch.cat(out) * 2,)

    args = (torch.randn(4, 16), torch.randn(16, 16))
    check(states, *args)
    compiled = TritonCodegen().compile(on_cuda(trace(states, *args)), None, {"mode": "max-autotune-no-cudagraphs"})
    assert compiled.fn.__globals__["_device"] == torch.device("cuda:0")
    allocations = [line.strip() for line in compiled.source.splitlines() if "_empty_strided(" in line]
    assert "b_cat = _empty_strided((44, 16), (16, 1), dtype=_dt0, device=_device)" in allocations
    assert all(line.endswith("device=_device)") for line in allocations), allocations
    assert all(re.match(r"b_(cat|mul) =", line) for line in allocations), allocations  # no part allocated
    assert "aten.cat" not in compiled.source
