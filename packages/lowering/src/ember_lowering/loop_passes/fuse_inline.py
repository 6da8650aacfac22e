"""fuse-inline: compute a pointwise producer inside its consumers instead of storing it.

A pointwise kernel that writes one temp, read only by kernel loads, is inlined at each load: its body is
copied there with its loop variables replaced by the load's index. That fuses producer→consumer chains and
pointwise prologues of reductions. It would recompute the producer once per load site, and once per element
of a broadcast read, so: a single consumer without broadcast always inlines; several consumers only when the
producer is cheap (cost ≤ RECOMPUTE_BUDGET); a broadcast read only when it is trivial (≤ BROADCAST_BUDGET). A
masked read (cat, padding) covers one region of its consumer and recomputes nothing, unless the consumer has
several masked reads of the value: the taps of a pooling window, each over nearly all of the consumer, count as
a broadcast read of (taps x the consumer's size / the producer's).
An expensive value with several consumers stays materialized.

A load whose index reads values (a gather, an embedding: `x[idx]`) is checked against its buffer's shape by the
codegens; inlined, the producer's own loads take that index instead, and are checked against their buffers. So a
producer is inlined at such a load only where each dim the index reads values for is one that some plain load of
the producer walks over the same extent: `arange(5)[idx]`, `zeros(5)[idx]` or a broadcast `x.expand(5)[idx]` stay
materialized, so that an index out of range fails as in eager instead of reading a value that was never there.
"""

from __future__ import annotations

from .._costs import BROADCAST_BUDGET, RECOMPUTE_BUDGET, kernel_cost
from .._decisions import Note
from .._fusion import describe, numel_hint, remove_dead_stores, step_reads, view_roots
from .._indexing import sym
from .._loop_ir import Instr, Kernel, KernelPlan, Loop, Op, Stmt, scalar_of
from .._rewrite import canonicalize, defined_names, rename_values, substitute_vars


