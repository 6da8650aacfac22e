"""bound-indices: the gathers of F.interpolate read inside their input for every input, so they lose their tests
and their negative-index wraps; an index that may leave its buffer (from the program, from a float that rounds
onto the size, from a range too wide) keeps its test."""

import pytest
import torch
import torch.nn.functional as F
from ember_lowering import Op, parse_plan, run_plan, schedule
from ember_lowering.loop_passes.bound_indices import BoundIndices
from lowering_checks import check, plan_of, run_passes, verdicts

HEAD = "# ember kernel plan 'g' on cpu\n# passes: lower\n"


def gathers(plan) -> list[tuple[str, bool]]:
    """(buffer, in bounds?) of each load whose index reads values."""
    values = {o for k in plan.kernels for i in k.instrs() for o in i.outs}
    return [(i.buffer, i.in_bounds) for k in plan.kernels for i in k.instrs()
            if i.op is Op.LOAD and any(s.name in values for e in i.index for s in e.free_symbols)]


def count(plan, op: Op) -> int:
    return sum(i.op is op for k in plan.kernels for i in k.instrs())


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear"])
@pytest.mark.parametrize("scale", [0.5, 1.7, 3.0])
def test_the_gathers_of_an_interpolation_are_in_bounds(mode, scale):
    """(This trace keeps bilinear and bicubic whole, as ATen calls; tests/ checks them through the frontends.)"""
    kw = {"align_corners": False} if mode == "linear" else {}
    x = torch.randn(2, 3, 9, 13) if mode != "linear" else torch.randn(2, 3, 9)
    plan = check(lambda x: F.interpolate(x, scale_factor=scale, mode=mode, **kw).relu(), x)
    found = gathers(plan)
    assert found and all(ok for _, ok in found), found
    assert count(plan, Op.LT) == 0  # the wraps of negative indices are gone


def test_an_index_array_of_the_program_keeps_its_test():
    plan = check(lambda x, i: x[i] * 2, torch.randn(8), torch.tensor([1, 7, 0]))
    assert gathers(plan) == [("arg0_1", False)]


def test_an_index_past_the_end_keeps_its_test_and_fails_as_eager():
    """arange(4) + 1 reaches 4 in a buffer of 4: never proven, and the run fails as eager's does."""
    def fn(x):
        return x[torch.arange(4) + 1] * 2
    x = torch.randn(4)
    with pytest.raises(IndexError):
        fn(x)
    plan = plan_of(fn, x)
    assert gathers(plan) == [("arg0_1", False)]
    with pytest.raises(Exception, match="out of bounds|index"):
        run_plan(plan, [x])


def test_a_float_index_that_rounds_onto_the_size_keeps_its_test():
    """3 * 3.3333333 is 9.9999999 exactly but 10.0 in float32: only the widening of float bounds by their
    rounding keeps the proof from reading x[10] of 10 elements unchecked."""
    def fn(x):
        return x[(torch.arange(4, dtype=torch.float32) * 3.3333333).long()]
    x = torch.randn(10)
    with pytest.raises(IndexError):
        fn(x)
    assert gathers(plan_of(fn, x)) == [("arg0_1", False)]


def test_a_range_that_does_not_fit_keeps_its_test():
    # (i * 2) of i < 8 reads up to 14: inside 15 elements, not inside 14
    assert gathers(plan_of(lambda x: x[torch.arange(8) * 2] + 1, torch.randn(15))) == [("arg0_1", True)]
    assert gathers(plan_of(lambda x: x[torch.arange(7) * 2] + 1, torch.randn(14))) == [("arg0_1", True)]
    assert gathers(plan_of(lambda x: x[torch.arange(8) * 2] + 1, torch.randn(14))) == [("arg0_1", False)]
    assert gathers(plan_of(lambda x: x[torch.arange(8) * 2 - 1] + 1, torch.randn(15))) == [("arg0_1", False)]


def test_symbolic_sizes_keep_the_upper_test_and_lose_the_wrap():
    x = torch.randn(2, 3, 10, 12)
    plan = check(lambda x: F.interpolate(x, scale_factor=0.5, mode="nearest") + 1, x, mode="symbolic",
                 others=[(torch.randn(2, 3, 7, 9),)])
    assert gathers(plan) and not any(ok for _, ok in gathers(plan))  # trunc(i * 2.0) < s2 is not proven
    assert count(plan, Op.LT) == 0  # but it is never negative


def test_a_float_that_may_be_nan_decides_nothing():
    """max(x, 0) of a loaded float may be NaN (which a cast makes any integer): no bound, no fold."""
    text = HEAD + """\
def g(x, y):
  x: f32[8] input
  y: f32[8] input
  z: f32[8] output
  kernel pointwise_8[i0 < 8]:
    t0: f32 = load x[i0]
    t1: f32 = const 0.0
    t2: f32 = maximum t0, t1
    t3: i64 = cast t2
    t4: i64 = const 7
    t5: i64 = minimum t3, t4
    t6: f32 = load y[t5]
    store z[i0] = t6
  return (z)
"""
    after, decisions = run_passes(text, [BoundIndices()])
    assert gathers(after) == [("y", False)] and not decisions


def test_decided_ops_fold_and_decisions_name_them():
    text = HEAD + """\
def g(x):
  x: f32[16] input
  z: f32[8] output
  kernel pointwise_8[i0 < 8]:
    t0: i64 = index i0
    t1: i64 = const 2
    t2: i64 = mul t0, t1
    t3: i64 = const 0
    t4: b8 = lt t2, t3
    t5: i64 = const 16
    t6: i64 = add t2, t5
    t7: i64 = where t4, t6, t2
    t8: i64 = const 15
    t9: i64 = minimum t8, t7
    t10: f32 = load x[t9]
    store z[i0] = t10
  return (z)
"""
    after, decisions = run_passes(text, [BoundIndices()])
    assert verdicts(decisions) == {("folded", "decided"), ("proven", "in-bounds")}
    (kernel,) = after.kernels
    assert [i.op for i in kernel.instrs()] == [Op.INDEX, Op.CONST, Op.MUL, Op.LOAD, Op.STORE]
    assert "load x[t2] in bounds" in str(after)
    assert parse_plan(str(after)) == after


def test_a_temp_written_in_part_or_twice_is_not_followed():
    """An index array read from a temp is trusted only when one unmasked store of one kernel writes it whole."""
    text = HEAD + """\
def g(x):
  x: f32[16] input
  idx: i64[8] temp
  z: f32[8] output
  kernel pointwise_4[i0 < 4]:
    t0: i64 = index i0
    store idx[i0] = t0
  kernel pointwise_8[i0 < 8]:
    t0: i64 = load idx[i0]
    t1: f32 = load x[t0]
    store z[i0] = t1
  return (z)
"""
    plan = parse_plan(text)
    after = schedule(plan, passes=[BoundIndices()], check=True)
    assert gathers(after) == [("x", False)]  # idx[4:] was never written: anything
    whole = text.replace("pointwise_4[i0 < 4]", "pointwise_8_0[i0 < 8]")
    after, _ = run_passes(whole, [BoundIndices()])
    assert gathers(after) == [("x", True)]
