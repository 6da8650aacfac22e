"""ember's own expression grammar: what sympy prints reads back equal; nothing in the text is ever run."""

import math
import time

import pytest
import sympy
from ember_core import ExprError, IntExpr, parse_expr
from ember_core.graph._expr import INDEX_FUNCTIONS, MAX_CHARS, MAX_DEPTH, SIZE_FUNCTIONS, parse_integer
from ember_core.graph._symbolic import expr_text
from torch.utils._sympy.functions import ToFloat, TruncToInt

CANARY: list[str] = []

# Texts sympy and torch print for sizes and indices.
PRINTED = [
    "s0", "4*s0", "4*s0 - 4", "(s96//2)", "Max(1, (s96//2))", "2*s0 + s1", "s0*s1 - 1", "FloorDiv(s1, 3)",
    "Mod(s1, 4)", "ModularIndexing(i0, 4, 8)", "PythonMod(s0, 3)", "CleanDiv(2*s0, 2)", "floor(s0/2)",
    "ceiling(s0/4 + 3/4)", "3 - s0", "s0**2", "-s0", "s0/2", "-(s0 + 1)*(s1 - 2)", "Min(s0, s1, 7)",
    "((s0 + 3)//4)", "i0 + 16*r0 + 1024*i1", "Abs(s0 - s1)", "2**10*s0", "-2**3", "s0 % 3",
]


def _sympify(text, functions):
    """The old reading (sympify on trusted text), as the reference for equality."""
    expr = sympy.sympify(text, locals=dict(functions))
    return expr.xreplace({s: sympy.Symbol(s.name, integer=True) for s in expr.free_symbols})


@pytest.mark.parametrize("text", PRINTED)
@pytest.mark.parametrize("table,functions", [("size", SIZE_FUNCTIONS), ("index", INDEX_FUNCTIONS)])
def test_printed_expressions_read_back_as_sympify_did(text, table, functions):
    assert parse_expr(text, table) == _sympify(text, functions)


def test_names_are_integer_symbols():
    assert all(s.is_integer for s in parse_expr("s0 + __import__").free_symbols)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')",
    "CANARY.append(1)",
    "(lambda: CANARY.append(1))()",
    "s0.__class__",
    "s0[0]",
    "exec('CANARY.append(1)')",
    "Max.__globals__",
    "s0 if s0 else s1",
])
def test_python_is_not_an_expression(text):
    with pytest.raises(ExprError):
        parse_expr(text)
    assert CANARY == []


@pytest.mark.parametrize("text,what", [
    ("", "empty"), ("s0 +", "unexpected end"), ("(s0", "expected ')', found the end"), ("s0 s1", "unexpected 's1'"),
    ("1.5.2*s0", "unexpected character '.'"), ("foo(s0)", "unknown function 'foo'"), ("s0 / 0", "division by zero"),
    ("s0 $ 1", "unexpected character '$'"), ("٣*s0", "unexpected character"),
])
def test_bad_text_is_an_error_naming_what_and_where(text, what):
    with pytest.raises(ExprError, match=None) as info:
        parse_expr(text)
    assert what in str(info.value) and repr(text)[:20] in str(info.value)


def test_function_with_wrong_arity_is_a_clean_error():
    with pytest.raises(ExprError, match="ModularIndexing"):
        parse_expr("ModularIndexing(s0)")


@pytest.mark.parametrize("text", [
    "10**10**10", "(10**1000)**1000", "2**100000", "9" * 5000, "s0" + "+s0" * MAX_CHARS,
    "(" * (MAX_DEPTH + 1) + "s0" + ")" * (MAX_DEPTH + 1), "-" * 5000 + "s0", "Max(" * 100 + "1" + ")" * 100,
])
def test_limits_end_quickly_in_an_error(text):
    start = time.perf_counter()
    with pytest.raises(ExprError):
        parse_expr(text)
    assert time.perf_counter() - start < 1.0


def test_nesting_within_the_limit_parses():
    depth = MAX_DEPTH // 2
    assert parse_expr("(" * depth + "s0 + 1" + ")" * depth) == sympy.Symbol("s0", integer=True) + 1


@pytest.mark.parametrize("text,env,value", [
    ("2*s0 + 1", {"s0": 3}, 7), ("(s0//2)", {"s0": 7}, 3), ("floor(s0/2)", {"s0": -7}, -4),
    ("ceiling(s0/4 + 3/4)", {"s0": 5}, 2), ("Max(1, s0 - 10)", {"s0": 6}, 1), ("Mod(s0, 4)", {"s0": 11}, 3),
    ("ModularIndexing(s0, 2, 4)", {"s0": 13}, 2), ("s0**2 - s1", {"s0": 4, "s1": 1}, 15), ("-2**3", {}, -8),
])
def test_int_expr_evaluates_like_sympy(text, env, value):
    expr = IntExpr(text)
    assert expr(env) == value
    assert int(parse_expr(text).subs({sympy.Symbol(k, integer=True): v for k, v in env.items()})) == value
    assert set(expr.names) == set(env)


def test_int_expr_refuses_a_non_integer_result():
    with pytest.raises(ExprError, match="non-integer"):
        IntExpr("s0/2")({"s0": 3})
    with pytest.raises(ExprError, match="non-integer"):
        IntExpr("0.5*ToFloat(s0)")({"s0": 3})


@pytest.mark.parametrize("text", ["TruncToInt(1e300*1e300*ToFloat(s0))", "FloorToInt(ToFloat(s0)/0.0)",
                                  "s0 // (s0 - 1)", "RoundToInt(1e308*10.0*ToFloat(s0))"])
def test_int_expr_of_a_value_past_a_double_or_a_zero_division_is_an_expression_error(text):
    with pytest.raises(ExprError, match="cannot be evaluated"):
        IntExpr(text)({"s0": 1})


@pytest.mark.parametrize("value", [1.7, 0.29, 0.30000000000000004, 1e-05, 2.5e+300, 0.5])
def test_a_float_of_a_size_reads_back_as_the_same_double_and_rounds_as_python(value):
    """`F.interpolate(x, scale_factor=v)` of a symbolic size: `TruncToInt(v*ToFloat(s0))`. sympy prints a float
    with 15 digits (0.30000000000000004 as 0.3); the schema text is the shortest that reads back to the double,
    and IntExpr computes in doubles as Python did (0.29 * 100 is 28.999999999999996: 28, not exact arithmetic's
    29)."""
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    size = TruncToInt(sympy.Float(value) * ToFloat(s0))
    text = expr_text(size)
    assert repr(value) in text
    assert parse_integer(text) == size.xreplace({s0: sympy.Symbol("s0", integer=True)})
    for n in (1, 10, 100, 37):
        assert IntExpr(text)({"s0": n}) == math.trunc(n * value)


def test_a_float_is_a_size_only_once_rounded_to_an_integer():
    with pytest.raises(ExprError, match="the float 0.5"):
        parse_integer("0.5*s0")
    assert parse_integer("TruncToInt(0.5*ToFloat(s0))") is not None


@pytest.mark.parametrize("text,what", [("1e999*s0", "not finite"), ("0." + "1" * 60, "too long"),
                                       ("1.5e3j", "unexpected 'j'"), ("nan", None), ("inf*s0", None)])
def test_a_float_literal_past_a_double_is_refused(text, what):
    if what is None:  # names, not numbers: integer symbols, as any other name
        assert all(s.is_integer for s in parse_expr(text).free_symbols)
        return
    with pytest.raises(ExprError, match=what):
        parse_expr(text)
