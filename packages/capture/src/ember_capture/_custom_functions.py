"""Custom autograd functions met while a graph is traced, kept as `ember.custom_function` calls.

Both frontends reach a custom `torch.autograd.Function` while make_fx traces: Dynamo hands over its
`autograd_function_apply` op with the forward and backward it traced as GraphModules; the trace frontend meets
`Function.apply` itself (`_function_apply.py`). Run as they are, both record the forward's ops, under no_grad as
`Function.forward` runs, and nothing of the backward: the function's gradient would be lost, or re-derived from the
forward when it is not the forward's derivative. So when a call needs a gradient (grad mode on, a tensor argument
that requires grad), `CustomFunctions.call`

1. captures the forward as a subgraph (the function's outputs, then the values its backward reads, kind `saved`)
   and the backward as another (tangents and saved values in, a `grad` output per input it differentiates), each
   with `capture_graph` on fresh fake inputs, the enclosing trace's modes set aside while it does;
2. records one `ember.custom_function` node in the enclosing trace, on the call's tensors and sizes.

A call that needs no gradient runs as before, its forward inline: that is eager's meaning too. A form ember cannot
hold (a forward that writes its inputs, `mark_dirty`; an argument or output of another type) raises `CaptureError`,
and the frontend runs the function eagerly, with a fallback event: never a graph that drops the gradient.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from ember_core import Graph, Input, Output, custom_function_arguments, is_custom_function, subgraph_scope
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.utils._python_dispatch import _disable_current_modes

from ._errors import CaptureError, located


@dataclass
class FunctionBody:
    """One custom function, as both frontends give it: `forward(*args) -> (outputs, saved)` (outputs a tensor or a
    tuple of them, saved a sequence); `backward(tangents, saved) -> one gradient or None per argument`;
    `non_differentiable()` the output indices marked so, known once the forward has run."""

    name: str
    forward: Callable[..., tuple[Any, Sequence[Any]]]
    backward: Callable[[Sequence[Any], Sequence[Any]], Sequence[Any]]
    non_differentiable: Callable[[], Sequence[int]]
    arg_names: Sequence[str] = ()  # for the forward subgraph's inputs, where known


def needs_gradient(args: Sequence[Any]) -> bool:
    """Whether a call on `args` gets a backward in eager: grad mode on and a tensor argument that requires grad."""
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


@dataclass
class _ForwardRun:
    """What the traced forward returned, for the backward's trace and the call's outputs."""

    outputs: list[torch.Tensor] = field(default_factory=list)
    saved: list[Any] = field(default_factory=list)
    single: bool = False  # the function returned one tensor, not a tuple

    def record(self, name: str, outputs: Any, saved: Sequence[Any]) -> list:
        self.single = isinstance(outputs, torch.Tensor)
        self.outputs = [outputs] if self.single else list(outputs)
        if not all(isinstance(o, torch.Tensor) for o in self.outputs):
            raise CaptureError(f"custom autograd function {name} returns a value that is not a tensor")
        self.saved = list(saved)
        return [*self.outputs, *self.saved]


class CustomFunctions:
    """The custom function calls of one graph's trace: their subgraphs, by name."""

    def __init__(self, fake_mode: Any, producer: str, capture: Callable[..., Graph]):
        # capture: `capture_graph` (`_aten.py`), which traces each half as it traces the enclosing program, and calls
        # back here for a custom function inside a custom function
        self.fake_mode, self.producer, self.capture = fake_mode, producer, capture
        self.subgraphs: dict[str, Graph] = {}

    def call(self, body: FunctionBody, args: Sequence[Any]) -> Any:
        """The call as one `ember.custom_function` node of the enclosing trace; returns its outputs as the function
        would (a tensor, or a tuple)."""
        order = _operand_order(body.name, args)
        operands = [args[i] for i in order]
        name = self._fresh_name(body.name)
        with outside_the_trace():
            forward, run = self._forward(body, order, operands, name)
            backward = self._backward(body, order, run, name)
        self.subgraphs.update({forward.name: forward, backward.name: backward})
        tensors = [a for a in operands if isinstance(a, torch.Tensor)]
        sizes = operands[len(tensors):]
        with subgraph_scope(self.subgraphs):
            outs = torch.ops.ember.custom_function.default(tensors, sizes, forward.name, backward.name,
                                                           list(body.non_differentiable()))
        return outs[0] if run.single else tuple(outs)

    def used_by(self, graph: Graph) -> dict[str, Graph]:
        """The subgraphs the graph's calls name (dead code elimination may have dropped some calls)."""
        names = set()
        for node in graph.nodes:
            if is_custom_function(node.op):
                args = custom_function_arguments(node)
                names |= {args["forward"], args["backward"]}
        return {k: g for k, g in self.subgraphs.items() if k in names}

    def _fresh_name(self, name: str) -> str:
        base = re.sub(r"\W", "_", name) or "function"
        k = sum(1 for n in self.subgraphs if n.endswith("_forward"))
        return f"{base}_{k}"

    def _forward(self, body: FunctionBody, order: list[int], operands: list, name: str) -> tuple[Graph, _ForwardRun]:
        run = _ForwardRun()

        def forward(*inputs: Any) -> list:
            outputs, saved = body.forward(*_in_call_order(order, inputs))
            return run.record(body.name, outputs, saved)

        names = [body.arg_names[i] if i < len(body.arg_names) else f"arg{i}" for i in order]
        graph = self._capture(forward, [self._fresh(a) for a in operands], names, f"{name}_forward", body.name)
        if any(i.mutated for i in graph.inputs):
            raise CaptureError(f"custom autograd function {body.name} writes its input in place (mark_dirty), which "
                               "ember cannot hold in a graph")
        n = len(run.outputs)
        outputs = [o if j < n else Output(o.name, "saved") for j, o in enumerate(graph.outputs)]
        return graph.replace(outputs=tuple(outputs)), run

    def _backward(self, body: FunctionBody, order: list[int], run: _ForwardRun, name: str) -> Graph:
        n = len(run.outputs)
        grad_inputs: list[int] = []

        def backward(*inputs: Any) -> list:
            grads = _gradients(body.name, body.backward(list(inputs[:n]), list(inputs[n:])), len(order))
            grad_inputs.extend(j for j, i in enumerate(order) if isinstance(grads[i], torch.Tensor))
            return [grads[order[j]] for j in grad_inputs]

        with self.fake_mode:
            tangents = [torch.empty(o.shape, dtype=o.dtype, device=o.device) for o in run.outputs]
        names = [f"tangent_{j}" for j in range(n)] + [f"saved_{j}" for j in range(len(run.saved))]
        graph = self._capture(backward, [*tangents, *(self._fresh(s) for s in run.saved)], names,
                              f"{name}_backward", body.name)
        kinds = ["tangent"] * n + ["saved"] * len(run.saved)
        return graph.replace(inputs=tuple(Input(i.name, k) for i, k in zip(graph.inputs, kinds)),
                             outputs=tuple(Output(o.name, "grad", k) for o, k in zip(graph.outputs, grad_inputs)))

    def _fresh(self, x: Any) -> Any:
        """A new fake tensor like `x` (of the enclosing trace), or `x` itself if it is a size."""
        if not isinstance(x, torch.Tensor):
            return x
        with self.fake_mode:
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)

    def _capture(self, fn: Callable, fakes: list, names: list[str], name: str, function: str) -> Graph:
        """`capture_graph` of one half, under no_grad as the function runs it (so its ops carry no grad facts)."""
        try:
            with torch.no_grad():
                return self.capture(fn, fakes, input_names=names, name=name, producer=self.producer,
                                     fake_mode=self.fake_mode)
        except CaptureError as e:
            if e.reason.startswith("custom autograd function"):
                raise
            raise CaptureError(f"custom autograd function {function} cannot be captured: {e.reason}", e.where,
                               e.code) from e
        except Exception as e:  # noqa: BLE001 - whatever stops the trace, the call must not be dropped silently
            first = (str(e).strip().splitlines() or [""])[0]
            raise located(f"custom autograd function {function} cannot be captured: {type(e).__name__}: {first}",
                          e) from e


