"""IndexPrinter: index expressions as Python with the loop IR's integer semantics, and the bounds it knows."""

from __future__ import annotations

import sympy
from ember_lowering.codegen import IndexPrinter

i0, s0, t3 = (sympy.Symbol(n, integer=True) for n in ("i0", "s0", "t3"))
PRINTER = IndexPrinter({"i0": "i0", "s0": "S_s0", "t3": "t3"}, {"i0": 0, "s0": 2}.get)


def test_python_text_has_floor_division_and_the_divisors_sign():
    expr = sympy.floor(s0 / 2) * 3 + sympy.Max(s0, 4) + sympy.Mod(-s0, 3) + sympy.floor(t3 / -2)
    text = PRINTER(expr)
    assert "//" in text and "%" in text and "max(" in text
    code = compile(text, "<index>", "eval")
    for n in range(9):
        for t in range(-5, 5):
            assert eval(code, {"S_s0": n, "t3": t, "max": max}) == 3 * (n // 2) + max(n, 4) + (-n) % 3 + t // -2


def test_bounds_of_sums_products_and_divisions():
    assert PRINTER.lower(i0 + 2 * s0) == 4
    assert PRINTER.nonneg(sympy.floor(i0 / s0)) and PRINTER.positive(s0)
    assert PRINTER.lower(t3 + 1) is None and not PRINTER.nonneg(sympy.Mod(i0, t3))


def test_large_integers_print_as_python_ints():
    assert PRINTER(sympy.Integer(1 << 40) * i0) == "(1099511627776 * i0)"
