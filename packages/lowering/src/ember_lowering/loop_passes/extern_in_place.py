"""extern-in-place: a functional scatter extern whose `self` dies with it writes into that storage instead of a copy.

`aten.index_put(x, idx, v, accumulate)` returns a new tensor: ATen copies all of `x`, then scatters a few rows
into the copy. An embedding's gradient is such a call on a fresh zero tensor (`full`), and for a 32K x 512
vocabulary the copy moves 130 MB to scatter 64K values. When nothing reads `x` after the call, the in-place
overload (`index_put_`) gives the same values without the copy; the result is then `x` itself.

The rewrite needs `x`'s storage to be the plan's own and unshared:
- `x` is a temp (not an input, a constant, an output or a view), with the result's shape and strides;
- a kernel of this plan writes it, or it is the result of an ATen call that returns fresh storage (its schema
  says the result aliases no argument: functionalization relies on the same promise), or of an extern this
  pass already made in place on such a buffer;
- no later step reads it (through a view either), and no other argument of the call reads it.
"""

from __future__ import annotations

from ember_core import Ref, returns_new_storage

from .._decisions import Note
from .._fusion import step_reads, step_writes, view_roots
from .._loop_ir import Kernel, KernelPlan

# functional op → its in-place twin: same arguments, result written into `self`
IN_PLACE = {
    "aten.index_put.default": "aten.index_put_.default",
    "aten.index_add.default": "aten.index_add_.default",
    "aten.index_copy.default": "aten.index_copy_.default",
    "aten.index_fill.int_Scalar": "aten.index_fill_.int_Scalar",
    "aten.scatter.src": "aten.scatter_.src",
    "aten.scatter.value": "aten.scatter_.value",
    "aten.scatter_add.default": "aten.scatter_add_.default",
    "aten.scatter_reduce.two": "aten.scatter_reduce_.two",
    "aten.masked_scatter.default": "aten.masked_scatter_.default",
}


class ExternInPlace:
    id = "extern-in-place"
    reasons = frozenset({"dead-self", "self-read-later"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        buffers = plan.buffer_map
        roots = view_roots(plan)
        outputs = {roots.get(o, o) for o in plan.outputs if isinstance(o, str)}
        last: dict[str, int] = {}
        for k, step in enumerate(plan.steps):
            for n in step_reads(step, roots):
                last[n] = k
        owned: set[str] = set()  # buffers whose storage only this plan's steps hold
        steps = list(plan.steps)
        for k, step in enumerate(steps):
            if isinstance(step, Kernel):
                owned |= step_writes(step)
                continue
            if step.op not in IN_PLACE:
                if returns_new_storage(step.op):
                    owned.update(o for o in step.outs if o != "_")
                continue
            self_ = step.args[0] if step.args else None
            out = step.outs[0]
            if not isinstance(self_, Ref) or out == "_" or self_.name not in owned:
                continue
            x, y = buffers[self_.name], buffers[out]
            if x.kind != "temp" or x.name in outputs or (x.shape, x.stride, x.dtype) != (y.shape, y.stride, y.dtype):
                continue
            others = step.replace(args=step.args[1:])
            if last.get(x.name, k) > k or x.name in step_reads(others, roots):
                note("kept", "self-read-later", (step.outs[0], x.name),
                     f"{step.op} copies {x.name}: a later step reads it")
                continue
            steps[k] = step.replace(op=IN_PLACE[step.op])
            owned.add(out)
            note("reused", "dead-self", (out, x.name), f"{IN_PLACE[step.op]} writes {out} into {x.name} (dead after)")
        return plan.replace(steps=tuple(steps))

