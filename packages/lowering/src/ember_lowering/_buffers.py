"""Buffer reuse planning (the `plan-buffers` pass): a temp takes the storage of a temp dead by the time
it is first written, or of one its own kernel reads for the last time at the very addresses it writes.

Walk the steps in order. A temp's live range runs from the step that writes it to the last step that reads it
(directly, through a view, or through the results of an extern that reads it: those may alias it); outputs
live to the end. A part (`cat-in-place`) is a slice of its base's storage: the base lives from its first part's
write to the last read of it, of a part or of a view of either. Storage the plan owns: what its kernels write
(whole or part by part), and the result of an ATen call whose schema says it returns storage of its own (`mm`,
`addmm`, a convolution; one tensor result, so no two results can share it). When a kernel writes a temp, the temp
takes, in this order:

- in place: the storage of a buffer that dies at this kernel, which the kernel reads only where it writes the
  temp, before writing it (`in_place`): a GELU's gradient into the matmul result it scales, as Inductor's
  `in_out_ptr` does;
- a freed storage of the same dtype and a size that is provably large enough (equal when symbolic), at most twice
  what it needs: the smallest such, and of equal ones the last to die (the storage is held from its death until
  the temp takes it, and all that the temp leaves unused is lost meanwhile).

The temp's `base` then names the buffer that owns that storage. Each storage taken is one allocation fewer a
call: fresh megabytes, which glibc hands back to the system and faults in again on the next call.
"""

from __future__ import annotations

import sympy
from ember_core import returns_new_storage

from ._decisions import Note
from ._fusion import step_reads, step_writes, view_roots
from ._indexing import Ranges, flat_index, storage_size, sym
from ._loop_ir import Buffer, Extern, Instr, Kernel, KernelPlan, Loop, Op


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
        for n in step_writes(step):  # an assembled buffer lives from its first part's write
            if n in roots:
                last[roots[n]] = max(last.get(roots[n], k), k)
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


def fresh_result(step: Extern, buffers: dict[str, Buffer]) -> str | None:
    """The temp an ATen call returns in storage of its own (its one tensor result), else None."""
    outs = [o for o in step.outs if o != "_"]
    if len(outs) != 1 or buffers[outs[0]].kind != "temp" or not returns_new_storage(step.op):
        return None
    return outs[0]


def plan_buffers(plan: KernelPlan, note: Note, extern_results: bool = True) -> KernelPlan:
    """The plan with each kernel-written temp reusing a dead temp's storage where one fits (an ATen result's
    too, if `extern_results`)."""
    buffers = plan.buffer_map
    roots = view_roots(plan)
    outputs = {roots.get(o, o) for o in plan.outputs if isinstance(o, str)}
    last = _last_uses(plan, roots)
    free: list[tuple[str, sympy.Expr]] = []  # (owner, storage size), in the order they died
    owner: dict[str, str] = {}  # buffer → the buffer that owns its storage, for buffers whose storage is the plan's
    extern_read = _extern_read(plan, roots)
    for k, step in enumerate(plan.steps):
        taken: set[str] = set()  # storages taken in place at this step: not freed when their reader dies here
        if isinstance(step, Kernel):
            dying = [n for n in owner if last.get(n) == k and buffers[n].kind == "temp" and n not in outputs
                     and n not in extern_read]
            for name in sorted(step_writes(step), key=list(buffers).index):
                if buffers[name].kind == "part":  # its base's storage, owned from the first part's write
                    owner.setdefault(buffers[name].base, buffers[name].base)
                    continue
                _allocate(buffers, name, step, dying, roots, free, owner, taken, note)
        elif extern_results and (out := fresh_result(step, buffers)) is not None:
            owner[out] = out
        for name, b in buffers.items():
            if last.get(name) == k and b.kind == "temp" and name not in outputs and name in owner:
                o = owner[name]
                if o not in taken:
                    free.append((o, _size(buffers[o])))
    return plan.replace(buffers=tuple(buffers.values()))


