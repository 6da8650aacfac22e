"""keep-float32: inside a kernel, a bfloat16 intermediate reaches the ops that read it unrounded.

Eager rounds every op's bfloat16 result to bfloat16 when it stores it. Once fusion has put a chain of ops in one
kernel, the rounding between two of them (an implicit cast, `IMPLICIT_CAST`: the producer's result narrowed to
its buffer, read back as float32 by the consumer) stores nothing: here the consumer takes the float32 value
instead. That saves a rounding per op (several instructions a vector) and is closer to the exact result, as
TorchInductor computes such chains. It stays where the value is stored, and where an op that jumps at a threshold
(a comparison, floor, sign, mod, argmax, a cast to an integer: not in `CONTINUOUS`) reads the value or anything made
from it in the kernel, so that such an op cannot give another answer than eager's; a cast the program asked for
(`Tensor.to`) is never dropped. float16 keeps every rounding: a
float32 intermediate could hold a value beyond float16's range where eager has an infinity.

When it is safe, and only then. A value left unrounded in one kernel is rounded where another kernel stores it or
something made from it, and the two must never meet: a bf16 batch norm over a channel equal in every row took its
mean from unrounded values, stored the mean rounded, and a kernel that computed the values again subtracted it
from them unrounded: 2^-9 where eager has an exact 0, times 1/sqrt(eps), a weight gradient of 0.7 where eager's is
0. Inside one kernel they cannot meet: a rounding is dropped for all of a value's readers or for none. So a kernel
widens only when
- its graph is not half of a training step (`for_graph`): a backward computes again what its forward computed, and
  the two are lowered apart. A pass not bound to a graph (`schedule` called with the plan alone) widens nothing
  unless made with `widen=True`;
- no graph node it computes is computed by another kernel of the plan too (fuse-inline copies a cheap producer
  into each of its consumers; a norm's statistics and its normalising can be two kernels that each compute the
  value normalised);
- it loads no bfloat16 buffer after storing it (a loop that reads what an earlier loop stored reads it rounded).
"""

from __future__ import annotations

from collections import Counter

from ember_core import Graph

from .._decisions import Note
from .._loop_ir import FLOAT_DTYPES, IMPLICIT_CAST, TRANSCENDENTAL, Instr, Kernel, KernelPlan, Loop, Op
from .._rewrite import canonicalize, rename_values

# Ops whose result moves little when an operand moves by a rounding error: they read a bfloat16 intermediate
# unrounded. Not here: what jumps at a threshold (comparisons, floor, sign, mod, argmax...), so that a rounding
# cannot flip their answer against eager's; lgamma (its poles); any op `define_op` adds.
CONTINUOUS = frozenset(TRANSCENDENTAL - {Op.LGAMMA} | {
    Op.NEG, Op.ABS, Op.RECIPROCAL, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM, Op.WHERE,
    Op.REDUCE_SUM, Op.REDUCE_PROD, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_WELFORD,
})


TRAINING_INPUTS = frozenset({"tangent", "saved"})
TRAINING_OUTPUTS = frozenset({"saved", "grad"})


class KeepFloat32:
    id = "keep-float32"
    # widened: readers take the float32 value; kept: an op that jumps at a threshold reads it, the kernel computes
    # a value another kernel computes too or reads back what it stored, the graph is half of a training step, the
    # pass knows no graph, or it was made not to widen
    reasons = frozenset({"continuous-readers", "threshold-reader", "computed-elsewhere", "reads-back",
                         "training-graph", "graph-unknown", "turned-off"})
    _kept_whole = {"training-graph": "a backward computes again what its forward computes",
                   "graph-unknown": "the pass was not told which graph the plan lowers",
                   "turned-off": "made with widen=False"}

    def __init__(self, widen: bool | None = None):
        # None: not bound to a graph (`for_graph` binds it), nothing widened; False: never widens
        self.widen = widen
        self._kept_why = "graph-unknown" if widen is None else "turned-off"

    def for_graph(self, graph: Graph) -> KeepFloat32:
        """The pass for lowering `graph`: it widens unless the graph is a forward or backward of a training step
        (its inputs' and outputs' kinds say so, or its nodes' regions: compiled autograd's captured backward has
        plain inputs, and its capture puts every node in the backward region)."""
        if self.widen is False:
            return self
        training = (any(i.kind in TRAINING_INPUTS for i in graph.inputs)
                    or any(o.kind in TRAINING_OUTPUTS for o in graph.outputs)
                    or any("region" in n.meta for n in graph.nodes))  # a joint, or a backward compiled autograd took
        bound = KeepFloat32(widen=not training)
        bound._kept_why = "training-graph"
        return bound

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        if not self.widen:
            if any(_roundings(k) for k in plan.kernels):
                note("kept", self._kept_why, (plan.name,),
                     f"{plan.name}: every bfloat16 rounding kept ({self._kept_whole[self._kept_why]})")
            return plan
        computed = Counter(o for k in plan.kernels for o in set(k.origins))
        steps = []
        for s in plan.steps:
            if isinstance(s, Kernel):
                shared = sorted(o for o in s.origins if computed[o] > 1)
                read_back = _reads_back(s)
                if not shared and not read_back:
                    s = _widen(s, note)
                elif _roundings(s):
                    if shared:
                        why, named, told = "computed-elsewhere", shared, "another kernel computes {} too"
                    else:
                        why, named, told = "reads-back", read_back, "it loads {} after storing it"
                    note("kept", why, (s.name, *named),
                         f"{s.name}: every bfloat16 rounding kept; " + told.format(", ".join(named)))
            steps.append(s)
        return plan.replace(steps=tuple(steps))


