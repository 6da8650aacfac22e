"""Scalars in a graph, as lowering sees them: symbolic ints (sizes, and arithmetic on them: `sym_rules` give their
sympy values), and numbers read from tensors at run time (`scalar_tensor`: `.item()`, a float Dynamo made an
input), which kernels load from their 0-d tensor, Python arithmetic on them computed by 0-d kernels
(`run_time_arithmetic`), and ATen calls get as `Item` arguments. `check_bound` refuses a plan that uses a symbol
no rule could express."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
from ember_core import Node, Ref, Sym, as_sympy, parse_expr

from ._builder import KernelBuilder, Val
from ._context import LoweringContext, TensorRef
from ._errors import LoweringError
from ._indexing import sym, to_expr
from ._loop_ir import Extern, KernelPlan


def _size_rule(fn: Callable) -> Callable:
    return lambda ctx, node, args: fn(ctx, *args)


# Ops on symbolic ints → their sympy value. A symbolic value no rule covers becomes a fresh symbol.
sym_rules: dict[str, Callable[..., Any]] = {
    "aten.sym_size.int": _size_rule(lambda ctx, x, d: ctx.tensor(x).shape[d]),
    "aten.sym_numel.default": _size_rule(lambda ctx, x: sympy.Mul(*ctx.tensor(x).shape)),
    "aten.sym_stride.int": _size_rule(lambda ctx, x, d: to_expr(ctx.values[x.name].stride[d])),
    "aten.sym_storage_offset.default": _size_rule(lambda ctx, x: to_expr(ctx.values[x.name].storage_offset)),
    "operator.add": _size_rule(lambda ctx, a, b: ctx.scalar(a) + ctx.scalar(b)),
    "operator.sub": _size_rule(lambda ctx, a, b: ctx.scalar(a) - ctx.scalar(b)),
    "operator.mul": _size_rule(lambda ctx, a, b: ctx.scalar(a) * ctx.scalar(b)),
    "operator.floordiv": _size_rule(lambda ctx, a, b: sympy.floor(as_sympy(ctx.scalar(a)) / ctx.scalar(b))),
    "operator.mod": _size_rule(lambda ctx, a, b: sympy.Mod(ctx.scalar(a), ctx.scalar(b))),
    "operator.neg": _size_rule(lambda ctx, a: -ctx.scalar(a)),
    "operator.truediv": _size_rule(lambda ctx, a, b: as_sympy(ctx.scalar(a)) / ctx.scalar(b)),
    "math.ceil": _size_rule(lambda ctx, a: sympy.ceiling(ctx.scalar(a))),
    "math.floor": _size_rule(lambda ctx, a: sympy.floor(ctx.scalar(a))),
    "torch.sym_max": _size_rule(lambda ctx, a, b: sympy.Max(ctx.scalar(a), ctx.scalar(b))),
    "torch.sym_min": _size_rule(lambda ctx, a, b: sympy.Min(ctx.scalar(a), ctx.scalar(b))),
    "torch.sym_int": _size_rule(lambda ctx, a: sympy.floor(ctx.scalar(a))),
    "torch.sym_float": _size_rule(lambda ctx, a: ctx.scalar(a)),
    "operator.pow": _size_rule(lambda ctx, a, b: sympy.Pow(_exact(ctx.scalar(a)), _exact(ctx.scalar(b)))),
    "torch.sym_sqrt": _size_rule(lambda ctx, a: sympy.sqrt(ctx.scalar(a))),
}


def _exact(x: Any) -> Any:
    """A Python float as the sympy rational it is exactly (0.5 → 1/2), so sizes raised to it stay exact."""
    return sympy.Rational(x) if isinstance(x, float) and math.isfinite(x) else x


def scalar_tensor(ctx: LoweringContext, node: Node) -> TensorRef | None:
    """A number read out of a 0-d tensor (`_local_scalar_dense`: how Dynamo passes a Python float that changes
    between calls, as a 0-d float64 input, and how `.item()` reads a value the graph computed): kernels read it
    from the tensor itself, as a broadcast operand. That is exact wherever a kernel computes it: the op's result
    dtype is the graph's, and the operand is converted to the op's compute dtype as ATen converts a Python scalar.
    An ATen call is given it as an `Item`. Complex numbers are not read this way.

    A CPU tensor in a plan of another device (Dynamo's 0-d float64 of a float, beside CUDA tensors) is copied to
    the device once, by an ATen call at the point of the read, and kernels load the copy: a GPU kernel cannot read
    host memory. ATen calls still read the CPU tensor (`host_of`), which needs no wait for the device."""
    if node.op != "aten._local_scalar_dense.default" or not node.args or not isinstance(node.args[0], Ref):
        return None
    v = ctx.values.get(node.args[0].name)
    ref = ctx.env.get(node.args[0].name)
    if v is None or v.type != "tensor" or v.shape != () or not isinstance(ref, TensorRef) or \
            v.dtype.startswith("complex"):
        return None
    if v.device == ctx.device:
        return ref
    host = ctx.materialize(ref)
    copy = ctx.new_buffer((), v.dtype, name=ctx.fresh_name(f"{host}_on_device"))
    ctx.steps.append(Extern((copy,), "aten._to_copy.default", (Ref(host),), {"device": torch.device(ctx.device)},
                            ctx.origin))
    ctx.host_of[copy] = host
    return ctx.identity(copy)


# Python arithmetic a graph does on numbers it reads from tensors at run time (an optimizer's `-lr` and
# `lr * weight_decay` once Dynamo made a learning rate that changes an input)
_RUN_TIME_ARITHMETIC: dict[str, Callable[..., Any]] = {
    "operator.add": lambda b, x, y: x + y,
    "operator.sub": lambda b, x, y: x - y,
    "operator.mul": lambda b, x, y: x * y,
    "operator.truediv": lambda b, x, y: x / y,
    "operator.neg": lambda b, x: -x,
    "operator.pow": lambda b, x, y: x ** y,
    "torch.sym_float": lambda b, x: x,
    "torch.sym_sqrt": lambda b, x: b.sqrt(x),
}


def run_time_arithmetic(ctx: LoweringContext, node: Node) -> TensorRef | None:
    """A number computed from numbers read from tensors at run time (`scalar_tensor`), as a 0-d kernel in the
    result's dtype: float64 for a Python float, int64 for an int, with every operand converted to it first, as
    Python converts an int it adds to a float. Kernels that use the number load it like the numbers it is made
    from. None when no operand is such a number or Python's arithmetic has no kernel form here (floor division,
    comparisons): the value then stays a symbol, which a plan cannot bind."""
    fn = _RUN_TIME_ARITHMETIC.get(node.op)
    out = ctx.values[node.outputs[0]]
    if fn is None or len(node.outputs) != 1 or node.kwargs or out.dtype not in ("float64", "int64") or \
            not any(isinstance(a, Ref) and ctx.read_at_run_time(a.name) for a in node.args):
        return None
    if node.op == "operator.truediv" and out.dtype != "float64":
        return None
    operands = [ctx.env[a.name] if isinstance(a, Ref) and ctx.read_at_run_time(a.name) else ctx.scalar(a)
                for a in node.args]

    def body(b: KernelBuilder, *vals: Any) -> Val:
        return fn(b, *(b.cast(v, out.dtype) if isinstance(v, Val) else b.lift(v, out.dtype) for v in vals))
    return ctx.pointwise(body, operands, (), out.dtype)


def sym_value(ctx: LoweringContext, node: Node) -> Any:
    """The sympy value of a symbolic-int node; a fresh symbol named after it when no rule can tell (nothing binds
    it at run time: `check_bound` refuses a plan that uses one)."""
    rule = sym_rules.get(node.op)
    try:
        if rule is not None:
            return rule(ctx, node, node.args)
    except (LoweringError, KeyError, IndexError, TypeError):
        pass
    ctx.opaque[node.outputs[0]] = node.op
    return sym(node.outputs[0])


def check_bound(ctx: LoweringContext, plan: KernelPlan) -> None:
    """LoweringError if a step uses a symbolic value no rule could express: its kernels or extern calls would
    read a symbol nothing binds (the graph then runs in the interpreter codegen, which computes it)."""
    if not ctx.opaque:
        return
    exprs = [e for b in plan.buffers for e in (*b.shape, *b.stride, b.offset)]
    for step in plan.steps:
        if isinstance(step, Extern):
            exprs += [parse_expr(a.expr) for a in _flat(step.args, step.kwargs) if isinstance(a, Sym)]
        else:
            exprs += [e for i in step.instrs() for e in i.index]
    used = {s.name for e in exprs for s in as_sympy(e).free_symbols} & set(ctx.opaque)
    if used:
        name = sorted(used)[0]
        raise LoweringError(f"symbolic value {name!r} ({ctx.opaque[name]}) has no lowering rule, and a step uses it")


def _flat(args: Any, kwargs: dict) -> list:
    out, todo = [], [*args, *kwargs.values()]
    while todo:
        a = todo.pop()
        if isinstance(a, (list, tuple)):
            todo.extend(a)
        else:
            out.append(a)
    return out
