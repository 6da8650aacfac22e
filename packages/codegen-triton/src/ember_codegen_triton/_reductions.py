"""Reductions in Triton: a row in one block (`TritonReduction.full`, the persistent form) or looped over in steps of
RBLOCK, each reduction then kept in `[XBLOCK, RBLOCK]` lanes initialised before the loop (`init`), updated by each
step (`update`) and reduced along the row after it (`final`), which defines the result as the persistent form does:
`[XBLOCK, 1]`, in its dtype.

What each reduction computes is ember-lowering's `REDUCTION_SEMANTICS`: lanes start from its identity (printed by
`identity`), a masked-off element counts as the identity, lanes take values by its combine op (printed as
`expression` prints that pointwise op), argmax's by its `better` comparison, and its NaN rule decides what rides
along. What is Triton's own:

- a row of lanes or of masked values reduces along axis 1 by `tl.sum`, `tl.reduce` with `_ember_mul`, `tl.max` or
  `tl.min` (`_ALONG_ROW`, by the op combining two of them);
- truth values (any, all) are int32 lanes of 0 and 1: OR is their max, AND their min (`_TRUTH_LANES`);
- max and min (NaN propagates) keep a NaN flag, their lanes the extreme of the rest; argmax/argmin keep the best
  value and its first index per lane (NaN counts as extreme) and take the smallest index among the lanes holding
  the row's best; Welford keeps count, mean and m2 per lane and merges the lanes with Chan's formula, and in one
  block takes the mean, then the squared deviations from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from ember_core import to_dtype
from ember_lowering import NAN_EXTREME, NAN_PROPAGATES, REDUCTION_SEMANTICS, Instr, Op
from ember_lowering.codegen import CannotPrint, unwrapped

from ._rules import FLOAT_DTYPES, TL_DTYPE, cast, expression, identity

if TYPE_CHECKING:
    from ._kernel_printer import TritonKernelPrinter

LANES = "[XBLOCK, RBLOCK]"
# the reduction of a row (of lanes, or of masked values) along axis 1, by the op that combines two of its elements
_ALONG_ROW = {Op.ADD: "tl.sum({}, 1)", Op.MUL: "tl.reduce({}, 1, _ember_mul)", Op.MAXIMUM: "tl.max({}, 1)",
              Op.MINIMUM: "tl.min({}, 1)"}
_TRUTH_LANES = {Op.OR: Op.MAXIMUM, Op.AND: Op.MINIMUM}
_EXTREME = {Op.GT: Op.MAXIMUM, Op.LT: Op.MINIMUM}  # argmax's best value is the row's max


def _along(op: Op, row: str) -> str:
    return _ALONG_ROW[op].format(row) + "[:, None]"


def _row_any(cond: str) -> str:
    """Does `cond` hold anywhere in the row's unmasked elements? `[XBLOCK, 1]` bool."""
    return _along(Op.MAXIMUM, f"tl.where(xrmask, {cond}, 0).to(tl.int32)") + " > 0"


