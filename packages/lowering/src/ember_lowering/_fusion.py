"""What the fusion passes share: step dependencies, iteration-space matching, kernel merging, store
forwarding, loop merging and dead-store removal (the recompute cost model is `_costs.py`).

Merging kernel A (first) with kernel B concatenates their bodies over one iteration space. It is legal when
every load in B of a buffer A stores reads the element A stores in the same iteration: then a parallel outer
iteration only reads what it wrote itself, and the load can take the stored value straight from A's body.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sympy
from ember_core import Ref, has_effect

from ._errors import PlanError
from ._indexing import sym
from ._loop_ir import (
    REDUCTIONS,
    Extern,
    Instr,
    Kernel,
    KernelPlan,
    Loop,
    Op,
    Step,
    Stmt,
)
from ._rewrite import canonicalize, defined_names, rename_values, renumber, substitute_vars, used_names

# ---------------------------------------------------------------------------------------------- sizes


def numel_hint(sizes: Iterable[sympy.Expr], hints: dict[str, int]) -> int:
    total = 1
    for s in sizes:
        total *= int(s.xreplace({sym(n): h for n, h in hints.items()})) if not s.is_number else int(s)
    return total


# ---------------------------------------------------------------------------------------------- dependencies


def view_roots(plan: KernelPlan) -> dict[str, str]:
    """view or part buffer → the buffer whose storage it lies in (a view of a part: the part's base)."""
    parts = {b.name: b.base for b in plan.buffers if b.kind == "part"}
    roots = {b.name: parts.get(b.base, b.base) for b in plan.buffers if b.kind == "view"}
    return roots | parts if parts else roots


_MEMO: dict[tuple[str, int], tuple[Step, frozenset[str]]] = {}  # steps are immutable: (kind, id) → names


def _memo(kind: str, step: Step, compute) -> frozenset[str]:
    hit = _MEMO.get((kind, id(step)))
    if hit is not None and hit[0] is step:
        return hit[1]
    if len(_MEMO) > 50_000:
        _MEMO.clear()
    names = frozenset(compute(step))
    _MEMO[(kind, id(step))] = (step, names)
    return names


def _raw_reads(step: Step) -> set[str]:
    if isinstance(step, Kernel):
        return {i.buffer for i in step.instrs() if i.op is Op.LOAD}
    names: set[str] = set()
    stack = [*step.args, *step.kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, Ref):
            names.add(a.name)
        elif isinstance(a, tuple):
            stack.extend(a)
    return names


def _raw_writes(step: Step) -> set[str]:
    if isinstance(step, Extern):
        return {o for o in step.outs if o != "_"}
    return {i.buffer for i in step.instrs() if i.op is Op.STORE}


def step_reads(step: Step, roots: dict[str, str]) -> frozenset[str]:
    """Buffers a step reads, views resolved to the buffer whose storage they read. (Fusion asks this of every step
    after each merge: the memoized set itself where no view is involved, not a copy.)"""
    raw = _memo("reads", step, _raw_reads)
    if roots.keys().isdisjoint(raw):
        return raw
    return frozenset(roots.get(n, n) for n in raw)


def step_writes(step: Step) -> frozenset[str]:
    return _memo("writes", step, _raw_writes)


@dataclass
class Deps:
    """Who writes and who reads each buffer, by step index."""

    producer: dict[str, int]
    readers: dict[str, set[int]]
    deps: list[set[int]]

    def path(self, a: int, b: int) -> bool:
        """Is there a path a → ... → b through some third step?"""
        stack = [d for d in self.deps[b] if d != a]
        seen: set[int] = set()
        while stack:
            s = stack.pop()
            if s in seen or s < a:
                continue
            seen.add(s)
            if a in self.deps[s]:
                return True
            stack.extend(self.deps[s])
        return False


def deps_of(plan: KernelPlan) -> Deps:
    roots = view_roots(plan)
    producer: dict[str, int] = {}
    readers: dict[str, set[int]] = {}
    deps: list[set[int]] = []
    for k, step in enumerate(plan.steps):
        reads = step_reads(step, roots)
        deps.append({producer[n] for n in reads if n in producer and producer[n] != k})
        for n in reads:
            readers.setdefault(n, set()).add(k)
        for n in step_writes(step):
            producer[n] = k
    return Deps(producer, readers, deps)


def toposort(steps: Sequence[Step], roots: dict[str, str]) -> tuple[Step, ...]:
    """Steps in dependency order, otherwise keeping the given order (Kahn's algorithm, lowest index first). An
    extern call of an effectful op (`ember_core.has_effect`) also waits for the one before it: effects keep
    their order."""
    producer = {n: k for k, s in enumerate(steps) for n in step_writes(s)}
    waiting = [0] * len(steps)
    users: list[list[int]] = [[] for _ in steps]
    effects = [k for k, s in enumerate(steps) if isinstance(s, Extern) and has_effect(s.op)]
    after = dict(zip(effects[1:], effects))
    for k, s in enumerate(steps):
        deps = {producer[n] for n in step_reads(s, roots) if n in producer and producer[n] != k}
        for d in deps | ({after[k]} if k in after else set()):
            waiting[k] += 1
            users[d].append(k)
    ready = [k for k in range(len(steps)) if waiting[k] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(steps[k])
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(steps):
        raise PlanError("steps depend on each other in a cycle; a fusion merged steps it must not merge")
    return tuple(order)


# ---------------------------------------------------------------------------------------------- spaces


def same_sizes(a: Sequence[sympy.Expr], b: Sequence[sympy.Expr]) -> bool:
    return len(a) == len(b) and all(sympy.expand(x - y) == 0 for x, y in zip(a, b))


@dataclass
class SpaceMap:
    """How two kernels share one iteration space: the merged dims, each kernel's var renaming, and whether
    each kernel's (pointwise) body runs per element (`loop`) or per outer iteration (`outer`)."""

    dims: tuple
    map_a: dict
    map_b: dict
    place_a: str
    place_b: str


def space_map(a: Kernel, b: Kernel) -> SpaceMap | None:
    sa, sb = [d.size for d in a.dims], [d.size for d in b.dims]
    ra, rb = bool(a.reduce_dims), bool(b.reduce_dims)
    if ra and rb:
        if same_sizes(sa, sb) and [d.reduce for d in a.dims] == [d.reduce for d in b.dims]:
            return SpaceMap(a.dims, {}, _rename(b.dims, a.dims), "keep", "keep")
        return None
    if ra or rb:
        red, pw = (a, b) if ra else (b, a)
        if same_sizes([d.size for d in pw.dims], [d.size for d in red.dims]):
            place, target = "loop", red.dims
        elif same_sizes([d.size for d in pw.dims], [d.size for d in red.outer_dims]):
            place, target = "outer", red.outer_dims
        else:
            return None
        pw_map = _rename(pw.dims, target)
        return SpaceMap(red.dims, {} if ra else pw_map, pw_map if ra else {}, "keep" if ra else place,
                        place if ra else "keep")
    if same_sizes(sa, sb):
        return SpaceMap(a.dims, {}, _rename(b.dims, a.dims), "keep", "keep")
    return None


def _rename(src: Sequence, dst: Sequence) -> dict:
    return {sym(s.var): sym(d.var) for s, d in zip(src, dst) if s.var != d.var}


# ---------------------------------------------------------------------------------------------- merging


def stores_of(kernel: Kernel) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for i in kernel.instrs():
        if i.op is Op.STORE:
            out.setdefault(i.buffer, []).append(i.index)
    return out


def reads_match(a: Kernel, b: Kernel, m: SpaceMap) -> str | None:
    """None if every load in b of a buffer a stores reads the element a stores; else the reason not."""
    stored = {n: {tuple(e.xreplace(m.map_a) for e in idx) for idx in idxs} for n, idxs in stores_of(a).items()}
    for i in b.instrs():
        if i.op is Op.LOAD and i.buffer in stored:
            idx = tuple(e.xreplace(m.map_b) for e in i.index)
            if stored[i.buffer] != {idx}:
                return f"reads {i.buffer} at another element than it is written"
    return None


def merge(a: Kernel, b: Kernel, m: SpaceMap) -> Kernel:
    """One kernel running a's body then b's over the merged space; then loops merged, stores forwarded."""
    body_a = _place(substitute_vars(canonicalize(a).body, m.map_a), m.place_a)
    n = len(defined_names(body_a))
    body_b = _place(substitute_vars(renumber(b.body, start=n), m.map_b), m.place_b)
    merged = Kernel(b.name, tuple(m.dims), body_a + body_b, _union(a.origins, b.origins))
    return tidy(merged)


def _place(body: tuple[Stmt, ...], place: str) -> tuple[Stmt, ...]:
    if place == "loop":
        return (Loop(tuple(body)),)
    return body


def _union(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*a, *b)))


