"""The one cost table of ember-lowering: what computing a value again costs, per instruction.

Two passes weigh recomputation against memory with it. fuse-inline recomputes a pointwise producer in each
consumer when the producer costs at most `RECOMPUTE_BUDGET` (and per element of a broadcast read at most
`BROADCAST_BUDGET`); stash-values keeps a value a later loop of a kernel needs again in a per-row stash when
computing it again costs at least `STASH_MIN_COST`. Units: a cheap instruction (add, compare, select, a load,
which re-reads mostly cached memory) costs 1.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._loop_ir import TRANSCENDENTAL, Instr, Kernel, Op

# Transcendentals are every exp/log/trig/hyperbolic/erf/sqrt/rsqrt/sigmoid op; then the slow arithmetic.
OP_COST: dict[Op, int] = {
    **{op: 4 for op in TRANSCENDENTAL}, Op.POW: 4, Op.ATAN2: 4,
    Op.DIV: 2, Op.MOD: 2, Op.FMOD: 2, Op.FLOORDIV: 2, Op.TRUNCDIV: 2,
    Op.CONST: 0, Op.INDEX: 0, Op.CAST: 0, Op.STORE: 0,
}
RECOMPUTE_BUDGET = 10  # a pointwise value this cheap is recomputed by each consumer rather than stored
BROADCAST_BUDGET = 3  # ... and recomputed for every element of a broadcast read when this cheap
# A stash costs a store and a load per element; from a loaded value through one transcendental (1 + 4), or
# five cheap instructions, keeping it is worth more than computing it again.
STASH_MIN_COST = 5


def op_cost(op: Op) -> int:
    return OP_COST.get(op, 1)


def instrs_cost(instrs: Iterable[Instr]) -> int:
    return sum(op_cost(i.op) for i in instrs)


def kernel_cost(kernel: Kernel) -> int:
    return instrs_cost(kernel.instrs())
