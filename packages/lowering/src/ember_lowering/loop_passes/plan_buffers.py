"""plan-buffers: a temp that a kernel writes takes the storage of a temp that is dead by then, or that the kernel
reads for the last time where it writes (see `_buffers.py` for the live ranges, the fit rule and what in place
needs). Runs last: it names storage, not computation."""

from __future__ import annotations

from .._buffers import plan_buffers
from .._decisions import Note
from .._loop_ir import KernelPlan


class PlanBuffers:
    id = "plan-buffers"
    reasons = frozenset({"dead-storage", "in-place"})

    def __init__(self, extern_results: bool = True):
        self.extern_results = extern_results  # ATen results lend their storage too

    @staticmethod
    def configured(capabilities) -> PlanBuffers:
        """Without ATen results' storage where a GEMM's product may never be one (`Capabilities.gemm_epilogues`)."""
        return PlanBuffers(extern_results=not capabilities.gemm_epilogues)

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        return plan_buffers(plan, note, self.extern_results)
