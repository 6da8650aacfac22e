"""Kernels against eager PyTorch: every kernel dtype, NaN and inf, Python division semantics, reductions with
lanes and tails, masked and indirect loads, zero-size and broadcast shapes."""

from __future__ import annotations

import math
import re

import pytest
import torch
from ember_codegen_cpp import KernelPrinter
from ember_codegen_cpp._build import vector_lanes
from ember_lowering import lower
from ember_lowering.codegen import PlanLayout
from helpers import check, compile_fn, trace

SPECIAL = torch.tensor([0.0, -0.0, 1.5, -2.5, 0.5, 3.0, math.inf, -math.inf, math.nan, 1e-40, -7.0, 65504.0, 70000.0])


def test_kernel_is_one_function_with_a_parallel_loop_of_vector_steps_and_a_scalar_tail():
    graph = trace(lambda x: (x.exp() * 2,), torch.randn(64, 32))
    plan = lower(graph, emit_event=False)
    printed = KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print()
    text, lanes = printed.text, vector_lanes()[0]
    assert text.startswith("static int k0(const float* __restrict b_arg0_1, float* __restrict b_mul")
    assert "#pragma omp parallel for" in text
    assert f"ember_v += {lanes}) {{" in text and "ember_vexpf(t0_v)" in text  # the vector step
    assert "ember_expf(t0)" in text  # the scalar tail
    assert printed.simd == f"explicit {lanes} lanes"


@pytest.mark.parametrize("dtype, short", [(torch.bfloat16, "bf16"), (torch.float16, "f16")])
def test_a_vector_store_rounds_a_float32_value_itself(dtype, short):
    """No rounding to the half dtype before a store that rounds the same way (bits: the rounding test below)."""
    graph = trace(lambda x: ((x * 3).exp().to(dtype),), torch.randn(64, 32))
    plan = lower(graph, emit_event=False)
    text = KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print().text
    (stored,) = re.findall(rf"ember_vstore_{short}\((\w+)\)", text)
    (rounded,) = re.findall(rf"(\w+) = ember_vround_{short}\((\w+)\)", text)
    assert stored == rounded[1] and "ember_vexpf" in next(line for line in text.splitlines() if f"{stored} =" in line)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_float_dtypes_round_like_torch(dtype):
    x = (torch.randn(37, 19) * 100).to(dtype)
    y = torch.randn(37, 19).to(dtype)

    def fn(x, y):
        return x * y + 1, (x / 3).exp().to(dtype), x.float() * 1.0001, (x > y).to(dtype)
    if dtype is not torch.bfloat16:
        check(fn, x, y)  # every op's result rounded to its dtype, as eager rounds it
        return
    # in a graph that trains nothing a fused bfloat16 chain rounds once, where it stores (lowering's keep-float32):
    # float32's results rounded once, where eager rounds after each op (x * y + 1 near 0 is off by far more than a
    # rounding of the result then)
    got = compile_fn(fn, x, y)([x, y])
    for g, w in zip(got, fn(x.float(), y.float())):
        torch.testing.assert_close(g, w.to(g.dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rounding_is_round_to_nearest_even_with_nan_and_inf(dtype):
    # ties (1 + 2^-8 and 1 + 3 * 2^-8 are halfway between bfloat16 neighbours, 1 + 2^-11 between float16 ones),
    # overflow to infinity, denormals; SPECIAL in the vector lanes and again in the scalar tail
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-11, 1 + 3 * 2**-11, 3.4028235e38, -3.4e38,
                         65519.0, 65520.0, 2**-140, 2**-133 * 1.5, 6e-8, -3e-8])
    x = torch.cat([SPECIAL, ties, torch.randn(200) * 1000, torch.randn(200) * 1e-5, ties, SPECIAL])

    def fn(x):
        # a store; a round trip to dtype and back, as an output and read by another op (`ember_vround_*`)
        return x.to(dtype), (x * 3).to(dtype).float(), (x * 3).to(dtype).float() * 1
    got, want = check(fn, x)([x]), fn(x)
    for g, w, bits in zip(got, want, (torch.int16, torch.int32, torch.int32)):  # bit for bit (NaN's payloads aside:
        nan = torch.isnan(w)                                              # eager's differ between its own kernels)
        assert torch.equal(torch.isnan(g), nan) and torch.equal(g[~nan].view(bits), w[~nan].view(bits))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_integer_dtypes_wrap_and_divide_like_python(dtype):
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (57,), dtype=dtype)
    b = torch.randint(1, 9, (57,), dtype=dtype) * (1 if dtype == torch.uint8 else torch.where(
        torch.rand(57) > 0.5, 1, -1).to(dtype))
    check(lambda a, b: (a + b, a * b, a - b, a // b, torch.remainder(a, b), torch.fmod(a, b), a & b, a | b, a ^ b,
                        torch.maximum(a, b), a.abs(), (a > b).to(dtype)), a, b)


