"""Accumulators: lane arrays updated a vector at a time (lane by lane where there is no vector update)."""

from __future__ import annotations

import torch
from ember_codegen_cpp._reductions import Accumulator
from ember_lowering import Instr, Op
from helpers import check


def test_vector_updates_of_sums_max_and_welford_and_lanes_for_the_rest():
    total = Accumulator(Instr(Op.REDUCE_SUM, ("t1",), "float32", ("t0",)), "float32", 1)
    assert total.cascade and total.vector_update("v", "ember_j", "ember_f32x16") == [
        "ember_vstore(ember_a_t1 + ember_j, (ember_vload<ember_f32x16>(ember_a_t1 + ember_j) + v));"]
    ints = Accumulator(Instr(Op.REDUCE_SUM, ("t1",), "int32", ("t0",)), "int32", 1)
    assert "ember_u32x16" in ints.vector_update("v", "ember_j", "ember_i32x16")[0]  # wraps as torch's sums do
    mx = Accumulator(Instr(Op.REDUCE_MAX, ("t1",), "float32", ("t0",)), "float32", 1)
    assert "ember_vmax(" in mx.vector_update("v", "ember_j", "ember_f32x16")[0]  # NaN wins
    welford = Accumulator(Instr(Op.REDUCE_WELFORD, ("t1", "t2"), "float32", ("t0",)), "float32", 3)
    assert any("ember_wi3_float" in line for line in welford.vector_update("v", "ember_j", "ember_f32x16"))
    argmax = Accumulator(Instr(Op.REDUCE_ARGMAX, ("t1",), "int64", ("t0", "t9")), "float32", 1)
    assert argmax.vector_update("v", "ember_j", "ember_f32x16") is None


def test_welford_lanes_share_one_count():
    acc = Accumulator(Instr(Op.REDUCE_WELFORD, ("t1", "t2"), "float32", ("t0",)), "float32", 3)
    assert "ember_wi3_float" in acc.update(["v"], "ember_l", tail=False)[0]
    assert "/" in acc.update(["v"], "0", tail=True)[0]


def test_long_rows_of_welford_and_argmax_with_tails():
    x = torch.randn(5, 1000) * 10 + 3
    x[2, 517] = 1e4
    check(lambda x: (x.var(1), x.mean(1), x.argmax(1), torch.nn.functional.layer_norm(x, (1000,))), x)


def test_float_sums_keep_lanes_in_registers_and_fold_outside_the_vector_loop():
    """A sum waits on its own additions with one vector of partials: lane arrays of two or more vectors, folded
    into the cascade once per chunk (outside the vector loop) and merged pairwise. softmax's exp sum likewise."""
    rms = lambda x, w: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,)  # noqa: E731
    x, w = torch.randn(6, 3000) * 3, torch.randn(3000)  # 3000 = 2 folds + a part chunk + a scalar tail of 24
    for source in (check(rms, x, w, mode="real", atol=1e-5, rtol=1e-5).source,
                   check(lambda x: (torch.softmax(x, -1),), x, mode="real").source):
        assert "ember_a_" in source and "reduction(+:" not in source
        lane_loop = source[source.index("for (; ember_rb < ember_ce"):source.index("++ember_steps")]
        assert "ember_vstore(ember_a_" in lane_loop and "_1[ember_l] +=" not in lane_loop  # no fold in the loop
        assert "ember_h /= 2" in source  # pairwise merge


def test_long_cheap_sums_cascade_across_many_folds():
    x = torch.rand(3, 200_000) + 1.0  # 195 folds, 6 of them into level 2: every level of the cascade
    check(lambda x: (x.sum(1), (x * x).sum(1), x.mean(1)), x, mode="real")
