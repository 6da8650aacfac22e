"""The op table: every pointwise op's meaning once, its defaults equal to it, and ops added at run time."""

from __future__ import annotations

import math

import pytest
import sympy
import torch
from ember_core import to_dtype
from ember_lowering import (
    POINTWISE_OPS,
    SEMANTICS,
    Buffer,
    Dim,
    KernelPlan,
    Op,
    PlanError,
    decompose_ops,
    define_op,
    forget_op,
    format_plan,
    parse_plan,
    run_plan,
    verify_plan,
)
from ember_lowering.codegen import one_op_kernel

N = 16
FLOATS = [-math.inf, -3.7, -2.0, -1.0, -0.5, -0.0, 0.0, 0.1, 0.5, 1.0, 2.0, 3.7, 7.0, 1e30, math.inf, math.nan]
SECOND = [0.1, 2.0, -2.0, 3.0, -0.0, 0.5, -1.5, 1.0, math.nan, -3.7, 0.25, 1e-30, 2.0, -1.0, 3.0, 0.0]
INTS = [-7, -2, -1, 0, 1, 2, 3, 7, 100, -100, 5, -5, 9, 13, 64, 1]
DIVISORS = [3, -2, 1, -1, 2, 7, -7, 5, 3, -3, 4, 2, -9, 1, 6, 2]
EXPONENTS = [3, -1, 2, -3, 0, 1, 5, 2, 1, 0, 7, 3, 2, 1, 9, -2]


def operands(op: Op, dtype: str) -> list[torch.Tensor]:
    """Operands of `dtype` for `op`, special values included (no integer division by zero)."""
    t = to_dtype(dtype)
    if dtype == "bool":
        first, second = torch.tensor(INTS) % 2 == 0, torch.tensor(INTS) % 3 == 0
    elif dtype in ("float32", "float64"):
        first, second = torch.tensor(FLOATS, dtype=t), torch.tensor(SECOND, dtype=t)
    else:
        lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
        first = torch.tensor(INTS).clamp(lo, hi).to(t)
        second = torch.tensor(EXPONENTS if op is Op.POW else DIVISORS)
        second = (second.abs().clamp(min=1) if dtype == "uint8" else second).clamp(lo, hi).to(t)
        if op in (Op.LSHIFT, Op.RSHIFT):
            second = second.abs() % 8
    if op is Op.WHERE:
        return [torch.tensor(INTS) % 2 == 0, first, second]
    return [first, second, first][:SEMANTICS[op].arity]


def one_op_plan(kernel, dtypes: list[str], out_dtype: str) -> KernelPlan:
    n, one = (sympy.Integer(N),), (sympy.Integer(1),)
    buffers = tuple(Buffer(f"in{k}", d, n, one, "input") for k, d in enumerate(dtypes))
    kernel = kernel.replace(dims=(Dim("i0", sympy.Integer(N)),))
    return KernelPlan("g", (*buffers, Buffer("out", out_dtype, n, one, "output")), (kernel,),
                      tuple(b.name for b in buffers), ("out",))


def run_one(kernel, args: list[torch.Tensor], out_dtype: str) -> torch.Tensor:
    plan = one_op_plan(kernel, [str(a.dtype).removeprefix("torch.") for a in args], out_dtype)
    verify_plan(plan)
    return run_plan(plan, args)[0]


CASES = [(op, d) for op, s in SEMANTICS.items() for d in s.dtypes()]


def test_every_pointwise_op_but_cast_has_semantics():
    assert set(SEMANTICS) == POINTWISE_OPS - {Op.CAST}


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{op.value}-{d}" for op, d in CASES])
def test_the_reference_takes_every_dtype_of_its_kinds(op, dtype):
    meaning = SEMANTICS[op]
    result = meaning.reference(*operands(op, dtype))
    assert str(result.dtype).removeprefix("torch.") == meaning.result_dtype(dtype)


def _composes(op: Op, dtype: str) -> bool:
    kernel = one_op_kernel(op, dtype)
    return decompose_ops(kernel, lambda o, srcs, d: o is not op) is not kernel


DEFAULTS = [(op, d) for op, d in CASES if SEMANTICS[op].default is not None and _composes(op, d)]


@pytest.mark.parametrize(("op", "dtype"), DEFAULTS, ids=[f"{op.value}-{d}" for op, d in DEFAULTS])
def test_each_default_computes_what_its_reference_does(op, dtype):
    kernel = one_op_kernel(op, dtype)
    composed = decompose_ops(kernel, lambda o, srcs, d: o is not op)
    assert op not in {i.op for i in composed.instrs()}
    args = operands(op, dtype)
    out_dtype = [i for i in kernel.instrs() if i.op is op][0].dtype
    want = SEMANTICS[op].reference(*args)
    got = run_one(composed, args, out_dtype)
    if dtype in ("float32", "float64") and op in (Op.SIGMOID, Op.RSQRT):
        torch.testing.assert_close(got, want, equal_nan=True)  # a few ulp apart: exp and sqrt, then a division
    else:
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


SOFTSIGN = dict(arity=1, kinds={"float"}, reference=lambda x: x / (1 + x.abs()),
                default=lambda b, x: x / (1.0 + b.abs(x)))


@pytest.fixture
def softsign():
    yield define_op("softsign", **SOFTSIGN)
    forget_op(Op("softsign"))


def test_a_defined_op_prints_parses_verifies_and_runs(softsign):
    kernel = one_op_kernel(softsign, "float32")
    plan = one_op_plan(kernel, ["float32"], "float32")
    text = format_plan(plan)
    assert "= softsign t0" in text
    assert parse_plan(text) == plan
    x = torch.randn(N)
    torch.testing.assert_close(run_plan(plan, [x])[0], x / (1 + x.abs()))
    composed = decompose_ops(kernel, lambda o, srcs, d: o is not softsign)
    assert [i.op.value for i in composed.instrs()] == ["load", "abs", "const", "add", "div", "store"]


def test_a_defined_op_is_checked_by_its_kinds(softsign):
    plan = one_op_plan(one_op_kernel(softsign, "float32"), ["float32"], "float32")
    text = format_plan(plan).replace("f32", "i32")
    with pytest.raises(PlanError, match="softsign needs float operands, got int32"):
        verify_plan(parse_plan(text))


def test_a_forgotten_op_is_gone(softsign):
    forget_op(softsign)
    try:
        assert Op.named("softsign") is None and softsign not in SEMANTICS and not hasattr(Op, "SOFTSIGN")
    finally:
        again = define_op("softsign", **SOFTSIGN)  # the fixture forgets it once more
    assert again is Op("softsign")


def test_define_op_refuses_a_taken_or_malformed_name():
    with pytest.raises(ValueError, match="already has an op 'exp'"):
        define_op("exp", arity=1, kinds={"float"}, reference=torch.exp)
    with pytest.raises(ValueError, match="kinds must be some of"):
        define_op("odd", arity=1, kinds={"complex"}, reference=torch.exp)
    with pytest.raises(ValueError, match="lower-case identifier"):
        define_op("Odd op", arity=1, kinds={"float"}, reference=torch.exp)
    with pytest.raises(ValueError, match="was not added by define_op"):
        forget_op(Op.EXP)