def _reads_back(kernel: Kernel) -> list[str]:
    """The bfloat16 buffers `kernel` loads after it has stored them: it would read rounded what it computed (a
    float32 temp, softmax's exp kept for its last loop, holds the value as computed)."""
    stored: set[str] = set()
    out: list[str] = []
    for i in kernel.instrs():
        if i.op is Op.STORE:
            stored.add(i.buffer)
        elif i.op is Op.LOAD and i.dtype == "bfloat16" and i.buffer in stored and i.buffer not in out:
            out.append(i.buffer)
    return out


def _roundings(kernel: Kernel) -> bool:
    """Whether `kernel` reads a bfloat16 rounding of a float32 value back as float32 (what `_widen` may drop)."""
    defs = {o: i for i in kernel.instrs() for o in i.outs}
    return any(_unrounded(i, defs) is not None for i in kernel.instrs())


def _widen(kernel: Kernel, note: Note) -> Kernel:
    instrs = [i for s in kernel.body for i in (s.body if isinstance(s, Loop) else (s,))]
    defs = {o: i for i in instrs for o in i.outs}
    widened: dict[str, str] = {}  # a float32 read of a rounded value → the value before the rounding
    exact = _threshold_inputs(instrs, defs)
    kept = 0
    for i in instrs:
        source = _unrounded(i, defs)
        if source is None:
            continue
        if i.out in exact:
            kept += 1
        else:
            widened[i.out] = source
    if kept:
        note("kept", "threshold-reader", (kernel.name,),
             f"{kernel.name}: {kept} bfloat16 rounding(s) kept, an op that jumps at a threshold reads a value made "
             "from them")
    if not widened:
        return kernel
    note("widened", "continuous-readers", (kernel.name,),
         f"{kernel.name}: {len(widened)} bfloat16 intermediate(s) read in float32, unrounded")

    def stays(i: Instr) -> bool:
        return not (i.outs and i.out in widened)

    body = [Loop(tuple(filter(stays, s.body))) if isinstance(s, Loop) else s
            for s in kernel.body if isinstance(s, Loop) or stays(s)]
    return canonicalize(kernel.replace(body=rename_values(body, widened)))


def _threshold_inputs(instrs: list[Instr], defs: dict[str, Instr]) -> set[str]:
    """The values an op that jumps at a threshold reads, and every value of the kernel they are made from: all of
    them computed as eager computes them, so that the op gives eager's answer. (`x * 3 + 1 > 1` with `x * 3` left
    unrounded flipped where `x * 3` rounds to half a step above 1.)"""
    stack = [s for i in instrs if _jumps(i) for s in i.srcs]
    seen: set[str] = set()
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            d = defs.get(v)
            stack.extend(d.srcs if d is not None else ())
    return seen


def _jumps(i: Instr) -> bool:
    """Whether `i`'s result can jump when an operand moves by a rounding: not in `CONTINUOUS`, not memory or a leaf,
    not a cast between float dtypes (a cast to an integer or bool truncates: it jumps)."""
    if i.op in CONTINUOUS or i.op in (Op.LOAD, Op.STORE, Op.CONST, Op.INDEX):
        return False
    return not (i.op is Op.CAST and i.dtype in FLOAT_DTYPES)


def _unrounded(i: Instr, defs: dict[str, Instr]) -> str | None:
    """For `i` a float32 read of an implicit rounding of a float32 value to bfloat16, that value."""
    if i.op is not Op.CAST or i.dtype != "float32":
        return None
    rounded = defs.get(i.srcs[0])
    if rounded is None or rounded.op is not Op.CAST or rounded.value != IMPLICIT_CAST or rounded.dtype != "bfloat16":
        return None
    source = defs.get(rounded.srcs[0])
    return rounded.srcs[0] if source is not None and source.dtype == "float32" else None
