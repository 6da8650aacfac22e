"""IndexPrinter: index expressions as Python with the loop IR's integer semantics, and the bounds it knows."""

from __future__ import annotations

import math

import sympy
import torch
from ember_lowering._interpreter import evaluate
from ember_lowering.codegen import IndexPrinter
from torch.utils._sympy.functions import CeilToInt, FloorToInt, IntTrueDiv, ToFloat, TruncToInt

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


def test_a_size_of_a_fractional_scale_is_computed_in_doubles():
    """`TruncToInt(0.29*ToFloat(s0))` (`F.interpolate(scale_factor=0.29)`): Python text of the exact double, and
    the interpreter's value: 0.29 * 100 is 28.999999999999996 in doubles, so 28 rows. The bound is known too."""
    size = TruncToInt(sympy.Float(0.29) * ToFloat(s0))
    assert PRINTER(size) == "int((0.29 * float(S_s0)))"
    assert eval(compile(PRINTER(size), "<size>", "eval"), {"S_s0": 100}) == 28
    assert evaluate(size, {"s0": 100}) == 28 and evaluate(i0 * size, {"i0": torch.tensor([2]), "s0": 100}) == 56
    assert PRINTER.nonneg(size)


def test_a_size_rounded_down_or_up_from_a_float():
    """In doubles, as Python: 0.29 * 100 is 28.999999999999996 (floor 28), 0.07 * 100 is 7.000000000000001 (ceil 8)."""
    down, up = FloorToInt(sympy.Float(0.29) * ToFloat(s0)), CeilToInt(sympy.Float(0.07) * ToFloat(s0))
    for n, floor_, ceil_ in ((100, 28, 8), (10, 2, 1), (37, 10, 3)):
        assert eval(compile(PRINTER(down), "<size>", "eval"), {"S_s0": n}) == floor_ == evaluate(down, {"s0": n})
        assert eval(compile(PRINTER(up), "<size>", "eval"), {"S_s0": n}) == ceil_ == evaluate(up, {"s0": n})
    assert PRINTER.nonneg(down) and PRINTER.nonneg(up)


def test_a_true_division_inside_a_rounding_is_a_double_division():
    """`math.ceil(n / 2)` is `CeilToInt(IntTrueDiv(s0, 2))`: IntTrueDiv prints as a floor division elsewhere (under
    a floor of its own), which made this n // 2: one short at odd n."""
    up = CeilToInt(IntTrueDiv(s0, 2))
    assert PRINTER(up) == "int((-((-((float(S_s0) / float(2)))) // 1)))"
    for n in (7, 8, 13):
        assert eval(compile(PRINTER(up), "<size>", "eval"), {"S_s0": n}) == math.ceil(n / 2) == evaluate(up, {"s0": n})
    assert PRINTER(IntTrueDiv(s0, 2)) == "(S_s0 // 2)"  # outside a rounding: unchanged
