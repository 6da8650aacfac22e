"""plan-buffers: a temp that a kernel writes takes the storage of a temp that is dead by then (see
`_buffers.py` for the live ranges and the fit rule). Runs last: it names storage, not computation."""

from __future__ import annotations

from .._buffers import plan_buffers
from .._decisions import Note
from .._loop_ir import KernelPlan


class PlanBuffers:
    id = "plan-buffers"
    reasons = frozenset({"dead-storage"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        return plan_buffers(plan, note)
