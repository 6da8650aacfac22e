"""KernelWalk: the names, roots and addresses every kernel printer shares."""

from __future__ import annotations

from ember_lowering import Instr, Op, parse_plan
from ember_lowering.codegen import KernelWalk, PlanLayout

PLAN = """\
# ember kernel plan 'g' on cpu
def g(x, idx):
  x: f32[4, 8] input
  idx: i64[3] input
  v: f32[8] view of x at 8
  y: f32[3, 8] output
  kernel k[i0 < 3, i1 < 8]:  # from embedding
    t0: i64 = load idx[i0]
    t1: f32 = load x[t0, i1]
    t2: f32 = load v[i1]
    t3: f32 = add t1, t2
    store y[i0, i1] = t3
  return (y)
"""


def walk() -> KernelWalk:
    plan = parse_plan(PLAN)
    return KernelWalk(plan.kernels[0], PlanLayout(plan), "k0")


def test_roots_are_noted_in_order_of_first_use_with_what_is_written():
    w = walk()
    for i in w.k.instrs():
        w.define(i)
        if i.op is Op.LOAD:
            w.read_root(i.buffer)
        elif i.op is Op.STORE:
            w.write_root(i.buffer)
    assert list(w.roots) == ["idx", "x", "y"]  # the view reads its base's storage
    assert w.written() == frozenset({"y"})
    assert w.dtypes == {"t0": "int64", "t1": "float32", "t2": "float32", "t3": "float32"}


def test_an_access_is_one_offset_from_its_root_and_indirect_dims_are_named():
    w = walk()
    loads = [i for i in w.k.instrs() if i.op is Op.LOAD]
    w.define(loads[0])
    assert str(w.flat(loads[2])) == "i1 + 8"  # the view's offset into x
    assert [str(e) for e, _ in w.indirect(loads[1])] == ["t0"]
    assert w.indirect(loads[2]) == [] and w.indirect(Instr(Op.LOAD, ("t9",), "int64", buffer="idx",
                                                             index=loads[0].index)) == []


def test_origins_are_a_comment_of_the_language():
    assert walk().origins_comment("#") == "  # from embedding"
