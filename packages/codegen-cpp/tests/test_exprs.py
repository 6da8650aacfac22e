"""Index expressions as C++ and Python: Python's floor division and remainder, plain operators when provably
nonnegative."""

from __future__ import annotations

import sympy
from ember_codegen_cpp._exprs import ExprPrinter, parse_expr

i0, s0, t3 = (sympy.Symbol(n, integer=True) for n in ("i0", "s0", "t3"))
NAMES = {"i0": "i0", "s0": "S_s0", "t3": "t3"}


def printer(python: bool = False) -> ExprPrinter:
    return ExprPrinter(NAMES, {"i0": 0, "s0": 2}.get, python=python)


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


def test_python_text_and_large_integers():
    text = printer(python=True)(sympy.floor(s0 / 2) * 3 + sympy.Max(s0, 4) + sympy.Mod(-s0, 3))
    assert "//" in text and all(eval(text, {"S_s0": n}) == 3 * (n // 2) + max(n, 4) + (-n) % 3 for n in range(9))
    assert printer()(sympy.Integer(1 << 40) * i0) == "(1099511627776LL * i0)"
    assert printer()(sympy.Integer(-(1 << 63))) == "(-9223372036854775807LL - 1)"


def test_parse_expr_reads_sym_text_with_integer_symbols():
    e = parse_expr("floor(s0/2) + Mod(s0, 3)")
    assert all(s.is_integer for s in e.free_symbols)
