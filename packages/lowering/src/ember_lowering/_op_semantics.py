"""What each pointwise op of the loop IR computes, said once.

An op's `OpSemantics` holds:
- `kinds`: the operand kinds it is defined on (`float`, `int`, `bool`; a `where` by its values' kind). The
  verifier rejects any other, and a codegen must print every (op, dtype) of these kinds;
- `result`: `same` (the operands' dtype) or `bool`;
- `reference`: a torch function, the meaning. The loop-IR interpreter runs it, the builder folds constants with it;
- `default`: the op composed from other ops, `default(b, *operands) -> Val` over a `KernelBuilder`, for the
  (op, dtype)s a codegen has no rule of its own for (`loop_passes/decompose_ops.py` applies it before printing). A
  default may compose only part of an op's kinds; it returns None for the others.

So a codegen writes rules only where it does better than the default, and a conformance test over this table
(`tests/test_op_conformance.py` in each codegen) finds any (op, dtype) it can print neither way. `define_op`
adds an op: its semantics here, and everything the IR needs of it (arity, text name, builder method).
`cast` is not in the table: every codegen spells conversions itself, with `Tensor.to`'s meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ._loop_ir import (
    ARITY,
    COMPARISONS,
    FLOAT_DTYPES,
    FLOAT_ONLY,
    INT_DTYPES,
    POINTWISE,
    PREDICATES,
    Op,
)

KINDS = ("float", "int", "bool")
_DTYPES_OF_KIND = {"float": ("float32", "float64"), "int": ("int64", "int32", "int16", "int8", "uint8"),
                   "bool": ("bool",)}


def kind_of(dtype: str) -> str:
    """`float`, `int` or `bool`: the kind of a compute dtype."""
    if dtype in FLOAT_DTYPES:
        return "float"
    return "int" if dtype in INT_DTYPES else "bool"


@dataclass(frozen=True, slots=True)
class OpSemantics:
    """One pointwise op's meaning (see the module docstring)."""

    op: Op
    kinds: frozenset[str]
    reference: Callable[..., torch.Tensor]
    result: str = "same"
    default: Callable[..., Any] | None = None

    @property
    def arity(self) -> int:
        return ARITY[self.op]

    def dtypes(self) -> tuple[str, ...]:
        """Every compute dtype the op takes (float16/bfloat16 are computed in float32, so never operands)."""
        return tuple(d for k in KINDS if k in self.kinds for d in _DTYPES_OF_KIND[k])

    def result_dtype(self, operand: str) -> str:
        return "bool" if self.result == "bool" else operand


# ---------------------------------------------------------------------------------------------- defaults
# Each is `(b, *operands) -> Val | None`: None where it does not compose that operand dtype.


def _reciprocal(b, x):
    return 1.0 / x


def _rsqrt(b, x):
    return 1.0 / b.sqrt(x)


def _sigmoid(b, x):
    return 1.0 / (1.0 + b.exp(-x))


def _integer_identity(b, x):
    """floor, ceil, round and trunc of an integer: the integer."""
    return x if x.dtype not in FLOAT_DTYPES else None


def _sign(b, x):
    """1, 0 or -1; 0 for NaN too, as torch gives on the CPU and on CUDA."""
    if x.dtype == "bool":
        return x
    return b.cast(x.gt(0), x.dtype) - b.cast(x.lt(0), x.dtype)


def _isnan(b, x):
    return x.ne(x)


def _isinf(b, x):
    return b.abs(x).eq(float("inf")) if x.dtype in FLOAT_DTYPES else x.ne(x)


def _signbit(b, x):
    if x.dtype == "bool":
        return x.ne(x)
    return x.lt(0) if x.dtype in INT_DTYPES else None


def _xor(b, x, y):
    return x.ne(y)


def _floordiv(b, x, y):
    """Integers: the truncating quotient corrected by the remainder's sign. Floats as torch (and Python) divide:
    through fmod, so 1.0 // 0.1 is 9.0, not the 10.0 that floor(1.0 / 0.1) gives."""
    if x.dtype in FLOAT_DTYPES:
        q = x / y
        m = b.fmod(x, y)
        div = (x - m) / y
        div = b.where(b.and_(m.ne(0), y.lt(0).ne(m.lt(0))), div - 1.0, div)
        f = b.floor(div)
        f = b.where((div - f).gt(0.5), f + 1.0, f)
        f = b.where(div.ne(0), f, b.copysign(b.const(0.0, x.dtype), q))
        return b.where(y.eq(0), q, f)
    q = b.truncdiv(x, y)
    r = x - q * y
    return b.where(b.and_(r.ne(0), r.lt(0).ne(y.lt(0))), q - 1, q)


