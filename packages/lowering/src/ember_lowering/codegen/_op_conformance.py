"""Does a codegen print every op of the tables? `missing_ops(prints)` answers for a codegen's `prints_op`,
`missing_reductions(print_kernel)` for its kernel printer.

For each pointwise op of `_op_semantics.SEMANTICS` and each dtype of its kinds, a one-instruction kernel is
decomposed as `plan_program` decomposes before printing (`loop_passes/decompose_ops.py`); the (op, dtype) is missing
when an instruction the codegen does not print is left. Casts between every two kernel dtypes are checked too. A
codegen's tests assert `missing_ops(codegen.prints_op) == []`, so a forgotten rule is a failing test, not a
fallback found at run time. A third-party codegen runs the same check.

For each reduction of `_reduction_semantics.REDUCTION_SEMANTICS`, each dtype it takes and each shape of
`REDUCTION_SHAPES` (a short row, a long one, one of symbolic length, the whole tensor, a reduction across rows), a
one-reduction kernel (`one_reduction_plan`) is printed; the (reduction, dtype, shape) is missing where the printer
raises `CannotPrint`.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from ember_core import Symbol

from ember_lowering import (
    KERNEL_DTYPES,
    REDUCTION_SEMANTICS,
    SEMANTICS,
    Buffer,
    Dim,
    Instr,
    Kernel,
    KernelPlan,
    Loop,
    Op,
    Prints,
    decompose_ops,
    opmath,
    sym,
    to_expr,
)

from ._errors import CannotPrint
from ._layout import PlanLayout

_I0 = sym("i0")
_COMPUTE_DTYPES = tuple(d for d in KERNEL_DTYPES if opmath(d) == d)


def one_op_kernel(op: Op, dtype: str) -> Kernel:
    """`out[i0] = op(a[i0], b[i0], ...)` on operands of `dtype` (a `where` takes a bool condition first)."""
    meaning = SEMANTICS[op]
    operand_dtypes = ["bool", dtype, dtype] if op is Op.WHERE else [dtype] * meaning.arity
    loads = tuple(Instr(Op.LOAD, (f"t{k}",), d, buffer=f"in{k}", index=(_I0,)) for k, d in enumerate(operand_dtypes))
    out = f"t{len(loads)}"
    result = dtype if op is Op.WHERE else meaning.result_dtype(dtype)
    body = (*loads, Instr(op, (out,), result, tuple(i.out for i in loads)),
            Instr(Op.STORE, (), "", (out,), buffer="out", index=(_I0,)))
    return Kernel(f"conformance_{op.value}_{dtype}", (Dim("i0", sympy.Integer(8)),), body)


def missing_ops(prints: Prints) -> list[str]:
    """`op(dtype)` for each op and dtype of the table that `prints` cannot print, even through defaults, and
    `cast(src->dst)` for each conversion it cannot print."""
    missing = []
    for op, meaning in SEMANTICS.items():
        for dtype in meaning.dtypes():
            kernel = decompose_ops(one_op_kernel(op, dtype), prints)
            if not all(_printed(i, kernel, prints) for i in kernel.instrs()):
                missing.append(f"{op.value}({dtype})")
    missing += [f"cast({a}->{b})" for a in _COMPUTE_DTYPES for b in KERNEL_DTYPES
                if a != b and not prints(Op.CAST, (a,), b)]
    return missing


def _printed(i: Instr, kernel: Kernel, prints: Prints) -> bool:
    if i.op not in SEMANTICS:
        return True
    dtypes = {o: x.dtype for x in kernel.instrs() for o in x.outs}
    return prints(i.op, tuple(dtypes[s] for s in i.srcs), i.dtype)


def prints_by_trying(expression) -> Prints:
    """A codegen's `prints_op` from its `expression(op, operands, operand dtypes, dtype) -> text` function, which
    raises `CannotPrint` for what it has no rule for: the rule is tried on placeholder operands."""
    placeholders = ("a", "b", "c")

    def prints(op: Op, srcs: tuple[str, ...], dtype: str) -> bool:
        try:
            expression(op, list(placeholders[:len(srcs)]), list(srcs), dtype)
        except CannotPrint:
            return False
        return True
    return prints


# ---------------------------------------------------------------------------------------------- reductions

_S0 = sym("s0")
# shape → (the input's shape, the kernel's dims, the load's index, the results' shape and index)
_SHAPES: dict[str, tuple] = {
    "row": ((4, 50), (("i0", 4), ("r0", 50)), ("i0", "r0"), ((4,), ("i0",))),
    "long_row": ((4, 20000), (("i0", 4), ("r0", 20000)), ("i0", "r0"), ((4,), ("i0",))),
    "symbolic_row": ((4, _S0), (("i0", 4), ("r0", _S0)), ("i0", "r0"), ((4,), ("i0",))),
    "whole": ((5000,), (("r0", 5000),), ("r0",), ((), ())),
    "across_rows": ((50, 64), (("r0", 50), ("i0", 64)), ("r0", "i0"), ((64,), ("i0",))),
}
REDUCTION_SHAPES = tuple(_SHAPES)


def one_reduction_plan(op: Op, dtype: str, shape: str = "row") -> KernelPlan:
    """A plan of one kernel that reduces input `x` of `dtype` with `op` over its r-dim (argmax and argmin with the
    r-dim's position as their index) and stores each result to `out<k>`, laid out as `shape` of
    `REDUCTION_SHAPES` says."""
    x_shape, dims, index, (out_shape, out_index) = _SHAPES[shape]
    meaning = REDUCTION_SEMANTICS[op]
    x_shape = tuple(to_expr(n) for n in x_shape)
    stride = tuple(sympy.Mul(*x_shape[k + 1:]) for k in range(len(x_shape)))
    body = [Instr(Op.LOAD, ("t0",), dtype, buffer="x", index=tuple(sym(v) for v in index))]
    if meaning.state == ("value", "index"):
        body.append(Instr(Op.INDEX, ("t1",), "int64", index=(sym("r0"),)))
    outs = tuple(f"t{len(body) + k}" for k in range(len(meaning.results)))
    result_dtypes = meaning.result_dtypes(dtype)
    body.append(Instr(op, outs, result_dtypes[0], tuple(i.out for i in body)))
    out_shape = tuple(sympy.Integer(n) for n in out_shape)
    out_stride = tuple(sympy.Mul(*out_shape[k + 1:]) for k in range(len(out_shape)))
    stores = tuple(Instr(Op.STORE, (), d, (o,), buffer=f"out{k}", index=tuple(sym(v) for v in out_index))
                   for k, (o, d) in enumerate(zip(outs, result_dtypes)))
    kernel = Kernel(f"conformance_{op.value}_{dtype}_{shape}",
                    tuple(Dim(v, to_expr(n)) for v, n in dims), (Loop(tuple(body)), *stores))
    buffers = (Buffer("x", dtype, x_shape, stride, "input"),
               *(Buffer(f"out{k}", d, out_shape, out_stride, "output") for k, d in enumerate(result_dtypes)))
    symbols = (Symbol("s0", 70, 2),) if shape == "symbolic_row" else ()
    return KernelPlan(kernel.name, buffers, (kernel,), ("x",), tuple(f"out{k}" for k in range(len(outs))), symbols)


def missing_reductions(print_kernel: Callable[..., object]) -> list[str]:
    """`reduction(dtype, shape)` for each reduction of the table, dtype it takes and shape of `REDUCTION_SHAPES`
    that `print_kernel(kernel, layout, name)` (a codegen's) cannot print."""
    missing = []
    for op, meaning in REDUCTION_SEMANTICS.items():
        for dtype in meaning.dtypes():
            for shape in REDUCTION_SHAPES:
                plan = one_reduction_plan(op, dtype, shape)
                try:
                    print_kernel(plan.kernels[0], PlanLayout(plan), "k0")
                except CannotPrint:
                    missing.append(f"{op.value}({dtype}, {shape})")
    return missing
