"""keep-float32: inside a kernel, a bfloat16 intermediate reaches the ops that read it unrounded.

Eager rounds every op's bfloat16 result to bfloat16 when it stores it. Once fusion has put a chain of ops in one
kernel, the rounding between two of them (an implicit cast, `IMPLICIT_CAST`: the producer's result narrowed to
its buffer, read back as float32 by the consumer) stores nothing: here the consumer takes the float32 value
instead. That saves a rounding per op (several instructions a vector) and is closer to the exact result, as
TorchInductor computes such chains. It stays where the value is stored, and where an op that jumps at a threshold
reads it (a comparison, floor, sign, mod, argmax: not in `CONTINUOUS`), so that such an op cannot give another
answer than eager's; a cast the program asked for (`Tensor.to`) is never dropped. float16 keeps every rounding: a
float32 intermediate could hold a value beyond float16's range where eager has an infinity.

Not a default pass (`default_passes`): the value a kernel reads unrounded is rounded wherever another kernel stores
it or a value made from it, and the two can meet. A bf16 batch norm over a channel equal in every row took its
mean from unrounded values, stored the mean rounded, and the backward subtracted it from the unrounded values
again: 2^-9 where eager has an exact 0, times 1/sqrt(eps), a weight gradient of 0.7 where eager's is 0. A pass that
widens safely must decide per graph value, for every kernel that computes it, not per kernel.
"""

from __future__ import annotations

from .._decisions import Note
from .._loop_ir import IMPLICIT_CAST, TRANSCENDENTAL, Instr, Kernel, KernelPlan, Loop, Op
from .._rewrite import canonicalize, rename_values, used_names

# Ops whose result moves little when an operand moves by a rounding error: they read a bfloat16 intermediate
# unrounded. Not here: what jumps at a threshold (comparisons, floor, sign, mod, argmax...), so that a rounding
# cannot flip their answer against eager's; lgamma (its poles); any op `define_op` adds.
CONTINUOUS = frozenset(TRANSCENDENTAL - {Op.LGAMMA} | {
    Op.NEG, Op.ABS, Op.RECIPROCAL, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM, Op.WHERE,
    Op.REDUCE_SUM, Op.REDUCE_PROD, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_WELFORD,
})


class KeepFloat32:
    id = "keep-float32"
    # widened: readers take the float32 value; kept: an op that jumps at a threshold reads it too
    reasons = frozenset({"continuous-readers", "threshold-reader"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        steps = tuple(_widen(s, note) if isinstance(s, Kernel) else s for s in plan.steps)
        return plan.replace(steps=steps)


def _widen(kernel: Kernel, note: Note) -> Kernel:
    instrs = [i for s in kernel.body for i in (s.body if isinstance(s, Loop) else (s,))]
    defs = {o: i for i in instrs for o in i.outs}
    readers: dict[str, list[Instr]] = {}
    for i in instrs:
        for n in used_names(i):
            readers.setdefault(n, []).append(i)
    widened: dict[str, str] = {}  # a float32 read of a rounded value → the value before the rounding
    kept = 0
    for i in instrs:
        source = _unrounded(i, defs)
        if source is None:
            continue
        if all(r.op in CONTINUOUS for r in readers.get(i.out, ())):
            widened[i.out] = source
        else:
            kept += 1
    if kept:
        note("kept", "threshold-reader", (kernel.name,),
             f"{kernel.name}: {kept} bfloat16 rounding(s) kept, an op that jumps at a threshold reads the value")
    if not widened:
        return kernel
    note("widened", "continuous-readers", (kernel.name,),
         f"{kernel.name}: {len(widened)} bfloat16 intermediate(s) read in float32, unrounded")

    def stays(i: Instr) -> bool:
        return not (i.outs and i.out in widened)

    body = [Loop(tuple(filter(stays, s.body))) if isinstance(s, Loop) else s
            for s in kernel.body if isinstance(s, Loop) or stays(s)]
    return canonicalize(kernel.replace(body=rename_values(body, widened)))


def _unrounded(i: Instr, defs: dict[str, Instr]) -> str | None:
    """For `i` a float32 read of an implicit rounding of a float32 value to bfloat16, that value."""
    if i.op is not Op.CAST or i.dtype != "float32":
        return None
    rounded = defs.get(i.srcs[0])
    if rounded is None or rounded.op is not Op.CAST or rounded.value != IMPLICIT_CAST or rounded.dtype != "bfloat16":
        return None
    source = defs.get(rounded.srcs[0])
    return rounded.srcs[0] if source is not None and source.dtype == "float32" else None
