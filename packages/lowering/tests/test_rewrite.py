"""Normal form of kernel bodies: duplicates merged, dead code dropped, values renamed in order."""

import sympy
from ember_lowering import Dim, Extern, Instr, Kernel, Loop, Op
from ember_lowering._indexing import sym
from ember_lowering._rewrite import canonicalize, rename_buffers

I0, R0 = sym("i0"), sym("r0")


def load(out, buf, *index, dtype="float32"):
    return Instr(Op.LOAD, (out,), dtype, (), buf, tuple(index))


def test_canonical_names_follow_definition_order_including_indirect_indices():
    body = (load("t7", "idx", I0, dtype="int64"), load("t3", "x", sym("t7")),
            Instr(Op.STORE, (), "", ("t3",), "y", (I0,)))
    k = canonicalize(Kernel("k", (), body))
    assert [i.outs for i in k.body] == [("t0",), ("t1",), ()]
    assert k.body[1].index == (sym("t0"),)


def test_duplicates_merge_within_scope_and_dead_code_goes():
    body = (
        load("a", "x", I0),
        Loop((load("b", "x", I0), load("c", "x", I0, R0), Instr(Op.REDUCE_SUM, ("d",), "float32", ("c",)),
              Instr(Op.EXP, ("dead",), "float32", ("c",)))),
        Instr(Op.ADD, ("e",), "float32", ("a", "d")),
        Instr(Op.STORE, (), "", ("e",), "y", (I0,)),
    )
    k = canonicalize(Kernel("k", (Dim("i0", sympy.Integer(4)), Dim("r0", sympy.Integer(8))), body))
    loop = k.body[1]
    assert [i.op for i in loop.body] == [Op.LOAD, Op.REDUCE_SUM]  # b (hoisted) reused a; the exp was dead
    assert k.body[2].srcs == ("t0", "t2")


def test_loop_invariant_instructions_move_before_the_loop():
    body = (Loop((load("a", "w", I0), load("b", "x", I0, R0), Instr(Op.MUL, ("c",), "float32", ("a", "b")),
                  Instr(Op.REDUCE_SUM, ("d",), "float32", ("c",)))),
            Instr(Op.STORE, (), "", ("d",), "y", (I0,)))
    k = canonicalize(Kernel("k", (Dim("i0", sympy.Integer(4)), Dim("r0", sympy.Integer(8))), body))
    assert k.body[0].op is Op.LOAD and k.body[0].buffer == "w"
    assert [i.op for i in k.body[1].body] == [Op.LOAD, Op.MUL, Op.REDUCE_SUM]


def test_a_store_stops_loads_of_its_buffer_from_merging():
    body = (load("a", "x", I0), Instr(Op.STORE, (), "", ("a",), "x2", (I0,)), load("b", "x2", I0),
            load("c", "x2", I0), Instr(Op.ADD, ("d",), "float32", ("b", "c")),
            Instr(Op.STORE, (), "", ("d",), "y", (I0,)))
    k = canonicalize(Kernel("k", (), body))
    assert sum(1 for i in k.body if i.op is Op.LOAD) == 2


def test_rename_buffers_in_kernels_and_externs():
    from ember_core import Ref

    k = Kernel("k", (), (load("a", "x", I0), Instr(Op.STORE, (), "", ("a",), "y", (I0,))))
    assert [i.buffer for i in rename_buffers(k, {"x": "z"}).body] == ["z", "y"]
    e = Extern(("y",), "aten.cat.default", ((Ref("x"), Ref("w")),), {"out": Ref("x")})
    renamed = rename_buffers(e, {"x": "z", "y": "q"})
    assert renamed.args == ((Ref("z"), Ref("w")),) and renamed.kwargs == {"out": Ref("z")} and renamed.outs == ("q",)


def test_float32_constants_that_round_alike_are_one_and_what_they_feed_is_computed_once():
    def body(dtype):
        const = lambda out, v: Instr(Op.CONST, (out,), dtype, (), value=v)  # noqa: E731
        return (load("x", "x", I0, dtype=dtype), const("a", 0.7071067811865476), const("b", 0.7071067811865475),
                Instr(Op.MUL, ("p",), dtype, ("x", "a")), Instr(Op.MUL, ("q",), dtype, ("x", "b")),
                Instr(Op.ERF, ("e",), dtype, ("p",)), Instr(Op.ERF, ("f",), dtype, ("q",)),
                Instr(Op.ADD, ("s",), dtype, ("e", "f")), Instr(Op.STORE, (), "", ("s",), "y", (I0,)))

    erfs = lambda k: sum(i.op is Op.ERF for i in k.body)  # noqa: E731
    assert erfs(canonicalize(Kernel("k", (), body("float32")))) == 1
    assert erfs(canonicalize(Kernel("k", (), body("float64")))) == 2  # distinct in float64
