"""stash-values: keep a value that a later loop of a kernel computes again in a per-row `local` buffer.

fuse-vertical makes softmax one kernel of three loops, and fuse-inline gives each loop its own copy of
exp(x - max): loop 2 sums it, loop 3 divides it. This pass finds such repeats by structure (same op and dtype,
operands that are repeats themselves or the same outer value, loads of the same element) and stores the
first loop's value into a local (`stash0: f32[R] local`, one row over the r-dims, `store stash0[r0] = t4`);
the later loop loads it (`t6: f32 = load stash0[r0]`) and the recomputation left unused is removed by the
kernel normal form (`canonicalize`: dead values go).

A repeated value is stashed when
- computing it again costs at least `STASH_MIN_COST` (`_costs.py`, the table fuse-inline's budgets use);
- it reads no buffer the kernel writes (the kernel may change that buffer between the two loops);
- the r-dims are static, a row has at most `max_elements` elements, and the kernel's stashes together take at
  most `max_bytes` per row (C++ keeps them on each thread's stack; a GPU in registers or shared memory when the
  row fits a block). The limits are the pass's arguments: a codegen may run the pipeline with its own.
Otherwise it is recomputed, and the decision says why. A codegen that cannot keep a stash where it chose to run
a kernel differently (C++ when its vector lanes are outer iterations) calls `recompute_locals`, which puts the
computation back in place of each stash load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .._costs import STASH_MIN_COST, op_cost
from .._decisions import Note
from .._indexing import contiguous_strides, sym
from .._loop_ir import ITEMSIZE, REDUCTIONS, Buffer, Instr, Kernel, KernelPlan, Loop, Op
from .._rewrite import canonicalize, defined_names, rename_values

MAX_ELEMENTS = 8192  # elements of one stashed row: 32 KiB of float32, in L1/L2 next to the row it came from
MAX_BYTES = 96 * 1024  # every stash of one kernel together, per row (on each C++ thread's stack)


@dataclass(frozen=True)
class _Value:
    """A loop value: its structural key (equal keys: equal values), the cost of computing it from the loop's
    loads and outer values, whether it reads a buffer the kernel writes, and its dtype."""

    key: tuple
    cost: int
    tainted: bool
    dtype: str


@dataclass(frozen=True)
class _Repeat:
    """`target`, in a later loop, computes again what `source` computed in an earlier one."""

    source: str
    target: str
    value: _Value


class StashValues:
    id = "stash-values"
    # stashed: expensive; recomputed: cheap / reads a buffer the kernel writes / symbolic, empty or too long
    # rows / the kernel's stashes over the byte budget
    reasons = frozenset({"expensive", "cheap", "reads-written-buffer", "symbolic-rows", "empty-rows",
                         "row-too-long", "over-budget"})

    def __init__(self, max_elements: int = MAX_ELEMENTS, max_bytes: int = MAX_BYTES):
        self.max_elements, self.max_bytes = max_elements, max_bytes

    @staticmethod
    def wanted(capabilities) -> bool:
        """Only for a codegen that keeps a row between loops (`Capabilities.stashes`)."""
        return capabilities.stashes

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        taken = {b.name for b in plan.buffers}
        buffers, steps = list(plan.buffers), []
        for step in plan.steps:
            if isinstance(step, Kernel) and step.reduce_dims:
                step, made = self.stash(step, taken, note)
                buffers += made
            steps.append(step)
        return plan.replace(buffers=tuple(buffers), steps=tuple(steps))

    def stash(self, kernel: Kernel, taken: set[str], note: Note) -> tuple[Kernel, list[Buffer]]:
        """The kernel with its worthwhile repeats stashed, and the locals it now uses."""
        chosen = []
        for r in repeats(kernel):
            reason = "cheap" if r.value.cost < STASH_MIN_COST else "reads-written-buffer" if r.value.tainted else None
            if reason is None:
                chosen.append(r)
            else:
                _note(note, "recomputed", reason, kernel, "", r, f"cost {r.value.cost}")
        refusal = self.refuse(kernel, chosen) if chosen else None
        if refusal is not None:
            for r in chosen:
                _note(note, "recomputed", refusal[0], kernel, "", r, refusal[1])
            return kernel, []
        rows = tuple(d.size for d in kernel.reduce_dims)
        made: dict[str, Buffer] = {}
        for r in chosen:
            if r.source not in made:
                made[r.source] = Buffer(_fresh("stash", taken), r.value.dtype, rows, contiguous_strides(rows),
                                        "local")
            _note(note, "stashed", "expensive", kernel, made[r.source].name, r, f"cost {r.value.cost}")
        return _rewrite(kernel, chosen, made) if chosen else kernel, list(made.values())

    def refuse(self, kernel: Kernel, chosen: list[_Repeat]) -> tuple[str, str] | None:
        """(reason code, words) why this kernel's rows cannot hold the stashes; None when they can."""
        sizes = [d.size for d in kernel.reduce_dims]
        if not all(s.is_Integer for s in sizes):
            return "symbolic-rows", f"the r-dims {', '.join(map(str, sizes))} are not static"
        n = math.prod(int(s) for s in sizes)
        if n == 0:
            return "empty-rows", "the rows are empty"
        if n > self.max_elements:
            return "row-too-long", f"{n} elements per row > {self.max_elements}"
        total = n * sum(ITEMSIZE[v.dtype] for v in {r.source: r.value for r in chosen}.values())
        if total > self.max_bytes:
            return "over-budget", f"the kernel's stashes take {total} bytes per row > {self.max_bytes}"
        return None


