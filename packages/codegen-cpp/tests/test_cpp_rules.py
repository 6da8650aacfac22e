"""cpp_rules: one C++ rule for every pointwise op of the loop IR; literals round as torch.tensor does."""

from __future__ import annotations

import math

import pytest
from ember_codegen_cpp import CannotPrint, cpp_rules
from ember_codegen_cpp._cpp_rules import cast, expression, literal
from ember_lowering import POINTWISE_OPS, Op


def test_every_pointwise_op_has_a_rule():
    missing = sorted(op.value for op in POINTWISE_OPS if op not in cpp_rules)
    assert missing == []


def test_every_op_of_the_table_prints_by_a_rule_or_its_default():
    from ember_codegen_cpp import CppCodegen
    from ember_lowering.codegen import missing_ops

    assert missing_ops(CppCodegen.prints_op) == []


def test_literals_round_once_to_their_dtype():
    assert literal(0.1, "float32") == "0.10000000149011612f"
    assert literal(0.1, "float64") == "0.1"
    assert literal(0.1, "bfloat16") == "0.10009765625f"
    assert literal(math.nan, "float32") == '__builtin_nanf("")'
    assert literal(-math.inf, "float64") == "-__builtin_inf()"
    assert literal(1e39, "float32") == "__builtin_inff()"
    assert literal(300, "uint8") == "((uint8_t)44)"
    assert literal(-(1 << 63), "int64") == "((int64_t)(-9223372036854775807LL - 1))"
    assert literal(True, "bool") == "true"


def test_casts_follow_torch():
    assert cast("x", "float32", "float16") == "ember_round_f16(x)"
    assert cast("x", "float64", "bfloat16") == "ember_round_bf16((float)(x))"
    assert cast("x", "float32", "uint8") == "(uint8_t)(int32_t)(x)"
    assert cast("x", "float32", "bool") == "(x != 0)"
    assert cast("x", "bfloat16", "float32") == "x"


def test_integer_and_float_forms_differ():
    assert expression(Op.FLOORDIV, ["a", "b"], ["int32", "int32"], "int32") == "ember_floordiv(a, b)"
    assert expression(Op.ADD, ["a", "b"], ["int64", "int64"], "int64") == "ember_add(a, b)"
    assert expression(Op.ABS, ["a"], ["float32"], "float32") == "__builtin_fabsf(a)"
    assert expression(Op.EXP, ["a"], ["float64"], "float64") == "exp(a)"
    assert expression(Op.EXP, ["a"], ["float32"], "float32") == "ember_expf(a)"


def test_an_op_without_a_form_for_its_dtype_cannot_print():
    with pytest.raises(CannotPrint):
        expression(Op.BITAND, ["a", "b"], ["float32", "float32"], "float32")
