"""Reductions in C++: each `reduce_*` instruction is an accumulator of `LANES` lanes, updated by the vectorized
lane loop, then merged into the instruction's result.

What each reduction computes is ember-lowering's `REDUCTION_SEMANTICS`: a lane starts from its identity (printed by
`literal`) and takes each value by its combine op, printed as `cpp_rules` (or, a vector of lanes at a time,
`VectorOps`) prints that pointwise op; NaN behaves as that op makes it (`ember_max` lets NaN win). What is C++'s own
is below.

sum/prod/max/min/any/all keep one value per lane. argmax/argmin keep (value, first index) per lane and merge
preferring NaN, then the larger (smaller) value, then the smaller index, as torch. Welford keeps (mean, m2) per
lane with one count shared by all lanes, so the update multiplies by 1/count once per set of lanes instead of
dividing in every lane; the scalar tail keeps its own (mean, m2, count). Lanes merge by Chan's formula. Welford
of float32 keeps all of that, and its chunks' partials, in double (`Accumulator.state`), as eager's CPU var does.
Along a row (not in a block, where lanes are i-points) the lanes keep shifted sums instead, Σ(x - k) and
Σ(x - k)² with k the lane's first value, turned into (mean, m2) before they merge (`shifted_to_welford`).

A kernel without i-dims (`x.sum()`, a loss) splits each loop's outermost r-dim into at most `CHUNKS` chunks of a
parallel loop; each chunk runs the accumulators above and leaves its merged result in `Partials`, which combine
after the loop in a fixed order: pairwise (sums), or in chunk order (Welford by Chan's formula, argmax/argmin
keeping the first index). The chunks
depend on the sizes only, never on the threads, so the result is the same however many threads run them.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from ember_lowering import REDUCTION_SEMANTICS, Instr, Kernel, Loop, Op, Ranges, flat_index
from ember_lowering.codegen import CannotPrint, PlanLayout, unwrapped

from ._cpp_rules import CTYPE, FLOATS, expression, literal
from ._vector import check_stack_vector
from ._vector_ops import VectorOps

LANES = 32  # lanes of a reduction accumulator: 2 AVX-512 vectors of float, enough to hide add latency
FOLD = 32 * LANES  # elements of the r-dim between two folds of a float32 sum's lanes into its cascade
# A block's lane (an i-point of an outer reduction) takes one element a step: its cascade folds every BLOCK_FOLD
# steps, each level into the next BLOCK_FOLD times less often (sums of 8, 64, 512, 4096 elements, then the rest).
BLOCK_FOLD = 8
BLOCK_LEVELS = 5
CHUNKS = 64  # most chunks of a whole-tensor reduction: enough to balance 2-16 threads, a fixed order to combine
CHUNK_MIN = FOLD  # fewest elements per chunk (a chunk's lanes cost about a hundred operations to set up and merge)


def welford_count(loop: int) -> str:
    """The lane loop's step count (every lane has seen this many values) of the kernel's loop number `loop`."""
    return f"ember_wn{loop}"


def inverse_count(loop: int, dtype: str) -> str:
    return f"ember_wi{loop}_{CTYPE[dtype]}"


class Accumulator:
    """The C++ of one reduce instruction: `init()` before the loop, `update(lane)` in it, `merge()` after."""

    def __init__(self, instr: Instr, src_dtype: str, loop: int, lanes: int = LANES, shifted: bool = False,
                 row: int | None = None, block: bool = False):
        self.i, self.src, self.loop, self.lanes, self.row, self.block = instr, src_dtype, loop, lanes, row, block
        # A row's Welford (not a block's, whose lanes are i-points) runs as shifted sums: see `shifted_sums`
        self.shifted = shifted and instr.op is Op.REDUCE_WELFORD
        self.acc = f"ember_a_{instr.out}"
        if instr.op not in REDUCTION_SEMANTICS:
            raise CannotPrint(f"no accumulator for {instr.op.value}")
        self.meaning = REDUCTION_SEMANTICS[instr.op]

    @property
    def cascade(self) -> bool:
        """float32 sums fold their lanes into two more levels, every `FOLD` elements and every 32 folds (cascade
        summation: a lane's error grows with about 32 + 32 + n/32K additions, not n, as torch's cascade sum). A row
        known to be at most `FOLD` long (`row`) needs none: each lane adds up at most FOLD / LANES values. A block's
        lanes (`block`) fold every `BLOCK_FOLD` steps through `BLOCK_LEVELS` levels: see `flush`."""
        short = self.row is not None and self.row <= FOLD
        return self.i.op is Op.REDUCE_SUM and self.i.dtype == "float32" and not short

    @property
    def levels(self) -> list[str]:
        """The arrays of the cascade's levels, the lanes' own first."""
        a = self.acc
        return [a, *(f"{a}_{k}" for k in range(1, BLOCK_LEVELS if self.block else 3))] if self.cascade else [a]

    def flush(self, counter: str) -> list[str]:
        """Lines to run after each chunk of `FOLD` elements of a row, or each step of a block's r-loops (`counter`
        counts them). They stay out of the lane loop: a fold inside it makes the compiler keep the lanes in memory
        rather than registers. A block's lanes add one element a step, so they fold every `BLOCK_FOLD` steps and
        each level into the next `BLOCK_FOLD` times less often: a lane's error grows with about 8 + 8 + 8 + 8 +
        n/4096 additions. (Folding every step, with two levels, left sums of 32 and then n/32 additions in a row:
        batch norm's channel sums over 64 elements were twice eager's error, and 22 ulp at 100K elements.)"""
        if not self.cascade:
            return []
        each = f"for (int ember_l = 0; ember_l < {self.lanes}; ++ember_l)"
        levels = self.levels
        fold = [f"{each} {{ {hi}[ember_l] += {lo}[ember_l]; {lo}[ember_l] = 0; }}"
                for lo, hi in zip(levels, levels[1:])]
        if not self.block:
            return [fold[0], f"if (({counter} & 31) == 0) {fold[1]}"]
        masks = [BLOCK_FOLD ** (k + 1) - 1 for k in range(len(fold))]
        return [f"if (({counter} & {m}) == 0) {line}" for m, line in zip(masks, fold)]

    def _total(self, j: str) -> str:
        """A lane's sum: its levels added smallest first."""
        total = f"{self.levels[0]}[{j}]"
        for level in self.levels[1:]:
            total = f"({total} + {level}[{j}])"
        return total

    @property
    def welford(self) -> bool:
        return self.meaning.state == ("count", "mean", "m2")

    @property
    def empty_mean(self) -> str:
        """Welford's mean where no value came (NaN: the reduction's result of reducing nothing)."""
        return literal(self.meaning.empty(self.i.dtype)[0], self.i.dtype)

    @property
    def state(self) -> str:
        """The dtype the accumulator's lanes, merges and partials hold. Welford of float32 (and of float16 and
        bfloat16, which reach it as float32) keeps double, as eager's CPU var does: each lane's m2 is a sum of up to
        n/LANES squares, and in float32 a var of 10^7 values came out up to 10 ulp from float64's."""
        return "float64" if self.welford and self.i.dtype == "float32" else self.i.dtype

    @property
    def ctype(self) -> str:
        """The C type of the lanes `init` declares: of `state` (argmax/argmin: their values, of the source's)."""
        return CTYPE[self.src] if self.arg else CTYPE[self.state]

    @property
    def arg(self) -> str | None:
        """`argmax`/`argmin` (the prelude's steps and merges of (value, index) lanes are named for them), or None."""
        return self.i.op.value.removeprefix("reduce_") if self.meaning.state == ("value", "index") else None

    def init(self) -> list[str]:
        a, t, n = self.acc, self.ctype, self.lanes
        each = f"for (int ember_l = 0; ember_l < {n}; ++ember_l)"
        if self.arg:
            return [f"{t} {a}v[{n}]; int64_t {a}i[{n}];",
                    f"{each} {{ {a}v[ember_l] = 0; {a}i[ember_l] = -1; }}"]
        if self.welford:
            shift = [f"{t} {a}k[{n}];"] if self.shifted else []
            return [f"{t} {a}m[{n}], {a}s[{n}]; {t} {a}tm = 0, {a}ts = 0, {a}tn = 0;", *shift,
                    f"{each} {{ {a}m[ember_l] = 0; {a}s[ember_l] = 0; }}"]
        if self.cascade:
            levels = self.levels
            return [f"{t} {', '.join(f'{v}[{n}]' for v in levels)};",
                    f"{each} {{ {' '.join(f'{v}[ember_l] = 0;' for v in levels)} }}"]
        return [f"{t} {a}[{n}];", f"{each} {a}[ember_l] = {_identity(self.i.op, self.i.dtype)};"]

    def update(self, args: list[str], lane: str, tail: bool) -> list[str]:
        a, v = self.acc, args[0]
        if self.arg:
            return [f"ember_{self.arg}_step({a}v[{lane}], {a}i[{lane}], {v}, (int64_t){args[1]});"]
        if self.welford:
            t = CTYPE[self.state]
            if tail:
                return [f"{{ const {t} ember_x = {v}; {a}tn += 1; const {t} ember_d = ember_x - {a}tm; "
                        f"{a}tm += ember_d / {a}tn; {a}ts += ember_d * (ember_x - {a}tm); }}"]
            if self.shifted:
                return [f"{{ const {t} ember_x = {v}; if ({welford_count(self.loop)} == 1) {a}k[{lane}] = ember_x; "
                        f"const {t} ember_d = ember_x - {a}k[{lane}]; {a}m[{lane}] += ember_d; "
                        f"{a}s[{lane}] += ember_d * ember_d; }}"]
            return [f"{{ const {t} ember_x = {v}, ember_d = ember_x - {a}m[{lane}]; {a}m[{lane}] += ember_d * "
                    f"{inverse_count(self.loop, self.state)}; {a}s[{lane}] += ember_d * (ember_x - {a}m[{lane}]); }}"]
        cur = f"{a}[{lane}]"
        return [f"{cur} = {combine(self.i.op, self.i.dtype, cur, v)};"]

    def vector_update(self, v: str, at: str, vt: str) -> list[str] | None:
        """`update` for the lanes `at`.. of the accumulator at once, `v` a vector of type `vt` (the lanes of
        `state`); None where only the lane-by-lane update exists (argmax/argmin, any/all). Its lanes move whole
        to and from the accumulator's arrays: `CannotPrint` where a lane is not one of their elements."""
        a = self.acc
        if self.welford:
            if not vt.startswith("ember_f64x"):  # Welford's lanes are double (`state`); anything else: lane by lane
                return None
            check_stack_vector(a, self.ctype, vt)
            if self.shifted:
                first = f"{welford_count(self.loop)} == 1"
                return self._by_halves(v, vt, at, "msk", [
                    f"if ({first}) ember_vstore(ember_pk, ember_y);",
                    "const HALF ember_d = ember_y - ember_vload<HALF>(ember_pk);",
                    "ember_vstore(ember_pm, ember_vload<HALF>(ember_pm) + ember_d);",
                    "ember_vstore(ember_ps, ember_vload<HALF>(ember_ps) + ember_d * ember_d);"])
            inv = inverse_count(self.loop, self.state)
            return self._by_halves(v, vt, at, "ms", [
                "const HALF ember_m = ember_vload<HALF>(ember_pm);",
                f"const HALF ember_d = ember_y - ember_m, ember_m2 = ember_m + ember_d * {inv};",
                "ember_vstore(ember_pm, ember_m2);",
                "ember_vstore(ember_ps, ember_vload<HALF>(ember_ps) + ember_d * (ember_y - ember_m2));"])
        if self.meaning.combine is None or self.meaning.truth:
            return None
        check_stack_vector(a, self.ctype, vt)
        cur = f"ember_vload<{vt}>({a} + {at})"
        lanes = VectorOps(int(vt.rsplit("x", 1)[1]))  # vt holds the lanes of `state`, the reduction's dtype here
        new = combine(self.i.op, self.i.dtype, cur, v, lanes.expression)
        return None if new is None else [f"ember_vstore({a} + {at}, {new});"]

    def _by_halves(self, v: str, vt: str, at: str, fields: str, body: list[str]) -> list[str]:
        """A Welford update of lanes `at`.. by the double vector `v`, run on its halves (`ember_f64hL`, one register
        each: gcc spills a product of a two-register double vector with a scalar to the stack, 5x slower). `body`
        sees the half `ember_y` and `ember_p<f>`, the half's place in array `<f>` for each of `fields`; HALF in
        it is the half's type.

        Row lanes (`shifted`) keep shifted sums: x - k and (x - k)^2, k the lane's first value (taken in the first
        step). Two operations a value and no division, where Welford's update is a chain of four through the
        running mean (the moments loop of a float32 layer norm took about 1.1 of the kernel's 3.1 ms). The shift
        keeps the sum of squares from cancelling (it is about twice the lane's m2)."""
        half, n = vt.replace("_f64x", "_f64h"), int(vt.removeprefix("ember_f64x")) // 2
        ptr = " ".join(f"double* ember_p{f} = {self.acc}{f} + {at} + {n} * ember_h;" for f in fields)
        return ["{", f"  const {vt} ember_x = {v};",
                f"  {half} ember_xh[2]; __builtin_memcpy(ember_xh, &ember_x, sizeof ember_x);",
                "  for (int ember_h = 0; ember_h < 2; ++ember_h) {", f"    {ptr}",
                f"    const {half} ember_y = ember_xh[ember_h];",
                *("    " + line.replace("HALF", half) for line in body), "  }", "}"]

    def shifted_to_welford(self) -> list[str]:
        """Each lane's (mean, m2) from its shifted sums, before the lanes merge: mean = k + p/n, m2 = q - p^2/n."""
        if not (self.welford and self.shifted):
            return []
        a, t = self.acc, CTYPE[self.state]
        n = f"({t}){welford_count(self.loop)}"
        return [f"if ({welford_count(self.loop)} > 0) for (int ember_l = 0; ember_l < {self.lanes}; ++ember_l) {{ "
                f"const {t} ember_p = {a}m[ember_l]; {a}m[ember_l] = {a}k[ember_l] + ember_p / {n}; "
                f"{a}s[ember_l] -= ember_p * ember_p / {n}; }}"]

    def merge(self) -> list[str]:
        a, t, i = self.acc, CTYPE[self.i.dtype], self.i
        each = f"for (int ember_l = 1; ember_l < {LANES}; ++ember_l)"
        if self.arg:
            return [f"{CTYPE[self.src]} {a}bv = {a}v[0]; int64_t {a}bi = {a}i[0];",
                    f"{each} ember_{self.arg}_merge({a}bv, {a}bi, {a}v[ember_l], {a}i[ember_l]);",
                    f"const {t} {i.out} = ({t})({a}bi < 0 ? 0 : {a}bi);"]
        if self.welford:
            mean, m2, out, t = *i.outs, t, CTYPE[self.state]
            # Every lane saw n values: the mean of the lane means, and m2 by the parallel axis theorem.
            n, all_ = f"({t}){welford_count(self.loop)}", f"for (int ember_l = 0; ember_l < {self.lanes}; ++ember_l)"
            return [*self.shifted_to_welford(), f"{t} {a}bm = 0, {a}bs = 0, {a}dv = 0;",
                    f"{all_} {a}bm += {a}m[ember_l];",
                    f"{a}bm *= ({t})1 / ({t}){self.lanes};",
                    f"{all_} {{ const {t} ember_d = {a}m[ember_l] - {a}bm; {a}bs += {a}s[ember_l]; "
                    f"{a}dv += ember_d * ember_d; }}",
                    f"{a}bs += {a}dv * {n};",
                    f"{t} {a}bn = {n} * ({t}){self.lanes};",
                    f"ember_welford_merge({a}bm, {a}bs, {a}bn, {a}tm, {a}ts, {a}tn);",
                    f"const {out} {mean} = {a}bn == 0 ? {self.empty_mean} : ({out}){a}bm;",
                    f"const {out} {m2} = ({out}){a}bs;"]
        # Pairwise over the lanes: log2(LANES) vector steps rather than a chain of LANES - 1 scalar ones.
        lanes = f"for (int ember_l = 0; ember_l < {self.lanes}; ++ember_l)"
        total = [f"{lanes} {a}[ember_l] = {self._total('ember_l')};"] if self.cascade else []
        # float lanes fold as vectors (`auto`: a float op's text does not name their width)
        step = combine(i.op, i.dtype, "ember_x", "ember_y", VectorOps(self.lanes).expression) \
            if i.dtype in FLOATS else None
        if step is not None:
            pair = f"[](auto ember_x, auto ember_y) {{ return {unwrapped(step)}; }}"
            return [*total, f"const {t} {i.out} = ember_fold<{self.lanes}>({a}, {pair});"]
        half = f"for (int ember_h = {self.lanes // 2}; ember_h > 0; ember_h /= 2)"
        pair = combine(i.op, i.dtype, f"{a}[ember_l]", f"{a}[ember_l + ember_h]")
        return [*total,
                f"{half} for (int ember_l = 0; ember_l < ember_h; ++ember_l) {a}[ember_l] = {pair};",
                f"const {t} {i.out} = {a}[0];"]


    def results(self, j: str) -> list[tuple[str, str]]:
        """(value, expression) of each result for block element j, where every lane is its own i-point."""
        a, i = self.acc, self.i
        if self.arg:
            return [(i.out, f"({CTYPE[i.dtype]})({a}i[{j}] < 0 ? 0 : {a}i[{j}])")]
        if self.welford:
            t = CTYPE[i.dtype]
            return [(i.outs[0], f"{welford_count(self.loop)} == 0 ? {self.empty_mean} : ({t}){a}m[{j}]"),
                    (i.outs[1], f"({t}){a}s[{j}]")]
        return [(i.out, self._total(j))]


