"""decompose-ops: each pointwise instruction a codegen has no rule for becomes its op's default composition.

A codegen says which (op, operand dtypes, result dtype) it prints; every other pointwise instruction is replaced
by the instructions its op's `default` emits (`_op_semantics.py`), and those are checked the same way, so a
default may use ops that have defaults of their own. An instruction without a default is left as it is: the
printer then raises `CannotPrint`, and the kernel runs in the loop-IR interpreter, visibly (the conformance tests
of each codegen make sure that never happens for an op of the table). Runs at print time, per codegen, so the
plan and its cache stay the same for every codegen.
"""

from __future__ import annotations

from collections.abc import Callable

from .._builder import KernelBuilder, Val
from .._loop_ir import Instr, Kernel, Loop
from .._op_semantics import SEMANTICS
from .._rewrite import canonicalize, rename_values

# prints(op, operand dtypes, result dtype) -> whether the codegen has a rule of its own
Prints = Callable[..., bool]

_MAX_DEPTH = 8  # defaults built on defaults; deeper means a default that (indirectly) uses itself


def decompose_ops(kernel: Kernel, prints: Prints) -> Kernel:
    """`kernel` with every instruction `prints` refuses composed from its op's default (the same kernel, not a
    copy, when there is none)."""
    run = _Decomposer(kernel, prints)
    body: list = []
    for s in kernel.body:
        if isinstance(s, Loop):
            body.append(Loop(tuple(run.expand_all(s.body))))
        else:
            body.extend(run.expand_all((s,)))
    if not run.changed:
        return kernel
    return canonicalize(kernel.replace(body=rename_values(body, run.same_as)))


class _Decomposer:
    def __init__(self, kernel: Kernel, prints: Prints):
        self.kernel, self.prints = kernel, prints
        self.dtypes = {o: i.dtype for i in kernel.instrs() for o in i.outs}
        self.same_as: dict[str, str] = {}  # a value whose default is one of its operands → that operand
        self.changed, self.count = False, 0

    def expand_all(self, instrs) -> list[Instr]:
        return [x for i in instrs for x in self.expand(i, _MAX_DEPTH)]

    def expand(self, i: Instr, depth: int) -> list[Instr]:
        meaning = SEMANTICS.get(i.op)
        if meaning is None or meaning.default is None or depth == 0:
            return [i]
        srcs = [self.same_as.get(s, s) for s in i.srcs]
        if self.prints(i.op, tuple(self.dtypes[s] for s in srcs), i.dtype):
            return [i]
        self.count += 1
        b = KernelBuilder(self.kernel.dims, prefix=f"{i.out}_d{self.count}_")
        result = meaning.default(b, *(Val(b, s, self.dtypes[s]) for s in srcs))
        if result is None:  # the default does not compose these dtypes
            return [i]
        if result.dtype != i.dtype:
            raise ValueError(f"the default of {i.op.value} gives {result.dtype} for {i.dtype}")
        self.changed = True
        emitted = [x for s in b.body for x in (s.body if isinstance(s, Loop) else (s,))]
        if result.name in srcs:  # the op is the identity on these dtypes
            self.same_as[i.out] = result.name
            return []
        emitted = list(rename_values(emitted, {result.name: i.out}))
        self.dtypes.update({o: x.dtype for x in emitted for o in x.outs})
        return [y for x in emitted for y in self.expand(x, depth - 1)]
