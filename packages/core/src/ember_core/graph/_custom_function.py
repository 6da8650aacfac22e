"""`ember.custom_function`: a call of a custom autograd function, differentiated by the backward its author wrote.

A `torch.autograd.Function` runs its forward under no_grad and gives its outputs the backward it defines, which
need not be the derivative of the forward (a straight-through estimator, a scaled or clipped gradient). A graph
that held only the forward's ops would lose that backward: a later stage tracing the joint graph would see no
path for the gradient, or derive the wrong one. So a frontend keeps the call as one node,

    y, m = ember.custom_function.default([x, w], [s0], "Clamp_0_forward", "Clamp_0_backward", [1])

whose string arguments name two graphs in `Graph.subgraphs`:

- forward: inputs are the call's tensors then its sizes (kind `user`); outputs are the function's outputs, then
  the values its backward reads (kind `saved`);
- backward: inputs are one tangent per function output (kind `tangent`), then the saved values (kind `saved`);
  outputs are gradients (kind `grad`, `input=k` for the forward input k it belongs to), for the inputs that get one.

The last argument lists the outputs the function marked non-differentiable.

Running the node (`bound_call`; public as `ember_core.node_callable`, with `_interpreter.py`'s `Interpreter` running
the subgraphs, which also registers how the op runs on fake tensors) applies
`CustomFunction`: the forward subgraph under no_grad, the backward subgraph when autograd asks for gradients.
Traced under make_fx, as ember-autograd traces the joint, that records the forward subgraph's ops in the forward
region and the backward subgraph's in the backward region, so the custom backward is what differentiates the
call. Anywhere else the op has no kernel: the call only means something next to its subgraphs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import torch

from .._errors import GraphError
from ._ops import resolve_op
from ._schema import Graph, Node

CUSTOM_FUNCTION = "ember.custom_function.default"
ARGUMENTS = ("tensors", "sizes", "forward", "backward", "non_differentiable")

_LIBRARY = torch.library.Library("ember", "DEF")  # noqa: TOR901 - ember's own op namespace, defined once
_LIBRARY.define("custom_function(Tensor[] tensors, SymInt[] sizes, str forward, str backward, "
                "int[] non_differentiable) -> Tensor[]")
_OP = torch.ops.ember.custom_function.default

# The subgraphs a frontend is tracing calls of (name → forward graph), for the fake kernel.
_SCOPE: ContextVar[Mapping[str, Graph] | None] = ContextVar("ember_custom_function_scope", default=None)


def is_custom_function(op: Any) -> bool:
    """Whether an op (its schema name, or the OpOverload) is `ember.custom_function`."""
    return op == CUSTOM_FUNCTION or op is _OP


def custom_function_arguments(node: Node) -> dict[str, Any]:
    """The node's arguments by name (`tensors`, `sizes`, `forward`, `backward`, `non_differentiable`), however
    they were given, positionally or by keyword."""
    return {**dict(zip(ARGUMENTS, node.args)), **node.kwargs}


def function_outputs(forward: Graph) -> int:
    """How many outputs the function has: the forward subgraph's outputs that are not saved for backward."""
    return sum(o.kind != "saved" for o in forward.outputs)


# ---------------------------------------------------------------------------------------------- running


class _Plan:
    """What one call needs at run time: its two subgraphs, planned once."""

    def __init__(self, forward: Graph, backward: Graph, non_differentiable: Sequence[int], interpreter: type):
        self.forward, self.backward = interpreter(forward), interpreter(backward)
        self.num_outputs = function_outputs(forward)
        self.num_inputs = len(forward.inputs)
        self.grad_inputs = [o.input for o in backward.outputs]
        self.non_differentiable = frozenset(non_differentiable)


class CustomFunction(torch.autograd.Function):
    """The autograd node of one `ember.custom_function` call: forward subgraph forward, backward subgraph backward."""

    @staticmethod
    def forward(ctx: Any, plan: _Plan, *inputs: Any) -> tuple[Any, ...]:
        results = plan.forward.run(list(inputs))
        outs, saved = results[:plan.num_outputs], results[plan.num_outputs:]
        ctx.plan = plan
        ctx.tensor_slots = [isinstance(s, torch.Tensor) for s in saved]
        ctx.others = [s for s in saved if not isinstance(s, torch.Tensor)]
        ctx.save_for_backward(*(s for s in saved if isinstance(s, torch.Tensor)))
        ctx.mark_non_differentiable(*(outs[i] for i in plan.non_differentiable))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[Any, ...]:
        plan: _Plan = ctx.plan
        tensors, others = iter(ctx.saved_tensors), iter(ctx.others)
        saved = [next(tensors) if is_tensor else next(others) for is_tensor in ctx.tensor_slots]
        grads: list[Any] = [None] * plan.num_inputs
        for k, g in zip(plan.grad_inputs, plan.backward.run([*grad_outputs, *saved])):
            grads[k] = g
        return (None, *grads)


