"""Lowering rules of softmax, log_softmax, logsumexp and the norms, written as the decompositions they are.

Each emits the kernels of its decomposition (a max, a sum of exps, a division; a Welford reduction and an
epilogue) and leaves the fusing to the scheduler: softmax and layer norm end as one kernel each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
from ember_core import Node, as_sympy

from ._builder import KernelBuilder, Val
from ._context import LoweringContext, TensorRef
from ._errors import Unsupported
from ._loop_ir import Op, opmath
from ._rules_reduction import count, welford
from ._rules_view import drop_dims, reshape_index


def _softmax(log: bool) -> Callable:
    def rule(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
        x = ctx.tensor(a["self"])
        out = ctx.values[node.outputs[0]].dtype
        acc = opmath(out)
        dims = [a["dim"] % x.rank] if x.rank else []
        m = ctx.reduction(Op.REDUCE_MAX, x, dims, True, acc, acc=acc)
        e = ctx.pointwise(lambda b, v, mm: b.exp(b.cast(v, acc) - mm), [x, m], x.shape, acc)
        s = ctx.reduction(Op.REDUCE_SUM, e, dims, True, acc, acc=acc)
        if log:
            return ctx.pointwise(lambda b, v, mm, ss: b.cast(v, acc) - mm - b.log(ss), [x, m, s], x.shape, out)
        if ctx.device == "cpu":  # times the row's `1 / sum`, as eager's CPU kernel (hoisted: once a row)
            return ctx.pointwise(lambda b, ee, ss: ee * b.reciprocal(ss), [e, s], x.shape, out)
        return ctx.pointwise(lambda b, ee, ss: ee / ss, [e, s], x.shape, out)  # eager's CUDA kernel divides
    return rule


def _logsumexp(ctx: LoweringContext, node: Node, a: dict) -> TensorRef:
    """log(sum(exp(x - m))) + m with m the max over `dim`, taken as 0 where it is infinite (a row of -inf gives
    -inf, one with +inf gives +inf, not NaN): ATen's kernel. Kept whole (`NUMERICALLY_KEPT`) for its derivative."""
    x = ctx.tensor(a["self"])
    out = ctx.values[node.outputs[0]].dtype
    acc = opmath(out)
    n = x.rank
    dims = sorted({d % n for d in a["dim"]}) if n and a["dim"] else list(range(n))
    m = ctx.reduction(Op.REDUCE_MAX, x, dims, True, acc, acc=acc)

    def finite(b: KernelBuilder, mm: Val) -> Val:
        return b.where(b.abs(mm).eq(b.const(float("inf"), acc)), b.const(0.0, acc), mm)

    e = ctx.pointwise(lambda b, v, mm: b.exp(b.cast(v, acc) - finite(b, mm)), [x, m], x.shape, acc)
    s = ctx.reduction(Op.REDUCE_SUM, e, dims, True, acc, acc=acc)
    r = ctx.pointwise(lambda b, ss, mm: b.log(ss) + finite(b, mm), [s, m], s.shape, out)
    return r if a.get("keepdim", False) else drop_dims(r, dims)


def _affine(b: KernelBuilder, y: Val, w: Val | None, bias: Val | None) -> Val:
    if w is not None:
        y = y * b.cast(w, y.dtype)
    if bias is not None:
        y = y + b.cast(bias, y.dtype)
    return y


def _optional(ctx: LoweringContext, arg: Any) -> TensorRef | None:
    return None if arg is None else ctx.tensor(arg)


def _stat(ctx: LoweringContext, node: Node, k: int, t: TensorRef) -> TensorRef:
    """Output k (a mean or rstd) in the dtype the graph records."""
    dtype = ctx.values[node.outputs[k]].dtype
    return t if t.dtype == dtype else ctx.pointwise(lambda b, v: v, [t], t.shape, dtype)


