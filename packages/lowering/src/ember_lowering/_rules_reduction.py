"""Lowering rules of reductions over any dims, with keepdim: sum, prod, amax/amin, max/min (values and
indices), argmax/argmin, any/all, mean (sum then divide), var/std/var_mean (Welford), logsumexp, vector norms.

Each reduction is one kernel; the division of mean and var is a second, pointwise kernel that the scheduler
fuses into the first. float16/bfloat16 inputs accumulate in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
from ember_core import Node

from ._builder import KernelBuilder, Val
from ._context import LoweringContext, TensorRef
from ._errors import Unsupported
from ._indexing import ONE
from ._loop_ir import FLOAT_DTYPES, Op, opmath
from ._rules_view import drop_dims


def reduce_dims(x: TensorRef, dim: Any) -> list[int]:
    """Normalized dims to reduce; `None`, `[]` and a 0-d input mean every dim."""
    if dim is None or x.rank == 0:
        return list(range(x.rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % x.rank for d in dims}) or list(range(x.rank))


def count(x: TensorRef, dims: Sequence[int]) -> sympy.Expr:
    return sympy.Mul(*(x.shape[d] for d in dims)) if dims else ONE


def _acc(kind: str, x: TensorRef, out_dtype: str) -> str:
    return {"out": opmath(out_dtype), "input": opmath(x.dtype), "bool": "bool"}[kind]


def simple(op: Op, acc: str, dim_key: str = "dim") -> Callable:
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        x = ctx.tensor(a["self"])
        out = ctx.values[node.outputs[0]].dtype
        dims = reduce_dims(x, a.get(dim_key))
        return ctx.reduction(op, x, dims, bool(a.get("keepdim", False)), out, acc=_acc(acc, x, out))
    return rule


def with_indices(value_op: Op, index_op: Op) -> Callable:
    """max.dim / min.dim: values and indices, two reductions the scheduler fuses into one loop."""
    def rule(ctx: LoweringContext, node: Node, a: dict) -> list[TensorRef]:
        x = ctx.tensor(a["self"])
        dims, keep = reduce_dims(x, a["dim"]), bool(a.get("keepdim", False))
        acc = opmath(x.dtype)
        values = ctx.reduction(value_op, x, dims, keep, x.dtype, acc=acc)
        return [values, ctx.reduction(index_op, x, dims, keep, "int64", acc=acc)]
    return rule


def _operands(ctx: LoweringContext, node: Node, a: dict) -> tuple[TensorRef, str, str, list[int]]:
    """What a reduction rule starts from: its input, its output dtype, the dtype it accumulates in (torch's
    opmath of the output) and the reduced dims."""
    x = ctx.tensor(a["self"])
    out = ctx.values[node.outputs[0]].dtype
    return x, out, opmath(out), reduce_dims(x, a.get("dim"))


def _mean(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x, out, acc, dims = _operands(ctx, node, a)
    total = ctx.reduction(Op.REDUCE_SUM, x, dims, bool(a.get("keepdim", False)), acc, acc=acc)
    n = count(x, dims)
    return ctx.pointwise(lambda b, s: s / n, [total], total.shape, out)


def welford(ctx: LoweringContext, x: TensorRef, dims: list[int], keepdim: bool,
            acc: str) -> tuple[TensorRef, TensorRef]:
    """(mean, m2) of x over dims, in `acc`."""
    return ctx.reduction(Op.REDUCE_WELFORD, x, dims, keepdim, acc, acc=acc)


def variance(b: KernelBuilder, m2: Val, n: sympy.Expr, correction: Any) -> Val:
    """m2 / max(n - correction, 0), as torch divides."""
    correction = 1 if correction is None else correction
    return m2 / b.maximum(b.lift(n, m2.dtype) - correction, 0.0)


def _var(kind: str) -> Callable:
    """var / std (one output) and var_mean / std_mean (two)."""
    def rule(ctx: LoweringContext, node: Node, a: dict) -> Any:
        x, out, acc, dims = _operands(ctx, node, a)
        mean, m2 = welford(ctx, x, dims, bool(a.get("keepdim", False)), acc)
        n, correction = count(x, dims), a.get("correction")

        def fn(b: KernelBuilder, v: Val) -> Val:
            var = variance(b, v, n, correction)
            return b.sqrt(var) if kind.startswith("std") else var
        result = ctx.pointwise(fn, [m2], m2.shape, out)
        if not kind.endswith("_mean"):
            return result
        mean_out = ctx.values[node.outputs[1]].dtype
        return [result, mean if mean_out == acc else ctx.pointwise(lambda b, v: v, [mean], mean.shape, mean_out)]
    return rule


def _logsumexp(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    x, out, acc, dims = _operands(ctx, node, a)
    m = ctx.reduction(Op.REDUCE_MAX, x, dims, True, acc, acc=acc)
    safe = ctx.pointwise(lambda b, v: b.where(b.isinf(v), 0.0, v), [m], m.shape, acc)
    total = _sum_exp(ctx, x, safe, dims, acc)
    if not a.get("keepdim", False):
        total, safe = drop_dims(total, dims), drop_dims(safe, dims)
    return ctx.pointwise(lambda b, s, mm: b.log(s) + mm, [total, safe], total.shape, out)


def _sum_exp(ctx: LoweringContext, x: TensorRef, shift: TensorRef, dims: list[int], acc: str) -> TensorRef:
    """sum(exp(x - shift)) over dims, keepdim; the exp is a pointwise kernel the scheduler inlines."""
    e = ctx.pointwise(lambda b, v, s: b.exp(b.cast(v, acc) - s), [x, shift], x.shape, acc)
    return ctx.reduction(Op.REDUCE_SUM, e, dims, True, acc, acc=acc)


def _vector_norm(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    """linalg.vector_norm of a float tensor for ord 2 (the square root of the sum of squares), 1 (the sum of |x|),
    inf and -inf (the max / min of |x|), accumulated in torch's opmath of the result as eager's kernel does (no
    scaling: float32 squares overflow as eager's do). Any other ord, a `dtype`, or the max / min over dims that may
    be empty (eager raises there) stays ATen's call."""
    x, out, acc, dims = _operands(ctx, node, a)
    order, keep = a.get("ord", 2), bool(a.get("keepdim", False))
    if a.get("dtype") is not None or x.dtype not in FLOAT_DTYPES or out != x.dtype or \
            isinstance(order, bool) or not isinstance(order, (int, float)):
        raise Unsupported("linalg.vector_norm with a dtype, of a non-float tensor or with a symbolic ord")
    if order == 2:
        sq = ctx.pointwise(lambda b, v: b.cast(v, acc) * b.cast(v, acc), [x], x.shape, acc)
        total = ctx.reduction(Op.REDUCE_SUM, sq, dims, keep, acc, acc=acc)
        return ctx.pointwise(lambda b, t: b.sqrt(t), [total], total.shape, out)
    if order not in (1, math.inf, -math.inf):
        raise Unsupported(f"linalg.vector_norm of ord {order}")
    if order != 1 and not all(x.shape[d].is_number and int(x.shape[d]) > 0 for d in dims):
        raise Unsupported("linalg.vector_norm's max / min over dims that may be empty")
    op = {1: Op.REDUCE_SUM, math.inf: Op.REDUCE_MAX, -math.inf: Op.REDUCE_MIN}[order]
    magnitude = ctx.pointwise(lambda b, v: b.abs(b.cast(v, acc)), [x], x.shape, acc)
    result = ctx.reduction(op, magnitude, dims, keep, acc, acc=acc)
    return result if acc == out else ctx.pointwise(lambda b, t: t, [result], result.shape, out)


reduction_rules: dict[str, Callable] = {
    "aten.sum.dim_IntList": simple(Op.REDUCE_SUM, "out"), "aten.sum.default": simple(Op.REDUCE_SUM, "out"),
    "aten.prod.dim_int": simple(Op.REDUCE_PROD, "out"), "aten.prod.default": simple(Op.REDUCE_PROD, "out"),
    "aten.amax.default": simple(Op.REDUCE_MAX, "input"), "aten.amin.default": simple(Op.REDUCE_MIN, "input"),
    "aten.max.default": simple(Op.REDUCE_MAX, "input"), "aten.min.default": simple(Op.REDUCE_MIN, "input"),
    "aten.max.dim": with_indices(Op.REDUCE_MAX, Op.REDUCE_ARGMAX),
    "aten.min.dim": with_indices(Op.REDUCE_MIN, Op.REDUCE_ARGMIN),
    "aten.argmax.default": simple(Op.REDUCE_ARGMAX, "input"),
    "aten.argmin.default": simple(Op.REDUCE_ARGMIN, "input"),
    "aten.any.default": simple(Op.REDUCE_ANY, "bool"), "aten.any.dim": simple(Op.REDUCE_ANY, "bool"),
    "aten.any.dims": simple(Op.REDUCE_ANY, "bool"), "aten.all.default": simple(Op.REDUCE_ALL, "bool"),
    "aten.all.dim": simple(Op.REDUCE_ALL, "bool"), "aten.all.dims": simple(Op.REDUCE_ALL, "bool"),
    "aten.mean.dim": _mean, "aten.mean.default": _mean,
    "aten.var.correction": _var("var"), "aten.std.correction": _var("std"),
    "aten.var_mean.correction": _var("var_mean"), "aten.std_mean.correction": _var("std_mean"),
    "aten.logsumexp.default": _logsumexp, "aten.linalg_vector_norm.default": _vector_norm,
}
