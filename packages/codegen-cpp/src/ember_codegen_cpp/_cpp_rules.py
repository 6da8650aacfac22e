"""C++ for each loop-IR op: `cpp_rules[op](args, dtype_of_args, dtype) -> expression`, one rule per op.

Values of every dtype are held in the C++ type of `CTYPE` (float16 and bfloat16 as a float holding the exactly
representable value, rounded by `cast`); memory holds `STORAGE_CTYPE`. Integer division and remainder also
need `flags_error` (the kernel's error flag is set where the divisor is zero).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Sequence

import torch
from ember_lowering import Op
from ember_lowering.codegen import CannotPrint

from ._libm import LIBM_OPS

CTYPE = {
    "float64": "double", "float32": "float", "float16": "float", "bfloat16": "float", "int64": "int64_t",
    "int32": "int32_t", "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool",
}
STORAGE_CTYPE = {**CTYPE, "float16": "uint16_t", "bfloat16": "uint16_t"}
FLOATS = frozenset({"float64", "float32", "float16", "bfloat16"})
INTS = frozenset({"int64", "int32", "int16", "int8", "uint8"})
_INT_RANGE = {"int64": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1),
              "int16": (-(1 << 15), (1 << 15) - 1), "int8": (-128, 127), "uint8": (0, 255), "bool": (0, 1)}

Rule = Callable[[Sequence[str], Sequence[str], str], str]


# ---------------------------------------------------------------------------------------------- literals


def literal(value: int | float | bool, dtype: str) -> str:
    """A C++ literal of `dtype` holding value as torch.tensor(value, dtype=dtype) would (rounded once)."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in INTS:
        n = int(value)
        lo, hi = _INT_RANGE[dtype]
        n = (n - lo) % (hi - lo + 1) + lo  # wraps as a torch tensor of that dtype does
        if n == -(1 << 63):
            return f"(({CTYPE[dtype]})(-9223372036854775807LL - 1))"
        return f"(({CTYPE[dtype]}){n}LL)" if dtype == "int64" else f"(({CTYPE[dtype]}){n})"
    value = float(value)
    if dtype in ("float16", "bfloat16"):
        value = torch.tensor(value, dtype=getattr(torch, dtype)).item()
    elif dtype == "float32" and math.isfinite(value):
        try:
            value = struct.unpack("f", struct.pack("f", value))[0]
        except OverflowError:
            value = math.copysign(math.inf, value)
    f = "f" if dtype != "float64" else ""
    if math.isnan(value):
        return f"__builtin_nan{f}(\"\")"
    if math.isinf(value):
        return f"{'-' if value < 0 else ''}__builtin_inf{f}()"
    text = repr(value)
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return text + f


# ---------------------------------------------------------------------------------------------- rules


