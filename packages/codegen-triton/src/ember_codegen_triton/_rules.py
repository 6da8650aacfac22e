"""One Triton expression per pointwise op of the loop IR, and the dtypes as Triton spells them.

Operands arrive as the text of Triton values already in the op's compute dtype (the loop IR casts explicitly:
float16/bfloat16 are only loaded, stored, cast or selected). Ops with no rule here make the kernel `CannotPrint`,
so it runs in the loop-IR interpreter, reported as a fallback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember_lowering import Op
from ember_lowering.codegen import CannotPrint

TL_DTYPE = {
    "float64": "tl.float64", "float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16",
    "int64": "tl.int64", "int32": "tl.int32", "int16": "tl.int16", "int8": "tl.int8", "uint8": "tl.uint8",
    "bool": "tl.int1",
}

FLOAT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})
_NAN = "tl.PropagateNan.ALL"

# op → template over the operands {0}, {1}, {2}
_FLOAT_RULES: dict[Op, str] = {
    Op.EXP: "tl.exp({0})", Op.EXP2: "tl.exp2({0})", Op.LOG: "tl.log({0})", Op.LOG2: "tl.log2({0})",
    Op.SQRT: "tl.sqrt({0})", Op.RSQRT: "tl.rsqrt({0})", Op.SIN: "tl.sin({0})", Op.COS: "tl.cos({0})",
    Op.ERF: "tl.erf({0})", Op.SIGMOID: "tl.sigmoid({0})", Op.FLOOR: "tl.floor({0})", Op.CEIL: "tl.ceil({0})",
    Op.EXPM1: "libdevice.expm1({0})", Op.LOG1P: "libdevice.log1p({0})", Op.LOG10: "libdevice.log10({0})",
    Op.TAN: "libdevice.tan({0})", Op.ASIN: "libdevice.asin({0})", Op.ACOS: "libdevice.acos({0})",
    Op.ATAN: "libdevice.atan({0})", Op.SINH: "libdevice.sinh({0})", Op.COSH: "libdevice.cosh({0})",
    Op.TANH: "libdevice.tanh({0})", Op.ASINH: "libdevice.asinh({0})", Op.ACOSH: "libdevice.acosh({0})",
    Op.ATANH: "libdevice.atanh({0})", Op.ERFC: "libdevice.erfc({0})", Op.ERFINV: "libdevice.erfinv({0})",
    Op.LGAMMA: "libdevice.lgamma({0})", Op.ROUND: "libdevice.rint({0})", Op.TRUNC: "libdevice.trunc({0})",
    Op.RECIPROCAL: "(1.0 / {0})", Op.DIV: "({0} / {1})", Op.POW: "libdevice.pow({0}, {1})",
    Op.ATAN2: "libdevice.atan2({0}, {1})", Op.COPYSIGN: "libdevice.copysign({0}, {1})",
    Op.FMOD: "libdevice.fmod({0}, {1})",
    Op.ISNAN: "({0} != {0})", Op.ISINF: "(tl.abs({0}) == float('inf'))",
    Op.SIGNBIT: "(libdevice.signbit({0}) != 0)",
    Op.MAXIMUM: f"tl.maximum({{0}}, {{1}}, propagate_nan={_NAN})",
    Op.MINIMUM: f"tl.minimum({{0}}, {{1}}, propagate_nan={_NAN})",
}
_INT_RULES: dict[Op, str] = {
    Op.FLOORDIV: "_ember_floordiv({0}, {1})", Op.MOD: "_ember_mod({0}, {1})",
    Op.TRUNCDIV: "_ember_truncdiv({0}, {1})", Op.FMOD: "_ember_fmod({0}, {1})",
    Op.MAXIMUM: "tl.maximum({0}, {1})", Op.MINIMUM: "tl.minimum({0}, {1})",
    Op.ISNAN: "({0} != {0})",
    Op.ISINF: "({0} != {0})", Op.SIGNBIT: "({0} < 0)",
    Op.BITAND: "({0} & {1})", Op.BITOR: "({0} | {1})", Op.BITXOR: "({0} ^ {1})", Op.BITNOT: "(~{0})",
    Op.LSHIFT: "({0} << {1})", Op.RSHIFT: "({0} >> {1})",
}
_ANY_RULES: dict[Op, str] = {
    Op.NEG: "(-{0})", Op.ABS: "tl.abs({0})", Op.ADD: "({0} + {1})", Op.SUB: "({0} - {1})", Op.MUL: "({0} * {1})",
    Op.EQ: "({0} == {1})", Op.NE: "({0} != {1})", Op.LT: "({0} < {1})", Op.LE: "({0} <= {1})",
    Op.GT: "({0} > {1})", Op.GE: "({0} >= {1})", Op.WHERE: "tl.where({0}, {1}, {2})",
    Op.AND: "({0} & {1})", Op.OR: "({0} | {1})", Op.XOR: "({0} ^ {1})", Op.NOT: "({0} == 0)",
}


def expression(op: Op, operands: list[str], srcs: Sequence[str], dtype: str) -> str:
    """The Triton expression of one pointwise instruction on operands of dtypes `srcs`; `CannotPrint` when no rule
    covers it (its op is then composed from its default before printing: `prints_op`)."""
    src_dtype = (srcs[1] if op is Op.WHERE else srcs[0]) if srcs else dtype
    if op is Op.CAST:
        return cast(operands[0], src_dtype, dtype)
    if src_dtype in FLOAT_DTYPES:
        rule = _FLOAT_RULES.get(op)
    else:
        rule = _INT_RULES.get(op)
    rule = rule or _ANY_RULES.get(op)
    if rule is None:
        raise CannotPrint(f"no Triton rule for op {op.value!r} on {src_dtype}")
    return rule.format(*operands, t=TL_DTYPE[dtype])


def cast(value: str, src: str, dtype: str) -> str:
    """`value.to(dtype)` with torch's meaning: to bool is `!= 0`; float to int truncates, as `.to` does."""
    if dtype == src:
        return value
    if dtype == "bool":
        return f"({value} != 0)"
    return f"{value}.to({TL_DTYPE[dtype]})"


