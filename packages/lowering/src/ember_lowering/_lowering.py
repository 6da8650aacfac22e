"""Lowering: an ATen `Graph` → an unfused `KernelPlan`, one walk over the nodes driven by `lowering_rules`.

Each rule takes `(ctx, node, a)` (`a`: the node's arguments by schema name, defaults filled in) and returns
one `TensorRef` per node output (or `None` for an output it does not produce). A node whose op has no rule,
whose rule raises `Unsupported`, or that touches a dtype or device kernels do not handle becomes an `Extern`
call of the ATen op: a missing lowering is never an error. `lower()` then runs the scheduler.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
from ember_core import (
    Event,
    Graph,
    Node,
    Ref,
    Stopwatch,
    Sym,
    Value,
    dtype_name,
    emit,
    has_effect,
    is_custom_function,
    node_refs,
    resolve_op,
    run_graph_passes,
)

from ._context import LoweringContext, TensorRef
from ._decisions import Decision
from ._errors import LoweringError, Unsupported
from ._indexing import sym, to_expr
from ._loop_ir import KERNEL_DTYPES, NAN, Buffer, Extern, Item, Kernel, KernelPlan
from ._rewrite import rename_buffers
from ._rules_index import index_rules
from ._rules_norm import norm_rules
from ._rules_pointwise import pointwise_rules
from ._rules_pool import pool_rules
from ._rules_reduction import reduction_rules
from ._rules_view import view_rules
from ._scalars import check_bound, run_time_arithmetic, scalar_tensor, sym_value
from ._scheduler import bind_passes, default_passes, drop_unused_buffers, name_kernels, order_buffers, schedule
from ._split_reductions import SplitPolicy
from ._verify import verify_plan

log = logging.getLogger("ember.kernels")

Rule = Callable[[LoweringContext, Node, dict], Any]

# ATen op name → rule. Add an op here (or in its _rules_*.py table) to lower it; without one it runs extern.
lowering_rules: dict[str, Rule] = {**pointwise_rules, **reduction_rules, **norm_rules, **view_rules, **index_rules,
                                   **pool_rules}


@functools.cache
def _schema_args(op: str) -> tuple[tuple[str, bool, Any], ...]:
    schema = resolve_op(op)._schema
    return tuple((a.name, a.kwarg_only, a.default_value) for a in schema.arguments)


def bind_args(node: Node) -> dict[str, Any]:
    """The node's arguments by schema name, with the schema's defaults for those it leaves out."""
    spec = _schema_args(node.op)
    out = {name: default for name, _, default in spec}
    out.update(zip((name for name, _, _ in spec), node.args))
    out.update(node.kwargs)
    return out


# ---------------------------------------------------------------------------------------------- the walk


def lower_graph(graph: Graph, split: SplitPolicy | None = None, decisions: list[Decision] | None = None,
                graph_passes: Sequence[str] | None = None) -> KernelPlan:
    """The unfused plan: the graph passes at `pre_lowering` first (`graph_passes`: their ids, as the `passes`
    option names them; None: the registered defaults), then one kernel per lowered op (views are index
    arithmetic), externs for the rest; long reductions with few results split in two under `split`
    (`_split_reductions.py`), each such choice appended to `decisions`."""
    graph = run_graph_passes(graph, "pre_lowering", graph_passes)
    ctx = LoweringContext(graph, split)
    if decisions is not None:
        ctx.decisions = decisions
    for inp in graph.inputs:
        v = graph.values[inp.name]
        if v.type == "tensor":
            ctx.new_buffer(v.shape, v.dtype, kind="input", stride=v.stride, name=inp.name)
            ctx.env[inp.name] = ctx.identity(inp.name)
        elif v.type == "sym" and not v.dtype.startswith(("int", "uint")):
            # symbols are integers (sizes, indices): a float or bool read as one would be truncated, silently
            raise LoweringError(f"input {inp.name!r} is a symbolic {v.dtype}, which kernels do not take")
        else:
            ctx.env[inp.name] = sym(inp.name)
    for name, c in sorted(graph.constants.items()):
        ctx.new_buffer(tuple(c.tensor.shape), dtype_name(c.tensor.dtype), kind="constant", stride=c.tensor.stride(),
                       name=name)
        ctx.env[name] = ctx.identity(name)
    needed = _needed(graph)
    for node in graph.nodes:
        if any(o in needed for o in node.outputs):
            lower_node(ctx, node)
    outputs = tuple(_output(ctx, o.name) for o in graph.outputs)
    plan = KernelPlan(graph.name, tuple(ctx.buffers.values()), tuple(ctx.steps), graph.input_names, outputs,
                      graph.symbols, ("lower",), ctx.device)
    plan = name_kernels(drop_unused_buffers(order_buffers(plan)))
    check_bound(ctx, plan)
    return plan


def _needed(graph: Graph) -> set[str]:
    """The values the outputs read, and those an effectful node reads (`ember_core.has_effect`: it is kept, as an
    extern call, though it has no output anyone reads)."""
    needed = {o.name for o in graph.outputs}
    for node in reversed(graph.nodes):
        if has_effect(node.op):
            needed.update(node.outputs)
        if any(o in needed for o in node.outputs):
            needed.update(node_refs(node))
    return needed


def lower_node(ctx: LoweringContext, node: Node) -> None:
    if is_custom_function(node.op):
        raise LoweringError(f"{node.outputs[0]} = {node.op}: a custom autograd function call has no kernel of its "
                            "own; the interpreter codegen runs it with its backward subgraph")
    ctx.origin = (node.outputs[0],)
    values = [ctx.values.get(o) for o in node.outputs]
    scalar_of = scalar_tensor(ctx, node)
    if scalar_of is not None:
        ctx.env[node.outputs[0]] = scalar_of
        return
    if values and all(v is not None and v.type == "sym" for v in values):
        computed = run_time_arithmetic(ctx, node)
        if computed is not None:
            ctx.env[node.outputs[0]] = computed
            return
        for o in node.outputs:
            ctx.env[o] = sym_value(ctx, node) if len(node.outputs) == 1 else sym(o)
        return
    reason = _cannot_lower(ctx, node)
    if reason is None:
        steps, buffers = len(ctx.steps), dict(ctx.buffers)
        try:
            results = lowering_rules[node.op](ctx, node, _symbolic_ints(ctx, bind_args(node)))
        except Unsupported as e:
            ctx.steps[steps:] = []
            ctx.buffers = buffers
            reason = str(e) or "unsupported arguments"
        else:
            _bind(ctx, node, results, steps, set(buffers))
            return
    log.debug("extern %s (%s): %s", node.op, node.outputs[0], reason)
    extern(ctx, node)


def _symbolic_ints(ctx: LoweringContext, args: dict[str, Any]) -> dict[str, Any]:
    """A rule's arguments with each read of a symbolic int (a `sym` input or node, alone or in a list: an alpha,
    a pad value, a stride Dynamo made an input) as its sympy value, as a rule takes a Python number; tensors and
    numbers read from tensors at run time stay refs (the rule loads them)."""
    def one(a: Any) -> Any:
        if isinstance(a, Ref) and not isinstance(ctx.env.get(a.name), TensorRef):
            return ctx.scalar(a)
        if isinstance(a, (list, tuple)):
            return type(a)(one(x) for x in a)
        return a
    return {k: one(v) for k, v in args.items()}


def _cannot_lower(ctx: LoweringContext, node: Node) -> str | None:
    if node.op not in lowering_rules:
        return "no lowering rule"
    for name in (*node.outputs, *node_refs(node)):
        v = ctx.values.get(name)
        if v is not None and v.type == "tensor":
            if v.dtype not in KERNEL_DTYPES:
                return f"dtype {v.dtype} is not computed by kernels"
            if v.device != ctx.device:
                return f"value {name!r} is on {v.device}, the plan on {ctx.device}"
    return None


def _bind(ctx: LoweringContext, node: Node, results: Any, first_step: int, old: set[str]) -> None:
    """Record each output's TensorRef; a buffer the rule made for an output takes the output's name."""
    results = results if isinstance(results, (tuple, list)) else (results,)
    renames: dict[str, str] = {}
    for name, r in zip(node.outputs, results):
        if r is None:
            continue
        if not isinstance(r, TensorRef):
            ctx.env[name] = r
            continue
        buf = ctx.buffers[r.buffer]
        if r.buffer not in old and buf.kind == "temp" and r.is_identity(buf) and r.buffer not in renames \
                and name not in ctx.buffers:
            renames[r.buffer] = name
            v = ctx.values.get(name)
            stride = v.stride if v is not None and _dense(ctx, buf.shape, v.stride) else buf.stride
            del ctx.buffers[r.buffer]
            ctx.new_buffer(buf.shape, buf.dtype, stride=stride, name=name)
            r = ctx.identity(name)
        ctx.env[name] = r
    if renames:
        ctx.steps[first_step:] = [rename_buffers(s, renames) for s in ctx.steps[first_step:]]
        for name in node.outputs:
            r = ctx.env.get(name)
            if isinstance(r, TensorRef) and r.buffer in renames:
                ctx.env[name] = TensorRef(renames[r.buffer], r.index, r.shape, r.dtype)


def _dense(ctx: LoweringContext, shape: tuple, stride: tuple) -> bool:
    """Does (shape, stride) cover its elements exactly once, like a permuted contiguous layout?"""
    if len(stride) != len(shape):
        return False
    shape_h = [ctx.hint(d) for d in shape]
    stride_h = [ctx.hint(s) for s in stride]
    order = sorted((k for k in range(len(shape)) if shape_h[k] != 1), key=lambda k: (stride_h[k], -k))
    expected = 1
    for k in order:
        if stride_h[k] != expected or sympy.expand(to_expr(stride[k]) - _product(shape, order, k)) != 0:
            return False
        expected *= shape_h[k]
    return True


def _product(shape: tuple, order: list[int], k: int) -> sympy.Expr:
    out = sympy.Integer(1)
    for j in order[:order.index(k)]:
        out *= to_expr(shape[j])
    return out


def _output(ctx: LoweringContext, name: str) -> Any:
    value = ctx.env[name]
    if not isinstance(value, TensorRef):
        return Sym(str(value))
    buf = ctx.materialize(value, name=None if name in ctx.buffers else name)
    if ctx.buffers[buf].kind == "temp":
        ctx.buffers[buf] = ctx.buffers[buf].replace(kind="output")
    elif ctx.buffers[buf].kind == "view" and name in ctx.values:
        ctx.buffers[buf] = _unit_strides_as_graph(ctx.buffers[buf], ctx.values[name])
    return buf


def _unit_strides_as_graph(view: Buffer, value: Value) -> Buffer:
    """An output view with the graph's strides at its size-1 dims. Any stride indexes a size-1 dim alike, so the
    view's index arithmetic may have left 0 there; but the caller sees the strides, and Dynamo guards them under
    dynamic shapes: an output fed back as an input (a decode loop) would recompile on a stride eager never has."""
    if len(value.stride) != view.rank:
        return view
    stride = tuple(sympy.Integer(g) if size == 1 and isinstance(g, int) else s
                   for size, s, g in zip(view.shape, view.stride, value.stride))
    return view if stride == view.stride else view.replace(stride=stride)


# ---------------------------------------------------------------------------------------------- externs


def extern(ctx: LoweringContext, node: Node) -> None:
    """Call the ATen op. Tensor arguments are materialized; outputs get the layout the graph records."""
    args = tuple(_extern_arg(ctx, a) for a in node.args)
    kwargs = {k: _extern_arg(ctx, v) for k, v in node.kwargs.items()}
    outs = []
    for name in node.outputs:
        v = ctx.values.get(name)
        if v is None or v.type != "tensor":
            outs.append("_")
            ctx.env[name] = sym(name)
            continue
        ctx.new_buffer(v.shape, v.dtype, stride=v.stride, name=name)
        ctx.env[name] = ctx.identity(name)
        outs.append(name)
    ctx.steps.append(Extern(tuple(outs), node.op, args, kwargs, ctx.origin))


def _extern_arg(ctx: LoweringContext, a: Any) -> Any:
    if isinstance(a, Ref):
        value = ctx.env.get(a.name)
        if ctx.read_at_run_time(a.name):  # the call reads the number from its 0-d tensor when it runs
            buffer = ctx.materialize(value)
            return Item(ctx.host_of.get(buffer, buffer))
        if isinstance(value, TensorRef):
            return Ref(ctx.materialize(value))
        if isinstance(value, sympy.Basic):
            if value.has(sympy.Float) or value.is_integer is False:  # a plan's symbolic arguments are ints
                raise LoweringError(f"{a.name!r} is a symbolic float ({value}) and {', '.join(ctx.origin) or 'a node'}"
                                    " takes it as an argument of an ATen call; a plan's symbolic arguments are ints")
            return Sym(str(value))
        raise LoweringError(f"extern argument {a.name!r} has no value")
    if isinstance(a, (list, tuple)):
        return tuple(_extern_arg(ctx, x) for x in a)
    if isinstance(a, float) and math.isnan(a):
        return NAN
    return a


# ---------------------------------------------------------------------------------------------- entry


def lower(graph: Graph, *, passes: Any = None, check: bool = False, emit_event: bool = True,
          split: SplitPolicy | None = None, graph_passes: Sequence[str] | None = None) -> KernelPlan:
    """Lower a graph and schedule it: the KernelPlan a codegen builds from.

    passes: the scheduler passes to run (default `default_passes()`); check: verify the plan and its text round
    trip after every pass (tests turn this on); split: the codegen's policy for long reductions with few results
    (`SplitPolicy`; None: none split); graph_passes: the ids of the graph passes to run at `pre_lowering` (None:
    the registered defaults); emit_event: send `kernels_planned` (stage `lowering`, the plan's text as
    source, the passes' `Decision`s as `data["decisions"]`) to `ember_event` observers.
    Codegens emit `kernels_generated` with their own source.
    """
    if emit_event:
        return lower_with_text(graph, passes=passes, check=check, split=split, graph_passes=graph_passes)[0]
    return _lower(graph, passes, check, split, graph_passes, [])


def lower_with_text(graph: Graph, *, passes: Any = None, check: bool = False, split: SplitPolicy | None = None,
                    graph_passes: Sequence[str] | None = None) -> tuple[KernelPlan, str]:
    """`lower` with its `kernels_planned` event, and the plan's text the event carried: the plan cache stores that
    text instead of printing the plan a second time."""
    decisions: list[Decision] = []
    with Stopwatch() as clock:
        plan = _lower(graph, passes, check, split, graph_passes, decisions)
    text = str(plan)
    emit(Event(kind="kernels_planned", stage="lowering",
               message=f"graph {graph.name!r}: {len(plan.kernels)} kernels, {len(plan.externs)} extern calls"
                       + "".join(f"\n  {d}" for d in decisions),
               source=text, data={"graph": graph.name, "decisions": tuple(decisions),
                                  "steps": plan_steps(plan), "seconds": clock.seconds}))
    return plan, text


def _lower(graph: Graph, passes: Any, check: bool, split: SplitPolicy | None, graph_passes: Sequence[str] | None,
           decisions: list[Decision]) -> KernelPlan:
    passes = bind_passes(default_passes() if passes is None else passes, graph)
    plan = schedule(lower_graph(graph, split, decisions, graph_passes), passes=passes, check=check,
                    decisions=decisions)
    if not check:  # (with check, every pass's result was verified)
        verify_plan(plan)  # what codegens get: a plan a pass broke is a PlanError (the graph falls back), not garbage
    return plan


def plan_steps(plan: KernelPlan) -> tuple[dict[str, Any], ...]:
    """Each step of a plan as simple values, for observers: `kind` (`kernel` or `extern`), `name` (the kernel's, or
    the extern call's op), `sizes` (a kernel's iteration space, `16x32`; an extern call's output buffers) and
    `origins` (the graph nodes it computes)."""
    buffers = {b.name: b for b in plan.buffers}
    steps = []
    for step in plan.steps:
        if isinstance(step, Kernel):
            sizes = "x".join(str(d.size) for d in step.dims)
            steps.append({"kind": "kernel", "name": step.name, "sizes": sizes, "origins": list(step.origins)})
        else:
            shapes = ["x".join(map(str, buffers[o].shape)) or "scalar" for o in step.outs if o in buffers]
            steps.append({"kind": "extern", "name": step.op, "sizes": ", ".join(shapes),
                          "origins": list(step.origins)})
    return tuple(steps)

