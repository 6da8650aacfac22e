"""Stashing expensive values between the loops of one kernel (softmax's exp, computed in two loops).

The fusion scheduler recomputes cheap-to-recompute values in each loop that needs them: softmax's second loop
sums exp(x - max) and its third loop divides exp(x - max) by the sum. The C++ computes the exp once: the first
loop also writes it to a per-row stack array (the *stash*), the later loop reads it back. Only for values whose
expression contains a transcendental op, for static r-sizes of at most `MAX_ELEMENTS` elements, and never for
values that read a buffer the kernel writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ember_lowering import REDUCTIONS, Instr, Kernel, Loop, Op

from ._cpp_rules import CTYPE

MAX_ELEMENTS = 8192  # elements per stashed value (per row): 32 KiB of float, in L1/L2 with its row
MAX_BYTES = 96 * 1024  # every stash of a kernel together (stack of each thread)
_EXPENSIVE = 8  # subtree cost from which a value is stashed rather than recomputed
_COST = {Op.DIV: 2, Op.POW: 8, Op.ATAN2: 8, Op.FMOD: 4, Op.MOD: 4, Op.FLOORDIV: 4}


@dataclass
class Stash:
    """Which values a kernel's loops write to a stash (`store`: value → stash) or read from one (`load`)."""

    store: dict[str, str] = field(default_factory=dict)
    load: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, str] = field(default_factory=dict)  # stash → C++ element type
    elements: int = 0

    def __bool__(self) -> bool:
        return bool(self.load)


def is_transcendental(i: Instr) -> bool:
    return i.op.value in _TRANSCENDENTAL


def _cost(i: Instr) -> int:
    if is_transcendental(i):
        return _EXPENSIVE
    return _COST.get(i.op, 1)


_TRANSCENDENTAL = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "lgamma", "sigmoid",
})


def plan_stash(kernel: Kernel) -> Stash:
    """Decide the stash of one kernel (empty when its r-sizes are symbolic or too large)."""
    stash = Stash()
    sizes = [d.size for d in kernel.reduce_dims]
    if not sizes or not all(s.is_Integer for s in sizes):
        return stash
    elements = 1
    for s in sizes:
        elements *= int(s)
    if elements == 0 or elements > MAX_ELEMENTS:
        return stash
    written = {i.buffer for i in kernel.instrs() if i.op is Op.STORE}
    seen: dict[tuple, str] = {}  # structural key → value of an earlier loop
    loops = [s for s in kernel.body if isinstance(s, Loop)]
    for loop in loops:
        keys, costs = _keys(loop, written)
        matched = {n for n, k in keys.items() if k in seen and costs[n] >= _EXPENSIVE}
        users: dict[str, list[str]] = {}
        for i in loop.body:
            for s in i.srcs:
                users.setdefault(s, []).append(i.outs[0] if i.outs else "")
        for name in matched:
            if any(u not in matched for u in users.get(name, [])):
                source = seen[keys[name]]
                stash.store.setdefault(source, f"ember_stash_{source}")
                stash.load[name] = stash.store[source]
        for n, k in keys.items():
            seen.setdefault(k, n)
    dtype = {o: i.dtype for i in kernel.instrs() for o in i.outs}
    for source, array in stash.store.items():
        stash.arrays[array] = CTYPE[dtype[source]]
    stash.elements = elements
    if stash.arrays and elements * 8 * len(stash.arrays) > MAX_BYTES:
        return Stash()
    if not stash.load:
        return Stash()
    return stash


def _keys(loop: Loop, written: set[str]) -> tuple[dict[str, tuple], dict[str, int]]:
    """Structural keys of a loop's pointwise values (equal keys: equal values in every iteration) and the cost
    of computing each from scratch."""
    keys: dict[str, tuple] = {}
    costs: dict[str, int] = {}
    for i in loop.body:
        if i.op in REDUCTIONS or i.op is Op.STORE or not i.outs:
            continue
        if i.op is Op.LOAD and i.buffer in written:
            continue
        src_keys = []
        cost = _cost(i)
        for s in i.srcs:
            if s in keys:
                src_keys.append(keys[s])
                cost += costs[s]
            elif _defined_in(loop, s):
                break  # a loop value without a key (it reads a written buffer): no key for this one either
            else:
                src_keys.append(("outer", s))
        else:
            keys[i.outs[0]] = (i.op, i.dtype, repr(i.value), i.buffer, tuple(map(str, i.index)), tuple(src_keys))
            costs[i.outs[0]] = cost
    return keys, costs


def _defined_in(loop: Loop, name: str) -> bool:
    return any(name in i.outs for i in loop.body)