def _libm(name: str) -> Rule:
    def rule(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
        return f"{_scalar_libm(name + ('' if src[0] == 'float64' else 'f'))}({', '.join(a)})"

    return rule


def _scalar_libm(fname: str) -> str:
    """The scalar function a kernel calls for libm's `fname`: the function itself, or, where the vector loops call
    libmvec's or Sleef's form of it, `ember_s_<fname>`, which gives the vector form's bits (`scalar_layer`)."""
    return f"ember_s_{fname}" if fname in _vector_only() else fname


@functools.cache
def _vector_only() -> frozenset[str]:
    from ._build import vector_lanes
    from ._vector_prelude import vector_only

    return vector_only(vector_lanes()[0])


def _exp(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    return f"exp({a[0]})" if src[0] == "float64" else f"ember_expf({a[0]})"


def _sigmoid(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    if src[0] == "float64":
        return f"(1.0 / (1.0 + exp(-{a[0]})))"
    return f"(1.0f / (1.0f + ember_expf(-{a[0]})))"


def _builtin(name: str) -> Rule:
    def rule(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
        if src[0] not in FLOATS:
            return a[0]
        return f"__builtin_{name}{'' if src[0] == 'float64' else 'f'}({', '.join(a)})"

    return rule


def _float_or_int(float_fmt: str, int_fmt: str, bool_fmt: str | None = None) -> Rule:
    def rule(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
        kind = src[0]
        fmt = float_fmt if kind in FLOATS else (bool_fmt if kind == "bool" and bool_fmt else int_fmt)
        if fmt is None:
            raise CannotPrint(f"no C++ rule for this op on {kind}")
        one, f = ("1.0", "") if kind == "float64" else ("1.0f", "f")
        return fmt.format(*a, T=CTYPE[kind], one=one, F=f)

    return rule


def _cmp(symbol: str) -> Rule:
    return lambda a, src, dtype: f"({a[0]} {symbol} {a[1]})"


def cast(value: str, src: str, dst: str) -> str:
    """Conversion as torch's Tensor.to: float→int truncates (through int32 for narrow ints), →bool is != 0,
    float16/bfloat16 round to nearest even (from float64 through float32, as c10 does)."""
    if src == dst or (src in ("float16", "bfloat16") and dst == "float32"):
        return value
    if dst == "bool":
        return f"({value} != 0)"
    if dst in ("float16", "bfloat16"):
        inner = value if src in ("float32", "float16", "bfloat16") else f"(float)({value})"
        return f"ember_round_{'f16' if dst == 'float16' else 'bf16'}({inner})"
    if dst in ("int8", "uint8", "int16") and src in FLOATS:
        return f"({CTYPE[dst]})(int32_t)({value})"
    return f"({CTYPE[dst]})({value})"


def _cast_rule(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    return cast(a[0], src[0], dtype)


def _where(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    return f"({a[0]} ? {a[1]} : {a[2]})"


def _isinf(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    if src[0] not in FLOATS:
        return "false"
    f = "" if src[0] == "float64" else "f"
    return f"(__builtin_fabs{f}({a[0]}) == __builtin_inf{f}())"


def _signbit(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    # the sign bit read from the bits: gcc 12 fails with an internal error ("unrecognizable insn") vectorizing
    # __builtin_signbit of a float into a bool store under -march=native
    if src[0] == "float64":
        return f"((__builtin_bit_cast(uint64_t, {a[0]}) >> 63) != 0)"
    if src[0] in FLOATS:
        return f"((__builtin_bit_cast(uint32_t, (float)({a[0]})) >> 31) != 0)"
    return "false" if src[0] in ("uint8", "bool") else f"({a[0]} < 0)"


def _float_mod(kind: str, a: Sequence[str]) -> str:
    f = "" if kind == "float64" else "f"
    return f"fmod{f}({a[0]}, {a[1]})"


def _floordiv(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    if src[0] in FLOATS:
        return f"ember_ffloordiv({a[0]}, {a[1]}, {_float_mod(src[0], a)})"
    return f"ember_floordiv({a[0]}, {a[1]})"


def _mod(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    if src[0] in FLOATS:
        return f"ember_fmodpy({_float_mod(src[0], a)}, {a[1]})"
    return f"ember_mod({a[0]}, {a[1]})"


def _pow(a: Sequence[str], src: Sequence[str], dtype: str) -> str:
    if src[0] in FLOATS:
        return f"{_scalar_libm('pow' if src[0] == 'float64' else 'powf')}({a[0]}, {a[1]})"
    if src[0] == "bool":
        return f"({a[0]} || !{a[1]})"
    return f"ember_ipow({a[0]}, {a[1]})"


cpp_rules: dict[Op, Rule] = {
    Op.NEG: _float_or_int("(-{0})", "ember_neg({0})", "{0}"),
    Op.ABS: _float_or_int("__builtin_fabs{F}({0})", "ember_iabs({0})", "{0}"),
    Op.RECIPROCAL: _float_or_int("({one} / {0})", None),
    Op.SIGN: _float_or_int("ember_sign({0})", "ember_sign({0})", "{0}"),
    Op.FLOOR: _builtin("floor"), Op.CEIL: _builtin("ceil"), Op.ROUND: _builtin("rint"), Op.TRUNC: _builtin("trunc"),
    Op.EXP: _exp,
    **{op: _libm(op.value) for op in sorted(LIBM_OPS, key=lambda op: op.value)},
    Op.SQRT: _builtin("sqrt"),
    Op.RSQRT: _float_or_int("({one} / __builtin_sqrt{F}({0}))", None),
    Op.ERFINV: _float_or_int("ember_erfinv({0})", None),
    Op.SIGMOID: _sigmoid,
    Op.ISNAN: _float_or_int("({0} != {0})", "false"),
    Op.ISINF: _isinf,
    Op.SIGNBIT: _signbit,
    Op.NOT: lambda a, src, dtype: f"(!{a[0]})",
    Op.BITNOT: _float_or_int(None, "(({T})~{0})", "(!{0})"),
    Op.ADD: _float_or_int("({0} + {1})", "ember_add({0}, {1})", "(bool)({0} | {1})"),
    Op.SUB: _float_or_int("({0} - {1})", "ember_sub({0}, {1})", "(bool)({0} ^ {1})"),
    Op.MUL: _float_or_int("({0} * {1})", "ember_mul({0}, {1})", "(bool)({0} & {1})"),
    Op.DIV: _float_or_int("({0} / {1})", None),
    Op.FLOORDIV: _floordiv,
    Op.TRUNCDIV: _float_or_int("__builtin_trunc{F}({0} / {1})", "ember_truncdiv({0}, {1})"),
    Op.MOD: _mod,
    Op.FMOD: lambda a, src, dtype: _float_mod(src[0], a) if src[0] in FLOATS else f"ember_cmod({a[0]}, {a[1]})",
    Op.POW: _pow,
    Op.MAXIMUM: _float_or_int("ember_max({0}, {1})", "ember_max({0}, {1})", "(bool)({0} | {1})"),
    Op.MINIMUM: _float_or_int("ember_min({0}, {1})", "ember_min({0}, {1})", "(bool)({0} & {1})"),
    Op.COPYSIGN: _float_or_int("__builtin_copysign{F}({0}, {1})", None),
    Op.AND: lambda a, src, dtype: f"(bool)({a[0]} & {a[1]})",
    Op.OR: lambda a, src, dtype: f"(bool)({a[0]} | {a[1]})",
    Op.XOR: lambda a, src, dtype: f"({a[0]} != {a[1]})",
    Op.BITAND: _float_or_int(None, "(({T})({0} & {1}))", "(bool)({0} & {1})"),
    Op.BITOR: _float_or_int(None, "(({T})({0} | {1}))", "(bool)({0} | {1})"),
    Op.BITXOR: _float_or_int(None, "(({T})({0} ^ {1}))", "(bool)({0} ^ {1})"),
    Op.LSHIFT: _float_or_int(None, "ember_lshift({0}, {1})"),
    Op.RSHIFT: _float_or_int(None, "ember_rshift({0}, {1})"),
    Op.EQ: _cmp("=="), Op.NE: _cmp("!="), Op.LT: _cmp("<"), Op.LE: _cmp("<="), Op.GT: _cmp(">"), Op.GE: _cmp(">="),
    Op.WHERE: _where,
    Op.CAST: _cast_rule,
}

# Ops whose integer forms divide: the kernel flags an error where the divisor (operand 1) is zero.
DIVIDING = frozenset({Op.FLOORDIV, Op.TRUNCDIV, Op.MOD, Op.FMOD})


def flags_error(op: Op, src: Sequence[str]) -> bool:
    return op in DIVIDING and src[0] not in FLOATS


def expression(op: Op, args: Sequence[str], src: Sequence[str], dtype: str) -> str:
    """The C++ expression of one pointwise instruction; `CannotPrint` when no rule covers it."""
    rule = cpp_rules.get(op)
    if rule is None:
        raise CannotPrint(f"no C++ rule for op {op.value!r} (add one to cpp_rules)")
    return rule(args, src, dtype)
