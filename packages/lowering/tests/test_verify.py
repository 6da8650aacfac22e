"""The verifier: each broken rule is named, with the plan around the offending line marked."""

import pytest
from ember_core import Ref
from ember_lowering import Extern, Item, KernelPlan, PlanError, parse_plan, verify_plan

HEAD = """\
# ember kernel plan 'g' on cpu
# symbols: s0=4 in [2, inf]
def g(x, i):
  x: f32[s0, 8] input
  i: i64[s0] input
  y: f32[s0, 8] temp
  m: f32[s0] output
"""
OK = """\
  kernel k[i0 < s0, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = reduce_sum t0
    store m[i0] = t1
  return (m)
"""


def verify_text(body: str) -> None:
    verify_plan(parse_plan(HEAD + body))


def test_a_good_plan_passes():
    verify_text(OK)


@pytest.mark.parametrize("body, message", [
    (OK.replace("reduce_sum t0", "reduce_sum t9"), "operand 't9' is not defined or not visible"),
    (OK.replace("store m[i0] = t1", "store m[i0] = t0"), "operand 't0' is not defined or not visible"),
    (OK.replace("store m[i0]", "store m[r0]"), "uses unknown symbol(s) r0"),
    (OK.replace("load x[i0, r0]", "load x[i0]"), "x has 2 dims, indexed with 1"),
    (OK.replace("load x[i0, r0]", "load x[i0, s9]"), "unknown symbol(s) s9"),
    (OK.replace("load x[i0, r0]", "load y[i0, r0]"), "load of 'y' before any step writes it"),
    (OK.replace("store m[i0]", "store x[i0, 0]"), "store to input buffer x"),
    (OK.replace("t1: f32 = reduce_sum t0", "t1: i64 = reduce_sum t0"), "reduce_sum gives float32, declared int64"),
    (OK.replace("t0: f32 = load x", "t0: f64 = load x"), "load of x (float32) gives float64"),
    (OK.replace("    loop:\n      t0: f32 = load x[i0, r0]\n      t1: f32 = reduce_sum t0\n",
                "    t0: f32 = load x[i0, 0]\n    t1: f32 = reduce_sum t0\n"), "reduce_sum outside a loop"),
    (OK.replace("t1: f32 = reduce_sum t0", "t1: f32 = add t0"), "add takes 2 operands, got 1"),
    (OK.replace("r0 < 8", "j0 < 8"), "bad or repeated dim var 'j0'"),
    (OK.replace("return (m)", "return (y)"), "output 'y' is never written"),
    (OK.replace("t1: f32 = reduce_sum t0", "t1: f32 = exp t2\n      t2: f32 = exp t0"), "'t2' is not defined"),
    (OK + "", None),
])
def test_broken_rules_are_named(body, message):
    if message is None:
        verify_text(body)
        return
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        verify_text(body)


def test_type_rules_of_math():
    body = """\
  kernel k[i0 < s0, i1 < 8]:
    t0: f32 = load x[i0, i1]
    t1: i64 = load i[i0]
    t2: f32 = add t0, t1
    store y[i0, i1] = t2
  kernel k2[i0 < s0, r0 < 8]:
    loop:
      t0: f32 = load y[i0, r0]
      t1: f32 = reduce_sum t0
    store m[i0] = t1
  return (m)
"""
    with pytest.raises(PlanError, match="add operands differ in dtype: float32, int64"):
        verify_text(body)
    with pytest.raises(PlanError, match="exp needs float operands"):
        verify_text(body.replace("t2: f32 = add t0, t1", "t3: i64 = exp t1\n    t2: f32 = cast t3"))


def test_loops_need_r_dims_and_buffers_one_writer():
    with pytest.raises(PlanError, match="a loop in a kernel without r-dims"):
        verify_text(OK.replace("r0 < 8", "i1 < 8").replace("r0]", "i1]"))
    twice = OK.replace("  return (m)\n", "") + OK
    with pytest.raises(PlanError, match="buffer 'm' is written by two steps"):
        verify_text(twice)


def test_the_error_shows_the_plan_with_the_line_marked():
    with pytest.raises(PlanError) as info:
        verify_text(OK.replace("reduce_sum t0", "reduce_sum t9"))
    lines = str(info.value).splitlines()
    assert lines[0].startswith("plan 'g': kernel k:")
    assert ">     t1: f32 = reduce_sum t9" in lines