def _note(note: Note, verdict: str, reason: str, kernel: Kernel, local: str, r: _Repeat, why: str) -> None:
    subjects = (kernel.name, local, r.source, r.target) if local else (kernel.name, r.source, r.target)
    where = f" in {local}" if local else ""
    note(verdict, reason, subjects, f"{kernel.name}: {r.target} repeats {r.source}{where} ({reason}, {why})")


def _fresh(stem: str, taken: set[str]) -> str:
    k = 0
    while f"{stem}{k}" in taken:
        k += 1
    taken.add(f"{stem}{k}")
    return f"{stem}{k}"


# ---------------------------------------------------------------------------------------------- finding repeats


def repeats(kernel: Kernel) -> list[_Repeat]:
    """Each value of a loop that an earlier loop computed too, and that this loop needs as such: at least one
    of its users is not itself a repeat (or is a repeat reading a written buffer when it does not)."""
    written = {i.buffer for i in kernel.instrs() if i.op is Op.STORE}
    seen: dict[tuple, str] = {}  # key → the value of the earliest loop computing it
    out = []
    for loop in (s for s in kernel.body if isinstance(s, Loop)):
        values = loop_values(loop, written)
        again = {n for n, v in values.items() if v.key in seen}
        users = _users(loop.body)
        for n in again:
            v = values[n]
            if any(u not in again or (values[u].tainted and not v.tainted) for u in users.get(n, ())):
                out.append(_Repeat(seen[v.key], n, v))
        for n, v in values.items():
            seen.setdefault(v.key, n)
    return sorted(out, key=lambda r: _order(kernel, r.target))


def loop_values(loop: Loop, written: set[str]) -> dict[str, _Value]:
    """Every pointwise value of a loop (not reductions) with its key, cost, taint and dtype."""
    out: dict[str, _Value] = {}
    for i in loop.body:
        if i.op in REDUCTIONS or not i.outs:
            continue
        srcs = [out.get(s) for s in i.srcs]
        key = (i.op, i.dtype, repr(i.value), i.buffer, tuple(map(str, i.index)),
               tuple(v.key if v is not None else ("outer", s) for s, v in zip(i.srcs, srcs)))
        inner = [v for v in srcs if v is not None]
        tainted = (i.op is Op.LOAD and i.buffer in written) or any(v.tainted for v in inner)
        out[i.out] = _Value(key, op_cost(i.op) + sum(v.cost for v in inner), tainted, i.dtype)
    return out