def _layer_norm(ctx: LoweringContext, node: Node, a: dict) -> list[TensorRef]:
    x = ctx.tensor(a["input"])
    acc = opmath(x.dtype)
    dims = list(range(x.rank - len(a["normalized_shape"]), x.rank))
    mean, m2 = welford(ctx, x, dims, True, acc)
    n, eps = count(x, dims), a["eps"]
    rstd = ctx.pointwise(lambda b, v: b.rsqrt(v / n + eps), [m2], m2.shape, acc)
    w, bias = _optional(ctx, a["weight"]), _optional(ctx, a["bias"])
    inputs = [x, mean, rstd] + [t for t in (w, bias) if t is not None]

    def fn(b: KernelBuilder, v: Val, mu: Val, r: Val, *wb: Val) -> Val:
        wv = wb[0] if w is not None else None
        bv = wb[-1] if bias is not None else None
        return _affine(b, (b.cast(v, acc) - mu) * r, wv, bv)
    out = ctx.pointwise(fn, inputs, x.shape, ctx.values[node.outputs[0]].dtype)
    return [out, _stat(ctx, node, 1, mean), _stat(ctx, node, 2, rstd)]


def _group_norm(ctx: LoweringContext, node: Node, a: dict) -> list[TensorRef]:
    x = ctx.tensor(a["input"])
    acc = opmath(x.dtype)
    n, c, hw, g = (as_sympy(ctx.scalar(a[k])) for k in ("N", "C", "HxW", "group"))
    per_group = sympy.floor(c / g)
    grouped_shape = [n, g, per_group * hw]
    grouped = x.view(grouped_shape, lambda v: reshape_index(ctx, x.shape, grouped_shape, v))
    mean, m2 = welford(ctx, grouped, [2], False, acc)
    eps = a["eps"]
    rstd = ctx.pointwise(lambda b, v: b.rsqrt(v / (per_group * hw) + eps), [m2], m2.shape, acc)

    def by_channel(t: TensorRef) -> TensorRef:
        return t.view(x.shape, lambda v: [v[0], sympy.floor(v[1] / per_group)])
    w, bias = _optional(ctx, a["weight"]), _optional(ctx, a["bias"])
    inputs = [x, by_channel(mean), by_channel(rstd)] + [t.view(x.shape, lambda v: [v[1]])
                                                        for t in (w, bias) if t is not None]

    def fn(b: KernelBuilder, v: Val, mu: Val, r: Val, *wb: Val) -> Val:
        return _affine(b, (b.cast(v, acc) - mu) * r, wb[0] if w is not None else None,
                       wb[-1] if bias is not None else None)
    out = ctx.pointwise(fn, inputs, x.shape, ctx.values[node.outputs[0]].dtype)
    return [out, _stat(ctx, node, 1, mean), _stat(ctx, node, 2, rstd)]


def _batch_norm(ctx: LoweringContext, node: Node, a: dict, training: bool,
                updated_at: tuple[int, int] | None = None) -> list[TensorRef | None]:
    """Normalize over every dim but 1; stats from the batch (training) or the running stats. A functional op also
    returns the running stats, updated (training) or as they were, as outputs `updated_at`."""
    x = ctx.tensor(a["input"])
    acc = opmath(x.dtype)
    eps = a["eps"]
    if training:
        dims = [0, *range(2, x.rank)]
        mean, m2 = welford(ctx, x, dims, False, acc)
        n = count(x, dims)
        invstd = ctx.pointwise(lambda b, v: b.rsqrt(b.cast(v, _wide(acc)) / n + eps), [m2], m2.shape, acc)
    else:
        mean = ctx.tensor(a["running_mean"])
        invstd = ctx.pointwise(lambda b, v: b.rsqrt(b.cast(v, acc) + eps), [ctx.tensor(a["running_var"])],
                               ctx.tensor(a["running_var"]).shape, acc)
    w, bias = _optional(ctx, a["weight"]), _optional(ctx, a["bias"])
    per_channel = [t.view(x.shape, lambda v: [v[1]]) for t in (mean, invstd, w, bias) if t is not None]

    def fn(b: KernelBuilder, v: Val, mu: Val, r: Val, *wb: Val) -> Val:
        return _affine(b, (b.cast(v, acc) - b.cast(mu, acc)) * r, wb[0] if w is not None else None,
                       wb[-1] if bias is not None else None)
    out = ctx.pointwise(fn, [x, *per_channel], x.shape, ctx.values[node.outputs[0]].dtype)
    if not training:
        results = [out, *(_empty(ctx, node, k) for k in (1, 2))]
        running = [ctx.tensor(a[k]) for k in ("running_mean", "running_var")]
        updated = [_copy(ctx, node, k, t) for k, t in zip(updated_at or (), running)]
        return results + updated
    results = [out, _stat(ctx, node, 1, mean), _stat(ctx, node, 2, invstd)]
    return results + (_running_stats(ctx, node, a, mean, m2, n, updated_at) if updated_at else [])


