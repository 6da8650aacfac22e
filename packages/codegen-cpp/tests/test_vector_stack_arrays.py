"""Vector moves of a kernel's stack arrays (`_vector.py`): block arrays of an outer-dim reduction, a row's stashes
and accumulator lanes are declared with one C type per element, and a vector loaded from or stored to them must
have lanes of exactly that size (`check_stack_vector`). A kernel that would move other vectors is refused at print
time (`CannotPrint`: it runs in the interpreter, with a fallback event) instead of built to read and write the
wrong bytes, past the array's end, with no error (the bool block arrays of 82fe9ed)."""

from __future__ import annotations

import pytest
import torch
from ember_codegen_cpp import CannotPrint, KernelPrinter, _kernel_printer, _vector, compiler
from ember_codegen_cpp._cpp_rules import STORAGE_CTYPE
from ember_codegen_cpp._reductions import Accumulator
from ember_codegen_cpp._vector import check_stack_vector
from ember_lowering import Instr, Op, lower, parse_plan, run_plan
from ember_lowering.codegen import PlanLayout
from helpers import CODEGEN, Events, check, trace

needs_compiler = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")


def test_a_vector_moves_a_stack_array_only_in_lanes_of_its_element_size():
    for array, ctype, vector in [("ember_b_t3", "float", "ember_f32x16"), ("ember_b_t4", "bool", "ember_u8x8"),
                                 ("b_stash0", "int64_t", "ember_i64x16"), ("ember_a_t1m", "double", "ember_f64h8")]:
        check_stack_vector(array, ctype, vector)
    for ctype, vector in [("bool", "ember_i32x16"), ("float", "ember_u16x16"), ("uint16_t", "ember_f32x8"),
                          ("float", "ember_f64x8"), (None, "ember_f32x8"), ("float", "not_a_vector")]:
        with pytest.raises(CannotPrint, match="b_x"):
            check_stack_vector("b_x", ctype, vector)


def _cat_sum(a, b, c):
    """A cat summed over its outer dim: its masks are bool block arrays (`_outer_reduction`)."""
    return ((torch.cat([a, b, c], 1) * 2).sum(0),)


CAT_PARTS = [torch.randn(4, w) for w in (70, 45, 83)]


def test_bool_block_arrays_moved_as_int32_vectors_cannot_print(monkeypatch):
    """The bug of 82fe9ed put back: the masks' vectors stored and loaded whole as int32 lanes into one-byte bool
    elements. The kernel is refused and runs in the interpreter, right and visibly, not built wrong."""
    def int32_load(self, array, address, dtype):
        return self._stack_move(array, self.vtype(dtype), "load", address)

    def int32_store(self, array, address, dtype, value):
        return self._stack_move(array, self.vtype(dtype), "store", address, value)

    plan = lower(trace(_cat_sum, *CAT_PARTS), emit_event=False)
    KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print()  # as it is: prints
    monkeypatch.setattr(_vector.VectorBody, "_stack_load", int32_load)
    monkeypatch.setattr(_vector.VectorBody, "_stack_store", int32_store)
    with pytest.raises(CannotPrint, match=r"ember_i32x\d+ moved to or from stack array ember_b_t\d+ of bool"):
        KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print()
    if compiler() is not None:
        with Events() as ev:
            check(_cat_sum, *CAT_PARTS, fallback=True)
        assert any("loop-IR interpreter" in e.message for e in ev.kinds("fallback"))


def test_a_block_array_declared_narrower_than_its_vectors_cannot_print(monkeypatch):
    """Block arrays declared in memory's type (uint16_t for float16) while their vectors are the value's float
    lanes: refused."""
    x = torch.randn(37, 300).half()
    fn = lambda x: ((x.float() * 3).sum(0).half(), (x * x).sum(0))  # noqa: E731
    plan = lower(trace(fn, x), emit_event=False)
    texts = [KernelPrinter(k, PlanLayout(plan), f"k{n}").print().text for n, k in enumerate(plan.kernels)]
    assert any("float ember_b_" in t for t in texts)
    monkeypatch.setattr(_kernel_printer, "CTYPE", STORAGE_CTYPE)
    with pytest.raises(CannotPrint, match="uint16_t elements: 4 bytes a lane, 2 an element"):
        for n, k in enumerate(plan.kernels):
            KernelPrinter(k, PlanLayout(plan), f"k{n}").print()


