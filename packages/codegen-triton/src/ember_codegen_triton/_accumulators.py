"""Reductions of a looped row: each reduction of a `Loop` keeps `[XBLOCK, RBLOCK]` lanes, initialised before the
loop over the row (`init`), updated by each step of RBLOCK elements (`update`) and reduced across lanes after it
(`final`), which defines the reduction's result as the persistent form does: `[XBLOCK, 1]`, in its dtype.

Max and min keep a NaN flag per lane (a NaN anywhere makes the result NaN, as torch's amax); argmax/argmin keep
the best value and its first index per lane (NaN counts as extreme) and take the smallest index among the lanes
holding the row's best; Welford keeps count, mean and m2 per lane and merges the lanes with Chan's formula.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember_lowering import Instr, Op

from ._rules import FLOAT_DTYPES, TL_DTYPE, cast, identity

if TYPE_CHECKING:
    from ._kernel_printer import TritonKernelPrinter

LANES = "[XBLOCK, RBLOCK]"
_BIG = "9223372036854775807"


class Accumulator:
    def __init__(self, i: Instr, printer: TritonKernelPrinter):
        self.i, self.p = i, printer
        self.a = f"{i.out}_acc"
        self.t = TL_DTYPE[i.dtype]

    def value(self) -> str:
        """The reduced operand in the reduction's dtype."""
        src = self.i.srcs[0]
        return cast(src, self.p.dtypes.get(src, self.i.dtype), self.i.dtype)

    # ------------------------------------------------------------------ the three parts

    def init(self) -> list[str]:
        op, a, t = self.i.op, self.a, self.t
        if op is Op.REDUCE_SUM:
            return [f"{a} = tl.zeros({LANES}, {t})"]
        if op is Op.REDUCE_PROD:
            return [f"{a} = tl.full({LANES}, 1, {t})"]
        if op in (Op.REDUCE_ANY, Op.REDUCE_ALL):
            return [f"{a} = tl.full({LANES}, {0 if op is Op.REDUCE_ANY else 1}, tl.int32)"]
        if op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
            return [f"{a} = tl.full({LANES}, {identity(self.i.dtype, op is Op.REDUCE_MAX)}, {t})",
                    f"{a}_nan = tl.zeros({LANES}, tl.int32)"]
        if op is Op.REDUCE_WELFORD:
            return [f"{a}_{part} = tl.zeros({LANES}, {t})" for part in ("n", "mean", "m2")]
        value_t = TL_DTYPE[self.p.dtypes.get(self.i.srcs[0], "float32")]
        fill = identity(self.p.dtypes.get(self.i.srcs[0], "float32"), op is Op.REDUCE_ARGMAX)
        return [f"{a}_best = tl.full({LANES}, {fill}, {value_t})", f"{a}_idx = tl.full({LANES}, {_BIG}, tl.int64)"]

    def update(self) -> list[str]:
        op, a, t, v = self.i.op, self.a, self.t, self.value()
        if op is Op.REDUCE_SUM:
            return [f"{a} = {a} + tl.where(xrmask, {v}, 0).to({t})"]
        if op is Op.REDUCE_PROD:
            return [f"{a} = {a} * tl.where(xrmask, {v}, 1).to({t})"]
        if op in (Op.REDUCE_ANY, Op.REDUCE_ALL):
            fn, fill = ("tl.maximum", 0) if op is Op.REDUCE_ANY else ("tl.minimum", 1)
            return [f"{a} = {fn}({a}, tl.where(xrmask, {self.i.srcs[0]} != 0, {fill}).to(tl.int32))"]
        if op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
            fn = "tl.maximum" if op is Op.REDUCE_MAX else "tl.minimum"
            lines = [f"{a} = {fn}({a}, tl.where(xrmask, {v}, {identity(self.i.dtype, op is Op.REDUCE_MAX)}))"]
            if self.i.dtype in FLOAT_DTYPES:
                lines.append(f"{a}_nan = tl.maximum({a}_nan, (xrmask & ({v} != {v})).to(tl.int32))")
            return lines
        if op is Op.REDUCE_WELFORD:
            return [f"{a}_n = {a}_n + xrmask.to({t})",
                    f"{a}_d = tl.where(xrmask, {v} - {a}_mean, 0)",
                    f"{a}_mean = {a}_mean + tl.where(xrmask, {a}_d / tl.maximum({a}_n, 1), 0)",
                    f"{a}_m2 = {a}_m2 + tl.where(xrmask, {a}_d * ({v} - {a}_mean), 0)"]
        return self._arg_update()

    def final(self) -> list[str]:
        op, a, out = self.i.op, self.a, self.i.out
        if op is Op.REDUCE_SUM:
            return [f"{out} = tl.sum({a}, 1)[:, None]"]
        if op is Op.REDUCE_PROD:
            return [f"{out} = tl.reduce({a}, 1, _ember_mul)[:, None]"]
        if op in (Op.REDUCE_ANY, Op.REDUCE_ALL):
            return [f"{out} = {'tl.max' if op is Op.REDUCE_ANY else 'tl.min'}({a}, 1)[:, None] > 0"]
        if op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
            lines = [f"{out} = {'tl.max' if op is Op.REDUCE_MAX else 'tl.min'}({a}, 1)[:, None]"]
            if self.i.dtype in FLOAT_DTYPES:
                lines.append(f"{out} = tl.where(tl.max({a}_nan, 1)[:, None] > 0, float('nan'), {out})")
            return lines
        if op is Op.REDUCE_WELFORD:
            mean, m2 = self.i.outs
            return [f"{a}_total = tl.sum({a}_n, 1)[:, None]",
                    f"{mean} = tl.sum({a}_mean * {a}_n, 1)[:, None] / {a}_total",
                    f"{a}_gap = {a}_mean - {mean}",
                    f"{m2} = tl.sum({a}_m2 + {a}_n * {a}_gap * {a}_gap, 1)[:, None]"]
        return self._arg_final()

    # ------------------------------------------------------------------ argmax / argmin

    def _arg_update(self) -> list[str]:
        a, (value, index) = self.a, self.i.srcs
        better = ">" if self.i.op is Op.REDUCE_ARGMAX else "<"
        nan = f" | (({value} != {value}) & ({a}_best == {a}_best))" if self.p.dtypes.get(value) in FLOAT_DTYPES else ""
        return [f"{a}_take = xrmask & (({a}_idx == {_BIG}) | ({value} {better} {a}_best){nan})",
                f"{a}_best = tl.where({a}_take, {value}, {a}_best)",
                f"{a}_idx = tl.where({a}_take, {index}.to(tl.int64), {a}_idx)"]

    def _arg_final(self) -> list[str]:
        a, out = self.a, self.i.out
        src = self.p.dtypes.get(self.i.srcs[0], "float32")
        is_max = self.i.op is Op.REDUCE_ARGMAX
        fn, fill = ("tl.max" if is_max else "tl.min"), identity(src, is_max)
        seen = f"{a}_idx != {_BIG}"
        lines = [f"{a}_top = {fn}(tl.where({seen}, {a}_best, {fill}), 1)[:, None]",
                 f"{a}_hit = ({seen}) & ({a}_best == {a}_top)"]
        if src in FLOAT_DTYPES:
            lines = [f"{a}_isnan = ({seen}) & ({a}_best != {a}_best)",
                     f"{a}_top = {fn}(tl.where(({seen}) & ~{a}_isnan, {a}_best, {fill}), 1)[:, None]",
                     f"{a}_hit = tl.where(tl.max({a}_isnan.to(tl.int32), 1)[:, None] > 0, {a}_isnan, "
                     f"({seen}) & ({a}_best == {a}_top))"]
        return lines + [f"{out} = tl.min(tl.where({a}_hit, {a}_idx, {_BIG}), 1)[:, None].to({TL_DTYPE[self.i.dtype]})"]
