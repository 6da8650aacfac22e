"""order-dims: nest a kernel's i-dims so that the last one walks memory with stride 1.

Lowering loops over a result's logical dims in order, N, C, H, W for a batch-norm or a ReLU. When the result is
channels-last (a convolution's output under the layout a oneDNN convolution picks) C is the dim with stride 1,
and the innermost loop over W steps C elements at a time: every vector load is a gather, every store a scatter.
mobilenetv3's ReLU after a depthwise convolution took 172 us that way for 113K floats.

The i-dims of a kernel are independent iteration points, so their nesting order is free; this pass sorts them
by their stride in the kernel's first store (outermost: largest), when that makes more of the kernel's loads
and stores walk the last i-dim with stride 1 than the order lowering gave. coalesce-dims then merges what has
become one walk: a channels-last [N, C, H, W] kernel is one loop over N*H*W*C elements. The r-dims keep their
order: it is the order a reduction adds in. Strides that are symbols (dynamic shapes) cannot be sorted; there
the dim whose stride in the store is exactly 1 moves last and the others stay as they were. Runs after the
fusion passes (they match iteration spaces dim by dim, in lowering's order) and before coalesce-dims.
"""

from __future__ import annotations

import sympy

from .._decisions import Note
from .._indexing import Ranges, flat_index, sym
from .._loop_ir import Buffer, Dim, Kernel, KernelPlan, Op


class OrderDims:
    id = "order-dims"
    # reordered: more accesses now walk the last i-dim with stride 1; kept: the order already does at least as well,
    # or the kernel stores nothing a stride could be read from
    reasons = frozenset({"unit-stride-last", "no-better", "no-store"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        buffers = plan.buffer_map
        return plan.replace(steps=tuple(order(s, buffers, note) if isinstance(s, Kernel) else s
                                        for s in plan.steps))


def order(kernel: Kernel, buffers: dict[str, Buffer], note: Note) -> Kernel:
    """The kernel with its i-dims nested by stride, when that makes more accesses contiguous."""
    outer = list(kernel.outer_dims)
    if len(outer) < 2:
        return kernel
    offsets = _offsets(kernel, buffers)
    store = next((e for op, e in offsets if op is Op.STORE), None)
    if store is None:
        note("kept", "no-store", (kernel.name,), f"{kernel.name}: stores nothing")
        return kernel
    proposed = _by_stride(outer, store)
    before, after = _contiguous(offsets, outer[-1]), _contiguous(offsets, proposed[-1])
    if after <= before:
        note("kept", "no-better", (kernel.name,),
             f"{kernel.name}: {before} of {len(offsets)} accesses already walk {outer[-1].var} with stride 1")
        return kernel
    note("reordered", "unit-stride-last", (kernel.name, *(d.var for d in proposed)),
         f"{kernel.name}: i-dims nested {', '.join(d.var for d in proposed)}; {after} of {len(offsets)} accesses "
         f"walk {proposed[-1].var} with stride 1, {before} walked {outer[-1].var}")
    placed = iter(proposed)
    return kernel.replace(dims=tuple(d if d.reduce else next(placed) for d in kernel.dims))


def _offsets(kernel: Kernel, buffers: dict[str, Buffer]) -> list[tuple[Op, sympy.Expr]]:
    """(op, element offset) of each load and store of a buffer in memory (not a per-row local), simplified over
    the loops' ranges as a codegen addresses it (a reshape's `64*floor(i/64) + Mod(i, 64)` is `i`)."""
    ranges = Ranges({d.var: d.size for d in kernel.dims})
    out = []
    for i in kernel.instrs():
        if i.op in (Op.LOAD, Op.STORE) and buffers[i.buffer].kind != "local":
            out.append((i.op, sympy.expand(flat_index(i.index, buffers[i.buffer].stride, ranges=ranges))))
    return out


def _by_stride(outer: list[Dim], store: sympy.Expr) -> list[Dim]:
    """The i-dims, largest stride in `store` first (a stable sort); with a symbolic stride, only the dim of
    stride exactly 1 moves, to the end."""
    strides = [store.coeff(sym(d.var)) for d in outer]
    if all(s.is_number for s in strides):
        return [d for _, d in sorted(zip(strides, outer), key=lambda p: -p[0])]
    unit = [d for d, s in zip(outer, strides) if s == 1]
    return [d for d in outer if d not in unit] + unit


def _contiguous(offsets: list[tuple[Op, sympy.Expr]], last: Dim) -> int:
    v = sym(last.var)
    return sum(1 for _, e in offsets if e.coeff(v) == 1)
