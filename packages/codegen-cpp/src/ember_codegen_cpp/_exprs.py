"""Index and size expressions in C++, with the loop IR's Python integer semantics: `floor` is floor division and
`Mod` takes the divisor's sign. C++ spells that `ember_ifloor`/`ember_imod`, or plain `/` and `%` where the
operands are provably nonnegative (loop vars and sizes are), which keeps inner loops simple enough to vectorize.
The walk over the expression and the bounds are the shared `IndexPrinter`'s; only the leaves are C++ here.
"""

from __future__ import annotations

from ember_lowering.codegen import IndexPrinter

_INT64_MIN = -(1 << 63)


class ExprPrinter(IndexPrinter):
    """C++ spelling of index expressions (int64 literals, floor division and modulo that match Python's)."""

    div_op, floordiv_fn, mod_fn = "/", "ember_ifloor", "ember_imod"
    max_fn, min_fn = "ember_imax", "ember_imin"
    floor_fn, ceil_fn = "__builtin_floor", "__builtin_ceil"

    def integer(self, n: int) -> str:
        if n == _INT64_MIN:
            return "(-9223372036854775807LL - 1)"
        return f"{n}LL" if not -(1 << 31) <= n < (1 << 31) else str(n)

    def float_literal(self, x: float) -> str:
        return x.hex()  # a C++17 hexadecimal literal: the exact double, no decimal rounding in between

    def to_float(self, a: str) -> str:
        return f"static_cast<double>({a})"

    def trunc_to_int(self, a: str) -> str:
        return f"static_cast<int64_t>({a})"  # toward zero, as Python's int() of a float
