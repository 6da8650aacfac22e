"""Index expressions as C++: Python's floor division and remainder, plain operators when provably nonnegative."""

from __future__ import annotations

import sympy
from ember_codegen_cpp._exprs import ExprPrinter
from torch.utils._sympy.functions import CeilToInt, FloorToInt, ToFloat, TruncToInt

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


def test_a_size_of_a_fractional_scale_is_a_double_rounded_toward_zero():
    """`TruncToInt(0.29*ToFloat(s0))`: the double as a hexadecimal literal (exact, no decimal rounding), the product
    in double precision and a cast that truncates, as Python's `int(0.29 * 100)`; sizes stay provably nonnegative."""
    size = TruncToInt(sympy.Float(0.29) * ToFloat(s0))
    assert printer()(size) == "static_cast<int64_t>((0x1.28f5c28f5c28fp-2 * static_cast<double>(S_s0)))"
    assert printer()(sympy.floor(size / 2)) == f"({printer()(size)} / 2)"


def test_a_size_rounded_down_or_up_from_a_float():
    scaled = sympy.Float(0.3) * ToFloat(s0)
    assert printer()(FloorToInt(scaled)).startswith("static_cast<int64_t>(__builtin_floor((0x1.3333333333333p-2 * ")
    assert printer()(CeilToInt(scaled)).startswith("static_cast<int64_t>(__builtin_ceil((0x1.3333333333333p-2 * ")