def test_an_accumulator_refuses_vectors_wider_than_its_lanes():
    """A bool max keeps its lanes in `bool` (one byte); an int32 mask vector would overrun them."""
    flag = Accumulator(Instr(Op.REDUCE_MAX, ("t1",), "bool", ("t0",)), "bool", 1)
    assert flag.ctype == "bool" and "bool ember_a_t1[32];" in flag.init()
    with pytest.raises(CannotPrint, match="ember_a_t1 of bool"):
        flag.vector_update("v", "ember_j", "ember_i32x16")
    total = Accumulator(Instr(Op.REDUCE_SUM, ("t1",), "float32", ("t0",)), "float32", 1)
    with pytest.raises(CannotPrint, match="ember_a_t1 of float"):
        total.vector_update("v", "ember_j", "ember_f64x16")
    welford = Accumulator(Instr(Op.REDUCE_WELFORD, ("t1", "t2"), "float32", ("t0",)), "float32", 3)
    assert welford.ctype == "double" and welford.vector_update("v", "ember_j", "ember_f64x16")


# A row's float16 stash, written by a loop with accumulators (steps of 32 elements, the rest in the scalar tail)
# and read by one without (steps of one vector). Its elements are C floats, as the scalar lines write them; its
# vectors were the u16 lanes of float16 memory, so a vector step read a scalar-written float as two halves. In
# rows of 20 and 56 the second loop's vector steps read elements the first loop's scalar tail wrote (softmax
# values up to 18 off, no error).
F16_STASH = """# ember kernel plan 'graph' on cpu
def graph(arg0_1):
  arg0_1: f16[4, {n}] input
  stash0: f16[{n}] local
  _to_copy_2: f16[4, {n}] output
  kernel reduce_4x{n}[i0 < 4, r0 < {n}]:
    loop:
      t0: f16 = load arg0_1[i0, r0]
      t1: f32 = cast t0
      t2: f32 = exp t1
      t7: f16 = cast t2
      store stash0[r0] = t7
      t3: f32 = reduce_sum t2
    loop:
      t4: f16 = load stash0[r0]
      t8: f32 = cast t4
      t5: f32 = div t8, t3
      t6: f16 = cast t5
      store _to_copy_2[i0, r0] = t6
  return (_to_copy_2)
"""


@needs_compiler
@pytest.mark.parametrize("n", [20, 56])
def test_a_float16_stash_is_moved_in_the_float_lanes_it_is_declared_with(monkeypatch, n):
    plan = parse_plan(F16_STASH.format(n=n))
    text = KernelPrinter(plan.kernels[0], PlanLayout(plan), "k0").print().text
    assert f"float b_stash0[{n}];" in text and "ember_vload<ember_f32x" in text and "ember_u16x" not in \
        "".join(line for line in text.splitlines() if "b_stash0" in line)
    x = torch.randn(4, n).half()
    fn = lambda x: ((x.float().exp() / x.float().exp().sum(-1, keepdim=True)).half(),)  # noqa: E731
    graph = trace(fn, x)
    monkeypatch.setattr("ember_lowering.codegen._codegen.lower_cached", lambda graph, **kw: plan)
    with Events() as ev:
        got = CODEGEN.compile(graph, [x], {"cache": False})([x.clone()])[0]
    assert not ev.kinds("fallback"), [e.message for e in ev.kinds("fallback")]
    want = run_plan(plan, [x.clone()])[0]
    torch.testing.assert_close(got, want)  # float16 tolerances: the sums add in another order
    torch.testing.assert_close(got, fn(x)[0], rtol=2e-3, atol=1e-3)