def tidy(kernel: Kernel) -> Kernel:
    """Merge independent adjacent loops and forward stores to loads until nothing changes; canonicalize."""
    while True:
        before = kernel
        kernel = canonicalize(merge_loops(forward_stores(kernel)))
        if kernel == before:
            return kernel


def _reduce_outs(loop: Loop) -> set[str]:
    return {o for i in loop.body if i.op in REDUCTIONS for o in i.outs}


def _stores(stmts: Iterable[Instr]) -> dict[str, set[tuple]]:
    out: dict[str, set[tuple]] = {}
    for i in stmts:
        if i.op is Op.STORE:
            out.setdefault(i.buffer, set()).add(i.index)
    return out


def _independent(first: Sequence[Instr], second: Sequence[Instr], results: set[str]) -> bool:
    """Can `second` run interleaved with `first`? It must not use `results` (values `first` finishes) nor read
    what `first` stores at another element."""
    stored = _stores(first)
    defined = set(defined_names(first)) | set(defined_names(second)) | results  # an index may read a result
    for i in second:
        if used_names(i, defined) & results:
            return False
        if i.op is Op.LOAD and i.buffer in stored and stored[i.buffer] != {i.index}:
            return False
    return True


def merge_loops(kernel: Kernel) -> Kernel:
    """Fold each loop into the previous one when it does not need that loop's results. Outer instructions in
    between that do not need the first loop move before it; the rest stay after the merged loop."""
    body = list(kernel.body)
    k = 0
    while k < len(body):
        j = next((j for j in range(k + 1, len(body)) if isinstance(body[j], Loop)), None)
        if not isinstance(body[k], Loop) or j is None:
            k += 1
            continue
        first, second = body[k], body[j]
        early, late = _split_between(first, body[k + 1:j])
        finished = _reduce_outs(first) | set(defined_names(late))
        stored_late, stored_second = set(_stores(late)), set(_stores(second.body))
        if _independent(first.body, second.body, finished) \
                and not any(i.op is Op.LOAD and i.buffer in stored_late for i in second.body) \
                and not any(i.op is Op.LOAD and i.buffer in stored_second for i in late):
            body = body[:k] + early + [Loop(first.body + second.body)] + late + body[j + 1:]
            k += len(early)
        else:
            k = j
    return kernel.replace(body=tuple(body))