class FuseInline:
    id = "fuse-inline"
    # fused: nothing reads it / one consumer / cheap enough to recompute at every load;
    # kept: an extern reads it / a broadcast read would recompute it / expensive and read more than once
    # kept: ... / a load with values in its index would lose its bounds check
    reasons = frozenset({"no-reader", "single-consumer", "cheap", "extern-reader", "broadcast", "expensive",
                         "unchecked-index"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        hints = {s.name: s.hint for s in plan.symbols}
        kinds = {b.name: b.kind for b in plan.buffers}
        roots = view_roots(plan)
        pinned = set(roots.values()) | {o for o in plan.outputs if isinstance(o, str)}
        steps: list = list(plan.steps)
        readers: dict[str, set[int]] = {}
        for k, s in enumerate(steps):
            for n in step_reads(s, roots):
                readers.setdefault(n, set()).add(k)
        for p, producer in enumerate(steps):
            target = _inlinable(producer)
            if target is None or kinds[target] != "temp" or target in pinned:
                continue
            users = sorted(readers.get(target, ()))
            if any(not isinstance(steps[k], Kernel) for k in users):
                note("kept", "extern-reader", (producer.name, target),
                     f"keep {describe(producer)}: an extern call reads {target}")
                continue
            shapes = {b.name: b.shape for b in plan.buffers}
            unchecked = _unchecked_dims(producer, target, [steps[k] for k in users], shapes)
            if unchecked:
                note("kept", "unchecked-index", (producer.name, target),
                     f"keep {describe(producer)}: a load reads {target} at an index computed from values in dims "
                     f"{unchecked}, which no load of it would check")
                continue
            ok, code, reason = _decide(producer, target, [steps[k] for k in users], hints)
            note("fused" if ok else "kept", code, (producer.name, target),
                 f"{'inline' if ok else 'keep'} {describe(producer)}: {reason}")
            if not ok:
                continue
            reads = step_reads(producer, roots)
            for k in users:
                steps[k] = inline(steps[k], producer, target)
            for n in reads:
                readers[n] = (readers.get(n, set()) - {p}) | set(users)
            readers.pop(target, None)
            steps[p] = None
        return remove_dead_stores(plan.replace(steps=tuple(s for s in steps if s is not None)))


def _inlinable(k) -> str | None:
    """The buffer a pointwise kernel stores, if it stores exactly one at its own loop variables."""
    if not isinstance(k, Kernel) or k.reduce_dims or any(isinstance(s, Loop) for s in k.body):
        return None
    stores = [i for i in k.body if i.op is Op.STORE]
    if len(stores) != 1 or len(stores[0].srcs) != 1:
        return None
    used = [e for e in stores[0].index if not e.is_number]
    if sorted(used, key=str) != sorted((sym(d.var) for d in k.dims), key=str):
        return None
    return stores[0].buffer


def _unchecked_dims(producer: Kernel, target: str, readers: list[Kernel], shapes: dict) -> list[int]:
    """The dims of `target` that some reader indexes with values (an indirect load) and that no unmasked load of
    the producer walks at the same loop variable over the same extent: inlined there, an out-of-range index would
    go unchecked."""
    store = next(i for i in producer.body if i.op is Op.STORE)
    sizes = {d.var: d.size for d in producer.dims}
    carried = set()  # the producer's loop variables some plain load indexes one of its buffer's dims with
    for i in producer.body:
        if i.op is Op.LOAD and not i.srcs:
            for e, extent in zip(i.index, shapes.get(i.buffer, ())):
                if e.is_Symbol and e.name in sizes and extent == sizes[e.name]:
                    carried.add(e.name)
    unchecked = set()
    for r in readers:
        values = set(defined_names(r.body))
        for s in r.body:
            for i in (s.body if isinstance(s, Loop) else (s,)):
                if i.op is not Op.LOAD or i.buffer != target:
                    continue
                for d, e in enumerate(i.index):
                    var = store.index[d]
                    if {x.name for x in e.free_symbols} & values and not (var.is_Symbol and var.name in carried):
                        unchecked.add(d)
    return sorted(unchecked)


def _sites(kernel: Kernel, target: str) -> list[tuple[bool, bool]]:
    """One entry per load of target: (inside a loop?, masked?)."""
    out = []
    for s in kernel.body:
        for i in (s.body if isinstance(s, Loop) else (s,)):
            if i.op is Op.LOAD and i.buffer == target:
                out.append((isinstance(s, Loop), bool(i.srcs)))
    return out


def _decide(producer: Kernel, target: str, readers: list[Kernel], hints: dict[str, int]) -> tuple[bool, str, str]:
    """(inline?, reason code, reason in words)."""
    cost = kernel_cost(producer)
    size = max(numel_hint((d.size for d in producer.dims), hints), 1)
    sites, amplification = 0, 1.0
    for r in readers:
        loads = _sites(r, target)
        taps = sum(masked for _, masked in loads)
        for in_loop, masked in loads:
            sites += 1
            trips = numel_hint((d.size for d in (r.dims if in_loop else r.outer_dims)), hints)
            if masked and taps == 1:  # one masked read (cat, padding) covers one region of the consumer
                continue
            # several masked reads in one kernel are taps of overlapping windows (pooling): each recomputes
            amplification = max(amplification, trips * (taps if masked else 1) / size)
    if sites == 0:
        return True, "no-reader", "nothing reads it"
    if amplification > 1 and cost > BROADCAST_BUDGET:
        return False, "broadcast", (f"a broadcast read would recompute it {amplification:g}x "
                                    f"(cost {cost} > {BROADCAST_BUDGET})")
    if sites == 1:
        return True, "single-consumer", "single consumer" + (
            f", broadcast {amplification:g}x (cost {cost})" if amplification > 1 else "")
    if cost <= RECOMPUTE_BUDGET:
        return True, "cheap", f"cheap (cost {cost} <= {RECOMPUTE_BUDGET}), recomputed at {sites} loads"
    return False, "expensive", f"expensive (cost {cost} > {RECOMPUTE_BUDGET}) with {sites} loads: materialized"


# ---------------------------------------------------------------------------------------------- rewriting


def inline(consumer: Kernel, producer: Kernel, target: str) -> Kernel:
    """Replace every load of `target` in consumer by producer's body at that load's index."""
    counter = [len(defined_names(consumer.body)) + len(defined_names(producer.body))]
    mapping: dict[str, str] = {}

    def block(instrs) -> list[Instr]:
        out: list[Instr] = []
        for i in instrs:
            i = rename_values((i,), mapping)[0] if mapping else i
            if i.op is Op.LOAD and i.buffer == target:
                body, result = _instance(producer, i, counter)
                out.extend(body)
                mapping[i.out] = result
            else:
                out.append(i)
        return out

    body: list[Stmt] = []
    for s in consumer.body:
        if isinstance(s, Loop):
            body.append(Loop(tuple(block(s.body))))
        else:
            body.extend(block((s,)))
    origins = tuple(dict.fromkeys((*producer.origins, *consumer.origins)))
    return canonicalize(consumer.replace(body=tuple(body), origins=origins))


def _instance(producer: Kernel, load: Instr, counter: list[int]) -> tuple[list[Instr], str]:
    """Producer's instructions computing the element `load` reads, with fresh names; and the result name."""
    store = next(i for i in producer.body if i.op is Op.STORE)
    varmap = {e: v for e, v in zip(store.index, load.index) if not e.is_number}
    fresh = {}
    for n in defined_names(producer.body):
        fresh[n] = f"t{counter[0]}"
        counter[0] += 1
    body = substitute_vars(rename_values(tuple(i for i in producer.body if i is not store), fresh), varmap)
    result = fresh.get(store.srcs[0], store.srcs[0])
    if not load.srcs:
        return list(body), result
    mask = load.srcs[0]
    out: list[Instr] = []
    for i in body:  # under the consumer's mask: mask every load, select the masked-off value at the end
        if i.op is Op.LOAD:
            m = mask
            if i.srcs:
                m = f"t{counter[0]}"
                counter[0] += 1
                out.append(Instr(Op.AND, (m,), "bool", (mask, i.srcs[0])))
            i = i.replace(srcs=(m,), value=i.value if i.srcs else scalar_of(0, i.dtype))
        out.append(i)
    other = f"t{counter[0]}"
    masked = f"t{counter[0] + 1}"
    counter[0] += 2
    out.append(Instr(Op.CONST, (other,), load.dtype, value=load.value))
    out.append(Instr(Op.WHERE, (masked,), load.dtype, (mask, result, other)))
    return out, masked
