"""bound-indices: what the value ranges of a kernel prove, its gathers no longer test.

`F.interpolate` and friends gather with index arrays computed from `arange`: `x[..., idx_h, idx_w]`, with `idx =
trunc(max((i + 0.5) * 2.0 - 0.5, 0))`, clamped to the input's last row. ATen's `index` wraps a negative index and
raises on one out of range, so the lowering writes `where(t < 0, t + size, t)` and the codegens test every lane
of the gather against the buffer's shape (a conditional load per element, which keeps C++ from vectorizing).
This pass computes each value's range (`_value_ranges.py`: through the index arrays' own kernels, whose temps it
follows into the kernels that read them) and then:
- folds a comparison the ranges decide into a constant, and a `where` of a decided condition, a `minimum` or a
  `maximum` of ordered operands into the operand it selects: the wrap of a nonnegative index disappears;
- marks a gather's load `in bounds` when every index that reads values lies in [0, size) of its buffer's dim for
  every input: the codegens then load without a test. Under symbolic sizes the upper bound of such an index is
  rarely provable (`trunc(i * 2.0)` against `s2`): those loads keep their test.

It runs after fusion (which substitutes loop variables: a proof holds for the kernel it was made in).
"""

from __future__ import annotations

from .._decisions import Note
from .._indexing import Ranges
from .._loop_ir import COMPARISONS, Instr, Kernel, KernelPlan, Loop, Op
from .._rewrite import canonicalize, rename_values
from .._value_ranges import Interval, KernelRanges, index_range, plan_ranges


class BoundIndices:
    id = "bound-indices"
    # folded: a comparison, where, minimum or maximum the ranges decide; proven: a gather's index is in bounds
    reasons = frozenset({"decided", "in-bounds"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        shapes = {b.name: b.shape for b in plan.buffers}
        steps = tuple(s if found is None else _bound(s, found, shapes, note)
                      for s, found in zip(plan.steps, plan_ranges(plan)))
        return plan.replace(steps=steps)


def _bound(kernel: Kernel, found: KernelRanges, shapes: dict, note: Note) -> Kernel:
    ranges, values, decided = found.ranges, found.values, found.decided
    alias: dict[str, str] = {}
    changed = False

    def visit(i: Instr) -> Instr:
        nonlocal changed
        i = rename_values((i,), alias)[0] if alias else i
        if i.op in COMPARISONS and i.out in decided:
            note("folded", "decided", (kernel.name, i.out), f"{kernel.name}: {i.out} ({i.op.value}) is always "
                 f"{decided[i.out]}")
            changed = True
            return Instr(Op.CONST, i.outs, "bool", value=decided[i.out])
        chosen = _selected(i, decided, values)
        if chosen is not None:
            note("folded", "decided", (kernel.name, i.out), f"{kernel.name}: {i.out} ({i.op.value}) is {chosen}")
            alias[i.out] = chosen
            changed = True
            return i  # dead now: canonicalize drops it
        if i.op is Op.LOAD and not i.in_bounds and _proven(i, shapes[i.buffer], ranges, values):
            note("proven", "in-bounds", (kernel.name, i.out), f"{kernel.name}: {i.out} = load {i.buffer} reads "
                 "inside it for every input")
            changed = True
            return i.replace(in_bounds=True)
        return i

    body = []
    for s in kernel.body:
        body.append(Loop(tuple(visit(i) for i in s.body)) if isinstance(s, Loop) else visit(s))
    return canonicalize(kernel.replace(body=tuple(body))) if changed else kernel


def _selected(i: Instr, decided: dict[str, bool], values: dict[str, Interval | None]) -> str | None:
    """The operand a where of a decided condition, or a minimum / maximum of ordered operands, gives."""
    if i.op is Op.WHERE and i.srcs[0] in decided:
        return i.srcs[1] if decided[i.srcs[0]] else i.srcs[2]
    if i.op in (Op.MINIMUM, Op.MAXIMUM):
        a, b = (values.get(s) for s in i.srcs)
        if a is None or b is None:  # a float that may be NaN: both propagate it
            return None
        if a[1] <= b[0]:
            return i.srcs[0] if i.op is Op.MINIMUM else i.srcs[1]
        if b[1] <= a[0]:
            return i.srcs[1] if i.op is Op.MINIMUM else i.srcs[0]
    return None


def _proven(i: Instr, shape: tuple, ranges: Ranges, values: dict[str, Interval | None]) -> bool:
    """Does every dim of the load whose index reads values stay inside [0, size) of its buffer? (False for a load
    with no such dim: there is nothing to prove.)"""
    gathered = [(e, size) for e, size in zip(i.index, shape) if any(s.name in values for s in e.free_symbols)]
    for e, size in gathered:
        lo, hi = index_range(e, ranges, values)
        smallest = index_range(size, ranges, {})[0]  # a symbolic size: at least its lower bound
        if not (lo >= 0 and hi < smallest):
            return False
    return bool(gathered)
