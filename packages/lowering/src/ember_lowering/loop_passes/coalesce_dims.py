"""coalesce-dims: merge adjacent dims of a kernel that every access walks as one.

A batch norm over NCHW is a kernel over [N, C, H, W]: H and W are two loops of 32, but every access reaches
element (h, w) at `h * W + w` times a stride, so they are one loop of H*W: longer inner loops, and reductions
over (H, W) fill their vector lanes. Dims a, b (adjacent among the i-dims, or among the r-dims) merge when the
element offset of every load and store, and every `index` expression, is linear in them with
coefficient(a) == coefficient(b) * size(b). The merged dim keeps a's variable v; the body then reads
a → floor(v / size(b)) and b → Mod(v, size(b)), which `flat_index` folds back to v for a codegen. Row-major
order is kept, so the r-dims still run in the order they did. Runs after the fusion passes (they match
iteration spaces dim by dim) and before stash-values (a stash row is then one merged r-dim).
"""

from __future__ import annotations

import sympy

from .._decisions import Note
from .._indexing import Ranges, flat_index, simplify, sym
from .._loop_ir import Buffer, Dim, Kernel, KernelPlan, Op
from .._rewrite import substitute_vars


class CoalesceDims:
    id = "coalesce-dims"
    # merged: every access walks the two dims as one; kept: some access's coefficients differ, or some index
    # is not linear in the two dims (a Mod or floor from a view)
    reasons = frozenset({"one-stride", "strides-differ", "not-linear"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        buffers = plan.buffer_map
        return plan.replace(steps=tuple(coalesce(s, buffers, note) if isinstance(s, Kernel) else s
                                        for s in plan.steps))


def coalesce(kernel: Kernel, buffers: dict[str, Buffer], note: Note) -> Kernel:
    """The kernel with mergeable dims merged, first pair first, until no pair merges."""
    name = kernel.name
    while True:
        exprs = _exprs(kernel, buffers)
        pair = next((p for p in _pairs(kernel) if _refusal(exprs, *p) is None), None)
        if pair is None:
            break
        note("merged", "one-stride", (name, pair[0].var, pair[1].var),
             f"{name}: {pair[0].var} and {pair[1].var} are one walk of {pair[0].size * pair[1].size} elements")
        kernel = _merge(kernel, *pair)
    for a, b in _pairs(kernel):
        reason = _refusal(exprs, a, b)
        note("kept", reason, (name, a.var, b.var), f"{name}: {a.var} and {b.var} stay apart ({reason})")
    return kernel


def _pairs(kernel: Kernel) -> list[tuple[Dim, Dim]]:
    """Adjacent dims of the same kind: i-dims with i-dims, r-dims with r-dims."""
    groups = (kernel.outer_dims, kernel.reduce_dims)
    return [(a, b) for g in groups for a, b in zip(g, g[1:])]


def _exprs(kernel: Kernel, buffers: dict[str, Buffer]) -> list[sympy.Expr]:
    """Every expression a dim var appears in: the element offset of each access, the value of each `index`; each
    once (a kernel reads one address many times, and `_refusal` runs sympy on each expression for each pair)."""
    out = []
    ranges = Ranges({d.var: d.size for d in kernel.dims})  # folds a merged pair back: 3*floor(v/3) + Mod(v, 3) = v
    for i in kernel.instrs():
        if i.op in (Op.LOAD, Op.STORE):
            out.append(flat_index(i.index, buffers[i.buffer].stride, ranges=ranges))
        elif i.op is Op.INDEX:
            out.append(simplify(sympy.expand(i.index[0]), ranges))
    return list(dict.fromkeys(out))


def _refusal(exprs: list[sympy.Expr], da: Dim, db: Dim) -> str | None:
    """Why dims da, db (da first) cannot merge; None when they can."""
    a, b = sym(da.var), sym(db.var)
    reason = None
    for e in exprs:
        ca, cb = e.coeff(a), e.coeff(b)
        if ca.has(a, b) or cb.has(a, b) or sympy.expand(e - ca * a - cb * b).has(a, b):
            return "not-linear"
        if sympy.expand(ca - cb * db.size) != 0:
            reason = "strides-differ"
    return reason


def _merge(kernel: Kernel, da: Dim, db: Dim) -> Kernel:
    a, b = sym(da.var), sym(db.var)
    mapping = {a: sympy.floor(a / db.size), b: sympy.Mod(a, db.size)}
    dims = tuple(Dim(d.var, da.size * db.size) if d is da else d for d in kernel.dims if d is not db)
    return kernel.replace(dims=dims, body=substitute_vars(kernel.body, mapping))
