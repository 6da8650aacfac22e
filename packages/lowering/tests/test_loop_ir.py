"""The IR's data: frozen slotted records over one closed op set."""

import dataclasses

import pytest
from ember_lowering import NAN, POINTWISE_OPS, REDUCTIONS, Dim, Instr, Kernel, Loop, Op, opmath, parse_plan
from ember_lowering._indexing import sym
from ember_lowering._loop_ir import ARITY, scalar_of


def test_records_are_frozen_and_slotted():
    i = Instr(Op.ADD, ("t2",), "float32", ("t0", "t1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        i.dtype = "float64"
    assert not hasattr(i, "__dict__") and i.replace(dtype="float64").dtype == "float64"


def test_every_op_is_classified():
    assert set(Op) == POINTWISE_OPS | REDUCTIONS | {Op.LOAD, Op.STORE, Op.CONST, Op.INDEX}
    assert set(ARITY) == set(Op) - {Op.LOAD, Op.STORE}


def test_kernel_dims_split_into_outer_and_reduce():
    k = Kernel("k", (Dim("r0", sym("s0")), Dim("i0", sym("s1"))), (Loop(()),))
    assert [d.var for d in k.outer_dims] == ["i0"] and [d.var for d in k.reduce_dims] == ["r0"]


def test_scalars_take_their_dtypes_kind_and_nan_is_one_object():
    assert scalar_of(float("nan"), "float32") is NAN
    assert scalar_of(2.7, "int64") == 2 and scalar_of(0, "bool") is False
    assert opmath("bfloat16") == "float32" and opmath("float64") == "float64"


def test_plans_know_their_kernels_externs_and_buffers():
    plan = parse_plan("# ember kernel plan 'g' on cpu\ndef g(x):\n  x: f32[4] input\n  y: f32[4] output\n"
                      "  extern y = aten.cumsum.default(x, 0)\n  return (y)\n")
    assert plan.buffer("y").kind == "output" and not plan.kernels and len(plan.externs) == 1
    with pytest.raises(KeyError, match="no buffer 'z'"):
        plan.buffer("z")
