"""fuse-siblings: merge kernels with matching iteration spaces that read a common buffer and do not depend
on each other, so the shared input is read once (max and argmax of `max.dim`, mean and variance, several
pointwise outputs of one input, a pointwise output next to a reduction of the same input). Their loops fold
into one when neither needs the other's results.
"""

from __future__ import annotations

from .._decisions import Note
from .._fusion import deps_of, describe, merge, replace_steps, space_map, step_reads, view_roots
from .._loop_ir import Kernel, KernelPlan


class FuseSiblings:
    id = "fuse-siblings"
    reasons = frozenset({"shared-input"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        while True:
            fused = self.fuse_one(plan, note)
            if fused is None:
                return plan
            plan = fused

    def fuse_one(self, plan: KernelPlan, note: Note) -> KernelPlan | None:
        deps = deps_of(plan)
        roots = view_roots(plan)
        kernels = [(k, s) for k, s in enumerate(plan.steps) if isinstance(s, Kernel)]
        for x, (a, first) in enumerate(kernels):
            for b, second in kernels[x + 1:]:
                shared = step_reads(first, roots) & step_reads(second, roots)
                if not shared or a in deps.deps[b] or deps.path(a, b):
                    continue
                m = space_map(first, second)
                if m is None:
                    continue
                note("fused", "shared-input", (first.name, second.name, *sorted(shared)),
                     f"fuse siblings {describe(first)} and {describe(second)}: both read {', '.join(sorted(shared))}")
                return replace_steps(plan, {b}, {a: merge(first, second, m)})
        return None