def _truncdiv(b, x, y):
    if x.dtype in FLOAT_DTYPES:
        return b.trunc(x / y)
    return None  # a codegen's integer division truncates or floors: each spells it


def _mod(b, x, y):
    if x.dtype in FLOAT_DTYPES:
        m = b.fmod(x, y)
        return b.where(b.and_(m.ne(0), y.lt(0).ne(m.lt(0))), m + y, m)
    return x - b.floordiv(x, y) * y


def _fmod(b, x, y):
    return x - b.truncdiv(x, y) * y if x.dtype in INT_DTYPES else None


def _copysign(b, x, y):
    return b.where(b.signbit(y), -b.abs(x), b.abs(x))


_BITS = {"int64": 64, "int32": 32, "int16": 16, "int8": 8, "uint8": 8}


def _pow(b, x, e):
    """Integers: square and multiply over every bit of the exponent (wrapping, as torch's integer pow does); a
    negative exponent gives 1 for a base of 1, ±1 for -1, else 0."""
    if x.dtype not in INT_DTYPES:
        return None
    result, base = b.const(1, x.dtype), x
    for k in range(_BITS[x.dtype]):
        bit = b.bitand(b.rshift(e, b.const(k, e.dtype)), b.const(1, e.dtype))
        result = b.where(bit.ne(0), result * base, result)
        base = base * base
    if x.dtype == "uint8":
        return result
    odd = b.bitand(e, b.const(1, e.dtype)).ne(0)
    negative = b.where(x.eq(1), b.const(1, x.dtype),
                       b.where(x.eq(-1), b.where(odd, b.const(-1, x.dtype), b.const(1, x.dtype)), b.const(0, x.dtype)))
    return b.where(e.lt(0), negative, result)


def _floor_div_ref(a, b):
    return torch.div(a, b, rounding_mode="floor")


def _trunc_div_ref(a, b):
    return torch.div(a, b, rounding_mode="trunc")


# ---------------------------------------------------------------------------------------------- the table

# operand kinds: Float, Int, Bool
F, N, B = frozenset({"float"}), frozenset({"int"}), frozenset({"bool"})
FI, IB, FIB = F | N, N | B, F | N | B

SEMANTICS: dict[Op, OpSemantics] = {}


def _table(entries: Iterable[tuple[Op, frozenset[str], Callable, Callable | None]], result: str = "same") -> None:
    for op, kinds, reference, default in entries:
        SEMANTICS[op] = OpSemantics(op, kinds, reference, result, default)


