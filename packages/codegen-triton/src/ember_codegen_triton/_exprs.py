"""Index expressions in Triton: the shared `IndexPrinter`'s walk with Triton leaves. Floor division and modulo keep
the loop IR's Python meaning: plain `//` and `%` where both operands are provably nonnegative (loop vars and sizes
are), where every rounding agrees, else the prelude's `_ember_floordiv` / `_ember_mod`."""

from __future__ import annotations

import sympy
from ember_lowering.codegen import IndexPrinter


class TritonIndexPrinter(IndexPrinter):
    def floordiv(self, num: sympy.Expr, den: sympy.Expr) -> str:
        a, b = self.print(num), self.print(den)
        if self.nonneg(num) and self.positive(den):
            return f"({a} // {b})"
        return f"_ember_floordiv({a}, {b})"

    def mod(self, num: sympy.Expr, den: sympy.Expr) -> str:
        a, b = self.print(num), self.print(den)
        if self.nonneg(num) and self.positive(den):
            return f"({a} % {b})"
        return f"_ember_mod({a}, {b})"

    def extremum(self, e: sympy.Expr) -> str:
        return self.fold("tl.maximum" if isinstance(e, sympy.Max) else "tl.minimum", [self.print(a) for a in e.args])