def _split_between(first: Loop, between: Sequence[Instr]) -> tuple[list[Instr], list[Instr]]:
    """Outer instructions between two loops: those that can run before the first loop, and the rest. A load stays
    after every store to its buffer: the first loop's, and those that stay after it (a masked load of a result
    stored there is not forwarded, so it still reads memory)."""
    blocked = _reduce_outs(first) | set(defined_names(first.body))
    stored = set(_stores(first.body))
    early, late = [], []
    for i in between:
        if i.op is Op.STORE or used_names(i) & blocked or (i.op is Op.LOAD and i.buffer in stored):
            late.append(i)
            blocked |= set(i.outs)
            if i.op is Op.STORE:
                stored.add(i.buffer)
        else:
            early.append(i)
    return early, late


def forward_stores(kernel: Kernel) -> Kernel:
    """A load of an element this kernel stored earlier, where the stored value is visible, takes that value."""
    mapping: dict[str, str] = {}
    outer: dict[tuple, str] = {}
    out: list[Stmt] = []

    def visit(i: Instr, scope: dict) -> Instr | None:
        i = rename_values((i,), mapping)[0] if mapping else i
        if i.op is Op.STORE and len(i.srcs) == 1:
            for k in [k for k in scope if k[0] == i.buffer]:
                del scope[k]
            scope[(i.buffer, i.index)] = i.srcs[0]
        elif i.op is Op.LOAD and not i.srcs and (i.buffer, i.index) in scope:
            mapping[i.out] = scope[(i.buffer, i.index)]
            return None
        return i

    for s in kernel.body:
        if isinstance(s, Loop):
            scope = dict(outer)
            out.append(Loop(tuple(j for j in (visit(i, scope) for i in s.body) if j is not None)))
            for key in [k for k in outer if any(st.buffer == k[0] for st in s.body if st.op is Op.STORE)]:
                del outer[key]
        else:
            j = visit(s, outer)
            if j is not None:
                out.append(j)
    return kernel.replace(body=tuple(out))


