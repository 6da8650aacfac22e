"""Symbolic size expressions: text in the schema, evaluated with concrete symbol values."""

import pytest
from ember_core.graph._symbolic import evaluate, free_symbols, parse


@pytest.mark.parametrize("text,value", [
    ("s0", 6), ("2*s0 + s1", 19), ("(s1//2)", 3), ("Max(1, s0 - 10)", 1), ("FloorDiv(s1, 3)", 2),
    ("Mod(s1, 4)", 3), ("s0*s1 - 1", 41),
])
def test_expression_evaluates_with_bindings(text, value):
    assert evaluate(text, {"s0": 6, "s1": 7}) == value


def test_ints_evaluate_to_themselves():
    assert evaluate(4, {}) == 4


def test_free_symbols_are_names():
    assert free_symbols("2*s0 + s12") == {"s0", "s12"} and free_symbols(3) == set()


def test_symbols_are_integers():
    assert all(s.is_integer for s in parse("s0 + s1").free_symbols)


def test_unbound_symbol_is_a_key_error_naming_it():
    with pytest.raises(KeyError, match="s1"):
        evaluate("s0 + s1", {"s0": 1})