class TritonReduction:
    """The Triton lines of one reduce instruction of a kernel `printer` prints."""

    def __init__(self, i: Instr, printer: TritonKernelPrinter):
        if i.op not in REDUCTION_SEMANTICS:
            raise CannotPrint(f"no Triton reduction for {i.op.value}")
        self.i, self.p, self.meaning = i, printer, REDUCTION_SEMANTICS[i.op]
        self.a = f"{i.out}_acc"
        self.t = TL_DTYPE[i.dtype]

    @property
    def src(self) -> str:
        """The dtype of the (first) operand, known before the walk reaches the instruction that defines it: a looped
        row's lanes are declared (`init`) before the loop that computes their values."""
        return self.p.value_dtypes[self.i.srcs[0]]

    # ------------------------------------------------------------------ one-value states

    @property
    def lane_op(self) -> Op:
        return _TRUTH_LANES.get(self.meaning.combine, self.meaning.combine)

    @property
    def fill(self) -> str:
        """The identity: where a lane starts, what a masked-off element counts as."""
        return identity(self.meaning.identity(self.i.dtype))

    @property
    def flags_nan(self) -> bool:
        """Does a NaN flag ride along (NaN propagates, and the values can be NaN)?"""
        return self.meaning.nan == NAN_PROPAGATES and self.i.dtype in FLOAT_DTYPES

    def value(self) -> str:
        """The reduced operand in the reduction's dtype."""
        return cast(self.i.srcs[0], self.src, self.i.dtype)

    def _masked(self) -> str:
        """The step's values as the lanes take them: the identity where the mask is off; truth values as int32
        lanes, sums and products converted back to their dtype (where's Python 0 or 1 would widen narrow ints)."""
        if self.meaning.truth:
            return f"tl.where(xrmask, {self.i.srcs[0]} != 0, {self.fill}).to(tl.int32)"
        masked = f"tl.where(xrmask, {self.value()}, {self.fill})"
        return f"{masked}.to({self.t})" if self.lane_op in (Op.ADD, Op.MUL) else masked

    def _result(self, row: str) -> str:
        return _along(self.lane_op, row) + (" > 0" if self.meaning.truth else "")

    def _combine(self, acc: str, x: str) -> str:
        """acc after taking x, as `expression` prints the lanes' combine op. The extreme of NaN-flagged lanes is
        Triton's NaN-blind one (`tl.maximum` without `propagate_nan`): the flag carries the NaN."""
        op, dtype = self.lane_op, "int32" if self.meaning.truth else self.i.dtype
        if self.flags_nan:
            return f"tl.{op.value}({acc}, {x})"
        return unwrapped(expression(op, [acc, x], [dtype, dtype], dtype))

    # ------------------------------------------------------------------ the persistent form

    def full(self) -> list[str]:
        """The reduction of a row held in one block."""
        if self.meaning.better is not None:
            return self._arg_full()
        if self.meaning.combine is None:
            return self._moments_full()
        out, v = self.i.out, self.value()
        lines = [f"{out} = {self._result(self._masked())}"]
        if self.flags_nan:
            lines += [f"{out}_nan = {_row_any(f'{v} != {v}')}", f"{out} = tl.where({out}_nan, float('nan'), {out})"]
        return lines

    def _moments_full(self) -> list[str]:
        """A row's mean and m2 by the corrected two-pass algorithm, as `split-moments` gives the C++ codegen: the
        first pass's mean m, then the sums of d = x - m and of d * d; s1 = sum(d) takes m's rounding out of both
        (mean = m + s1 / n, m2 = s2 - s1 * s1 / n, never below 0). A row with an infinity then has a NaN mean, as
        eager's Welford gives (m is inf, so d holds -inf and NaN), where sum / n alone said inf. The correction is
        capped at the dtype's largest value: where d * d overflows, s1 (m's rounding, ~1e31 for a row holding
        3e38) overflows when squared too, and the variance was inf - inf = NaN where eager's is inf."""
        (mean, m2), v, n = self.i.outs, self.value(), self.p.rsize
        top = torch.finfo(to_dtype(self.i.dtype)).max  # s1 holds m's rounding: its square may overflow (a row of 3e38)
        return [f"{mean}_m = tl.sum(tl.where(xrmask, {v}, 0), 1)[:, None] / {n}",
                f"{m2}_d = tl.where(xrmask, {v} - {mean}_m, 0)",
                f"{m2}_s1 = tl.sum({m2}_d, 1)[:, None]",
                f"{mean} = {mean}_m + {m2}_s1 / {n}",
                f"{m2} = tl.sum({m2}_d * {m2}_d, 1)[:, None] - tl.minimum({m2}_s1 * ({m2}_s1 / {n}), {top!r})",
                f"{m2} = tl.where({m2} < 0, 0.0, {m2})"]  # not tl.maximum: it would turn a NaN into 0

    # ------------------------------------------------------------------ the looped form

    def init(self) -> list[str]:
        a, t = self.a, self.t
        if self.meaning.better is not None:
            value, index = self.meaning.initial(self.src)
            return [f"{a}_best = tl.full({LANES}, {identity(value)}, {TL_DTYPE[self.src]})",
                    f"{a}_idx = tl.full({LANES}, {identity(index)}, tl.int64)"]
        if self.meaning.combine is None:
            return [f"{a}_{part} = tl.zeros({LANES}, {t})" for part in ("n", "mean", "m2")]
        if self.lane_op is Op.ADD:
            lines = [f"{a} = tl.zeros({LANES}, {t})"]
        else:
            lines = [f"{a} = tl.full({LANES}, {self.fill}, {'tl.int32' if self.meaning.truth else t})"]
        if self.meaning.nan == NAN_PROPAGATES:
            lines.append(f"{a}_nan = tl.zeros({LANES}, tl.int32)")
        return lines

    def update(self) -> list[str]:
        a, v = self.a, self.value()
        if self.meaning.better is not None:
            return self._arg_update()
        if self.meaning.combine is None:
            t = self.t
            return [f"{a}_n = {a}_n + xrmask.to({t})",
                    f"{a}_d = tl.where(xrmask, {v} - {a}_mean, 0)",
                    f"{a}_mean = {a}_mean + tl.where(xrmask, {a}_d / tl.maximum({a}_n, 1), 0)",
                    f"{a}_m2 = {a}_m2 + tl.where(xrmask, {a}_d * ({v} - {a}_mean), 0)"]
        lines = [f"{a} = {self._combine(a, self._masked())}"]
        if self.flags_nan:
            lines.append(f"{a}_nan = tl.maximum({a}_nan, (xrmask & ({v} != {v})).to(tl.int32))")
        return lines

    def final(self) -> list[str]:
        a, out = self.a, self.i.out
        if self.meaning.better is not None:
            return self._arg_final()
        if self.meaning.combine is None:
            mean, m2 = self.i.outs
            return [f"{a}_total = tl.sum({a}_n, 1)[:, None]",
                    f"{mean} = tl.sum({a}_mean * {a}_n, 1)[:, None] / {a}_total",
                    f"{a}_gap = {a}_mean - {mean}",
                    f"{m2} = tl.sum({a}_m2 + {a}_n * {a}_gap * {a}_gap, 1)[:, None]"]
        lines = [f"{out} = {self._result(a)}"]
        if self.flags_nan:
            lines.append(f"{out} = tl.where({_along(Op.MAXIMUM, f'{a}_nan')} > 0, float('nan'), {out})")
        return lines

    # ------------------------------------------------------------------ argmax / argmin

    @property
    def _extreme(self) -> Op:
        return _EXTREME[self.meaning.better]

    @property
    def _arg_fills(self) -> tuple[str, str]:
        """The identity state's value and index: what no value loses to, and an index past every real one."""
        value, index = self.meaning.initial(self.src)
        return identity(value), identity(index)

    @property
    def _nan_extreme(self) -> bool:
        return self.meaning.nan == NAN_EXTREME and self.src in FLOAT_DTYPES

    def _arg_full(self) -> list[str]:
        """The smallest index operand among the elements equal to the row's best; NaN counts as extreme."""
        i, (value, index) = self.i, self.i.srcs
        fill, big = self._arg_fills
        best, hit = f"{i.out}_best", f"{i.out}_hit"
        best_of_row = _along(self._extreme, f"tl.where(xrmask, {value}, {fill})")
        lines = [f"{best} = {best_of_row}", f"{hit} = {value} == {best}"]
        if self._nan_extreme:
            lines += [f"{i.out}_nan = {_row_any(f'{value} != {value}')}",
                      f"{hit} = tl.where({i.out}_nan, {value} != {value}, {hit})"]
        first = _along(Op.MINIMUM, f"tl.where(xrmask & {hit}, {index}.to(tl.int64), {big})")
        return lines + [f"{i.out} = {first}.to({self.t})"]

    def _arg_update(self) -> list[str]:
        a, (value, index) = self.a, self.i.srcs
        big = self._arg_fills[1]
        better = expression(self.meaning.better, [value, f"{a}_best"], [self.src] * 2, "bool")
        if self._nan_extreme:  # a NaN beats any number
            nan = expression(Op.ISNAN, [value], [self.src], "bool")
            settled = expression(Op.EQ, [f"{a}_best"] * 2, [self.src] * 2, "bool")  # the best is no NaN
            better += f" | {expression(Op.AND, [nan, settled], ['bool'] * 2, 'bool')}"
        return [f"{a}_take = xrmask & (({a}_idx == {big}) | {better})",
                f"{a}_best = tl.where({a}_take, {value}, {a}_best)",
                f"{a}_idx = tl.where({a}_take, {index}.to(tl.int64), {a}_idx)"]

    def _arg_final(self) -> list[str]:
        a, out = self.a, self.i.out
        fill, big = self._arg_fills
        seen = f"{a}_idx != {big}"
        best = _along(self._extreme, f"tl.where({seen}, {a}_best, {fill})")
        lines = [f"{a}_top = {best}", f"{a}_hit = ({seen}) & ({a}_best == {a}_top)"]
        if self._nan_extreme:
            best = _along(self._extreme, f"tl.where(({seen}) & ~{a}_isnan, {a}_best, {fill})")
            lines = [f"{a}_isnan = ({seen}) & ({a}_best != {a}_best)", f"{a}_top = {best}",
                     f"{a}_hit = tl.where({_along(Op.MAXIMUM, f'{a}_isnan.to(tl.int32)')} > 0, {a}_isnan, "
                     f"({seen}) & ({a}_best == {a}_top))"]
        return lines + [f"{out} = {_along(Op.MINIMUM, f'tl.where({a}_hit, {a}_idx, {big})')}.to({self.t})"]
