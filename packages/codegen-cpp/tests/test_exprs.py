"""Index expressions as C++: Python's floor division and remainder, plain operators when provably nonnegative."""

from __future__ import annotations

import sympy
from ember_codegen_cpp._exprs import ExprPrinter

i0, s0, t3 = (sympy.Symbol(n, integer=True) for n in ("i0", "s0", "t3"))
NAMES = {"i0": "i0", "s0": "S_s0", "t3": "t3"}


def printer() -> ExprPrinter:
    return ExprPrinter(NAMES, {"i0": 0, "s0": 2}.get)


def test_nonnegative_floor_and_mod_use_plain_operators():
    c = printer()
    assert c(sympy.floor(i0 / 4)) == "(i0 / 4)"
    assert c(sympy.Mod(i0 + 3 * s0, s0)) == "(i0 % S_s0)"
    assert c(sympy.floor((i0 + s0 - 2) / s0)) == "((-2 + i0 + S_s0) / S_s0)"


def test_possibly_negative_operands_use_python_semantics():
    c = printer()
    assert c(sympy.floor(t3 / 4)) == "ember_ifloor(t3, 4)"
    assert c(sympy.Mod(t3, 3)) == "ember_imod(t3, 3)"
    assert c(sympy.ceiling(i0 / 3)) == "(-ember_ifloor((-1 * i0), 3))"


def test_large_integers_are_int64_literals():
    assert printer()(sympy.Integer(1 << 40) * i0) == "(1099511627776LL * i0)"
    assert printer()(sympy.Integer(-(1 << 63))) == "(-9223372036854775807LL - 1)"
    assert printer()(sympy.Max(i0, s0, 3)) == "ember_imax(ember_imax(3, i0), S_s0)"