def _identity(op: Op, dtype: str) -> str:
    """The state a lane starts from: the reduction's identity, as a C++ literal of `dtype`."""
    return literal(REDUCTION_SEMANTICS[op].identity(dtype), dtype)


def combine(op: Op, dtype: str, acc: str, v: str, pointwise: Callable[..., str | None] = expression) -> str | None:
    """The accumulator after taking value v (also how two partial results merge): the reduction's combine op on
    (acc, v), printed by `pointwise` (the scalar rules of `cpp_rules`, or a `VectorOps`' over lanes: None where it
    has no vector form), v taken as a truth value first (`v != 0`) where the reduction says so."""
    meaning = REDUCTION_SEMANTICS[op]
    if meaning.combine is None:
        raise CannotPrint(f"{op.value} merges states of {', '.join(meaning.state)}, not one value")
    if meaning.truth:
        v = expression(Op.NE, [v, "0"], [dtype, dtype], "bool")
    return pointwise(meaning.combine, [acc, v], [dtype, dtype], dtype)


class Partials:
    """One reduce instruction's merged result per chunk of a kernel without i-dims (`decl()` before the parallel
    loop, `save(chunk)` in it after the accumulator's merge), then `combine(count)`: the instruction's outputs from
    the partials, in a fixed order (chunk order, or a fixed pairwise tree)."""

    def __init__(self, acc: Accumulator):
        self.acc, self.i = acc, acc.i
        self.name = f"ember_c_{acc.i.out}"

    def _fields(self) -> list[tuple[str, str, str]]:
        """(array suffix, C type, the chunk's value after its merge) of each partial."""
        a, i, t = self.acc.acc, self.i, CTYPE[self.i.dtype]
        if self.acc.welford:
            w = CTYPE[self.acc.state]
            return [("m", w, f"{a}bm"), ("s", w, f"{a}bs"), ("n", w, f"{a}bn")]
        if self.acc.arg:
            return [("v", CTYPE[self.acc.src], f"{a}bv"), ("i", "int64_t", f"{a}bi")]
        return [("", t, i.out)]

    def decl(self) -> list[str]:
        return [f"{t} {self.name}{s}[{CHUNKS}];" for s, t, _ in self._fields()]

    def save(self, chunk: str) -> list[str]:
        return [f"{self.name}{s}[{chunk}] = {v};" for s, _, v in self._fields()]

    def combine(self, count: str) -> list[str]:
        c, i, t = self.name, self.i, CTYPE[self.i.dtype]
        each = f"for (int64_t ember_c = 1; ember_c < {count}; ++ember_c)"
        r = f"ember_r_{i.out}"
        if self.acc.welford:
            mean, m2, w = *i.outs, CTYPE[self.acc.state]
            return [f"{w} {r}m = {c}m[0], {r}s = {c}s[0], {r}n = {c}n[0];",
                    f"{each} ember_welford_merge({r}m, {r}s, {r}n, {c}m[ember_c], {c}s[ember_c], {c}n[ember_c]);",
                    f"const {t} {mean} = {r}n == 0 ? {self.acc.empty_mean} : ({t}){r}m;",
                    f"const {t} {m2} = ({t}){r}s;"]
        if self.acc.arg:
            return [f"{CTYPE[self.acc.src]} {r}v = {c}v[0]; int64_t {r}i = {c}i[0];",
                    f"{each} ember_{self.acc.arg}_merge({r}v, {r}i, {c}v[ember_c], {c}i[ember_c]);",
                    f"const {t} {i.out} = ({t})({r}i < 0 ? 0 : {r}i);"]
        # Pairwise over all CHUNKS (the unused ones hold the identity), as the lanes: a float32 sum of 10^7 then
        # rounds in 6 steps, not a chain of 63 additions into the largest value.
        pair = combine(i.op, i.dtype, f"{c}[ember_c]", f"{c}[ember_c + ember_h]")
        return [f"for (int64_t ember_c = {count}; ember_c < {CHUNKS}; ++ember_c) {c}[ember_c] = "
                f"{_identity(i.op, i.dtype)};",
                f"for (int ember_h = {CHUNKS // 2}; ember_h > 0; ember_h /= 2) "
                f"for (int ember_c = 0; ember_c < ember_h; ++ember_c) {c}[ember_c] = {pair};",
                f"const {t} {i.out} = {c}[0];"]