def test_buffer_declarations_are_checked():
    with pytest.raises(PlanError, match="names base 'nope'"):
        verify_plan(parse_plan(HEAD.replace("y: f32[s0, 8] temp", "y: f32[s0, 8] view of nope") + "  return (x)\n"))
    with pytest.raises(PlanError, match="only a temp reuses another temp of its dtype"):
        verify_plan(parse_plan(HEAD.replace("m: f32[s0] output", "m: f32[s0] output reuses y") + "  return (x)\n"))


def test_no_arithmetic_in_half_precision():
    body = """\
  h: f16[s0, 8] temp
  kernel k[i0 < s0, i1 < 8]:
    t0: f32 = load x[i0, i1]
    t1: f16 = cast t0
    t2: f16 = add t1, t1
    store h[i0, i1] = t2
  return (h)
"""
    with pytest.raises(PlanError, match="add computes in float16; kernels compute in float32"):
        verify_text(body)
    verify_text(body.replace("t2: f16 = add t1, t1", "t2: f16 = where t3, t1, t1").replace(
        "    t1: f16 = cast t0\n", "    t1: f16 = cast t0\n    t3: b8 = const True\n"))


STASH = """\
  st: f32[8] local
  kernel k[i0 < s0, r0 < 8]:
    loop:
      t0: f32 = load x[i0, r0]
      t1: f32 = exp t0
      store st[r0] = t1
      t2: f32 = reduce_sum t1
    loop:
      t3: f32 = load st[r0]
      t4: f32 = div t3, t2
      store y[i0, r0] = t4
    store m[i0] = t2
  return (m)
"""


@pytest.mark.parametrize("body, message", [
    (STASH, None),
    (STASH.replace("st: f32[8] local", "st: f32[s0] local"), "local buffer 'st' needs a static shape"),
    (STASH.replace("st: f32[8] local", "st: f32[8]{2} local"), "local buffer 'st' must be row-major"),
    (STASH.replace("load st[r0]", "load st[i0]"), "local st is indexed by i0; only r-dims may index a local"),
    (STASH.replace("      store st[r0] = t1\n", ""), "load of local 'st' before this kernel stores it"),
    (STASH.replace("  return (m)\n", "  extern z = aten.neg.default(st)\n  return (m)\n"),
     "extern aten.neg.default reads local buffer 'st'"),
    (STASH.replace("return (m)", "return (st)"), "output 'st' is a local buffer"),
    ("  st: f32[1] local\n  kernel k[i0 < s0, i1 < 8]:\n    t0: f32 = load x[i0, i1]\n    store st[0] = t0\n"
     "    store y[i0, i1] = t0\n  return (m)\n", "local st in a kernel without r-dims"),
    (STASH.replace("  return (m)\n", """\
  kernel k2[i0 < s0, r0 < 8]:
    loop:
      t0: f32 = load st[r0]
      store y[i0, r0] = t0
  return (m)
"""), "load of local 'st' before this kernel stores it"),
])
def test_locals_belong_to_one_kernel_with_a_static_row_major_shape(body, message):
    test_broken_rules_are_named(body, message)


def extern_plan(op: str, args: tuple) -> KernelPlan:
    """A plan of one extern call built in memory (its text would not parse with an unknown op)."""
    plan = parse_plan(HEAD + "  extern y = aten.neg.default(x)\n  kernel k[i0 < s0, r0 < 8]:\n    loop:\n"
                      "      t0: f32 = load y[i0, r0]\n      t1: f32 = reduce_sum t0\n    store m[i0] = t1\n"
                      "  return (m)\n")
    return plan.replace(steps=(Extern(("y",), op, args), *plan.steps[1:]))


@pytest.mark.parametrize("op, args, message", [
    ("aten.repdat.default", (Ref("x"),), "extern aten.repdat.default: unknown op"),
    ("aten.neg.default", (Ref("x"), Ref("x")), "aten.neg.default takes at most 1 positional arguments, got 2"),
    ("aten.addmm.default", (Ref("x"), Ref("x"), (1, 2)), r"argument 'mat2' expects Tensor, got a list \[1, 2\]"),
    ("aten.sum.dim_IntList", (Ref("x"), (float("inf"),)), r"argument 'dim' expects Optional\[List\[int\]\]"),
    # an Item is the number its 0-d buffer holds: a buffer of more elements is no number, and a number no tensor
    ("aten.mul.Scalar", (Ref("x"), Item("x")), r"argument 'other' expects number, got value 'x' \(tensor"),
    ("aten.mul.Scalar", (Ref("x"), Item("nowhere")), r"extern aten.mul.Scalar reads undeclared buffer 'nowhere'"),
])
def test_extern_calls_must_name_an_op_and_match_its_schema(op, args, message):
    with pytest.raises(PlanError, match=message):
        verify_plan(extern_plan(op, args))
