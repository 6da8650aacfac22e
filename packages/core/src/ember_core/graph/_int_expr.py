"""`IntExpr`: an integer expression text compiled to a function of integer bindings, for sizes at run time.

The text is read by `_expr.py`'s grammar into its tree; this fold turns the tree into nested closures over Python
ints, with division exact (fractions), so the value agrees with sympy's, and with the same limits on powers (and
products) that keep a hostile text from running for ever. A float (a literal, `ToFloat`) is a double, so that
`TruncToInt(1.7*ToFloat(s0))` rounds as the Python arithmetic of `F.interpolate` that made it does.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from ._expr import BINARY, MAX_POWER_BITS, SIZE_FUNCTIONS, ExprError, ExprTree, children, parse_tree


def _ceil_div(a: Any, b: Any) -> int:
    return -(-a // b)


def _exact_div(a: Any, b: Any) -> Any:
    """Exact on integers and fractions; a double where either side is one, as Python (and the shape env) divides."""
    if isinstance(a, float) or isinstance(b, float):
        return float(a) / float(b)
    return Fraction(a) / Fraction(b)


def _checked_power(text: str) -> Callable[[Any, Any], Any]:
    """`a ** b` on exact numbers, refused when the exponent is not an integer or the result would be huge."""
    def power(base: Any, exponent: Any) -> Any:
        if Fraction(exponent).denominator != 1:
            raise ExprError(text, f"{base}**{exponent} has a non-integer exponent")
        exponent = int(exponent)
        if abs(exponent) * max(abs(int(base)), 2).bit_length() > MAX_POWER_BITS:
            raise ExprError(text, f"{base}**{exponent} is larger than {MAX_POWER_BITS} bits")
        return Fraction(base) ** exponent if exponent < 0 else base ** exponent
    return power


# Integer meanings of the functions a run-time size may use (division exact, on fractions); anything else is
# evaluated through sympy.
_INT_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "FloorDiv": operator.floordiv, "CleanDiv": operator.floordiv, "IntTrueDiv": _exact_div,
    "FloatTrueDiv": _exact_div, "CeilDiv": _ceil_div, "Mod": operator.mod, "PythonMod": operator.mod,
    "ModularIndexing": lambda x, d, m: (x // d) % m, "Max": max, "Min": min, "Abs": abs,
    "floor": math.floor, "ceiling": math.ceil, "FloorToInt": math.floor, "CeilToInt": math.ceil,
    "TruncToInt": math.trunc, "RoundToInt": round, "ToFloat": float, "Identity": lambda x: x,
    "BitwiseFn_bitwise_and": operator.and_, "BitwiseFn_bitwise_or": operator.or_,
    "BitwiseFn_bitwise_xor": operator.xor,
}


class IntExpr:
    """An expression text compiled to a function of integer bindings: `IntExpr("2*s0 + 1")({"s0": 3}) == 7`.
    Division is exact (fractions), so `floor(s0/2)` and `(s0//2)` agree with sympy. `names` lists the symbols."""

    __slots__ = ("text", "names", "_run")

    def __init__(self, text: str):
        tree = parse_tree(text, SIZE_FUNCTIONS)
        self.text = text
        self.names = tuple(sorted(_names(tree)))
        self._run = _int_fold(tree, text)

    def __call__(self, env: Mapping[str, int]) -> int:
        try:
            value = self._run(env)
        except (ArithmeticError, ValueError) as e:  # a division by zero, a float past a double rounded to an int
            if isinstance(e, ExprError):
                raise
            raise ExprError(self.text, f"cannot be evaluated at {dict(env)}: {e}"[:300]) from None
        if isinstance(value, (Fraction, float)):
            if not (isinstance(value, Fraction) and value.denominator == 1 or isinstance(value, float)
                    and value.is_integer()):
                raise ExprError(self.text, f"evaluates to the non-integer {value}")
        return int(value)


def _names(tree: ExprTree) -> set[str]:
    if tree[0] == "name":
        return {tree[1]}
    return set().union(*(_names(c) for c in children(tree)))


def _int_fold(tree: ExprTree, text: str) -> Callable[[Mapping[str, int]], Any]:
    kind = tree[0]
    if kind in ("int", "float"):
        n = tree[1]
        return lambda env: n
    if kind == "name":
        name = tree[1]
        return lambda env: env[name]
    if kind == "neg":
        inner = _int_fold(tree[1], text)
        return lambda env: -inner(env)
    if kind == "bin":
        return _int_binary(tree[1], _int_fold(tree[2], text), _int_fold(tree[3], text), text)
    fn = _checked_power(text) if tree[1] == "PowByNatural" else _INT_FUNCTIONS.get(tree[1])
    if fn is None:
        raise ExprError(text, f"function {tree[1]!r} cannot be evaluated on integers")
    args = [_int_fold(a, text) for a in tree[2]]
    return lambda env: fn(*(a(env) for a in args))


def _int_binary(op: str, a: Callable, b: Callable, text: str) -> Callable[[Mapping[str, int]], Any]:
    fn = _exact_div if op == "/" else _checked_power(text) if op == "**" else BINARY[op]
    if op not in ("*", "**"):
        return lambda env: fn(a(env), b(env))

    def grown(env: Mapping[str, int]) -> Any:  # a product of many large factors is refused as a power is
        value = fn(a(env), b(env))
        if _bits(value) > MAX_POWER_BITS:
            raise ExprError(text, f"a product larger than {MAX_POWER_BITS} bits")
        return value
    return grown


def _bits(value: Any) -> int:
    if isinstance(value, int):
        return value.bit_length()
    value = Fraction(value)
    return max(abs(value.numerator), value.denominator).bit_length()
