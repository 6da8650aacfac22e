"""order-dims alone and with coalesce-dims: a kernel's i-dims nest so its last one walks memory with stride 1."""

import torch
from ember_lowering import parse_plan, schedule
from ember_lowering.loop_passes.coalesce_dims import CoalesceDims
from ember_lowering.loop_passes.order_dims import OrderDims
from lowering_checks import before_after, run_passes, verdicts

HEAD = "# ember kernel plan 'g' on cpu\n# passes: lower\n"

CHANNELS_LAST = HEAD + """\
def g(x):
  x: f32[2, 4, 3, 5]{60, 1, 20, 4} input
  y: f32[2, 4, 3, 5]{60, 1, 20, 4} output
  kernel pointwise_2x4x3x5[i0 < 2, i1 < 4, i2 < 3, i3 < 5]:
    t0: f32 = load x[i0, i1, i2, i3]
    t1: f32 = neg t0
    store y[i0, i1, i2, i3] = t1
  return (y)
"""


def test_a_channels_last_kernel_nests_channels_innermost():
    after, decisions = run_passes(CHANNELS_LAST, [OrderDims()])
    kernel = after.kernels[0]
    assert [d.var for d in kernel.dims] == ["i0", "i2", "i3", "i1"]
    assert [(d.verdict, d.reason, d.subjects) for d in decisions] == [
        ("reordered", "unit-stride-last", ("pointwise_2x4x3x5", "i0", "i2", "i3", "i1"))]


def test_then_coalesce_makes_it_one_contiguous_walk():
    after, _ = run_passes(CHANNELS_LAST, [OrderDims(), CoalesceDims()])
    assert [str(d.size) for d in after.kernels[0].dims] == ["120"]


def test_row_major_kernels_and_layout_changes_keep_their_order():
    row_major = CHANNELS_LAST.replace("{60, 1, 20, 4}", "")
    # reads channels-last, writes row-major: one access is strided either way, and the store's order is kept
    convert = CHANNELS_LAST.replace("y: f32[2, 4, 3, 5]{60, 1, 20, 4}", "y: f32[2, 4, 3, 5]")
    for text in (row_major, convert):
        after, decisions = run_passes(text, [OrderDims()])
        assert [d.var for d in after.kernels[0].dims] == ["i0", "i1", "i2", "i3"]
        assert verdicts(decisions) == {("kept", "no-better")}


def test_a_symbolic_stride_moves_only_the_unit_stride_dim():
    text = (CHANNELS_LAST.replace("def g(x):", "def g(x, s0):")
            .replace("[2, 4, 3, 5]{60, 1, 20, 4}", "[2, s0, 3, 5]{15*s0, 1, 5*s0, s0}")
            .replace("i1 < 4", "i1 < s0").replace("2x4x3x5", "2xs0x3x5"))
    decisions: list = []
    after = schedule(parse_plan(text), passes=[OrderDims()], check=True, decisions=decisions)
    assert [d.var for d in after.kernels[0].dims] == ["i0", "i2", "i3", "i1"]
    assert verdicts(decisions) == {("reordered", "unit-stride-last")}


def test_reductions_reorder_only_their_i_dims_and_results_hold():
    x = torch.randn(2, 8, 6, 5).to(memory_format=torch.channels_last)
    fns = (lambda x: x.relu() * 2, lambda x: x.sum(1, keepdim=True) + x, lambda x: x.mean((2, 3)),
           lambda x: x.softmax(1), lambda x: torch.nn.functional.batch_norm(x, None, None, training=True))
    for fn in fns:
        _, after, decisions = before_after(fn, x, passes=[OrderDims(), CoalesceDims()])
        for k in after.kernels:
            assert [d.var for d in k.reduce_dims] == sorted(d.var for d in k.reduce_dims)
    _, after, decisions = before_after(lambda x: x.relu(), x, passes=[OrderDims(), CoalesceDims()])
    assert [str(d.size) for d in after.kernels[0].dims] == [str(x.numel())]


def test_merged_indices_count_as_the_walk_they_are():
    """A reshape's index `4*floor(i0/4) + Mod(i0, 4)` is `i0`: with the addresses simplified as a codegen prints
    them, the two accesses that walk i0 with stride 1 outvote the one that walks i1 (unsimplified, they counted
    for neither and the kernel kept walking z and y 12 elements a step)."""
    text = HEAD + """\
def g(x, z):
  x: f32[5, 12]{1, 5} input
  z: f32[5, 3, 4] input
  y: f32[5, 3, 4] output
  kernel pointwise_12x5[i0 < 12, i1 < 5]:
    t0: f32 = load x[i1, i0]
    t1: f32 = load z[i1, floor(i0/4), Mod(i0, 4)]
    t2: f32 = add t0, t1
    store y[i1, floor(i0/4), Mod(i0, 4)] = t2
  return (y)
"""
    after, decisions = run_passes(text, [OrderDims()])
    assert [d.var for d in after.kernels[0].dims] == ["i1", "i0"]
    assert verdicts(decisions) == {("reordered", "unit-stride-last")}
