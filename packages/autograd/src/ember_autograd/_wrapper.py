"""`wrap(partition, forward, compile_backward)`: the compiled halves as one differentiable callable.

An `autograd.Function` runs the compiled forward (it returns the forward outputs, then the saved values), keeps the
saved values for the backward, and marks outputs without a tangent non-differentiable. Its backward compiles the
backward graph on first use (once), feeds it the saved values and the incoming gradients (zeros where autograd has
none, made contiguous, as the tangents were traced), and hands back one gradient per primal (None where the
backward computes none). `retain_graph=True` runs it again on the same saved values. A second-order gradient
through it is an error raised when it is asked for, never a silent zero.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember_core import CompiledGraph, GraphError, Partition

DOUBLE_BACKWARD = ("ember's compiled backward is not differentiable twice (double backward, e.g. a gradient penalty "
                   "through create_graph=True). Run this function eagerly for higher-order gradients, or enable "
                   "compiled autograd (ember.compiled_autograd.enable()).")


class Plan:
    """What the autograd.Function needs: the compiled forward, the backward (compiled on first use) and the layout
    of both graphs."""

    def __init__(self, partition: Partition, forward: CompiledGraph, compile_backward: Callable[[], CompiledGraph]):
        fw, bw = partition.forward, partition.backward
        self.forward = forward
        self._compile_backward = compile_backward
        self._backward: CompiledGraph | None = None
        self._lock = threading.Lock()
        self.num_primals = len(fw.inputs)
        self.num_outputs = len(fw.outputs) - len(partition.saved)
        self.differentiable = tuple(fw.values[o.name].requires_grad for o in fw.outputs[:self.num_outputs])
        self.traced_grad = tuple(fw.values[i.name].requires_grad for i in fw.inputs)
        self.grad_inputs = tuple(o.input for o in bw.outputs)
        self._check(partition)

    def _check(self, partition: Partition) -> None:
        fw, bw = partition.forward, partition.backward
        saved_outputs = fw.outputs[self.num_outputs:]
        if self.num_outputs < 0 or any(o.kind != "saved" for o in saved_outputs):
            raise GraphError(f"forward graph {fw.name!r} must end with the {len(partition.saved)} saved values")
        tangents = [i for i in bw.inputs if i.kind == "tangent"]
        if len(tangents) != sum(self.differentiable) or len(bw.inputs) != len(saved_outputs) + len(tangents):
            raise GraphError(f"backward graph {bw.name!r} takes {len(bw.inputs)} inputs; expected the "
                             f"{len(saved_outputs)} saved values then one tangent per differentiable forward "
                             f"output ({sum(self.differentiable)})")
        for o in bw.outputs:
            if o.kind != "grad" or o.input is None or not 0 <= o.input < self.num_primals:
                raise GraphError(f"backward graph {bw.name!r}: output {o.name!r} must be a grad of a primal")

    def backward(self) -> CompiledGraph:
        """The compiled backward, compiled by the first caller."""
        if self._backward is None:
            with self._lock:
                if self._backward is None:
                    self._backward = self._compile_backward()
        return self._backward

    def check_inputs(self, inputs: Sequence[Any]) -> None:
        """An input that requires grad now but was traced without would silently get no gradient: refuse it."""
        for k, (x, traced) in enumerate(zip(inputs, self.traced_grad)):
            if not traced and isinstance(x, torch.Tensor) and x.requires_grad:
                raise RuntimeError(f"input {k} requires grad, but the joint graph was traced with it not requiring "
                                   "grad; the frontend must recompile when requires_grad changes")


class CompiledFunction(torch.autograd.Function):
    """The autograd node of one compiled graph; `Plan` carries everything call-independent."""

    @staticmethod
    def forward(ctx: Any, plan: Plan, *inputs: Any) -> tuple[Any, ...]:
        results = plan.forward(list(inputs))
        outs, saved = results[:plan.num_outputs], results[plan.num_outputs:]
        ctx.plan = plan
        ctx.tensor_slots = [isinstance(s, torch.Tensor) for s in saved]
        ctx.others = [s for s in saved if not isinstance(s, torch.Tensor)]
        ctx.save_for_backward(*(s for s in saved if isinstance(s, torch.Tensor)))
        ctx.mark_non_differentiable(*(o for o, d in zip(outs, plan.differentiable)
                                      if isinstance(o, torch.Tensor) and not d))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[Any, ...]:
        plan: Plan = ctx.plan
        with torch.no_grad():
            grads = _run_backward(plan, _saved_values(ctx), grad_outputs)
        if torch.is_grad_enabled():  # create_graph=True: these grads have no backward of their own
            grads = _error_on_differentiation(grads)
        return (None, *grads)


def _saved_values(ctx: Any) -> list[Any]:
    tensors, others = iter(ctx.saved_tensors), iter(ctx.others)
    return [next(tensors) if is_tensor else next(others) for is_tensor in ctx.tensor_slots]


def _run_backward(plan: Plan, saved: list[Any], grad_outputs: Sequence[Any]) -> list[Any]:
    tangents = [g.contiguous() for g, d in zip(grad_outputs, plan.differentiable) if d]
    results = plan.backward()([*saved, *tangents])
    grads: list[Any] = [None] * plan.num_primals
    for k, g in zip(plan.grad_inputs, results):
        grads[k] = g
    return grads


def _error_on_differentiation(grads: list[Any]) -> list[Any]:
    """The grads as outputs of a node whose own backward raises DOUBLE_BACKWARD (as once_differentiable does)."""
    live = [k for k, g in enumerate(grads) if isinstance(g, torch.Tensor)]
    if not live:
        return grads
    err = torch._C._functions.DelayedError(DOUBLE_BACKWARD.encode(), len(live))
    marked = err(*(grads[k].detach().requires_grad_(grads[k].dtype.is_floating_point or grads[k].dtype.is_complex)
                   for k in live))
    marked = marked if isinstance(marked, tuple) else (marked,)
    out = list(grads)
    for k, g in zip(live, marked):
        out[k] = g
    return out


def wrap(partition: Partition, forward: CompiledGraph,
         compile_backward: Callable[[], CompiledGraph]) -> Callable[[Sequence[Any]], list]:
    """A callable from the graph's inputs (a list) to its forward outputs (a list, every kind, in the forward
    graph's order), differentiable through `CompiledFunction`. Without grad mode, or when no input requires grad,
    it runs the forward alone."""
    plan = Plan(partition, forward, compile_backward)

    def run(inputs: Sequence[Any]) -> list:
        if not torch.is_grad_enabled() or not any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
            return list(plan.forward(list(inputs))[:plan.num_outputs])
        plan.check_inputs(inputs)
        return list(CompiledFunction.apply(plan, *inputs))

    run.plan = plan  # type: ignore[attr-defined]
    return run
