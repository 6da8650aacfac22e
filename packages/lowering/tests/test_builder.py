"""The kernel builder: SSA names, reuse of identical instructions in scope, constant folding, Val operators."""

import pytest
from ember_lowering import Dim, Op
from ember_lowering._builder import KernelBuilder
from ember_lowering._indexing import sym

DIMS = (Dim("i0", sym("s0")), Dim("r0", sym("s1")))


def test_identical_instructions_are_emitted_once():
    b = KernelBuilder(DIMS)
    with b.loop():
        x = b.load("x", (sym("i0"), sym("r0")), "float32")
        y = b.load("x", (sym("i0"), sym("r0")), "float32")
        assert x.name == y.name
        total = b.reduce(Op.REDUCE_SUM, b.exp(x))
    b.store("out", (sym("i0"),), total * 2.0)
    kernel = b.finish("k")
    assert [i.op for i in kernel.instrs()] == [Op.LOAD, Op.EXP, Op.REDUCE_SUM, Op.CONST, Op.MUL, Op.STORE]


def test_loop_values_are_not_reused_outside_but_reductions_are():
    b = KernelBuilder(DIMS)
    with b.loop():
        c = b.const(1.0, "float32")
        r = b.reduce(Op.REDUCE_MAX, b.load("x", (sym("i0"), sym("r0")), "float32"))
    assert b.const(1.0, "float32").name != c.name
    b.store("out", (sym("i0"),), r)
    kernel = b.finish("k")
    assert kernel.body[-1].srcs == (kernel.body[0].body[-1].out,)


def test_a_store_invalidates_earlier_loads_of_its_buffer():
    b = KernelBuilder(DIMS[:1])
    first = b.load("a", (sym("i0"),), "float32")
    b.store("a", (sym("i0"),), first + 1.0)
    assert b.load("a", (sym("i0"),), "float32").name != first.name


def test_constants_fold():
    b = KernelBuilder(DIMS[:1])
    b.store("out", (sym("i0"),), (b.const(16.0, "float32") - 1.0) * 2.0)
    const, store = b.finish("k").body
    assert const.op is Op.CONST and const.value == 30.0 and store.srcs == const.outs


def test_val_operators_lift_scalars_to_the_values_dtype():
    b = KernelBuilder(DIMS[:1])
    x = b.load("x", (sym("i0"),), "int64")
    y = 3 - x // 2
    three, sub = b.body[-2:]
    assert y.dtype == "int64" and sub.op is Op.SUB and sub.srcs == (three.out, b.body[-3].out)
    assert three.op is Op.CONST and three.value == 3 and three.dtype == "int64"
    assert x.lt(0).dtype == "bool"


def test_reductions_only_inside_loops():
    b = KernelBuilder(DIMS)
    with pytest.raises(RuntimeError, match="inside a loop"):
        b.reduce(Op.REDUCE_SUM, b.const(1.0, "float32"))