_table([
    (Op.NEG, FI, torch.neg, None), (Op.ABS, FI, torch.abs, None),
    (Op.RECIPROCAL, F, torch.reciprocal, _reciprocal), (Op.SIGN, FIB, torch.sign, _sign),
    (Op.FLOOR, FI, torch.floor, _integer_identity), (Op.CEIL, FI, torch.ceil, _integer_identity),
    (Op.ROUND, FI, torch.round, _integer_identity), (Op.TRUNC, FI, torch.trunc, _integer_identity),
    (Op.EXP, F, torch.exp, None), (Op.EXP2, F, torch.exp2, None), (Op.EXPM1, F, torch.expm1, None),
    (Op.LOG, F, torch.log, None), (Op.LOG2, F, torch.log2, None), (Op.LOG10, F, torch.log10, None),
    (Op.LOG1P, F, torch.log1p, None), (Op.SQRT, F, torch.sqrt, None), (Op.RSQRT, F, torch.rsqrt, _rsqrt),
    (Op.SIN, F, torch.sin, None), (Op.COS, F, torch.cos, None), (Op.TAN, F, torch.tan, None),
    (Op.ASIN, F, torch.asin, None), (Op.ACOS, F, torch.acos, None), (Op.ATAN, F, torch.atan, None),
    (Op.SINH, F, torch.sinh, None), (Op.COSH, F, torch.cosh, None), (Op.TANH, F, torch.tanh, None),
    (Op.ASINH, F, torch.asinh, None), (Op.ACOSH, F, torch.acosh, None), (Op.ATANH, F, torch.atanh, None),
    (Op.ERF, F, torch.erf, None), (Op.ERFC, F, torch.erfc, None), (Op.ERFINV, F, torch.erfinv, None),
    (Op.LGAMMA, F, torch.lgamma, None), (Op.SIGMOID, F, torch.sigmoid, _sigmoid),
    (Op.BITNOT, IB, torch.bitwise_not, None),
    (Op.ADD, FIB, torch.add, None), (Op.SUB, FI, torch.sub, None), (Op.MUL, FIB, torch.mul, None),
    (Op.DIV, F, torch.div, None), (Op.FLOORDIV, FI, _floor_div_ref, _floordiv),
    (Op.TRUNCDIV, FI, _trunc_div_ref, _truncdiv), (Op.MOD, FI, torch.remainder, _mod),
    (Op.FMOD, FI, torch.fmod, _fmod), (Op.POW, FI, torch.pow, _pow),
    (Op.MAXIMUM, FIB, torch.maximum, None), (Op.MINIMUM, FIB, torch.minimum, None),
    (Op.ATAN2, F, torch.atan2, None), (Op.COPYSIGN, F, torch.copysign, _copysign),
    (Op.BITAND, IB, torch.bitwise_and, None), (Op.BITOR, IB, torch.bitwise_or, None),
    (Op.BITXOR, IB, torch.bitwise_xor, None), (Op.LSHIFT, N, torch.bitwise_left_shift, None),
    (Op.RSHIFT, N, torch.bitwise_right_shift, None), (Op.WHERE, FIB, torch.where, None),
])
_table([
    (Op.ISNAN, FIB, torch.isnan, _isnan), (Op.ISINF, FIB, torch.isinf, _isinf),
    (Op.SIGNBIT, FIB, torch.signbit, _signbit),
    (Op.NOT, B, torch.logical_not, None), (Op.AND, B, torch.logical_and, None),
    (Op.OR, B, torch.logical_or, None), (Op.XOR, B, torch.logical_xor, _xor),
    (Op.EQ, FIB, torch.eq, None), (Op.NE, FIB, torch.ne, None), (Op.LT, FIB, torch.lt, None),
    (Op.LE, FIB, torch.le, None), (Op.GT, FIB, torch.gt, None), (Op.GE, FIB, torch.ge, None),
], result="bool")


# ---------------------------------------------------------------------------------------------- new ops


def define_op(name: str, *, arity: int, kinds: Iterable[str], reference: Callable[..., torch.Tensor],
              default: Callable[..., Any] | None = None, result: str = "same") -> Op:
    """Add a pointwise op to the loop IR: `name` is its text name (`softsign`), `reference` its meaning as a torch
    function of `arity` tensors, `default` its composition from other ops (needed unless every codegen gets a
    rule for it). Lowering rules emit it as `b.<name>(x)`, the parser reads it, the interpreter runs `reference`.
    `forget_op` takes it out again (for tests)."""
    kinds = frozenset(kinds)
    if not kinds or kinds - set(KINDS) or result not in ("same", "bool") or arity not in (1, 2, 3):
        raise ValueError(f"define_op({name!r}): kinds must be some of {KINDS}, result 'same' or 'bool', "
                         f"arity 1 to 3")
    if not name.isidentifier() or not name.islower():
        raise ValueError(f"define_op({name!r}): an op's name is a lower-case identifier")
    op = Op._add(name.upper(), name)
    ARITY[op] = arity
    POINTWISE.add(op)
    if kinds == F:
        FLOAT_ONLY.add(op)
    if result == "bool":
        (PREDICATES if arity == 1 else COMPARISONS).add(op)
    SEMANTICS[op] = OpSemantics(op, kinds, reference, result, default)
    return op


def forget_op(op: Op) -> None:
    """Undo `define_op`."""
    if op not in SEMANTICS or op in _BUILTIN:
        raise ValueError(f"{op!r} was not added by define_op")
    del SEMANTICS[op]
    del ARITY[op]
    for group in (POINTWISE, FLOAT_ONLY, PREDICATES, COMPARISONS):
        group.discard(op)
    Op._remove(op)


_BUILTIN = frozenset(SEMANTICS)
