"""keep-float32 after fuse-inline: a fused bfloat16 chain computes in float32 and rounds once, where it stores;
roundings a threshold op reads, casts the program asked for and float16 chains stay."""

import torch
from ember_core import Output
from ember_lowering import Op, bind_passes, default_passes, lower_graph, parse_plan, run_plan, schedule
from ember_lowering.loop_passes.fuse_inline import FuseInline
from ember_lowering.loop_passes.fuse_vertical import FuseVertical
from ember_lowering.loop_passes.keep_float32 import KeepFloat32
from lowering_checks import before_after, trace, verdicts

PASSES = [FuseInline(), KeepFloat32(widen=True)]


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
        return torch.floor(y) + (y * 1.7 > 2).to(torch.bfloat16) * y

    before, after, decisions = before_after(f, x, passes=PASSES)
    assert ("kept", "threshold-reader") in verdicts(decisions)
    (got,) = run_plan(after, [x])
    torch.testing.assert_close(got, f(x), rtol=0, atol=0)  # eager's answer exactly, not float32's


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

    _, after, _ = before_after(f, x, passes=[FuseInline(), KeepFloat32(widen=True)])
    y, z = run_plan(after, [x])
    torch.testing.assert_close(y, x.sin() * 2, rtol=0, atol=0)
    torch.testing.assert_close(z, f(x)[1], rtol=2e-2, atol=2e-2)


def test_a_chain_inside_a_reduction_loop_and_its_epilogue():
    x = _bf16(16, 64, seed=5)

    def f(x):
        return torch.softmax(x.sin() * 3, -1) * 2 + 1

    _, after, decisions = before_after(f, x, passes=[FuseInline(), FuseVertical(), KeepFloat32(widen=True)])
    assert ("widened", "continuous-readers") in verdicts(decisions) and len(after.kernels) == 1
    torch.testing.assert_close(run_plan(after, [x])[0], f(x), rtol=2e-2, atol=2e-2)


def test_a_value_two_kernels_compute_keeps_its_roundings_in_both():
    """`v` inlined into the kernel of its max and into the kernel that subtracts the max: widened, the second
    would subtract the max (stored rounded to bfloat16) from `v` unrounded, 2^-9 of `v` where eager has an exact 0
    (0.21 after the * 1000)."""
    x = torch.full((8, 64), 0.3).to(torch.bfloat16)

    def f(x):
        v = x / (x.abs() + 1)
        return (v - v.amax(0)) * 1000 + 1

    _, after, decisions = before_after(f, x, passes=PASSES)
    assert ("kept", "computed-elsewhere") in verdicts(decisions) and len(after.kernels) == 2
    assert not any(d.verdict == "widened" for d in decisions)
    (got,) = run_plan(after, [x])
    assert torch.equal(got, f(x)) and torch.equal(got, torch.ones_like(got))


def test_a_plan_not_bound_to_a_graph_or_bound_to_half_of_a_training_step_keeps_every_rounding():
    x = _bf16(64, 32, seed=6)
    graph = trace(chain, x)
    widened = schedule(lower_graph(graph), passes=bind_passes(default_passes(), graph))
    assert _casts_to(widened, "bfloat16") == 1
    saved = graph.replace(outputs=(*graph.outputs, Output(graph.nodes[0].outputs[0], "saved")))
    # a backward compiled autograd captured: plain inputs, every node in the backward region
    backward = graph.replace(nodes=tuple(n.replace(meta={**n.meta, "region": "backward"}) for n in graph.nodes))
    cases = [(graph, default_passes(), "graph-unknown"),
             (saved, bind_passes(default_passes(), saved), "training-graph"),
             (backward, bind_passes(default_passes(), backward), "training-graph"),
             (graph, bind_passes([FuseInline(), KeepFloat32(widen=False)], graph), "turned-off")]
    for g, passes, why in cases:
        decisions = []
        kept = schedule(lower_graph(g), passes=passes, decisions=decisions)
        assert _casts_to(kept, "bfloat16") >= 5
        (said,) = [d for d in decisions if d.pass_id == "keep-float32"]
        assert (said.verdict, said.reason) == ("kept", why)
        torch.testing.assert_close(run_plan(kept, [x])[0], chain(x), rtol=0, atol=0)


READS_BACK = """\
# ember kernel plan 'g' on cpu
# passes: lower
def g(x):
  x: bf16[4, 8] input
  y: bf16[4, 8] temp
  out: bf16[4, 8] output
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: bf16 = load x[i0, r0]
      t1: f32 = cast t0
      t2: f32 = sin t1
      t3: bf16 = cast t2 implicit
      store y[i0, r0] = t3
      t4: f32 = cast t3
      t5: f32 = reduce_sum t4
    loop:
      t6: bf16 = load y[i0, r0]
      t7: f32 = cast t6
      t8: f32 = sub t7, t5
      t9: bf16 = cast t8 implicit
      store out[i0, r0] = t9
  return (out)
"""


def test_a_kernel_that_loads_what_it_stored_keeps_its_roundings():
    """The second loop reads `y` back rounded; the sum, widened, would be of the unrounded values."""
    plan = parse_plan(READS_BACK)
    decisions = []
    after = schedule(plan, passes=[KeepFloat32(widen=True)], decisions=decisions)
    assert [(d.verdict, d.reason) for d in decisions] == [("kept", "reads-back")]
    assert _casts_to(after, "bfloat16") == _casts_to(plan, "bfloat16") == 2


def test_a_comparison_reads_a_value_made_as_eager_makes_it():
    """`x * 3` is read by an add, the add by `>`: left unrounded, `x * 3` made `x * 3 + 1` round up past 1 where
    eager's rounded `x * 3` is half a step at 1 and the sum ties down to 1. Every rounding the comparison depends
    on stays, so its answer is eager's for every bf16 value near the tie."""
    near = torch.arange(0.0012, 0.0014, 2e-6).to(torch.bfloat16).unique()
    x = torch.cat([near, -near, _bf16(512, seed=7)])

    def f(x):
        return torch.where(x * 3 + 1 > 1, x.exp(), -x)

    _, after, decisions = before_after(f, x, passes=PASSES)
    assert ("kept", "threshold-reader") in verdicts(decisions)
    (got,) = run_plan(after, [x])
    torch.testing.assert_close(got > 0, f(x) > 0, rtol=0, atol=0)
