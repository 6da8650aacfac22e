"""Lowering rules of pointwise ops: arithmetic, comparisons, logical, where, clamp, casts, math, activations.

`elementwise(names, fn, compute)` makes a rule: the inputs named by `names` (tensors or scalars) are loaded
with broadcasting, converted to the compute dtype, and `fn(b, *vals, a)` builds the result from them (`a`: the
node's arguments by name). compute: `out` computes in the result dtype (float16/bfloat16 in float32),
`promote` in the inputs' promoted dtype (comparisons), `bool` in bool (logical ops).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from ember_core import Node, Ref, dtype_name, to_dtype
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ._builder import KernelBuilder, Val
from ._context import LoweringContext, TensorRef
from ._errors import Unsupported
from ._loop_ir import FLOAT_DTYPES, Op, opmath

Fn = Callable[..., Any]


def _input(ctx: LoweringContext, x: Any) -> Any:
    if isinstance(x, Ref) and isinstance(ctx.env.get(x.name), TensorRef):
        return ctx.env[x.name]
    return ctx.scalar(x) if x is not None else None


def promoted(inputs: list[Any]) -> str:
    """The dtype torch computes a comparison of these inputs in."""
    args = []
    for x in inputs:
        if isinstance(x, TensorRef):
            args.append(torch.empty((1,) * x.rank, dtype=to_dtype(x.dtype), device="meta"))
        elif isinstance(x, (bool, int, float)):
            args.append(x)
        elif x is not None:
            args.append(1)  # a symbolic int
    _, result = elementwise_dtypes(*args, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return dtype_name(result)


def elementwise(names: tuple[str, ...], fn: Fn, compute: str = "out", keep: tuple[str, ...] = ()) -> Callable:
    """A rule computing `fn(b, *vals, a)`; inputs named in `keep` (masks, conditions) are not converted."""
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        out = ctx.values[node.outputs[0]]
        inputs = [_input(ctx, a[n]) for n in names]
        cdtype = {"out": lambda: opmath(out.dtype), "promote": lambda: opmath(promoted(inputs)),
                  "bool": lambda: "bool"}[compute]()
        numbers = _run_time_numbers(ctx, a, names)

        def body(b: KernelBuilder, *vals: Any) -> Val:
            vals, loaded = vals[:len(names)], vals[len(names):]
            vals = tuple(_convert(b, v, "bool" if n in keep else cdtype, n in keep) for n, v in zip(names, vals))
            return fn(b, *vals, {**a, **{k: b.cast(v, cdtype) for k, v in zip(numbers, loaded)}})
        loads = [ctx.env[a[k].name] for k in numbers]
        return ctx.pointwise(body, [*inputs, *loads], ctx.shape_of(node.outputs[0]), out.dtype)
    return rule


def _run_time_numbers(ctx: LoweringContext, a: dict, names: tuple[str, ...]) -> list[str]:
    """The arguments other than `names` that are numbers read from tensors at run time (an add's alpha, an
    activation's beta, once Dynamo made a Python float that changed an input): the kernel loads each and
    converts it to the compute dtype, as ATen converts a Python scalar, and the rule's `fn` computes with it as a
    `Val` (Python arithmetic on it builds instructions; `alpha == 1` is False for a loaded number)."""
    return [k for k, v in a.items() if k not in names and isinstance(v, Ref) and ctx.read_at_run_time(v.name)]


def _convert(b: KernelBuilder, v: Any, dtype: str, keep: bool) -> Any:
    if v is None or (keep and isinstance(v, Val)):
        return v
    return b.cast(v, dtype) if isinstance(v, Val) else b.lift(v, dtype)


def _leaky_relu(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    """The slope is an input like `self`: a number, or a symbolic float (a module's slope Dynamo made an input)."""
    rule = elementwise(("self", "negative_slope"), lambda b, x, slope, a: b.where(x.gt(0), x, x * slope))
    return rule(ctx, node, {"negative_slope": 0.01, **a})


def _scaled(b: KernelBuilder, y: Val, alpha: Any) -> Val:
    return y if alpha is None or alpha == 1 else y * alpha


# ---------------------------------------------------------------------------------------------- tables

UNARY = {
    "abs": Op.ABS, "neg": Op.NEG, "reciprocal": Op.RECIPROCAL, "sign": Op.SIGN, "sgn": Op.SIGN,
    "floor": Op.FLOOR, "ceil": Op.CEIL, "round": Op.ROUND, "trunc": Op.TRUNC, "fix": Op.TRUNC,
    "exp": Op.EXP, "exp2": Op.EXP2, "expm1": Op.EXPM1, "log": Op.LOG, "log2": Op.LOG2, "log10": Op.LOG10,
    "log1p": Op.LOG1P, "sqrt": Op.SQRT, "rsqrt": Op.RSQRT, "sin": Op.SIN, "cos": Op.COS, "tan": Op.TAN,
    "asin": Op.ASIN, "acos": Op.ACOS, "atan": Op.ATAN, "sinh": Op.SINH, "cosh": Op.COSH, "tanh": Op.TANH,
    "asinh": Op.ASINH, "acosh": Op.ACOSH, "atanh": Op.ATANH, "erf": Op.ERF, "erfc": Op.ERFC,
    "erfinv": Op.ERFINV, "lgamma": Op.LGAMMA, "sigmoid": Op.SIGMOID, "bitwise_not": Op.BITNOT,
}
BINARY = {
    "mul": Op.MUL, "maximum": Op.MAXIMUM, "minimum": Op.MINIMUM, "atan2": Op.ATAN2, "copysign": Op.COPYSIGN,
    "remainder": Op.MOD, "fmod": Op.FMOD, "floor_divide": Op.FLOORDIV,
    "bitwise_and": Op.BITAND, "bitwise_or": Op.BITOR, "bitwise_xor": Op.BITXOR,
    "bitwise_left_shift": Op.LSHIFT, "bitwise_right_shift": Op.RSHIFT,
    "__lshift__": Op.LSHIFT, "__rshift__": Op.RSHIFT,
}
COMPARE = {"eq": Op.EQ, "ne": Op.NE, "lt": Op.LT, "le": Op.LE, "gt": Op.GT, "ge": Op.GE}
LOGICAL = {"logical_and": Op.AND, "logical_or": Op.OR, "logical_xor": Op.XOR}
OVERLOADS = ("Tensor", "Scalar", "default", "Tensor_Scalar", "Scalar_Tensor", "Tensor_Tensor")


def _unary(op: Op) -> Fn:
    return lambda b, x, a: b.emit(op, x)


def _binary(op: Op) -> Fn:
    return lambda b, x, y, a: b.emit(op, x, y)


def _div(b: KernelBuilder, x: Val, y: Val, a: dict) -> Val:
    mode = a.get("rounding_mode")
    op = {None: Op.DIV, "trunc": Op.TRUNCDIV, "floor": Op.FLOORDIV}[mode]
    return b.emit(op, x, y)


def _pow(b: KernelBuilder, x: Val, y: Val, a: dict) -> Val:
    """A constant exponent torch's own CPU kernel special-cases is computed as torch does (x * x for 2, a copy
    for 1, sqrt for 0.5 ...): the same roundings, and no call to pow in the loop."""
    e = a.get("exponent")
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        return b.emit(Op.POW, x, y)
    if e == 1:
        return x
    if e == 2:
        return x * x
    if e == 3:
        return x * x * x
    if x.dtype in FLOAT_DTYPES:
        special = {0.5: lambda: b.emit(Op.SQRT, x), -0.5: lambda: b.emit(Op.RSQRT, x),
                   -1: lambda: b.emit(Op.RECIPROCAL, x), -2: lambda: 1.0 / (x * x)}
        if e in special:
            return special[e]()
    return b.emit(Op.POW, x, y)


def _clamp(b: KernelBuilder, x: Val, lo: Val | None, hi: Val | None, a: dict) -> Val:
    """x limited to [lo, hi], NaN (of x or a bound) kept. Where x equals a bound it stays x, as in eager
    (`relu(-0.0)` is -0.0): maximum and minimum give their second operand on a tie, so x goes second."""
    if lo is not None:
        x = b.maximum(lo, x)
    if hi is not None:
        x = b.minimum(hi, x)
    return x


def _where(b: KernelBuilder, c: Val, x: Val, y: Val, a: dict) -> Val:
    return b.where(b.cast(c, "bool"), x, y)


def _lerp(b: KernelBuilder, x: Val, end: Val, w: Val, a: dict) -> Val:
    diff = end - x
    return b.where(b.abs(w).lt(0.5), x + w * diff, end - diff * (1.0 - w))


def _gelu(b: KernelBuilder, x: Val, a: dict) -> Val:
    if a.get("approximate", "none") == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (b.tanh(inner) + 1.0)
    return x * 0.5 * (b.erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


def _softplus(b: KernelBuilder, x: Val, a: dict) -> Val:
    beta, threshold = a.get("beta", 1), a.get("threshold", 20)
    scaled = x * beta if beta != 1 else x
    soft = b.log1p(b.exp(scaled))
    return b.where(scaled.gt(threshold), x, soft / beta if beta != 1 else soft)


def _elu(b: KernelBuilder, x: Val, a: dict) -> Val:
    alpha, scale, input_scale = a.get("alpha", 1), a.get("scale", 1), a.get("input_scale", 1)
    neg = b.expm1(x * input_scale) * (alpha * scale)
    return b.where(x.gt(0), x * scale if scale != 1 else x, neg)


def _hardsigmoid(b: KernelBuilder, x: Val, a: dict) -> Val:
    return b.minimum(b.maximum(x + 3.0, 0.0), 6.0) / 6.0


def _hardswish(b: KernelBuilder, x: Val, a: dict) -> Val:
    return x * b.minimum(b.maximum(x + 3.0, 0.0), 6.0) / 6.0


def _xlogy(b: KernelBuilder, x: Val, y: Val, a: dict) -> Val:
    """x * log(y), 0 where x is 0 (even for y = 0 or inf), NaN where y is NaN: eager's order of the cases."""
    return b.where(b.isnan(y), math.nan, b.where(x.eq(0), 0.0, x * b.log(y)))


def _xlog1py(b: KernelBuilder, x: Val, y: Val, a: dict) -> Val:
    """x * log1p(y) in `_xlogy`'s order of the cases."""
    return b.where(b.isnan(y), math.nan, b.where(x.eq(0), 0.0, x * b.log1p(y)))


def _softshrink(b: KernelBuilder, x: Val, a: dict) -> Val:
    """x ∓ lambd outside [-lambd, lambd], else x · 0 (-0 for a negative x, NaN for NaN), as eager's kernel."""
    lambd = a.get("lambd", 0.5)
    return b.where(x.gt(lambd), x - lambd, b.where(x.lt(-lambd), x + lambd, x * 0.0))


def _celu(b: KernelBuilder, x: Val, a: dict) -> Val:
    alpha = a.get("alpha", 1.0)
    return b.where(x.gt(0), x, b.expm1(x / alpha) * alpha)


def _sinc(b: KernelBuilder, x: Val, a: dict) -> Val:
    px = x * math.pi
    return b.where(px.eq(0), 1.0, b.sin(px) / px)


def _entr(b: KernelBuilder, x: Val, a: dict) -> Val:
    return b.where(b.isnan(x), x, b.where(x.gt(0), -x * b.log(x), b.where(x.eq(0), 0.0, b.lift(-math.inf, x.dtype))))


def _logit(b: KernelBuilder, x: Val, a: dict) -> Val:
    eps = a.get("eps")
    lo, hi = (-1.0, 2.0) if eps is None else (eps, 1.0 - eps)  # without eps the clamp changes no result's NaN
    x = b.where(x.lt(lo), lo, b.where(x.gt(hi), hi, x))
    return b.log(x / (1.0 - x))


def _mish(b: KernelBuilder, x: Val, a: dict) -> Val:
    return x * b.tanh(_softplus(b, x, {}))


def _nan_to_num(b: KernelBuilder, x: Val, a: dict) -> Val:
    if x.dtype not in ("float32", "float64"):
        return x
    info = torch.finfo(to_dtype(a["_out"]))
    nan, posinf, neginf = a.get("nan"), a.get("posinf"), a.get("neginf")
    x = b.where(b.isnan(x), 0.0 if nan is None else nan, x)
    x = b.where(x.eq(math.inf), info.max if posinf is None else posinf, x)
    return b.where(x.eq(-math.inf), info.min if neginf is None else neginf, x)


def _isfinite(b: KernelBuilder, x: Val, a: dict) -> Val:
    if x.dtype in ("float32", "float64"):
        return b.not_(b.or_(b.isnan(x), b.isinf(x)))
    return b.const(True, "bool")


def _cast_rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    device = a.get("device")
    x = ctx.tensor(a.get("self", a.get("a")))
    if device is not None and str(device) != ctx.values[node.outputs[0]].device:
        raise Unsupported("copy to another device")
    if a.get("layout") not in (None, torch.strided):
        raise Unsupported("copy to another layout")
    out = ctx.values[node.outputs[0]]
    return ctx.pointwise(lambda b, v: b.cast(v, out.dtype), [x], ctx.shape_of(node.outputs[0]), out.dtype)


def _copy_rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    out = ctx.values[node.outputs[0]]
    src = ctx.tensor(a["src"])
    return ctx.pointwise(lambda b, v: b.cast(v, out.dtype), [src], ctx.shape_of(node.outputs[0]), out.dtype)


def _with_out(fn: Fn) -> Callable:
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        return elementwise(("self",), fn)(ctx, node, {**a, "_out": ctx.values[node.outputs[0]].dtype})
    return rule


def _build_table() -> dict[str, Callable]:  # the whole table, read top to bottom: one place per op
    rules: dict[str, Callable] = {}

    def add(names: list[str], rule: Callable) -> None:
        for n in names:
            rules[n] = rule

    for name, op in UNARY.items():
        add([f"aten.{name}.default"], elementwise(("self",), _unary(op)))
    for name, op in BINARY.items():
        add([f"aten.{name}.{o}" for o in OVERLOADS], elementwise(("self", "other"), _binary(op)))
    for name, op in COMPARE.items():
        add([f"aten.{name}.Tensor", f"aten.{name}.Scalar"], elementwise(("self", "other"), _binary(op), "promote"))
    for name, op in LOGICAL.items():
        add([f"aten.{name}.default"], elementwise(("self", "other"), _binary(op), "bool"))
    add(["aten.logical_not.default"], elementwise(("self",), lambda b, x, a: b.not_(x), "bool"))
    add(["aten.add.Tensor", "aten.add.Scalar"],
        elementwise(("self", "other"), lambda b, x, y, a: x + _scaled(b, y, a.get("alpha"))))
    add(["aten.sub.Tensor", "aten.sub.Scalar"],
        elementwise(("self", "other"), lambda b, x, y, a: x - _scaled(b, y, a.get("alpha"))))
    add(["aten.rsub.Tensor", "aten.rsub.Scalar"],
        elementwise(("self", "other"), lambda b, x, y, a: y - _scaled(b, x, a.get("alpha"))))
    add(["aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode",
         "aten.true_divide.Tensor"], elementwise(("self", "other"), _div))
    add(["aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"], elementwise(("self", "exponent"), _pow))
    add(["aten.pow.Scalar"], elementwise(("self", "exponent"), _binary(Op.POW)))
    add(["aten.fmax.default"], elementwise(("self", "other"), lambda b, x, y, a: b.where(
        b.isnan(x), y, b.where(b.isnan(y), x, b.maximum(x, y)))))
    add(["aten.fmin.default"], elementwise(("self", "other"), lambda b, x, y, a: b.where(
        b.isnan(x), y, b.where(b.isnan(y), x, b.minimum(x, y)))))
    for pred, op in {"isnan": Op.ISNAN, "isinf": Op.ISINF, "signbit": Op.SIGNBIT}.items():
        add([f"aten.{pred}.default"], elementwise(("self",), _unary(op), "promote"))
    add(["aten.isposinf.default"], elementwise(("self",), lambda b, x, a: x.eq(math.inf), "promote"))
    add(["aten.isneginf.default"], elementwise(("self",), lambda b, x, a: x.eq(-math.inf), "promote"))
    add(["aten.isfinite.default"], elementwise(("self",), _isfinite, "promote"))
    add(["aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar"],
        elementwise(("condition", "self", "other"), _where, keep=("condition",)))
    add(["aten.clamp.default", "aten.clamp.Tensor"], elementwise(("self", "min", "max"), _clamp))
    add(["aten.clamp_min.default", "aten.clamp_min.Tensor"],
        elementwise(("self", "min"), lambda b, x, lo, a: _clamp(b, x, lo, None, a)))
    add(["aten.clamp_max.default", "aten.clamp_max.Tensor"],
        elementwise(("self", "max"), lambda b, x, hi, a: _clamp(b, x, None, hi, a)))
    add(["aten.hardtanh.default"], elementwise(("self", "min_val", "max_val"), _clamp))
    add(["aten.masked_fill.Scalar", "aten.masked_fill.Tensor"],
        elementwise(("mask", "value", "self"), _where, keep=("mask",)))
    add(["aten.lerp.Scalar", "aten.lerp.Tensor"], elementwise(("self", "end", "weight"), _lerp))
    add(["aten.addcmul.default"], elementwise(("self", "tensor1", "tensor2"),
                                              lambda b, x, t1, t2, a: x + _scaled(b, t1 * t2, a.get("value"))))
    # Dynamo writes `addcmul_` with a value as `prims.fma(t1 * t2, value, self)` (one rounding in eager; two here)
    add(["prims.fma.default"], elementwise(("a", "b", "c"), lambda b, x, y, z, a: x * y + z))
    add(["aten.addcdiv.default"], elementwise(("self", "tensor1", "tensor2"),
                                              lambda b, x, t1, t2, a: x + _scaled(b, t1 / t2, a.get("value"))))
    add(["aten.relu.default"], elementwise(("self",), lambda b, x, a: _clamp(b, x, 0, None, a)))
    add(["aten.gelu.default"], elementwise(("self",), _gelu))
    add(["aten.silu.default"], elementwise(("self",), lambda b, x, a: x * b.sigmoid(x)))
    add(["aten.leaky_relu.default"], _leaky_relu)
    add(["aten.elu.default"], elementwise(("self",), _elu))
    add(["aten.softplus.default"], elementwise(("self",), _softplus))
    add(["aten.hardsigmoid.default"], elementwise(("self",), _hardsigmoid))
    add(["aten.hardswish.default"], elementwise(("self",), _hardswish))
    add(["aten.mish.default"], elementwise(("self",), _mish))
    add(["aten.xlogy.Tensor", "aten.xlogy.Scalar_Other", "aten.xlogy.Scalar_Self"],
        elementwise(("self", "other"), _xlogy))
    add(["aten.special_xlog1py.default", "aten.special_xlog1py.other_scalar", "aten.special_xlog1py.self_scalar"],
        elementwise(("self", "other"), _xlog1py))
    add(["aten.celu.default"], elementwise(("self",), _celu))
    add(["aten.softshrink.default"], elementwise(("self",), _softshrink))
    add(["aten.sinc.default"], elementwise(("self",), _sinc))
    add(["aten.special_entr.default"], elementwise(("self",), _entr))
    add(["aten.logit.default"], elementwise(("self",), _logit))
    add(["aten.frac.default"], elementwise(("self",), lambda b, x, a: x - b.trunc(x)))
    add(["aten.square.default"], elementwise(("self",), lambda b, x, a: x * x))
    add(["aten.nan_to_num.default"], _with_out(_nan_to_num))
    add(["aten._to_copy.default", "prims.convert_element_type.default", "aten.clone.default",
         "aten.lift_fresh_copy.default"], _cast_rule)
    add(["aten.copy.default"], _copy_rule)
    return rules


pointwise_rules: dict[str, Callable] = _build_table()