def _extern_read(plan: KernelPlan, roots: dict[str, str]) -> set[str]:
    """What an ATen call reads: it may live on in the call's results (views), so only kernels' reads are known to
    end."""
    return {n for step in plan.steps if isinstance(step, Extern) for n in step_reads(step, roots)}


def sharing_problem(plan: KernelPlan) -> str | None:
    """What is wrong with the plan's storage sharing, or None. Each temp that takes a buffer's storage (`base`)
    must be first written after the storage's previous user is last read, or at that very kernel in place of it
    (`in_place`). The loop-IR verifier asks this of every plan, so a sharing mistake is a `PlanError` (the graph
    runs another way, visibly), never two live values in one storage."""
    buffers, roots = plan.buffer_map, view_roots(plan)
    last, extern_read = _last_uses(plan, roots), _extern_read(plan, roots)
    first: dict[str, int] = {}
    for k, step in enumerate(plan.steps):
        for n in step_writes(step):
            first.setdefault(roots.get(n, n), k)  # a part's write is its base's
    users: dict[str, list[str]] = {}
    for b in plan.buffers:
        if b.kind == "temp" and b.base is not None:
            users.setdefault(b.base, [b.base]).append(b.name)
    for owner, names in users.items():
        if any(n not in first for n in names):
            continue  # a buffer never written: the verifier's other rules speak of it
        names.sort(key=first.__getitem__)
        for a, b in zip(names, names[1:]):
            start, end = first[b], last.get(a, first[a])
            if end < start:
                continue
            step = plan.steps[start]
            if end == start and isinstance(step, Kernel) and a not in extern_read and \
                    in_place(step, a, b, buffers, roots):
                continue
            return (f"buffer {b!r} takes the storage of {owner!r} at step {start} while {a!r}, which holds it, "
                    f"is read until step {end}")
    return None


def _size(b: Buffer) -> sympy.Expr:
    return storage_size(b.shape, b.stride, b.offset)


def _allocate(buffers: dict[str, Buffer], name: str, kernel: Kernel, dying: list[str], roots: dict[str, str],
              free: list, owner: dict[str, str], taken: set[str], note: Note) -> None:
    """Give a temp the storage of a buffer its kernel finishes with where it may write in place, else the first
    dead storage of its dtype that fits, if any."""
    b = buffers[name]
    owner[name] = name
    if b.kind != "temp":
        return
    need = _size(b)
    for x in dying:
        o = owner[x]
        if o not in taken and buffers[o].dtype == b.dtype and _fits(need, _size(buffers[o])) and \
                in_place(kernel, x, name, buffers, roots):
            taken.add(o)
            owner[name] = o
            buffers[name] = b.replace(base=o)
            note("reused", "in-place", (name, o), f"{kernel.name} writes {name} in place of {x}, which it reads last")
            return
    fitting = [j for j, (o, size) in enumerate(free) if buffers[o].dtype == b.dtype and _fits(need, size)
               and not _wasteful(need, size)]
    if fitting:
        j = min(fitting, key=lambda j: (_numeric(free[j][1]), -j))  # the smallest; of equals, the last to die
        o = free.pop(j)[0]
        owner[name] = o
        buffers[name] = b.replace(base=o)
        note("reused", "dead-storage", (name, o), f"{name} reuses the storage of {o} (dead by then)")


def _numeric(size: sympy.Expr) -> float:
    """A storage size to compare by: its value, or infinity where it is symbolic (taken last)."""
    return float(size) if size.is_number else float("inf")


def _wasteful(need: sympy.Expr, size: sympy.Expr) -> bool:
    """Whether a dead storage is too big to hand to a temp: more than twice what it needs. The storage stays
    allocated from its death to the temp's last read, and what the temp does not use is lost for that time: a
    layer norm's output in a matmul result four times its size, kept from one transformer block to the next, grew
    a checkpointed stack's forward peak by 4 MiB a block."""
    return need.is_number and size.is_number and size > 2 * need