def scalar(value: object, dtype: str) -> str:
    """A Python literal of `dtype`'s kind, as Triton reads it (NaN and infinities as `float('...')`)."""
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in FLOAT_DTYPES:
        v = float(value)  # type: ignore[arg-type]
        return repr(v) if v == v and abs(v) != float("inf") else f"float('{v}')"
    return str(int(value))  # type: ignore[call-overload]


def literal(value: object, dtype: str) -> str:
    """A constant as a Triton scalar of `dtype`."""
    return f"tl.full([], {scalar(value, dtype)}, {TL_DTYPE[dtype]})"


def identity(value: object) -> str:
    """A reduction's identity (ember-lowering's `REDUCTION_SEMANTICS`) as Triton reads it in a `tl.full` or
    `tl.where`: infinities as `float('inf')`, every other (0, 1, an integer bound, False, True) a whole number."""
    if isinstance(value, float) and math.isinf(value):
        return "float('-inf')" if value < 0 else "float('inf')"
    return str(int(value))  # type: ignore[call-overload]


LIBDEVICE = "from triton.language.extra import libdevice"
INTERPRETER_LIBDEVICE = "from ember_codegen_triton._interpreter_math import libdevice"

PRELUDE = '''import triton
import triton.language as tl


# Integer division helpers that hold whichever rounding `//` has (C truncation when compiled, numpy's floor in
# the interpreter): the remainder decides the correction.
@triton.jit
def _ember_floordiv(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def _ember_mod(a, b):
    return a - _ember_floordiv(a, b) * b


@triton.jit
def _ember_truncdiv(a, b):
    q = _ember_floordiv(a, b)
    return tl.where(((a - q * b) != 0) & ((a < 0) != (b < 0)), q + 1, q)


@triton.jit
def _ember_fmod(a, b):
    return a - _ember_truncdiv(a, b) * b


@triton.jit
def _ember_mul(a, b):
    return a * b
'''
