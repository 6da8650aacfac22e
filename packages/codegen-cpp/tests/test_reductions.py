"""Accumulators: simd reduction variables for sum/prod/max/min/any/all, lane arrays for the rest."""

from __future__ import annotations

import torch
from ember_codegen_cpp._reductions import Accumulator, SimdAccumulator
from ember_lowering import Instr, Op
from helpers import check


def test_simd_form_handles_the_associative_reductions_only():
    assert SimdAccumulator.handles(Instr(Op.REDUCE_MAX, ("t1",), "float32", ("t0",)))
    assert not SimdAccumulator.handles(Instr(Op.REDUCE_WELFORD, ("t1", "t2"), "float32", ("t0",)))
    assert not SimdAccumulator.handles(Instr(Op.REDUCE_ARGMAX, ("t1",), "int64", ("t0", "t9")))


def test_float_max_keeps_a_nan_flag_and_float32_sum_cascades():
    mx = SimdAccumulator(Instr(Op.REDUCE_MAX, ("t1",), "float32", ("t0",)), 1)
    assert "reduction(|:ember_s_t1_nan)" in mx.clause() and "_nan ?" in mx.result()[0]
    total = SimdAccumulator(Instr(Op.REDUCE_SUM, ("t1",), "float32", ("t0",)), 1)
    assert total.cascade and total.chunk_end("n")
    ints = SimdAccumulator(Instr(Op.REDUCE_SUM, ("t1",), "int32", ("t0",)), 1)
    assert "ember_unsigned" in ints.decl()[0]  # wraps as torch's sums do


def test_welford_lanes_share_one_count():
    acc = Accumulator(Instr(Op.REDUCE_WELFORD, ("t1", "t2"), "float32", ("t0",)), "float32", 3)
    assert "ember_wi3_float" in acc.update(["v"], "ember_l", tail=False)[0]
    assert "/" in acc.update(["v"], "0", tail=True)[0]


def test_long_rows_of_welford_and_argmax_with_tails():
    x = torch.randn(5, 1000) * 10 + 3
    x[2, 517] = 1e4
    check(lambda x: (x.var(1), x.mean(1), x.argmax(1), torch.nn.functional.layer_norm(x, (1000,))), x)


def test_cheap_float_sums_keep_lanes_in_registers_and_exp_sums_stay_simd():
    """A sum over a cheap body waits on its own additions with one vector of partials: it gets lane arrays,
    folded into the cascade once per chunk (outside the lane loop) and merged pairwise. softmax keeps the
    simd reduction (its exp hides the latency)."""
    rms = lambda x, w: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,)  # noqa: E731
    x, w = torch.randn(6, 3000) * 3, torch.randn(3000)  # 3000 = 2 folds + a part chunk + a scalar tail of 24
    source = check(rms, x, w, mode="real", atol=1e-5, rtol=1e-5).source
    assert "ember_a_" in source and "reduction(+:" not in source
    lane_loop = source[source.index("for (; ember_rb < ember_ce"):source.index("++ember_steps")]
    assert "ember_a_" in lane_loop and "_1[ember_l] +=" not in lane_loop  # no fold where the lanes live
    assert "ember_h /= 2" in source  # pairwise merge
    softmax = check(lambda x: (torch.softmax(x, -1),), x, mode="real").source
    assert "reduction(+:" in softmax and "reduction(max:" in softmax


def test_long_cheap_sums_cascade_across_many_folds():
    x = torch.rand(3, 200_000) + 1.0  # 195 folds, 6 of them into level 2: every level of the cascade
    check(lambda x: (x.sum(1), (x * x).sum(1), x.mean(1)), x, mode="real")
