"""Does a codegen print every op of the table? `missing_ops(prints)` answers for a codegen's `prints_op`.

For each pointwise op of `_op_semantics.SEMANTICS` and each dtype of its kinds, a one-instruction kernel is
decomposed as `plan_program` decomposes before printing (`loop_passes/decompose_ops.py`); the (op, dtype) is missing
when an instruction the codegen does not print is left. Casts between every two kernel dtypes are checked too. A
codegen's tests assert `missing_ops(codegen.prints_op) == []`, so a forgotten rule is a failing test, not a
fallback found at run time. A third-party codegen runs the same check.
"""

from __future__ import annotations

import sympy

from .._indexing import sym
from .._loop_ir import KERNEL_DTYPES, Dim, Instr, Kernel, Op, opmath
from .._op_semantics import SEMANTICS
from ..loop_passes.decompose_ops import Prints, decompose_ops
from ._errors import CannotPrint

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
