"""Index and size expressions (sympy over loop vars, graph symbols and SSA values) as source text.

`IndexPrinter` walks an expression once and spells it in Python, which every generated wrapper needs; a codegen
subclasses it for its kernel language (C++ spells floor division `ember_ifloor`, Triton its own way) by setting
the names of its division and extremum functions, and overriding `integer` where literals need a suffix. The
printer also knows lower bounds (`lower`, `nonneg`, `positive`), so that a language's plain operators are used
where the operands are provably nonnegative: loop vars and sizes are. Python's own `//` and `%` already have the
loop IR's meaning (floor division, remainder with the divisor's sign).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import sympy
from ember_core import as_sympy

from ._errors import CannotPrint

_ROUNDINGS = ("ToFloat", "TruncToInt", "FloorToInt", "CeilToInt")  # functions of a size of a float (schema 1.2)


class IndexPrinter:
    """Prints expressions as Python; `names` maps each symbol name to its spelling, `lower` gives a symbol's known
    lower bound (None: unknown)."""

    def __init__(self, names: Mapping[str, str], lower: Callable[[str], int | None] = lambda name: None):
        self.names, self.lower_of = names, lower
        self.real = 0  # > 0 while printing the argument of a rounding: IntTrueDiv is a true division there

    # ------------------------------------------------------------------ facts

    def lower(self, e: sympy.Expr) -> int | None:
        """A lower bound of e over every value of its symbols, or None."""
        if e.is_Integer:
            return int(e)
        if e.is_Float:
            return math.floor(float(e))
        if e.is_Symbol:
            return self.lower_of(e.name)
        if type(e).__name__ in _ROUNDINGS:  # x >= n (an int) gives trunc(x), floor(x), ceil(x) >= n
            return self.lower(e.args[0])
        args = [self.lower(a) for a in e.args]
        if isinstance(e, sympy.Add):
            return None if None in args else sum(args)
        if isinstance(e, sympy.Mul):
            if None in args or any(a < 0 for a in args):
                return None
            out = 1
            for a in args:
                out *= a
            return out
        if isinstance(e, sympy.Max):
            known = [a for a in args if a is not None]
            return max(known) if known else None
        if isinstance(e, sympy.Min):
            return None if None in args else min(args)
        if isinstance(e, sympy.floor):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return 0 if self.nonneg(num) and self.positive(den) else None
        if isinstance(e, sympy.Mod) or type(e).__name__ == "ModularIndexing":
            return 0 if self.positive(e.args[-1]) else None
        if type(e).__name__ in ("FloorDiv", "CleanDiv"):
            return 0 if self.nonneg(e.args[0]) and self.positive(e.args[1]) else None
        return None

    def nonneg(self, e: sympy.Expr) -> bool:
        low = self.lower(e)
        return low is not None and low >= 0

    def positive(self, e: sympy.Expr) -> bool:
        low = self.lower(e)
        return low is not None and low >= 1

    # ------------------------------------------------------------------ printing

    def __call__(self, e: sympy.Expr) -> str:
        return self.print(as_sympy(e))

    def print(self, e: sympy.Expr) -> str:
        if e.is_Integer:
            return self.integer(int(e))
        if e.is_Float:
            return self.float_literal(float(e))
        if e.is_Symbol:
            if e.name not in self.names:
                raise CannotPrint(f"unknown symbol {e.name!r} in {e}")
            return self.names[e.name]
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self.print(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            num, den = sympy.fraction(e)
            if den != 1:
                raise CannotPrint(f"index expression {e} is not an integer")
            return "(" + " * ".join(self.print(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and e.args[1].is_Integer and int(e.args[1]) >= 0:
            return "(" + " * ".join([self.print(e.args[0])] * int(e.args[1]) or ["1"]) + ")"
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if isinstance(e, sympy.floor):
                return self.floordiv(num, den)
            return f"(-{self.floordiv(-num, den)})"
        if isinstance(e, sympy.Mod):
            return self.mod(*e.args)
        if isinstance(e, (sympy.Max, sympy.Min)):
            return self.extremum(e)
        name = type(e).__name__
        if name in ("IntTrueDiv", "FloatTrueDiv") and self.real:  # `math.ceil(n / 2)`: a double division
            return f"({self.to_float(self.print(e.args[0]))} / {self.to_float(self.print(e.args[1]))})"
        if name in ("FloorDiv", "CleanDiv", "IntTrueDiv"):
            return self.floordiv(*e.args)
        if name == "ModularIndexing":
            return self.mod(sympy.floor(e.args[0] / e.args[1]), e.args[2])
        if name in _ROUNDINGS:  # a size of a fractional scale: `TruncToInt(1.7*ToFloat(s0))`, double arithmetic
            self.real += 1
            try:
                inner = self.print(e.args[0])
            finally:
                self.real -= 1
            spell = {"ToFloat": self.to_float, "TruncToInt": self.trunc_to_int, "FloorToInt": self.floor_to_int,
                     "CeilToInt": self.ceil_to_int}[name]
            return spell(inner)
        raise CannotPrint(f"cannot print index expression {e} ({name})")

    # ------------------------------------------------------------------ leaves (set or override per language)

    # How the kernel language spells integer division and extrema: `div_op` is its division operator, right where
    # both operands are provably nonnegative; elsewhere `floordiv_fn` / `mod_fn` (functions with Python's meaning,
    # which the language's prelude defines) are called, unless None: then the operators already mean what Python's do.
    div_op = "//"
    floordiv_fn: str | None = None
    mod_fn: str | None = None
    max_fn, min_fn = "max", "min"

    def integer(self, n: int) -> str:
        return str(n)

    # A float of a size (`F.interpolate`'s fractional scale: `TruncToInt(1.7*ToFloat(s0))`) is a double of the
    # shape env, which the kernel computes with in double precision as Python did: `float_literal` spells the exact
    # double (a number the compiler formats, never text from a file), `to_float` and `trunc_to_int` the conversions,
    # `floor_fn` / `ceil_fn` the language's rounding of a double to a whole double (None: Python's `// 1`, exact).
    floor_fn: str | None = None
    ceil_fn: str | None = None

    def float_literal(self, x: float) -> str:
        return repr(x)

    def to_float(self, a: str) -> str:
        return f"float({a})"

    def trunc_to_int(self, a: str) -> str:
        return f"int({a})"

    def floor_to_int(self, a: str) -> str:
        return self.trunc_to_int(f"{self.floor_fn}({a})" if self.floor_fn else f"(({a}) // 1)")

    def ceil_to_int(self, a: str) -> str:
        return self.trunc_to_int(f"{self.ceil_fn}({a})" if self.ceil_fn else f"(-((-({a})) // 1))")

    def integers(self, *operands: sympy.Expr) -> list[str]:
        """Operands of an integer operation: a true division inside them is a floor division again."""
        real, self.real = self.real, 0
        try:
            return [self.print(x) for x in operands]
        finally:
            self.real = real

    def floordiv(self, num: sympy.Expr, den: sympy.Expr) -> str:
        a, b = self.integers(num, den)
        if self.floordiv_fn is None or self.nonneg(num) and self.positive(den):
            return f"({a} {self.div_op} {b})"
        return f"{self.floordiv_fn}({a}, {b})"

    def mod(self, num: sympy.Expr, den: sympy.Expr) -> str:
        a, b = self.integers(num, den)
        if self.mod_fn is None or self.nonneg(num) and self.positive(den):
            return f"({a} % {b})"
        return f"{self.mod_fn}({a}, {b})"

    def extremum(self, e: sympy.Expr) -> str:
        return self.fold(self.max_fn if isinstance(e, sympy.Max) else self.min_fn, [self.print(a) for a in e.args])

    @staticmethod
    def fold(fn: str, args: list[str]) -> str:
        """`fn(fn(a, b), c)`: a two-argument function over several arguments."""
        out = args[0]
        for a in args[1:]:
            out = f"{fn}({out}, {a})"
        return out


def unwrapped(expr: str) -> str:
    """`expr` without the parentheses around all of it, if it has them: a codegen's rule for an op parenthesizes
    its expression (`(a + b)`), which a statement of its own (`acc = a + b`, `return a + b;`) needs no more."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for k, c in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0 and k < len(expr) - 1:
            return expr  # the first parenthesis closes before the end: `(a) + (b)`
    return expr[1:-1]
