"""keep-float32 after fuse-inline: a fused bfloat16 chain computes in float32 and rounds once, where it stores;
roundings a threshold op reads, casts the program asked for and float16 chains stay."""

import torch
from ember_lowering import Op, run_plan
from ember_lowering.loop_passes.fuse_inline import FuseInline
from ember_lowering.loop_passes.fuse_vertical import FuseVertical
from ember_lowering.loop_passes.keep_float32 import KeepFloat32
from lowering_checks import before_after, verdicts

PASSES = [FuseInline(), KeepFloat32()]


def _bf16(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _casts_to(plan, dtype: str) -> int:
    return sum(1 for k in plan.kernels for i in k.instrs() if i.op is Op.CAST and i.dtype == dtype)


def chain(x):
    return ((x.sin() * 2).exp() + 1).sigmoid()


def test_a_fused_bfloat16_chain_rounds_once_where_it_stores():
    x = _bf16(64, 32)
    before, after, decisions = before_after(chain, x, passes=PASSES)
    assert _casts_to(before, "bfloat16") == 5 and _casts_to(after, "bfloat16") == 1  # one per op: five
    assert ("widened", "continuous-readers") in verdicts(decisions)
    (got,) = run_plan(after, [x])
    # exactly float32's chain rounded once, closer to the exact result than eager's rounding after each op
    torch.testing.assert_close(got, chain(x.float()).to(torch.bfloat16), rtol=0, atol=0)
    exact = chain(x.double())
    assert (got.double() - exact).abs().mean() < (chain(x).double() - exact).abs().mean()


def test_a_rounding_an_op_with_a_threshold_reads_is_kept():
    x = _bf16(64, 32, seed=1) * 4

    def f(x):
        y = x * 3.3
        return torch.floor(y), (y * 1.7 > 2).to(torch.bfloat16), y.argmax(1)

    before, after, decisions = before_after(f, x, passes=PASSES)
    assert ("kept", "threshold-reader") in verdicts(decisions)
    for got, want in zip(run_plan(after, [x]), f(x)):  # eager's answers exactly, not float32's
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_cast_the_program_asks_for_is_kept():
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(2))

    def f(x):
        return (x * 3.3).to(torch.bfloat16).to(torch.float32).exp()

    before, after, _ = before_after(f, x, passes=PASSES)
    assert _casts_to(after, "bfloat16") == 1
    torch.testing.assert_close(run_plan(after, [x])[0], f(x), rtol=0, atol=0)


def test_float16_keeps_every_rounding():
    x = _bf16(64, 32, seed=3).to(torch.float16)
    before, after, decisions = before_after(chain, x, passes=PASSES)
    assert _casts_to(before, "float16") == _casts_to(after, "float16") == 5
    assert not any(d.verdict == "widened" for d in decisions)


def test_a_stored_intermediate_is_stored_rounded():
    x = _bf16(64, 32, seed=4)

    def f(x):
        y = x.sin() * 2
        return y, (y.exp() + 1).sigmoid()

    _, after, _ = before_after(f, x, passes=[FuseInline(), KeepFloat32()])
    y, z = run_plan(after, [x])
    torch.testing.assert_close(y, x.sin() * 2, rtol=0, atol=0)
    torch.testing.assert_close(z, f(x)[1], rtol=2e-2, atol=2e-2)


def test_a_chain_inside_a_reduction_loop_and_its_epilogue():
    x = _bf16(16, 64, seed=5)

    def f(x):
        return torch.softmax(x.sin() * 3, -1) * 2 + 1

    _, after, decisions = before_after(f, x, passes=[FuseInline(), FuseVertical(), KeepFloat32()])
    assert ("widened", "continuous-readers") in verdicts(decisions) and len(after.kernels) == 1
    torch.testing.assert_close(run_plan(after, [x])[0], f(x), rtol=2e-2, atol=2e-2)
