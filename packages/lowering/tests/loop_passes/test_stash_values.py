"""stash-values: a value a later loop of a kernel would compute again is kept in a per-row local when it is
expensive, the row is static and small, and it reads nothing the kernel writes; otherwise recomputed."""

import torch
from ember_lowering import Op, parse_plan, run_plan
from ember_lowering.loop_passes.coalesce_dims import CoalesceDims
from ember_lowering.loop_passes.fuse_inline import FuseInline
from ember_lowering.loop_passes.fuse_siblings import FuseSiblings
from ember_lowering.loop_passes.fuse_vertical import FuseVertical
from ember_lowering.loop_passes.stash_values import StashValues, recompute_locals
from lowering_checks import before_after, count_ops, random_inputs, run_passes, verdicts

FUSE = [FuseInline(), FuseVertical(), FuseSiblings(), CoalesceDims()]
HEAD = "# ember kernel plan 'g' on cpu\n# passes: lower\ndef g(x):\n  x: f32[4, 8] input\n  y: f32[4, 8] output\n"
SOFTMAX = """\
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_max t0
    loop:
      t2: f32 = load x[i0, r0]
      t3: f32 = sub t2, t1
      t4: f32 = exp t3
      t5: f32 = reduce_sum t4
    loop:
      t6: f32 = load x[i0, r0]
      t7: f32 = sub t6, t1
      t8: f32 = exp t7
      t9: f32 = div t8, t5
      store y[i0, r0] = t9
  return (y)
"""


def test_softmax_keeps_its_exp_in_a_stash_and_drops_the_recompute():
    after, decisions = run_passes(HEAD + SOFTMAX, [StashValues()])
    assert str(after) == HEAD.replace("lower", "lower, stash-values").replace(
        "  y: f32[4, 8] output\n", "  stash0: f32[8] local\n  y: f32[4, 8] output\n") + """\
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_max t0
    loop:
      t2: f32 = load x[i0, r0]
      t3: f32 = sub t2, t1
      t4: f32 = exp t3
      store stash0[r0] = t4
      t5: f32 = reduce_sum t4
    loop:
      t6: f32 = load stash0[r0]
      t7: f32 = div t6, t5
      store y[i0, r0] = t7
  return (y)"""
    (stashed,) = [d for d in decisions if d.verdict == "stashed"]
    assert (stashed.reason, stashed.subjects) == ("expensive", ("reduce_4x8", "stash0", "t4", "t8"))
    assert ("recomputed", "cheap") in verdicts(decisions)  # the load of x in loop 2: no better from a stash


def test_recompute_locals_puts_the_computation_back():
    plan, _ = run_passes(HEAD + SOFTMAX, [StashValues()])
    (kernel,) = plan.kernels
    (original,) = run_passes(HEAD + SOFTMAX, [])[0].kernels
    assert recompute_locals(kernel, {"stash0"}) == original


NESTED = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  stash0: f32[8] local
  stash1: f32[8] local
  y: f32[4, 8] output
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_max t0
    loop:
      t2: f32 = load x[i0, r0]
      t3: f32 = sub t2, t1
      t4: f32 = exp t3
      store stash0[r0] = t4
      t5: f32 = reduce_sum t4
    loop:
      t6: f32 = load stash0[r0]
      t7: f32 = div t6, t5
      store stash1[r0] = t7
      t8: f32 = reduce_sum t7
    loop:
      t9: f32 = load stash1[r0]
      t10: f32 = mul t9, t8
      store y[i0, r0] = t10
  return (y)
"""


def test_recompute_locals_recomputes_a_stash_that_reads_a_stash():
    """softmax's backward over an outer dim stashes exp(x - max) / sum, whose exp is a stash itself: the copy
    put back in the last loop must compute the exp again too, not read a stash that is gone."""
    plan = parse_plan(NESTED)
    (kernel,) = plan.kernels
    plain = recompute_locals(kernel, {"stash0", "stash1"})
    assert not [i for i in plain.instrs() if i.buffer in ("stash0", "stash1")]
    assert count_ops(plan.replace(steps=(plain,)), Op.EXP) == 3
    x = random_inputs(plan)[0]
    torch.testing.assert_close(run_plan(plan.replace(steps=(plain,)), [x])[0], run_plan(plan, [x])[0])


def test_a_value_that_reads_a_buffer_the_kernel_writes_is_recomputed():
    text = """\
# ember kernel plan 'g' on cpu
def g(x):
  x: f32[4, 8] input
  y: f32[4, 8] temp
  z: f32[4, 8] output
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = exp t0
      store y[i0, r0] = t1
      t2: f32 = reduce_max t0
    loop:
      t3: f32 = load y[i0, r0]
      t4: f32 = sub t3, t2
      t5: f32 = exp t4
      t6: f32 = reduce_sum t5
    loop:
      t7: f32 = load y[i0, r0]
      t8: f32 = sub t7, t2
      t9: f32 = exp t8
      t10: f32 = div t9, t6
      store z[i0, r0] = t10
  return (z)
"""
    after, decisions = run_passes(text, [StashValues()])
    assert not any(b.kind == "local" for b in after.buffers)
    assert [(d.verdict, d.reason, d.subjects) for d in decisions] == [
        ("recomputed", "reads-written-buffer", ("reduce_4x8", "t5", "t9"))]


def test_a_cheap_repeated_value_is_recomputed():
    _, after, decisions = before_after(lambda x: torch.log_softmax(x, -1), torch.randn(4, 8), passes=[*FUSE,
                                                                                                      StashValues()])
    assert not any(b.kind == "local" for b in after.buffers)
    assert verdicts([d for d in decisions if d.pass_id == "stash-values"]) == {("recomputed", "cheap")}


def test_sqrt_is_expensive_enough_to_stash():
    def fn(x):
        s = x.abs().sqrt()
        return s / s.sum(-1, keepdim=True)
    _, after, decisions = before_after(fn, torch.randn(4, 8), passes=[*FUSE, StashValues()])
    assert ("stashed", "expensive") in verdicts(decisions) and count_ops(after, Op.SQRT) == 1


def test_long_symbolic_or_over_budget_rows_are_recomputed():
    softmax = [*FUSE, StashValues()]
    cases = [(torch.randn(2, 10_000), "fake", softmax, "row-too-long"),
             (torch.randn(4, 8), "symbolic", softmax, "symbolic-rows"),
             (torch.randn(4, 64), "fake", [*FUSE, StashValues(max_bytes=64)], "over-budget"),
             (torch.randn(4, 64), "fake", [*FUSE, StashValues(max_elements=32)], "row-too-long")]
    for x, mode, passes, reason in cases:
        _, after, decisions = before_after(lambda x: torch.softmax(x, -1), x, passes=passes, mode=mode)
        assert not any(b.kind == "local" for b in after.buffers) and count_ops(after, Op.EXP) == 2
        assert ("recomputed", reason) in verdicts(decisions), reason


def test_a_stashed_plan_runs_equal_to_eager():
    x = torch.randn(37, 300)
    for fn in (lambda x: torch.softmax(x, -1), lambda x: torch.softmax(x * 3, 0), lambda x: torch.log_softmax(x, -1)):
        _, after, _ = before_after(fn, x, passes=[*FUSE, StashValues()])
        (got,) = run_plan(after, [x.clone()])
        torch.testing.assert_close(got, fn(x))
    assert any(b.kind == "local" for b in before_after(lambda x: torch.softmax(x, -1), x,
                                                       passes=[*FUSE, StashValues()])[1].buffers)