def _operand_order(name: str, args: Sequence[Any]) -> list[int]:
    """Argument positions in the node's order: tensors, then sizes."""
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    sizes = [i for i, a in enumerate(args) if isinstance(a, (int, torch.SymInt)) and not isinstance(a, bool)]
    if len(tensors) + len(sizes) != len(args):
        raise CaptureError(f"custom autograd function {name} takes an argument that is neither a tensor nor a size")
    return tensors + sizes


def _in_call_order(order: list[int], operands: Sequence[Any]) -> list:
    args: list[Any] = [None] * len(order)
    for j, i in enumerate(order):
        args[i] = operands[j]
    return args


def _gradients(name: str, grads: Any, n: int) -> list:
    """The backward's result as one entry per argument, as eager autograd checks it."""
    grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
    if len(grads) < n or any(g is not None for g in grads[n:]):
        raise CaptureError(f"custom autograd function {name}: backward returned an incorrect number of "
                           f"gradients (expected {n}, got {len(grads)})")
    if not all(g is None or isinstance(g, torch.Tensor) for g in grads):
        raise CaptureError(f"custom autograd function {name}: backward returned a gradient that is not a tensor")
    return grads[:n]


@contextlib.contextmanager
def outside_the_trace() -> Iterator[None]:
    """Set the enclosing trace aside (its fake, functional and proxy modes), so a nested capture starts clean."""
    with _disable_current_modes(), disable_proxy_modes_tracing():
        yield


# ---------------------------------------------------------------------------------------------- Dynamo's form


def dynamo_body(name: str, fwd: fx.GraphModule, bwd: fx.GraphModule, kwargs: dict[str, Any]) -> FunctionBody:
    """Dynamo's `autograd_function_apply(fwd, bwd, *args, ...)`: `fwd(*args)` returns (outputs, saved values) and
    `bwd(*tangents, *saved)` one gradient per argument, as Dynamo rewired them."""
    if kwargs.get("dirty_idx"):
        raise CaptureError(f"custom autograd function {name} writes its input in place (mark_dirty), which ember "
                           "cannot hold in a graph")
    non_differentiable = list(kwargs.get("non_differentiable_idx", ()))

    def forward(*args: Any) -> tuple[Any, Sequence[Any]]:
        with fx.traceback.preserve_node_meta():
            outputs, saved = fx.Interpreter(fwd).run(*args)
        return outputs, saved

    def backward(tangents: Sequence[Any], saved: Sequence[Any]) -> Any:
        with fx.traceback.preserve_node_meta():
            return fx.Interpreter(bwd).run(*tangents, *saved)

    names = [n.name for n in fwd.graph.nodes if n.op == "placeholder"]
    return FunctionBody(name, forward, backward, lambda: non_differentiable, names)


_APPLY_SOURCE = re.compile(r"(\w+)\.apply\(")


def function_name(node: fx.Node) -> str:
    """The Function's class name, read off the source line Dynamo recorded (`Swish.apply(x)`), else `function`."""
    lines = (node.meta.get("stack_trace") or "").splitlines()
    found = next((m for line in reversed(lines) for m in _APPLY_SOURCE.findall(line)[-1:]), None)
    return found or "function"