def _users(instrs: Iterable[Instr]) -> dict[str, list[str]]:
    """value → the values using it (`""` for a store)."""
    out: dict[str, list[str]] = {}
    for i in instrs:
        for s in i.srcs:
            out.setdefault(s, []).append(i.outs[0] if i.outs else "")
    return out


def _order(kernel: Kernel, name: str) -> int:
    return defined_names(kernel.body).index(name)


# ---------------------------------------------------------------------------------------------- rewriting


def _rewrite(kernel: Kernel, chosen: list[_Repeat], made: dict[str, Buffer]) -> Kernel:
    """Store each source into its local right after computing it; load each target from it instead of
    computing it; then drop what nothing uses any more."""
    index = tuple(sym(d.var) for d in kernel.reduce_dims)
    loads = {r.target: made[r.source].name for r in chosen}

    def visit(i: Instr) -> list[Instr]:
        if i.outs and i.out in loads:
            return [Instr(Op.LOAD, i.outs, i.dtype, buffer=loads[i.out], index=index)]
        if i.outs and i.out in made:
            return [i, Instr(Op.STORE, (), "", (i.out,), made[i.out].name, index)]
        return [i]

    body = tuple(Loop(tuple(j for i in s.body for j in visit(i))) if isinstance(s, Loop) else s for s in kernel.body)
    return canonicalize(kernel.replace(body=body))


def recompute_locals(kernel: Kernel, locals_: set[str]) -> Kernel:
    """The kernel without its stashes in `locals_`: each load of one is replaced by a copy of the instructions
    that computed the stored value, and the stores go. A stored value may itself read a stash (softmax's
    backward stashes `exp / sum`, whose exp is stashed): the copy's loads of stashes are replaced in turn, so no
    load of a stash in `locals_` is left. Exact for what stash-values makes (stored values read no buffer the
    kernel writes, and every operand they use from outside their loop is visible later)."""
    trees = _stored_trees(kernel, locals_)
    if not trees:
        return kernel
    counter = [len(defined_names(kernel.body))]

    def visit(i: Instr, mapping: dict[str, str]) -> list[Instr]:
        i = rename_values((i,), mapping)[0] if mapping else i
        if i.op is Op.STORE and i.buffer in locals_:
            return []
        if i.op is Op.LOAD and i.buffer in locals_:
            body, result = _copy(trees[i.buffer], counter)
            inner: dict[str, str] = {}
            body = [k for j in body for k in visit(j, inner)]
            mapping[i.out] = inner.get(result, result)
            return body
        return [i]

    out = []
    for s in kernel.body:
        mapping: dict[str, str] = {}
        out.append(Loop(tuple(j for i in s.body for j in visit(i, mapping))) if isinstance(s, Loop) else s)
    return canonicalize(kernel.replace(body=tuple(out)))


def _stored_trees(kernel: Kernel, locals_: set[str]) -> dict[str, tuple[list[Instr], str]]:
    """local → (the instructions of the storing loop that compute the stored value, in order; its name)."""
    out = {}
    for loop in (s for s in kernel.body if isinstance(s, Loop)):
        for store in (i for i in loop.body if i.op is Op.STORE and i.buffer in locals_):
            need, tree = {store.srcs[0]}, []
            for i in reversed(loop.body):
                if i.outs and set(i.outs) & need:
                    tree.append(i)
                    need |= set(i.srcs) | {s.name for e in i.index for s in e.free_symbols}
            out[store.buffer] = (tree[::-1], store.srcs[0])
    return out


def _copy(tree: tuple[list[Instr], str], counter: list[int]) -> tuple[list[Instr], str]:
    """The tree's instructions with fresh names, and the fresh name of its result."""
    instrs, result = tree
    fresh = {}
    for i in instrs:
        for o in i.outs:
            fresh[o] = f"t{counter[0]}"
            counter[0] += 1
    return list(rename_values(instrs, fresh)), fresh[result]