def test_bool_logic_and_casts():
    a, b = torch.rand(40) > 0.5, torch.rand(40) > 0.3
    x = torch.cat([SPECIAL, torch.randn(27)])
    check(lambda a, b, x: (a & b, a | b, a ^ b, ~a, x.bool(), a.float() + b.int(), torch.where(a, x, -x)), a, b, x)


def test_float_to_narrow_int_casts_match_torch():
    x = torch.tensor([-1.5, 300.0, -300.0, 1e10, 2.5, -0.5, 127.9, -128.9])
    check(lambda x: (x.to(torch.uint8), x.to(torch.int8), x.to(torch.int32), x.to(torch.int64)), x)


def test_nan_propagates_through_max_min_and_reductions():
    x = torch.randn(6, 70)
    x[1, 3] = math.nan
    x[4, 69] = math.nan
    x[2, :] = -math.inf
    check(lambda x: (x.amax(1), x.amin(1), x.argmax(1), x.argmin(1), torch.maximum(x, x.flip(1)),
                     torch.clamp(x, -0.5, 0.5), x.max(0).values), x)


def test_float_floor_division_and_remainder_follow_torch():
    a = torch.tensor([-7.0, 7.0, 0.0, math.inf, 5.0, -5.5, 1e-30, math.nan, 3.0])
    b = torch.tensor([2.0, -2.0, 0.0, 3.0, math.inf, 0.5, -1.0, 1.0, -0.0])
    check(lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.remainder(a, b), torch.fmod(a, b),
                        torch.div(a, b, rounding_mode="trunc")), a, b)


def test_transcendental_functions_are_accurate():
    x = torch.cat([torch.linspace(-20, 20, 1001), SPECIAL])
    p = torch.rand(200) * 1.98 - 0.99
    check(lambda x, p: (x.exp(), x.abs().log(), x.tanh(), torch.erf(x), x.sigmoid(), x.sin(), x.cos(), x.expm1(),
                        x.abs().log1p(), x.abs().sqrt(), x.abs().rsqrt(), torch.atan2(x, x.flip(0)), x.atan(),
                        torch.erfinv(p), x.abs().pow(0.7), torch.lgamma(x.abs() + 0.1), x.round(), x.sign(),
                        torch.nn.functional.gelu(p * 10)), x, p)


@pytest.mark.filterwarnings("ignore:var():UserWarning")
@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000])
def test_reductions_over_lanes_and_tails(n):
    x = torch.randn(3, n, dtype=torch.float64)
    check(lambda x: (x.sum(1), x.prod(1), x.var(1, correction=0), x.mean(1), (x > 0).any(1), (x > -3).all(1)), x)
    if n:
        check(lambda x: (x.amax(1), x.argmax(1), x.argmin(1)), x)


def test_argmax_takes_the_first_of_equal_values():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0] * 20, [5.0] * 80, [0.0] * 79 + [9.0]])
    check(lambda x: (x.argmax(1), x.argmin(1), x.argmax(), x.argmin()), x)


def test_sum_of_many_floats_stays_accurate():
    x = torch.rand(1 << 20) + 1.0
    check(lambda x: (x.sum(), x.mean(), (x * x).sum()), x)


def test_integer_sums_and_full_reductions():
    x = torch.randint(-1000, 1000, (5, 77), dtype=torch.int32)
    check(lambda x: (x.sum(1), x.sum(), x.amax(0), x.amin(), x.argmax(1)), x)


def test_masked_loads_of_cat_and_pad_touch_no_memory_outside():
    x, y = torch.randn(5, 3), torch.randn(5, 4)
    check(lambda x, y: (torch.cat([x, y], 1), torch.nn.functional.pad(x, (2, 1, 0, 3), value=-1.0)), x, y)


def test_indirect_loads_gather_and_wrap_negative_indices():
    x = torch.randn(8, 5)
    idx = torch.tensor([7, 0, -1, 3])
    check(lambda x, i: (x[i], torch.index_select(x, 0, i.abs()), torch.gather(x, 1, (i.abs() % 5).view(4, 1))), x, idx)


def test_zero_size_tensors():
    x = torch.randn(0, 7)
    check(lambda x: (x.exp() + 1, x.sum(1), x.sum(0), x.amax(1)), x)


def test_broadcast_and_expanded_inputs():
    x, y = torch.randn(4, 1, 6), torch.randn(3, 1)
    z = torch.randn(6).expand(3, 6)
    check(lambda x, y, z: (x + y, x * z - y, (x * z).sum(-1)), x, y, z)


