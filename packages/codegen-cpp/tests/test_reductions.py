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
