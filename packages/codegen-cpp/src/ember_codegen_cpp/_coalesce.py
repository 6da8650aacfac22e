"""Merging adjacent dims of a kernel that every access walks as one (`coalesce`), before printing it.

A batch norm over NCHW is a kernel over [N, C, H, W]: H and W are two loops of 32, but every access reaches
element (h, w) at `h * W + w` times a stride, so they are one loop of H*W: longer simd loops, and reductions
over (H, W) fill their lanes. Dims a, b (adjacent, both i or both r) merge when every load, store and index
expression is linear in them with coefficient(a) == coefficient(b) * size(b); the kernel then reads
a → floor(v / size(b)) and b → Mod(v, size(b)) for the merged var v, which `flat_index` folds back to v.
Row-major order is kept, so r-dims still run in the order the loop IR prescribes.
"""

from __future__ import annotations

import sympy
from ember_lowering import Buffer, Dim, Instr, Kernel, Loop, Op


def coalesce(kernel: Kernel, buffers: dict[str, Buffer]) -> Kernel:
    """The kernel with mergeable dims merged (the same kernel when none are)."""
    while True:
        pair = _mergeable(kernel, buffers)
        if pair is None:
            return kernel
        kernel = _merge(kernel, *pair)


def _exprs(kernel: Kernel, buffers: dict[str, Buffer]) -> list[sympy.Expr]:
    """Every expression a dim var appears in, as the element offset it addresses (or the value it gives)."""
    out = []
    for i in kernel.instrs():
        if i.op in (Op.LOAD, Op.STORE):
            b = buffers[i.buffer]
            out.append(sympy.expand(sum((e * s for e, s in zip(i.index, b.stride)), sympy.Integer(0))))
        elif i.op is Op.INDEX:
            out.append(sympy.expand(i.index[0]))
    return out


def _linear_fit(expr: sympy.Expr, a: sympy.Symbol, b: sympy.Symbol, size_b: sympy.Expr) -> bool:
    ca, cb = expr.coeff(a), expr.coeff(b)
    if ca.has(a, b) or cb.has(a, b) or sympy.expand(expr - ca * a - cb * b).has(a, b):
        return False
    return sympy.expand(ca - cb * size_b) == 0


def _mergeable(kernel: Kernel, buffers: dict[str, Buffer]) -> tuple[Dim, Dim] | None:
    exprs = _exprs(kernel, buffers)
    for group in (kernel.outer_dims, kernel.reduce_dims):
        for da, db in zip(group, group[1:]):
            a, b = sympy.Symbol(da.var, integer=True), sympy.Symbol(db.var, integer=True)
            if all(_linear_fit(e, a, b, db.size) for e in exprs):
                return da, db
    return None


def _merge(kernel: Kernel, da: Dim, db: Dim) -> Kernel:
    a, b = sympy.Symbol(da.var, integer=True), sympy.Symbol(db.var, integer=True)
    mapping = {a: sympy.floor(a / db.size), b: sympy.Mod(a, db.size)}
    dims = tuple(Dim(d.var, da.size * db.size) if d is da else d for d in kernel.dims if d is not db)

    def instr(i: Instr) -> Instr:
        return i.replace(index=tuple(e.xreplace(mapping) for e in i.index)) if i.index else i

    body = tuple(Loop(tuple(instr(i) for i in s.body)) if isinstance(s, Loop) else instr(s) for s in kernel.body)
    return kernel.replace(dims=dims, body=body)
