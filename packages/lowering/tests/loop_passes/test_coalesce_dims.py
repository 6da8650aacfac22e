"""coalesce-dims alone: adjacent dims that every access walks as one become one dim; others stay."""

import torch
from ember_lowering.loop_passes.coalesce_dims import CoalesceDims
from lowering_checks import before_after, run_passes, verdicts

HEAD = "# ember kernel plan 'g' on cpu\n# passes: lower\n"

SCALE = HEAD + """\
def g(x, s):
  x: f32[2, 4, 8, 8] input
  s: f32[4] input
  y: f32[2, 4, 8, 8] output
  kernel pointwise_2x4x8x8[i0 < 2, i1 < 4, i2 < 8, i3 < 8]:
    t0: f32 = load x[i0, i1, i2, i3]
    t1: f32 = load s[i1]
    t2: f32 = mul t0, t1
    store y[i0, i1, i2, i3] = t2
  return (y)
"""


def test_contiguous_dims_merge_and_a_broadcast_dim_does_not():
    after, decisions = run_passes(SCALE, [CoalesceDims()])
    assert str(after) == (HEAD.replace("lower", "lower, coalesce-dims") + """\
def g(x, s):
  x: f32[2, 4, 8, 8] input
  s: f32[4] input
  y: f32[2, 4, 8, 8] output
  kernel pointwise_2x4x64[i0 < 2, i1 < 4, i2 < 64]:
    t0: f32 = load x[i0, i1, floor(i2/8), Mod(i2, 8)]
    t1: f32 = load s[i1]
    t2: f32 = mul t0, t1
    store y[i0, i1, floor(i2/8), Mod(i2, 8)] = t2
  return (y)""")
    merged = [d.subjects for d in decisions if d.verdict == "merged"]
    assert merged == [("pointwise_2x4x8x8", "i2", "i3")]
    assert ("kept", "strides-differ") in verdicts(decisions)


def test_dims_whose_coefficients_differ_stay_apart():
    text = HEAD + """\
def g(x):
  x: f32[8, 4] input
  y: f32[4, 8] output
  kernel pointwise_4x8[i0 < 4, i1 < 8]:
    t0: f32 = load x[i1, i0]
    store y[i0, i1] = t0
  return (y)
"""
    after, decisions = run_passes(text, [CoalesceDims()])
    assert str(after).splitlines()[2:] == text.splitlines()[2:]
    assert [(d.verdict, d.reason, d.subjects) for d in decisions] == [
        ("kept", "strides-differ", ("pointwise_4x8", "i0", "i1"))]


def test_an_index_that_is_not_linear_in_the_dims_keeps_them():
    text = HEAD + """\
def g(x):
  x: f32[4, 8] input
  y: f32[4, 8] output
  kernel pointwise_4x8[i0 < 4, i1 < 8]:
    t0: f32 = load x[i0, Mod(i1 + 1, 8)]
    store y[i0, i1] = t0
  return (y)
"""
    after, decisions = run_passes(text, [CoalesceDims()])
    assert len(after.kernels[0].dims) == 2 and verdicts(decisions) == {("kept", "not-linear")}


def test_reduction_dims_merge_in_row_major_order_and_results_hold():
    x = torch.randn(3, 4, 6, 10)
    for fn in (lambda x: x.mean((2, 3)), lambda x: x.amax((0, 2, 3)), lambda x: x.argmin(-1),
               lambda x: x.flatten(1).sum(1), lambda x: x.permute(0, 2, 3, 1) * 2):
        _, after, _ = before_after(fn, x, passes=[CoalesceDims()])
        for k in after.kernels:
            assert len(k.reduce_dims) <= 2
    _, after, _ = before_after(lambda x: x.sum((2, 3)), x, passes=[CoalesceDims()])
    assert [str(d.size) for d in after.kernels[0].dims] == ["12", "60"]
