"""Buffer reuse planning (the `plan-buffers` pass): a temp takes the storage of a temp dead by the time
it is first written.

Walk the steps in order. A temp's live range runs from the step that writes it to the last step that reads it
(directly, through a view, or through the results of an extern that reads it: those may alias it); outputs
live to the end. When a kernel writes a temp, it reuses a freed storage of the same dtype and a size that is
provably large enough (equal when symbolic); the temp's `base` then names the buffer that owns that storage.
Extern outputs are allocated by ATen and take part only as readers.
"""

from __future__ import annotations

import sympy

from ._decisions import Note
from ._fusion import step_reads, step_writes, view_roots
from ._indexing import storage_size
from ._loop_ir import Buffer, Extern, Kernel, KernelPlan


def _fits(need: sympy.Expr, have: sympy.Expr) -> bool:
    diff = sympy.expand(have - need)
    return diff == 0 or (diff.is_number and diff >= 0)


def _last_uses(plan: KernelPlan, roots: dict[str, str]) -> dict[str, int]:
    """The last step that reads each buffer. An extern's result may alias its arguments (ATen views do), so
    each argument lives as long as the extern's results; outputs live past the last step."""
    last: dict[str, int] = {}
    for k, step in enumerate(plan.steps):
        for n in step_reads(step, roots):
            last[n] = k
    end = len(plan.steps)
    for o in plan.outputs:
        if isinstance(o, str):
            last[roots.get(o, o)] = end
    for k in range(end - 1, -1, -1):
        step = plan.steps[k]
        if isinstance(step, Extern):
            until = max((last.get(o, k) for o in step_writes(step)), default=k)
            for n in step_reads(step, roots):
                last[n] = max(last.get(n, k), until)
    return last


def plan_buffers(plan: KernelPlan, note: Note) -> KernelPlan:
    """The plan with each kernel-written temp reusing a dead temp's storage where one fits."""
    buffers = plan.buffer_map
    roots = view_roots(plan)
    outputs = {roots.get(o, o) for o in plan.outputs if isinstance(o, str)}
    last = _last_uses(plan, roots)
    free: list[tuple[str, sympy.Expr]] = []  # (owner, storage size), in the order they died
    owner: dict[str, str] = {}
    for k, step in enumerate(plan.steps):
        if isinstance(step, Kernel):
            for name in sorted(step_writes(step), key=list(buffers).index):
                _allocate(buffers, name, free, owner, note)
        for name, b in buffers.items():
            if last.get(name) == k and b.kind == "temp" and name not in outputs and name in owner:
                o = owner[name]
                free.append((o, storage_size(buffers[o].shape, buffers[o].stride, buffers[o].offset)))
    return plan.replace(buffers=tuple(buffers.values()))


def _allocate(buffers: dict[str, Buffer], name: str, free: list, owner: dict[str, str],
              note: Note) -> None:
    """Give a temp the first dead storage of its dtype that fits, if any."""
    b = buffers[name]
    owner[name] = name
    if b.kind != "temp":
        return
    need = storage_size(b.shape, b.stride, b.offset)
    for j, (o, size) in enumerate(free):
        if buffers[o].dtype == b.dtype and _fits(need, size):
            del free[j]
            owner[name] = o
            buffers[name] = b.replace(base=o)
            note("reused", "dead-storage", (name, o), f"{name} reuses the storage of {o} (dead by then)")
            return