# ---------------------------------------------------------------------------------------------- plan edits


def remove_dead_stores(plan: KernelPlan, lost: frozenset[str] | None = None) -> KernelPlan:
    """Drop stores to temps nothing reads (no later load, extern, view or output); then kernels that store
    nothing. `lost`: the only buffers that may have lost their readers since the plan had no dead store (a
    fusion's), so only kernels writing them are looked at; None: every kernel."""
    roots = view_roots(plan)
    read: set[str] = {roots.get(o, o) for o in plan.outputs if isinstance(o, str)}
    for step in plan.steps:
        read |= step_reads(step, roots)
    kinds = {b.name: b.kind for b in plan.buffers}
    steps: list[Step] = []
    for step in plan.steps:
        suspect = lost is None or not lost.isdisjoint(step_writes(step))
        if suspect and isinstance(step, Kernel) and not all(_live(i, read, kinds) for i in step.instrs()):
            body = tuple(Loop(tuple(i for i in s.body if _live(i, read, kinds))) if isinstance(s, Loop) else s
                         for s in step.body if not isinstance(s, Instr) or _live(s, read, kinds))
            step = canonicalize(step.replace(body=body))
            if not any(i.op is Op.STORE for i in step.instrs()):
                continue
        steps.append(step)
    return plan.replace(steps=tuple(steps))


def _live(i: Instr, read: set[str], kinds: dict[str, str]) -> bool:
    return i.op is not Op.STORE or i.buffer in read or kinds.get(i.buffer) != "temp"


def replace_steps(plan: KernelPlan, drop: set[int], put: dict[int, Step]) -> KernelPlan:
    """Put `put[k]` at index k, drop indices `drop`, re-sort by dependencies, drop the stores that died (to buffers
    that the replaced steps read and the new ones do not). Fusion calls this once per merge: it must not look
    at every kernel's every instruction again (quadratic in a big training graph)."""
    roots = view_roots(plan)
    old = [plan.steps[k] for k in (*drop, *put)]
    lost = frozenset().union(*(step_reads(s, roots) for s in old)).difference(
        *(step_reads(s, roots) for s in put.values()))
    steps = [put.get(k, s) for k, s in enumerate(plan.steps) if k not in drop]
    plan = plan.replace(steps=toposort(steps, roots))
    return remove_dead_stores(plan, lost)


def describe(step: Step) -> str:
    name = step.name if isinstance(step, Kernel) else step.op
    return f"{name}({', '.join(step.origins)})"
