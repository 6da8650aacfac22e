"""The scheduler: runs the fusion passes and buffer planning over an unfused plan, in order.

Each pass is a class with a kebab-case `id` (matching its file under `loop_passes/`), a closed set of `reasons`
and `run(plan, note) -> plan`; `note(verdict, reason, subjects, detail)` records a `Decision`
(`_decisions.py`). After each pass the plan is put in normal form (kernels named by kind and shape, buffers in
order of use, unused ones dropped) and its id is appended to `plan.passes`. Decisions go to the
`ember.kernels` logger (DEBUG) and to `decisions`. A pass whose choices depend on the graph the plan lowers
(keep-float32) also has `for_graph(graph) -> pass`, which `lower` calls (`bind_passes`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Protocol

from ember_core import Graph, Ref

from ._decisions import Decision, Note, make_decision
from ._loop_ir import Extern, Kernel, KernelPlan
from ._rewrite import rename_buffers
from ._verify import check_round_trip, verify_plan
from .loop_passes.bound_indices import BoundIndices
from .loop_passes.cat_in_place import CatInPlace
from .loop_passes.coalesce_dims import CoalesceDims
from .loop_passes.extern_in_place import ExternInPlace
from .loop_passes.fuse_inline import FuseInline
from .loop_passes.fuse_siblings import FuseSiblings
from .loop_passes.fuse_vertical import FuseVertical
from .loop_passes.keep_float32 import KeepFloat32
from .loop_passes.order_dims import OrderDims
from .loop_passes.plan_buffers import PlanBuffers
from .loop_passes.split_moments import SplitMoments
from .loop_passes.stash_values import StashValues

log = logging.getLogger("ember.kernels")


class Pass(Protocol):
    id: str
    reasons: frozenset[str]  # the reason codes its decisions may give

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan: ...


def default_passes() -> tuple[Pass, ...]:
    """Fusion first (it matches iteration spaces dim by dim), then what fusion made of bfloat16 chains
    (keep-float32, which widens only in a plan `lower` bound it to: see `bind_passes`), the shape of each kernel's
    loops (order-dims, coalesce-dims, split-moments, stash-values), then storage (extern-in-place), what the value
    ranges of the final kernels prove (bound-indices) and the buffers' storage (cat-in-place, plan-buffers)."""
    return (FuseInline(), FuseVertical(), FuseSiblings(), KeepFloat32(), OrderDims(), CoalesceDims(), SplitMoments(),
            StashValues(), ExternInPlace(), BoundIndices(), CatInPlace(), PlanBuffers())


def bind_passes(passes: Sequence[Pass], graph: Graph) -> tuple[Pass, ...]:
    """`passes` for lowering `graph`: a pass whose choices depend on the graph (`for_graph(graph)`, keep-float32's
    on whether the graph is half of a training step) bound to it; the others as they are."""
    return tuple(p.for_graph(graph) if hasattr(p, "for_graph") else p for p in passes)


def schedule(plan: KernelPlan, passes: Sequence[Pass] | None = None, *, check: bool = False,
             decisions: list[Decision] | None = None) -> KernelPlan:
    """Run `passes` (default: `default_passes()`) over a plan."""
    if check:
        verify_plan(plan)
        check_round_trip(plan)
    for p in default_passes() if passes is None else passes:
        plan = p.run(plan, _recorder(p, decisions))
        plan = name_kernels(drop_unused_buffers(order_buffers(plan))).replace(passes=plan.passes + (p.id,))
        if check:
            verify_plan(plan)
            check_round_trip(plan)
    return plan


def _recorder(p: Pass, decisions: list[Decision] | None) -> Note:
    def note(verdict: str, reason: str, subjects: Sequence[str], detail: str = "") -> None:
        d = make_decision(p.id, getattr(p, "reasons", frozenset()), verdict, reason, subjects, detail)
        log.debug("%s", d)
        if decisions is not None:
            decisions.append(d)
    return note


# ---------------------------------------------------------------------------------------------- normal form


def buffers_read(step) -> list[str]:
    """Buffers a step reads, in order (extern arguments, kernel loads)."""
    if isinstance(step, Extern):
        out: list[str] = []
        stack = [*step.args, *step.kwargs.values()]
        while stack:
            a = stack.pop(0)
            if isinstance(a, Ref):
                out.append(a.name)
            elif isinstance(a, tuple):
                stack[:0] = list(a)
        return out
    return [i.buffer for i in step.instrs() if i.buffer is not None and i.op.value == "load"]


def buffers_written(step) -> list[str]:
    if isinstance(step, Extern):
        return [o for o in step.outs if o != "_"]
    return [i.buffer for i in step.instrs() if i.buffer is not None and i.op.value == "store"]


def order_buffers(plan: KernelPlan) -> KernelPlan:
    """Inputs in input order, constants, then every other buffer in order of first use; views after bases."""
    rank: dict[str, int] = {}
    for n in plan.inputs:
        rank.setdefault(n, len(rank))
    for b in plan.buffers:
        if b.kind == "constant":
            rank.setdefault(b.name, len(rank))
    for step in plan.steps:
        for n in (*buffers_read(step), *buffers_written(step)):
            rank.setdefault(n, len(rank))
    for o in plan.outputs:
        if isinstance(o, str):
            rank.setdefault(o, len(rank))
    by_name = plan.buffer_map
    order = sorted(plan.buffers, key=lambda b: rank.get(b.name, len(rank)))
    placed: dict[str, object] = {}  # by name: a list's `in` compared whole Buffers, sympy fields and all (O(n^2))
    for b in order:  # a view or reuse comes after the buffer it names
        if b.base is not None and b.base in by_name:
            placed.setdefault(b.base, by_name[b.base])
        placed.setdefault(b.name, b)
    return plan.replace(buffers=tuple(placed.values()))


def drop_unused_buffers(plan: KernelPlan) -> KernelPlan:
    used = set(plan.inputs) | {o for o in plan.outputs if isinstance(o, str)}
    for step in plan.steps:
        used.update(buffers_read(step), buffers_written(step))
    used |= {b.base for b in plan.buffers if b.name in used and b.base is not None}
    return plan.replace(buffers=tuple(b for b in plan.buffers if b.name in used))


def kernel_name(kernel: Kernel) -> str:
    kind = "reduce" if kernel.reduce_dims else "pointwise"
    sizes = "x".join(re.sub(r"[^0-9A-Za-z]", "", str(d.size)) for d in kernel.dims) or "1"
    return f"{kind}_{sizes}"


def name_kernels(plan: KernelPlan) -> KernelPlan:
    """Name each kernel by kind and iteration space (`reduce_8x16`); repeats get `_1`, `_2` ..."""
    seen: dict[str, int] = {}
    steps = []
    for step in plan.steps:
        if isinstance(step, Kernel):
            base = kernel_name(step)
            n = seen.get(base, 0)
            seen[base] = n + 1
            step = step.replace(name=base if n == 0 else f"{base}_{n}")
        steps.append(step)
    return plan.replace(steps=tuple(steps))


__all__ = ["schedule", "default_passes", "name_kernels", "order_buffers", "drop_unused_buffers",
           "buffers_read", "buffers_written", "rename_buffers"]
