"""decompose-ops: what a codegen has no rule for is composed from its op's default, before printing."""

from __future__ import annotations

import torch
from ember_lowering import Op, decompose_ops, parse_plan, run_plan, verify_plan

PLAN = """\
# ember kernel plan 'g' on cpu
def g(x, n):
  x: f32[8] input
  n: i64[8] input
  y: f32[8] output
  m: i64[8] output
  kernel k[i0 < 8]:
    t0: f32 = load x[i0]
    t1: f32 = sigmoid t0
    t2: i64 = load n[i0]
    t3: i64 = const 3
    t4: i64 = mod t2, t3
    t5: i64 = floor t4
    t6: f32 = cast t5
    t7: f32 = add t1, t6
    store y[i0] = t7
    store m[i0] = t5
  return (y, m)
"""


def ops_of(kernel) -> list[str]:
    return [i.op.value for i in kernel.instrs()]


X, N = torch.linspace(-3, 3, 8), torch.arange(-4, 4)


def run(plan, kernel):
    return run_plan(plan.replace(steps=(kernel,)), [X, N])


def test_a_kernel_the_codegen_prints_whole_is_the_same_object():
    kernel = parse_plan(PLAN).kernels[0]
    assert decompose_ops(kernel, lambda op, srcs, dtype: True) is kernel


def test_what_the_codegen_lacks_is_composed_and_computes_the_same():
    plan = parse_plan(PLAN)
    kernel = plan.kernels[0]
    lacks = {Op.SIGMOID, Op.MOD}
    composed = decompose_ops(kernel, lambda op, srcs, dtype: op not in lacks)
    assert not lacks & {i.op for i in composed.instrs()}
    assert {"exp", "floordiv", "div"} <= set(ops_of(composed))
    verify_plan(plan.replace(steps=(composed,)))
    for got, want in zip(run(plan, composed), run(plan, kernel)):
        torch.testing.assert_close(got, want)


def test_defaults_built_on_defaults_expand_until_printed():
    kernel = parse_plan(PLAN).kernels[0]
    composed = decompose_ops(kernel, lambda op, srcs, dtype: op not in (Op.MOD, Op.FLOORDIV))
    assert "truncdiv" in ops_of(composed) and "floordiv" not in ops_of(composed)


def test_an_op_that_is_the_identity_on_a_dtype_goes_and_its_uses_follow():
    plan = parse_plan(PLAN)
    kernel = plan.kernels[0]
    composed = decompose_ops(kernel, lambda op, srcs, dtype: op is not Op.FLOOR)  # floor of an integer
    assert "floor" not in ops_of(composed)
    verify_plan(plan.replace(steps=(composed,)))
    for got, want in zip(run(plan, composed), run(plan, kernel)):
        torch.testing.assert_close(got, want)


def test_an_op_without_a_default_is_left_for_the_printer_to_refuse():
    kernel = parse_plan(PLAN).kernels[0]
    assert decompose_ops(kernel, lambda op, srcs, dtype: op is not Op.ADD) is kernel
