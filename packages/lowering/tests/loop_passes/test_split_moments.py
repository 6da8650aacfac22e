"""split-moments: a short row's Welford becomes the mean's sum, then the squared deviations' sum, with the same
results; whole-tensor, long, symbolic rows, operands reading what their loop writes and other devices keep it."""

import torch
from ember_lowering import Capabilities, Op, lower_cached, lower_graph, schedule
from ember_lowering.loop_passes.split_moments import SplitMoments
from lowering_checks import before_after, check, run_passes, trace, verdicts

HEAD = ("# ember kernel plan 'g' on {device}\n# passes: lower\ndef g(x):\n  x: f32[4, {n}] input\n"
        "  y: f32[4, {n}] output\n")
NORM = """\
  kernel reduce_4x{n}[i0 < 4, r0 < {n}]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = sin t0
      t2: f32 = cos t0
      store y[i0, r0] = t2
      t3, t4: f32 = reduce_welford t1
    t5: f32 = add t3, t4
    loop:
      t6: f32 = load x[i0, r0]
      t7: f32 = sub t6, t5
      store y[i0, r0] = t7
  return (y)
"""


def ops(plan, op: Op) -> int:
    return sum(i.op is op for k in plan.kernels for i in k.instrs())


def test_a_short_rows_moments_are_two_sums_and_the_first_pass_computes_only_the_operand():
    after, decisions = run_passes(HEAD.format(device="cpu", n=8) + NORM.format(n=8), [SplitMoments()])
    assert str(after).split("def g(x):\n")[1] == """\
  x: f32[4, 8] input
  y: f32[4, 8] output
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = sin t0
      t2: f32 = reduce_sum t1
    t3: f32 = const 8.0
    t4: f32 = div t2, t3
    loop:
      t5: f32 = load x[i0, r0]
      t6: f32 = sin t5
      t7: f32 = cos t5
      store y[i0, r0] = t7
      t8: f32 = sub t6, t4
      t9: f32 = mul t8, t8
      t10: f32 = reduce_sum t8
      t11: f32 = reduce_sum t9
    t12: f32 = div t10, t3
    t13: f32 = add t4, t12
    t14: f32 = mul t10, t12
    t15: f32 = const 3.4028234663852886e+38
    t16: f32 = minimum t14, t15
    t17: f32 = sub t11, t16
    t18: f32 = const 0.0
    t19: f32 = maximum t17, t18
    t20: f32 = add t13, t19
    loop:
      t21: f32 = load x[i0, r0]
      t22: f32 = sub t21, t20
      store y[i0, r0] = t22
  return (y)"""
    assert [(d.verdict, d.reason, d.subjects) for d in decisions] == [
        ("split", "short-row", ("reduce_4x8", "t3", "t4"))]


def test_long_rows_keep_their_welford():
    text = HEAD.format(device="cpu", n=64) + NORM.format(n=64)
    after, decisions = run_passes(text, [SplitMoments(max_elements=32)])
    assert ops(after, Op.REDUCE_WELFORD) == 1 and verdicts(decisions) == {("kept", "row-too-long")}


def test_a_codegen_with_its_own_row_moments_gets_plans_with_welford_and_its_own_cache_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    graph = trace(lambda x: torch.nn.functional.layer_norm(x, (8,)), torch.randn(4, 8))
    for _ in range(2):  # lowered, then read back from the cache: each codegen's own plan
        split, kept = lower_cached(graph), lower_cached(graph, capabilities=Capabilities(row_moments=True))
        assert ops(split, Op.REDUCE_WELFORD) == 0 and "split-moments" in split.passes
        assert ops(kept, Op.REDUCE_WELFORD) == 1 and "split-moments" not in kept.passes


WRITTEN = """\
  kernel reduce_4x8[i0 < 4, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = cos t0
      store y[i0, r0] = t1
      t2: f32 = load y[i0, r0]
      t3, t4: f32 = reduce_welford t2
    t5: f32 = add t3, t4
    loop:
      t6: f32 = load x[i0, r0]
      t7: f32 = sub t6, t5
      store y[i0, r0] = t7
  return (y)
"""


def test_an_operand_reading_what_its_loop_writes_keeps_its_welford():
    after, decisions = run_passes(HEAD.format(device="cpu", n=8) + WRITTEN, [SplitMoments()])
    assert ops(after, Op.REDUCE_WELFORD) == 1 and verdicts(decisions) == {("kept", "reads-written-buffer")}


def test_layer_norm_var_and_std_match_the_graph_split():
    x = torch.randn(6, 40) * 3 + 100  # far from zero: the two-pass variance does not cancel
    _, after, decisions = before_after(lambda x: torch.nn.functional.layer_norm(x, (40,)), x, passes=None)
    assert ops(after, Op.REDUCE_WELFORD) == 0 and ("split", "short-row") in verdicts(decisions)
    check(lambda x: (x.var(1), x.std(1, keepdim=True), torch.var_mean(x, 1, correction=0)), x)
    check(lambda x: torch.var_mean(x, (0, 2)), torch.randn(3, 5, 7))  # the row is two r-dims
    check(lambda x: torch.var_mean(x.new_zeros(4, 0), 1), x)  # empty rows: NaN mean, like Welford's
    check(lambda x: torch.var_mean(x, 1), torch.full((4, 40), 0.1))  # constant rows: 0, never below


def test_a_whole_tensor_and_symbolic_rows_keep_their_welford():
    for fn, x, mode, reason in [(lambda x: x.var(), torch.randn(8, 5), "fake", "whole-tensor"),
                                (lambda x: x.var(1), torch.randn(8, 5), "symbolic", "symbolic-rows")]:
        decisions: list = []
        plan = schedule(lower_graph(trace(fn, x, mode=mode)), passes=[SplitMoments()], decisions=decisions)
        assert ops(plan, Op.REDUCE_WELFORD) == 1 and verdicts(decisions) == {("kept", reason)}