def outer_contiguous(kernel: Kernel, layout: PlanLayout) -> bool:
    """Do the loops' accesses run contiguously along the last i-dim rather than the last r-dim? Then lanes are
    i-points (`KernelPrinter._outer_reduction`), not r-steps. An access that does not move with the i-dim (layer
    norm's per-row mean in its weight gradient, a column sum over rows) is the same for every i-point lane, one value
    put in every lane: it does not count for r-steps. (Counting it made layer norm's weight gradient walk each
    column down 2048 rows, 4 KB apart: 200 ms where the column-lane kernel takes 2.) The address is the one the
    printer writes, simplified over the loops' ranges: merged dims index as `64*floor(i/64) + Mod(i, 64)`, which
    is `i` (scored unsimplified, a ViT's attention bias gradients summed each column in gathered lanes)."""
    outer, rdims = kernel.outer_dims, kernel.reduce_dims
    if not outer:
        return False
    iv, rv = sympy.Symbol(outer[-1].var, integer=True), sympy.Symbol(rdims[-1].var, integer=True)
    ranges = Ranges({d.var: d.size for d in kernel.dims}, layout.lowers)
    score = 0
    for stmt in kernel.body:
        for i in (stmt.body if isinstance(stmt, Loop) else ()):
            if i.op not in (Op.LOAD, Op.STORE):
                continue
            b = layout.buffers[i.buffer]
            flat = sympy.expand(flat_index(i.index, b.stride, 0, ranges))
            score += int(flat.coeff(iv) == 1) - int(flat.coeff(rv) == 1 and iv in flat.free_symbols)
    return score > 0