def _wide(dtype: str) -> str:
    """Where batch norm's 1/std is computed: float64 for float32 statistics, then rounded once, as ATen's CPU kernel
    does (one value a channel; in float32, rsqrt's two roundings put the saved 1/std and with it every gradient
    further from float64 than eager's)."""
    return "float64" if dtype == "float32" else dtype


def _running_stats(ctx: LoweringContext, node: Node, a: dict, mean: TensorRef, m2: TensorRef, n: sympy.Expr,
                   at: tuple[int, int]) -> list[TensorRef]:
    """The running stats moved `momentum` of the way to the batch's mean and unbiased variance, computed as 1/std is
    (`_wide`: nothing rounded to the stats' dtype first, as ATen), returned in the dtypes the graph records for
    outputs `at` (torch's meta functions say float32 for bfloat16 stats, where ATen's CPU kernel returns bfloat16;
    the graph casts them back for the write into the buffers)."""
    momentum, wide = a["momentum"], _wide(mean.dtype)
    rm, rv = ctx.tensor(a["running_mean"]), ctx.tensor(a["running_var"])
    mean_dtype, var_dtype = (ctx.values[node.outputs[k]].dtype for k in at)

    def update(b: KernelBuilder, running: Val, batch: Val) -> Val:
        return b.cast(running, wide) * (1 - momentum) + batch * momentum
    new_mean = ctx.pointwise(lambda b, r, m: update(b, r, b.cast(m, wide)), [rm, mean], rm.shape, mean_dtype)
    new_var = ctx.pointwise(lambda b, r, s: update(b, r, b.cast(s, wide) / (b.lift(n, wide) - 1.0)), [rv, m2],
                            rv.shape, var_dtype)
    return [new_mean, new_var]


def _copy(ctx: LoweringContext, node: Node, k: int, t: TensorRef) -> TensorRef:
    """A new tensor (a functional op's output, never its input's buffer) with t's values in output k's dtype."""
    return ctx.pointwise(lambda b, v: v, [t], t.shape, ctx.values[node.outputs[k]].dtype)


def _empty(ctx: LoweringContext, node: Node, k: int) -> TensorRef | None:
    v = ctx.values.get(node.outputs[k]) if k < len(node.outputs) else None
    if v is None or v.type != "tensor":
        return None
    return ctx.pointwise(lambda b: 0, [], ctx.shape_of(node.outputs[k]), v.dtype)


def _native_batch_norm(ctx: LoweringContext, node: Node, a: dict) -> list:
    if a["training"] and a["running_mean"] is not None:
        raise Unsupported("training batch norm updates its running stats in place")
    return _batch_norm(ctx, node, a, bool(a["training"]))


def _legit_no_stats(ctx: LoweringContext, node: Node, a: dict) -> list:
    return _batch_norm(ctx, node, a, bool(a["training"]))


def _legit_functional(ctx: LoweringContext, node: Node, a: dict) -> list:
    """(output, mean, rstd, running mean, running var): the last two updated in training, passed through in eval."""
    return _batch_norm(ctx, node, a, bool(a["training"]), updated_at=(3, 4))


def _with_update_functional(ctx: LoweringContext, node: Node, a: dict) -> list:
    """(output, mean, rstd, reserve, running mean, running var): training mode with an empty reserve (cuDNN's)."""
    out, mean, rstd, new_mean, new_var = _batch_norm(ctx, node, a, True, updated_at=(4, 5))
    return [out, mean, rstd, _empty(ctx, node, 3), new_mean, new_var]


norm_rules: dict[str, Callable] = {
    "aten._softmax.default": _softmax(log=False),
    "aten._log_softmax.default": _softmax(log=True),
    "aten.logsumexp.default": _logsumexp,
    "aten.native_layer_norm.default": _layer_norm,
    "aten.native_group_norm.default": _group_norm,
    "aten.native_batch_norm.default": _native_batch_norm,
    "aten._native_batch_norm_legit_no_training.default": lambda ctx, node, a: _batch_norm(ctx, node, a, False),
    "aten._native_batch_norm_legit.no_stats": _legit_no_stats,
    "aten._native_batch_norm_legit_functional.default": _legit_functional,
    "aten._batch_norm_with_update_functional.default": _with_update_functional,
}