def bound_call(graph: Graph, node: Node, interpreter: type) -> Callable[..., Any]:
    """What running `node` of `graph` calls: its op, or for a custom function call one bound to its subgraphs, which
    `interpreter` runs (`_interpreter.Interpreter`; the public form is `ember_core.node_callable`)."""
    if not is_custom_function(node.op):
        return resolve_op(node.op)
    args = custom_function_arguments(node)
    plan = _Plan(subgraph(graph, args["forward"]), subgraph(graph, args["backward"]), args["non_differentiable"],
                 interpreter)

    def custom_function(tensors: Sequence[Any], sizes: Sequence[Any], *_names_and_marks: Any, **_: Any) -> list:
        return list(CustomFunction.apply(plan, *tensors, *sizes))

    return custom_function


def subgraph(graph: Graph, name: Any) -> Graph:
    if not isinstance(name, str) or name not in graph.subgraphs:
        raise GraphError(f"graph {graph.name!r} has no subgraph {name!r} (it has {sorted(graph.subgraphs)})"[:300])
    return graph.subgraphs[name]


# ---------------------------------------------------------------------------------------------- while tracing


@contextlib.contextmanager
def subgraph_scope(subgraphs: Mapping[str, Graph]) -> Iterator[None]:
    """Make `subgraphs` known to the op's fake kernel: a frontend that traces calls of the op (with fake tensors)
    holds this around its trace, with the forward subgraphs the calls name."""
    token = _SCOPE.set(subgraphs)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.mark_non_differentiable(*(output[i] for i in inputs[4]))


def _no_backward(ctx: Any, *grads: Any) -> Any:
    raise RuntimeError("ember.custom_function was differentiated by torch's autograd outside ember: its gradient is "
                       "its backward subgraph, which only ember_core's interpreter (or a joint graph) runs")


# While a frontend traces, outputs require grad as the function's would (bar the non-differentiable ones).
torch.library.register_autograd("ember::custom_function", _no_backward, setup_context=_setup_context, lib=_LIBRARY)


# ---------------------------------------------------------------------------------------------- checking


def call_problem(graph: Graph, node: Node) -> str | None:
    """Why a custom function call does not fit its subgraphs (names, arity, kinds), or None."""
    args = custom_function_arguments(node)
    names = [args.get("forward"), args.get("backward")]
    missing = [n for n in names if not isinstance(n, str) or n not in graph.subgraphs]
    if missing:
        return f"names subgraph {missing[0]!r}, which the graph does not have (it has {sorted(graph.subgraphs)})"
    forward, backward = (graph.subgraphs[n] for n in names)
    n_in = len(args.get("tensors", ())) + len(args.get("sizes", ()))
    n_out = function_outputs(forward)
    n_saved = len(forward.outputs) - n_out
    kinds = [o.kind for o in forward.outputs]
    if len(forward.inputs) != n_in:
        return f"passes {n_in} inputs to forward subgraph {names[0]!r}, which takes {len(forward.inputs)}"
    if kinds != sorted(kinds, key=lambda k: k == "saved"):
        return f"forward subgraph {names[0]!r} must list its saved outputs after the function's outputs"
    if len(node.outputs) != n_out:
        return f"has {len(node.outputs)} outputs, but forward subgraph {names[0]!r} returns {n_out}"
    want = ["tangent"] * n_out + ["saved"] * n_saved
    if [i.kind for i in backward.inputs] != want:
        return (f"backward subgraph {names[1]!r} must take {n_out} tangents then {n_saved} saved values, "
                f"as the forward returns")
    grads = [o.input for o in backward.outputs if o.kind == "grad"]
    if len(grads) != len(backward.outputs) or len(set(grads)) != len(grads) or \
            not all(isinstance(k, int) and 0 <= k < n_in for k in grads):
        return f"backward subgraph {names[1]!r} must return one `grad` output per input it differentiates"
    marks = args.get("non_differentiable", ())
    if not all(isinstance(i, int) and 0 <= i < n_out for i in marks):
        return f"non_differentiable {list(marks)} must be indices of the function's {n_out} outputs"
    return None