# ---------------------------------------------------------------------------------------------- in place


def in_place(kernel: Kernel, x: str, y: str, buffers: dict[str, Buffer], roots: dict[str, str]) -> bool:
    """May `kernel`, the last reader of `x` (no ATen call reads x: its results might alias it), write `y` into
    x's storage? The kernel must read x, each element only at the point that writes the same element of y,
    before that write, and never again:

    - the kernel has at most one r-loop and no per-row scratch (a codegen may reload a stashed row's values in
      a later loop, after the write);
    - y has one store; every load of x (or a view of it) is in the same block (the r-loop, or outside it) before
      that store, at the same address;
    - that address is affine in the block's dims with constant coefficients that give each point of the block
      its own element (so no point reads what another one wrote)."""
    if sum(isinstance(s, Loop) for s in kernel.body) > 1 or \
            any(i.buffer is not None and buffers[i.buffer].kind == "local" for i in kernel.instrs()):
        return False
    if sum(1 for i in kernel.instrs() if i.op is Op.STORE and i.buffer == y) != 1:
        return False
    ranges = Ranges({d.var: d.size for d in kernel.dims})
    values = {sym(o) for i in kernel.instrs() for o in i.outs}  # an address using one is read from memory
    for block, dims in _blocks(kernel):
        stores = [j for j, i in enumerate(block) if i.op is Op.STORE and i.buffer == y]
        if not stores:
            continue
        reads = [j for j, i in enumerate(block) if i.op is Op.LOAD and roots.get(i.buffer, i.buffer) == x]
        everywhere = sum(1 for i in kernel.instrs() if i.op is Op.LOAD and roots.get(i.buffer, i.buffer) == x)
        if not reads or len(reads) != everywhere or any(j > stores[0] for j in reads):
            return False
        at = _address(block[stores[0]], buffers, ranges)
        return not (at.free_symbols & values) and _one_element_each(at, dims) and \
            all(_address(block[j], buffers, ranges) == at for j in reads)
    return False


def _blocks(kernel: Kernel) -> list[tuple[list[Instr], list]]:
    """The kernel's instructions outside its r-loop (run once per i-point) and inside it (once per point of all
    dims), each with the dims it runs over."""
    top = [s for s in kernel.body if not isinstance(s, Loop)]
    loops = [list(s.body) for s in kernel.body if isinstance(s, Loop)]
    return [(top, list(kernel.outer_dims)), *((body, list(kernel.dims)) for body in loops)]


def _address(i: Instr, buffers: dict[str, Buffer], ranges: Ranges) -> sympy.Expr:
    """The element a load or store addresses, counted from its storage's start."""
    b = buffers[i.buffer]
    offset = b.offset + (buffers[b.base].offset if b.kind == "view" else 0)
    return sympy.expand(flat_index(i.index, b.stride, offset, ranges))


def _one_element_each(at: sympy.Expr, dims: list) -> bool:
    """Is `at` affine in `dims` with integer coefficients, a different value at each point (static sizes)?"""
    vars_ = [sym(d.var) for d in dims]
    if not vars_:  # one point (a kernel's instructions outside its loop when it has no i-dims)
        return True
    if not at.is_polynomial(*vars_) or sympy.Poly(at, *vars_).total_degree() > 1:
        return False
    span = 0  # sum of |coefficient| * (size - 1) over the dims placed so far: the largest step they make
    terms = []
    for d, v in zip(dims, vars_):
        c = at.coeff(v)
        if not d.size.is_number or not c.is_number or (c == 0 and d.size != 1):
            return False
        if d.size != 1:
            terms.append((abs(c), d.size))
    for c, n in sorted(terms):
        if c <= span:
            return False
        span += c * (n - 1)
    return True
