"""plan-buffers: a temp that a kernel writes takes the storage of a temp that is dead by then (see
`_buffers.py` for the live ranges and the fit rule). Runs last: it names storage, not computation."""

from __future__ import annotations

from collections.abc import Callable

from .._buffers import plan_buffers
from .._loop_ir import KernelPlan


class PlanBuffers:
    id = "plan-buffers"

    def run(self, plan: KernelPlan, note: Callable[[str], None]) -> KernelPlan:
        return plan_buffers(plan, note)
