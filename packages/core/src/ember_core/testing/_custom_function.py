"""A graph with a custom autograd function call (`ember.custom_function`), built by hand, and its eager reference.

The function, `Gate`, has two outputs and a backward that is deliberately not the derivative of its forward:

    forward(a, w):   y = a * sigmoid(w),  mask = (a > 0) as float (non-differentiable); saves a and w
    backward(gy, _): grad a = 2 * gy * sigmoid(w)   (twice the derivative)
                     grad w = (gy * a).sum(0)        (without sigmoid's derivative)

so a stage that re-derived the forward instead of running the backward subgraph gets different gradients. The
graph around it, `gate_graph`, computes `(y * 2 + mask, mask)` from `Gate(x.sin(), w)`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import _disable_current_modes

from ..graph._custom_function import subgraph_scope
from ..graph._fx_bridge import from_fx
from ..graph._schema import Graph, Input, Output

FORWARD, BACKWARD = "Gate_0_forward", "Gate_0_backward"


def _gate_forward(a: torch.Tensor, w: torch.Tensor) -> list:
    return [a * torch.sigmoid(w), (a > 0).to(a.dtype), a, w]


def _gate_backward(gy: torch.Tensor, g_mask: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> list:
    return [2 * gy * torch.sigmoid(w), (gy * a).sum(0)]


class Gate(torch.autograd.Function):
    """The eager reference of the subgraph pair."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, w: torch.Tensor) -> tuple:
        y, mask, *saved = _gate_forward(a, w)
        ctx.save_for_backward(*saved)
        ctx.mark_non_differentiable(mask)
        return y, mask

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor, g_mask: torch.Tensor) -> tuple:
        return tuple(_gate_backward(gy, g_mask, *ctx.saved_tensors))


def _subgraph(fn: Any, examples: Sequence[torch.Tensor], name: str, inputs: Sequence[str],
              outputs: Sequence[tuple[str, int | None]]) -> Graph:
    graph = from_fx(make_fx(fn, tracing_mode="fake")(*examples), name=name, producer="ember_core.testing")
    return graph.replace(inputs=tuple(Input(i.name, k) for i, k in zip(graph.inputs, inputs)),
                         outputs=tuple(Output(o.name, k, j) for o, (k, j) in zip(graph.outputs, outputs)))


@functools.cache
def gate_subgraphs(rows: int, cols: int = 8) -> dict[str, Graph]:
    """The forward and backward subgraphs of `Gate` for `a: f32[rows, cols]`, `w: f32[cols]`.

    Called from inside the model's own trace (`gate_model`), so it builds with every dispatch mode of that trace
    set aside: otherwise the trace records this function's example tensors as ops of the model."""
    with _disable_current_modes():
        return _build_gate_subgraphs(rows, cols)


def _build_gate_subgraphs(rows: int, cols: int) -> dict[str, Graph]:
    a, w = torch.empty(rows, cols), torch.empty(cols)
    forward = _subgraph(_gate_forward, (a, w), FORWARD, ("user", "user"),
                        (("user", None), ("user", None), ("saved", None), ("saved", None)))
    backward = _subgraph(_gate_backward, (a.clone(), a.clone(), a.clone(), w), BACKWARD,
                         ("tangent", "tangent", "saved", "saved"), (("grad", 0), ("grad", 1)))
    return {FORWARD: forward, BACKWARD: backward}


def gate_model(x: torch.Tensor, w: torch.Tensor) -> tuple:
    """The graph's function: call the op while its subgraphs are in scope (make_fx records one node)."""
    with subgraph_scope(gate_subgraphs(*x.shape)):
        y, mask = torch.ops.ember.custom_function.default([x.sin(), w], [], FORWARD, BACKWARD, [1])
    return (y * 2 + mask, mask)


def gate_reference(x: torch.Tensor, w: torch.Tensor) -> tuple:
    y, mask = Gate.apply(x.sin(), w)
    return (y * 2 + mask, mask)


def stamp_gate(gm: fx.GraphModule) -> None:
    """Give the traced module its subgraphs, which `from_fx` reads."""
    call = next(n for n in gm.graph.nodes if n.op == "placeholder")
    gm.meta["ember_graph"] = {"subgraphs": gate_subgraphs(*call.meta["val"].shape)}


def gate_graph(rows: int = 6) -> Graph:
    """`gate_model` as a graph, inputs `x: f32[rows, 8]`, `w: f32[8]`."""
    gm = make_fx(gate_model, tracing_mode="fake")(torch.empty(rows, 8), torch.empty(8))
    stamp_gate(gm)
    return from_fx(gm, name="gate", producer="ember_core.testing")