def test_reduction_over_the_outer_dim():
    x = torch.randn(300, 70)
    check(lambda x: (x.sum(0), x.var(0), x.amax(0), torch.softmax(x, 0)), x)


def test_a_column_sum_through_merged_dims_runs_in_column_lanes():
    """Attention's gradients come out of SDPA's backward as (batch, heads, tokens, head dim) views of (batch, tokens,
    heads, head dim) memory; their bias gradient sums them over tokens. With heads and head dim merged into one
    i-dim, the loads index it as `64*floor(i/64) + Mod(i, 64)`, which is `i`: contiguous along the i-dim. Scored
    on the unsimplified index, each column was walked down the rows in gathered lanes, 192 floats apart (a ViT's
    qkv-gradient kernel: 58 us where column lanes took 38, at 2 threads)."""
    y = torch.randn(1, 197, 3, 64).transpose(1, 2)
    fn = lambda y: (y.transpose(1, 2).reshape(197, 192).sum(0),)  # noqa: E731
    check(fn, y)
    plan = lower(trace(fn, y), emit_event=False)
    (kernel,) = plan.kernels
    assert "floor" in str(kernel)  # the merged dims' index, as the plan has it
    assert KernelPrinter(kernel, PlanLayout(plan), "k0").outer_contiguous


def test_values_of_an_outer_reduction_the_same_for_a_whole_block_are_scalars():
    """A stack's gradient summed over tokens (attention's q, k and v gradients into the qkv bias's): the cat's
    masks depend on the outer i-dim only, so each block computes them once as scalars, and its masked loads are
    one branch and a plain vector load. As block arrays read lane by lane in every step, the kernel took 38 us
    where this takes 7 (197x3x192, 2 threads)."""
    parts = [torch.randn(197, 1, 192) for _ in range(3)]
    fn = lambda a, b, c: (torch.cat([a, b, c], 1).sum(0), torch.cat([a, b, c], 1) * 2)  # noqa: E731
    check(fn, *parts)
    plan = lower(trace(fn, *parts), emit_event=False)
    (kernel,) = [k for k in plan.kernels if k.reduce_dims]
    printer = KernelPrinter(kernel, PlanLayout(plan), "k0")
    text = printer.print().text
    assert printer.outer_contiguous
    masks = {o for i in kernel.instrs() if i.dtype == "bool" for o in i.outs}
    assert masks and masks <= printer.uniform
    assert "bool ember_b_" not in text and re.search(r"const bool t\d+ = ", text)


@pytest.mark.parametrize("widths", [(12, 12, 12), (70, 45, 83)], ids=["one-block", "two-blocks"])
def test_bool_masks_of_an_outer_reduction_keep_one_byte_per_lane(widths):
    """A cat summed over its outer dim (an RNN's gate gradients summed over the batch): the cat's masks are
    hoisted out of the r-loop into bool block arrays, one byte per i-point. Copying their int32 vectors whole
    there overlapped the next vector's lanes and ran past the array (wrong sums, NaN in the RNNs' gradients)."""
    parts = [torch.randn(4, w) for w in widths]
    fn = lambda a, b, c: ((torch.cat([a, b, c], 1) * 2).sum(0), torch.cat([a, b, c], 1).amax(0))  # noqa: E731
    check(fn, *parts)
    plan = lower(trace(fn, *parts), emit_event=False)
    text = KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print().text
    assert "bool ember_b_" in text and "(ember_vload<ember_u8x" in text


def test_shifts_and_integer_powers_follow_torch():
    a = torch.tensor([1, -1, 5, 100, -8, 3], dtype=torch.int32)
    b = torch.tensor([33, 40, -1, 31, 2, 3], dtype=torch.int32)
    check(lambda a, b: (a << b, a >> b, a ** b.abs().clamp(max=5)), a, b)


