"""Value ranges: an interval each SSA value of a kernel is sure to lie in, for every input, on every codegen.

An interval is `(lo, hi)`, bounds that may be infinite. For an integer or bool value it always exists (at worst
its dtype's range); for a float value it also says the value is never NaN, and `None` means nothing is known (a
loaded float, the result of a transcendental: it may be NaN, and a NaN cast to an integer is anything).

The facts start at what the plan fixes: loop variables lie in [0, size), constants are themselves, a symbol is at
least its lower bound. They go through the ops whose result is monotonic in each operand (add, sub, mul, neg,
min, max, where, casts, floor and friends, floor division and remainder by a positive divisor); any other op
gives its dtype's range. Float arithmetic rounds: each float result's bounds are widened by a few units in the
last place of its dtype (`_EPS`), more than IEEE rounding (half a unit) or Triton's approximate division (two)
can move it, so that a bound holds for the computed value and not only for the exact one. Zero stays zero: a
rounding of a nonnegative result is nonnegative.

`plan_ranges` walks a plan's kernels in order, once each. A load reads what it knows of its buffer by then: a temp
written whole by one unmasked store of one kernel holds that store's values (the index arrays `F.interpolate`
computes from `arange`, read by the kernel that gathers with them); anything else (inputs, views, an extern's
result) is unknown.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import sympy

from ._indexing import Ranges, bounds
from ._loop_ir import FLOAT_DTYPES, Buffer, Instr, Kernel, KernelPlan, Loop, Op

Interval = tuple[float, float]  # ints as Python ints where finite
INF = math.inf
# A loop over a symbolic extent runs fewer times than this (2^53 iterations would take weeks): its variable's bound,
# which a float computed from it (`i * 2.0`) keeps finite, so that its cast to an integer stays nonnegative.
LOOP_LIMIT = 1 << 53

# relative widening of a float result's bounds, by dtype: eight units in its last place (2^-52 x 8 for float64)
_EPS = {"float64": 2.0 ** -49, "float32": 2.0 ** -20, "float16": 2.0 ** -7, "bfloat16": 2.0 ** -4}
_TINY = {"float64": 5e-324, "float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}
_INT_RANGE = {"int64": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1),
              "int16": (-(1 << 15), (1 << 15) - 1), "int8": (-128, 127), "uint8": (0, 255), "bool": (0, 1)}


def full(dtype: str) -> Interval | None:
    """What a value of `dtype` may be when nothing else is known."""
    return _INT_RANGE.get(dtype)


def _fit(r: Interval | None, dtype: str) -> Interval | None:
    """`r` as a value of `dtype`: a float range is widened by the dtype's rounding; an integer range with a finite
    bound outside the dtype may wrap (the dtype's whole range then). An infinite integer bound is a size's, which
    int64 holds (index arithmetic never wraps it), and a narrower dtype may not."""
    if dtype in FLOAT_DTYPES:
        if r is None or any(math.isnan(x) for x in r):
            return None
        return _widen(r[0], dtype, -1), _widen(r[1], dtype, 1)
    lo, hi = _INT_RANGE[dtype]
    if r is None or any(math.isnan(x) for x in r):
        return lo, hi
    finite = math.isfinite(r[0]) and math.isfinite(r[1])
    if (math.isfinite(r[0]) and r[0] < lo) or (math.isfinite(r[1]) and r[1] > hi) or (not finite and dtype != "int64"):
        return lo, hi
    return max(_int(r[0]), lo), min(_int(r[1]), hi)


def _int(x: float) -> float:
    return int(x) if math.isfinite(x) else x


def _widen(x: float, dtype: str, direction: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return float(x) + direction * (abs(x) * _EPS[dtype] + _TINY[dtype])


def _span(values: list[float]) -> Interval | None:
    if any(math.isnan(v) for v in values):
        return None
    return min(values), max(values)


def _union(a: Interval | None, b: Interval | None) -> Interval | None:
    return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))


def decide(op: Op, a: Interval | None, b: Interval | None) -> bool | None:
    """The comparison `a op b` when every pair of values in the ranges gives the same answer, else None."""
    if a is None or b is None:
        return None
    if op is Op.LT:
        return True if a[1] < b[0] else False if a[0] >= b[1] else None
    if op is Op.LE:
        return True if a[1] <= b[0] else False if a[0] > b[1] else None
    if op is Op.GT:
        return decide(Op.LT, b, a)
    if op is Op.GE:
        return decide(Op.LE, b, a)
    if op in (Op.EQ, Op.NE):
        same = True if a[0] == a[1] == b[0] == b[1] else False if a[1] < b[0] or b[1] < a[0] else None
        return same if same is None or op is Op.EQ else not same
    return None


def index_range(expr: sympy.Expr, ranges: Ranges, values: Mapping[str, Interval | None]) -> Interval:
    """An index expression's range: loop vars, symbols (their lower bounds) and integer SSA values (`values`)."""
    if expr.is_Integer:
        return int(expr), int(expr)
    if expr.is_Symbol:
        if expr.name in values:
            return values[expr.name] or (-INF, INF)
        if expr.name in ranges.sizes and not ranges.sizes[expr.name].is_number:
            return 0, LOOP_LIMIT - 1
        lo, hi = bounds(expr, ranges)
        return (int(lo) if lo is not None and lo.is_number else -INF), (int(hi) if hi is not None and
                                                                          hi.is_number else INF)
    if isinstance(expr, sympy.Add):
        lo, hi = 0, 0
        for a in expr.args:
            r = index_range(a, ranges, values)
            lo, hi = lo + r[0], hi + r[1]
        return lo, hi
    if isinstance(expr, sympy.Mul) and len(expr.args) == 2 and expr.args[0].is_Integer:
        c, r = int(expr.args[0]), index_range(expr.args[1], ranges, values)
        return _span([c * r[0], c * r[1]]) or (-INF, INF) if c else (0, 0)
    if not expr.free_symbols & {sympy.Symbol(n, integer=True) for n in values}:
        lo, hi = bounds(expr, ranges)  # loop vars and symbols only (floor, Mod of a view)
        return (int(lo) if lo is not None and lo.is_number else -INF), (int(hi) if hi is not None and
                                                                          hi.is_number else INF)
    return -INF, INF


def _const_range(value: float | bool, dtype: str) -> Interval | None:
    return None if isinstance(value, float) and not math.isfinite(value) else _fit((value, value), dtype)


def instr_range(i: Instr, args: list[Interval | None], dtypes: list[str], ranges: Ranges,
                values: Mapping[str, Interval | None], buffers: Mapping[str, Interval | None]) -> Interval | None:
    """The range of `i`'s result from its operands' (`args`, of `dtypes`)."""
    op, dtype = i.op, i.dtype
    if op is Op.CONST:
        return _const_range(i.value, dtype)
    if op is Op.INDEX:
        return _fit(index_range(i.index[0], ranges, values), dtype)
    if op is Op.LOAD:
        r = buffers.get(i.buffer) if i.buffer is not None else None
        if i.srcs and r is not None:  # a masked load: its buffer's values or its fill value
            r = _union(r, _const_range(i.value, dtype))
        return r if r is not None else full(dtype)
    if op is Op.CAST:
        return _cast(args[0], dtypes[0], dtype)
    if op is Op.WHERE:
        return _fit(_union(args[1], args[2]), dtype)
    if any(a is None for a in args):
        return full(dtype)
    return _fit(_arith(op, args, dtype), dtype) or full(dtype)


def _cast(r: Interval | None, src: str, dtype: str) -> Interval | None:
    if dtype == "bool":
        return 0, 1
    if src in FLOAT_DTYPES and dtype not in FLOAT_DTYPES:  # toward zero; NaN or out of range: anything
        if r is None or not all(math.isfinite(x) for x in r):
            return full(dtype)
        return _fit((math.trunc(r[0]), math.trunc(r[1])), dtype)
    return _fit(r, dtype)


def _arith(op: Op, args: list[Interval], dtype: str) -> Interval | None:
    a = args[0]
    b = args[1] if len(args) > 1 else None
    floats = dtype in FLOAT_DTYPES
    if floats and b is not None and _may_be_nan(op, a, b):
        return None
    if op is Op.NEG:
        return -a[1], -a[0]
    if op is Op.ABS:
        return (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1]))), max(abs(a[0]), abs(a[1]))
    if op in (Op.FLOOR, Op.CEIL, Op.TRUNC, Op.ROUND):
        fn = {Op.FLOOR: math.floor, Op.CEIL: math.ceil, Op.TRUNC: math.trunc, Op.ROUND: round}[op]
        return (fn(a[0]), fn(a[1])) if floats else a
    if op is Op.ADD:
        return a[0] + b[0], a[1] + b[1]
    if op is Op.SUB:
        return a[0] - b[1], a[1] - b[0]
    if op is Op.MUL:
        return _span([x * y for x in a for y in b])
    if op is Op.MAXIMUM:
        return max(a[0], b[0]), max(a[1], b[1])
    if op is Op.MINIMUM:
        return min(a[0], b[0]), min(a[1], b[1])
    if op is Op.DIV and floats and b[0] > 0:
        return _span([x / y for x in a for y in b])
    if op is Op.FLOORDIV and not floats and b[0] > 0 and all(math.isfinite(x) for x in b):
        return _span([x // y if math.isfinite(x) else x for x in a for y in b])
    if op is Op.MOD and not floats and b[0] > 0:
        return 0, b[1] - 1
    return None


def _may_be_nan(op: Op, a: Interval, b: Interval) -> bool:
    """Can a float op of values in `a` and `b` (which may reach an infinite bound) give NaN: inf - inf, 0 * inf,
    inf / inf?"""
    if op is Op.ADD:
        return (a[1] == INF and b[0] == -INF) or (a[0] == -INF and b[1] == INF)
    if op is Op.SUB:
        return (a[1] == INF and b[1] == INF) or (a[0] == -INF and b[0] == -INF)
    a_inf, b_inf = not all(map(math.isfinite, a)), not all(map(math.isfinite, b))
    if op is Op.MUL:
        return (a_inf and b[0] <= 0 <= b[1]) or (b_inf and a[0] <= 0 <= a[1])
    return a_inf or b_inf  # division and the rest: only of finite ranges


@dataclasses.dataclass(frozen=True)
class KernelRanges:
    """What the ranges say of one kernel."""

    ranges: Ranges  # its loop vars' and the symbols' bounds
    values: dict[str, Interval | None]  # each SSA value's range
    decided: dict[str, bool]  # the comparisons the ranges decide: value -> its only result


def kernel_ranges(kernel: Kernel, lowers: Mapping[str, int], buffers: Mapping[str, Interval | None]) -> KernelRanges:
    """Each SSA value's range (see the module docstring), a load's from what `buffers` says its buffer holds."""
    ranges = Ranges({d.var: d.size for d in kernel.dims}, lowers)
    decided: dict[str, bool] = {}
    values: dict[str, Interval | None] = {}
    dtypes: dict[str, str] = {}
    for i in kernel.instrs():
        if not i.outs:
            continue
        args = [values[s] for s in i.srcs]
        if i.op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE):
            verdict = decide(i.op, *args)
            if verdict is not None:
                decided[i.out] = verdict
            r = (int(verdict), int(verdict)) if verdict is not None else (0, 1)
        elif i.op is Op.WHERE and i.srcs[0] in decided:
            r = args[1] if decided[i.srcs[0]] else args[2]
        else:
            r = instr_range(i, args, [dtypes.get(s, i.dtype) for s in i.srcs], ranges, values, buffers)
        for o in i.outs:
            values[o], dtypes[o] = (r if len(i.outs) == 1 else full(i.dtype)), i.dtype
    return KernelRanges(ranges, values, decided)


def whole_writes(plan: KernelPlan) -> dict[str, tuple[Kernel, Instr]]:
    """The temps a plan writes whole with one unmasked store of one kernel, at that kernel's own loop vars (each
    dim of the buffer walked by one var over its size, or 0 where the size is 1): buffer → (kernel, store)."""
    stores: dict[str, list] = {}
    for step in plan.steps:
        if isinstance(step, Kernel):
            for s in step.body:
                for i in (s.body if isinstance(s, Loop) else (s,)):
                    if i.op is Op.STORE:
                        stores.setdefault(i.buffer, []).append((step, i, isinstance(s, Loop)))
        else:
            for o in step.outs:
                stores.setdefault(o, []).append(None)
    viewed = {b.base for b in plan.buffers if b.base is not None}
    out = {}
    for b in plan.buffers:
        found = stores.get(b.name, [])
        if b.kind != "temp" or b.base is not None or b.name in viewed or len(found) != 1 or found[0] is None:
            continue
        kernel, store, looped = found[0]
        if not looped and len(store.srcs) == 1 and _walks(kernel, store, b):
            out[b.name] = (kernel, store)
    return out


def _walks(kernel: Kernel, store: Instr, b: Buffer) -> bool:
    sizes = {d.var: d.size for d in kernel.outer_dims}
    seen = set()
    for e, size in zip(store.index, b.shape):
        if e.is_Symbol and e.name in sizes and e.name not in seen and sympy.simplify(sizes[e.name] - size) == 0:
            seen.add(e.name)
        elif not (e == 0 and size == 1):
            return False
    return len(store.index) == b.rank and seen == set(sizes) and not kernel.reduce_dims


def plan_ranges(plan: KernelPlan) -> list[KernelRanges | None]:
    """Each step's ranges (None for an extern), computed once per kernel in the plan's order: a load reads the range
    of the values an earlier kernel wrote to its buffer, for the temps `whole_writes` finds (others are unknown)."""
    lowers = {s.name: s.lower for s in plan.symbols if s.lower is not None}
    dtypes = {b.name: b.dtype for b in plan.buffers}
    written = whole_writes(plan)
    held: dict[str, Interval | None] = {}
    out: list[KernelRanges | None] = []
    for step in plan.steps:
        if not isinstance(step, Kernel):
            out.append(None)
            continue
        found = kernel_ranges(step, lowers, held)
        for name, (kernel, store) in written.items():
            if kernel is step:
                value_dtype = next(i.dtype for i in step.instrs() if store.srcs[0] in i.outs)
                held[name] = _cast(found.values[store.srcs[0]], value_dtype, dtypes[name])
        out.append(found)
    return out