def test_exp_matches_torch_over_its_whole_range():
    x = torch.cat([torch.linspace(-110.0, 95.0, 200_001), torch.randn(10_000) * 30, SPECIAL])
    check(lambda x: (x.exp(), torch.sigmoid(x), torch.softmax(x[:70].view(10, 7), 1)), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_reductions_and_norms(dtype):
    x = torch.randn(9, 300).to(dtype)
    w = torch.randn(300).to(dtype)
    check(lambda x, w: (x.sum(1), x.amax(1), torch.softmax(x, -1), torch.nn.functional.layer_norm(x, (300,), w),
                        x.float().mean(0)), x, w, atol=1e-2, rtol=1e-2)


def test_mixed_dtype_promotion_and_factories():
    a = torch.randint(-50, 50, (4, 6), dtype=torch.int32)
    b = torch.randn(4, 6)
    check(lambda a, b: (a / 7, a * b, torch.arange(6) * a, torch.full((4, 6), 2.5) + a, a.abs(), a.clamp(-3, 3),
                        torch.logical_and(a > 0, b > 0), torch.where(a > 0, a, -a)), a, b)


def test_symbolic_reductions_and_views_at_several_sizes():
    x = torch.randn(5, 12)
    check(lambda x: (x.sum(0), x.view(-1, 3).amax(1), x.t().contiguous() * 2, x[:, 1::2].mean(1)), x,
          mode="symbolic", others=[(torch.randn(9, 12),), (torch.randn(2, 12),)])


def _printed(fn, *args):
    plan = lower(trace(fn, *args), emit_event=False)
    layout = PlanLayout(plan)
    return plan, [KernelPrinter(k, layout, f"k{n}").print().text for n, k in enumerate(plan.kernels)]


def test_a_stash_of_the_plan_is_a_stack_array_of_the_row():
    plan, (text,) = _printed(lambda x: (torch.softmax(x, -1),), torch.randn(4, 64))
    assert [b.name for b in plan.buffers if b.kind == "local"] == ["stash0"]
    head, *body = text.splitlines()
    assert "stash" not in head and "    float b_stash0[64];" in body
    # written and read once in the vector step, once in the scalar tail
    assert text.count("ember_vstore(&b_stash0[r0], ") == 1 and text.count(">(&b_stash0[r0]);") == 1
    assert text.count("b_stash0[r0] = ") == 1 and text.count("= b_stash0[r0];") == 1
    assert text.count("ember_expf") == 1 and text.count("ember_vexpf") == 1


def test_a_stash_is_recomputed_when_the_lanes_are_outer_iterations():
    plan, (text,) = _printed(lambda x: (torch.softmax(x * 3, 0),), torch.randn(37, 300))
    assert any(b.kind == "local" for b in plan.buffers)
    assert "stash" not in text and text.count("ember_expf") == 2


def test_stashed_kernels_match_eager():
    x = torch.randn(37, 300).abs()
    check(lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1), torch.softmax(x * 3, 0),
                     x.sqrt() / x.sqrt().sum(-1, keepdim=True)), x)


def test_dims_the_plan_merged_print_as_one_loop():
    plan, (text,) = _printed(lambda x: (x.mean((2, 3)),), torch.randn(2, 4, 8, 8))
    assert [str(d.size) for d in plan.kernels[0].dims] == ["8", "64"]
    assert "const int64_t n_r0 = 64;" in text and "(r0 + (64 * i0))" in text


def test_coalesced_kernels_match_eager():
    x = torch.randn(3, 4, 6, 10)
    check(lambda x: (x.mean((2, 3)), x.amax((0, 2, 3)), x.permute(0, 2, 3, 1) * 2, x.argmin(-1), x.flatten(1).sum(1)),
          x)


def test_pow_by_the_exponents_torch_special_cases_matches_eager_and_calls_no_pow():
    x = torch.cat([torch.randn(300) * 10, torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")])])
    exps = (1, 2, 3, 0.5, -0.5, -1, -2)
    check(lambda x: tuple(x.pow(e) for e in exps) + (x.pow(2.5),), x)
    _, texts = _printed(lambda x: tuple(x.pow(e) for e in exps), x)
    assert not any(call in t for t in texts for call in ("powf(", "ember_vpow("))
    n = torch.arange(-20, 20)
    check(lambda n: (n.pow(1), n.pow(2), n.pow(3)), n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16])
def test_a_cat_reads_whole_vectors_and_goes_lane_by_lane_only_where_an_input_ends(dtype):
    """Each vector step of a cat tests its mask: all lanes in one input is one vector read. The edges (200, 213)
    fall inside a vector; 64-bit data and the int64 index compare half a vector at a time."""
    parts = [torch.arange(n * 3, dtype=torch.float64).reshape(3, n).to(dtype) - n for n in (200, 13, 67)]
    fn = lambda a, b, c: (torch.cat([a, b, c], 1), torch.stack([a[:, :13], b], 1))  # noqa: E731
    check(fn, *parts)
    plan = lower(trace(fn, *parts), emit_event=False)
    text = KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print().text
    assert "ember_vall(" in text and "ember_vcmp_wide<" in text


def test_division_by_a_constant_in_a_reduction_loop_rounds_as_eager():
    """x / 6 stays a division (x * (1/6) is an ulp off for about a third of x): hardswish after batch norm's stats,
    one kernel, made mobilenetv3's first convolution's gradient 1.6e-3 off eager's."""
    def fn(x):
        y = x - x.amax(1, keepdim=True)  # exact, as eager's: the loop's values below are eager's bit for bit
        return (y * (y + 3).clamp(0, 6) / 6,)
    x = torch.randn(64, 1000)
    got = compile_fn(fn, x)([x])[0]
    torch.testing.assert_close(got, fn(x)[0], rtol=0, atol=0)
