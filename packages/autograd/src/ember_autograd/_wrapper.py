"""`wrap(partition, forward, compile_backward)`: the compiled halves as one differentiable callable.

An `autograd.Function` runs the compiled forward (it returns the forward outputs, then the saved values), keeps the
saved values for the backward, and marks outputs without a tangent non-differentiable. Its backward compiles the
backward graph on first use (once), feeds it the saved values and the incoming gradients (zeros where autograd has
none, made contiguous, as the tangents were traced), and hands back one gradient per primal (None where the
backward computes none). `retain_graph=True` runs it again on the same saved values.

A primal whose value reaches none of the outputs that got a gradient gets None, not the zeros the backward
computes for it: eager autograd never reaches it, so its `.grad` stays None, and an optimizer skips it (AdamW
would otherwise decay it and move its moments). Reach is the forward graph's data flow (`_output_sources`), which
covers autograd's; autograd hands the function None for an output the loss does not use (grads not
materialized; compiled autograd does the same).

A backward asked for with `create_graph=True` (a gradient penalty, double backward) must itself be
differentiable: the compiled kernels are not, so that backward runs the forward graph again through ATen with
grad mode on, from the function's inputs, and takes the gradients of its outputs with eager's autograd
(`torch.autograd.grad(create_graph=True)`): eager's formulas, and eager's formulas for their derivatives. (The
partition's backward graph run through ATen on the saved values is not differentiable enough: layer norm's and
batch norm's mean and inverse std come out of their ops without history, and the second derivative lost their
dependence on the input: a gradient penalty through a layer norm gave the first layer's weights wrong gradients,
silently.) It is reported once as a `fallback` of stage `autograd`. Running the forward again is right only on
the inputs it ran on: the gradients are functions of the inputs the saved values are computed from (and the
tangents), so the version of each is kept at the forward, and one modified in place since raises as eager's
autograd does for a saved tensor (recomputing from it gave wrong gradients, silently).

The backward frees the saved values as it uses them, as eager's does. When the compiled backward offers
`consume` (codegens of the loop IR do for a backward), it is called through it: the function's own references are
dropped first (`ctx.maybe_clear_saved_tensors`, unless the graph is retained), then the backward empties the list it
was given and deletes each saved value after its last use. Should it need its inputs again to fall back midway
(`InputsConsumed`), the saved values are made again by the compiled forward on the function's inputs (the same
random draws), the backward runs on them without `consume`, and so does every later call of this plan; reported
once as a `fallback` of stage `autograd`.

Under compiled autograd (`ember.compiled_autograd`) the engine hands this backward to Dynamo, which traces it into
the whole backward it captures: then the backward graph runs as an FX module of ATen calls (`Plan.backward_module`),
which Dynamo can trace and ember then compiles with the rest of the backward. A backward with create_graph=True is
captured too, and there the module on the saved values would lose their paths to the inputs (they have no history):
the gradients are taken as above (`differentiable_grads`), outside Dynamo, which breaks its graph for the call.
Dynamo never compiles `backward` as a frame of its own (`_frames_without_dynamo`). The forward run again, for
create_graph=True and for saved values let go, is `_rerun`'s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx
from ember_core import (
    CompiledGraph,
    Event,
    Graph,
    GraphError,
    InputsConsumed,
    Interpreter,
    Partition,
    Ref,
    autocast_disabled,
    emit,
    grad_rules,
    is_random,
    node_refs,
    symbolic_backward_formulas,
    to_fx,
)

from ._rerun import (
    differentiable_grads,
    grads_outside_dynamo,
    prepare_for_dynamo,
    rng_states,
    same_draws,
    unchanged_inputs,
)

log = logging.getLogger("ember.autograd")


def _with_formulas(module: fx.GraphModule) -> fx.GraphModule:
    """`module` with each call of an op of `symbolic_backward_formulas` calling its formula instead."""
    formulas = symbolic_backward_formulas()
    nodes = [n for n in module.graph.nodes if n.op == "call_function" and n.target in formulas]
    for node in nodes:
        node.target = formulas[node.target]
    if nodes:
        module.recompile()
    return module


class Plan:
    """What the autograd.Function needs: the compiled forward, the backward (compiled on first use) and the layout
    of both graphs."""

    def __init__(self, partition: Partition, forward: CompiledGraph, compile_backward: Callable[[], CompiledGraph]):
        fw, bw = partition.forward, partition.backward
        self.partition = partition
        self.forward = forward
        self.random = any(is_random(n.op) for n in fw.nodes)  # then a forward run again must draw the same
        self._differentiable: Interpreter | None = None
        self._compile_backward = compile_backward
        self._backward: CompiledGraph | None = None
        self._backward_module: fx.GraphModule | None = None
        self._lock = threading.Lock()
        self.num_primals = len(fw.inputs)
        self.num_outputs = len(fw.outputs) - len(partition.saved)
        self.differentiable = tuple(fw.values[o.name].requires_grad for o in fw.outputs[:self.num_outputs])
        every = _output_sources(fw)
        sources = every[:self.num_outputs]
        # the primals the saved values are computed from: the gradients are functions of these (and the tangents)
        # only, so a forward run again must read them as they were (to make the saved values again for the
        # compiled backward, or the gradients for one with create_graph=True)
        self.saved_from = tuple(k for k in range(self.num_primals)
                                if any(m >> k & 1 for m in every[self.num_outputs:]))
        mutated = {o.input for o in fw.outputs if o.kind == "mutation"}
        self.rereads = next((k for k in self.saved_from if k in mutated), None)  # written, then read again written
        # the backward is called through `consume` where it offers it, until it cannot (or cannot recover)
        self.consumes = self.rereads is None
        # per primal, per forward output: does the primal reach it? (bools, not masks: torch 2.11's Dynamo, tracing
        # the backward under compiled autograd, made an int attribute a graph input and printed `0 |= x`)
        self.reaches = tuple(tuple(d and bool(m >> k & 1) for m, d in zip(sources, self.differentiable))
                             for k in range(self.num_primals))
        self.traced_grad = tuple(fw.values[i.name].requires_grad for i in fw.inputs)
        self.grad_inputs = tuple(o.input for o in bw.outputs)
        slot = {k: j for j, k in enumerate(self.grad_inputs)}
        self.grad_slots = tuple(slot.get(k) for k in range(self.num_primals))  # primal → backward output, or None
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

    def backward_module(self) -> fx.GraphModule:
        """The backward graph as an FX module of ATen calls, which Dynamo can trace (compiled autograd inlines it
        into the backward it captures). Built outside Dynamo (`prepare_for_dynamo`).
        Dynamo traces it with symbolic sizes, so an ATen backward kernel that fake tensors of symbolic sizes cannot
        run (softshrink's, kept whole in a static joint trace) is called as its formula, as a symbolic joint trace
        writes it (`symbolic_backward_formulas`): Dynamo raised out of `backward()`."""
        if self._backward_module is None:
            with self._lock:
                if self._backward_module is None:
                    self._backward_module = _with_formulas(to_fx(self.partition.backward))
        return self._backward_module

    def differentiable_forward(self) -> Interpreter:
        """The partition's forward graph as ATen calls (with `grad_rules`), for a backward that must be
        differentiable."""
        if self._differentiable is None:
            with self._lock:
                if self._differentiable is None:
                    fw = self.partition.forward
                    report = f"graph {fw.name!r}: a backward with create_graph=True runs it through ATen with grad " \
                             "mode on and differentiates it with eager's autograd (compiled kernels are not " \
                             "differentiable)"
                    log.warning("autograd: %s", report)
                    emit(Event(kind="fallback", stage="autograd", message=report, graph=self.partition.backward,
                               data={"reason": report, "cause": "autograd"}))
                    self._differentiable = Interpreter(fw, overrides=grad_rules)
        return self._differentiable

    def stop_consuming(self, why: str) -> None:
        """The backward needed its inputs after letting them go: from now on it keeps them (reported once)."""
        with self._lock:
            if not self.consumes:
                return
            self.consumes = False
        bw = self.partition.backward
        report = f"graph {bw.name!r} needed its saved values again after freeing them ({why}); they were made " \
                 "again by the forward, and from now on this backward keeps them to its end"
        log.warning("autograd: %s", report)
        emit(Event(kind="fallback", stage="autograd", message=report, graph=bw,
                   data={"reason": report, "cause": "autograd"}))

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
        ctx.rng = rng_states(inputs) if plan.random else None
        engine = torch._dynamo.compiled_autograd
        if engine.compiled_autograd_enabled:
            prepare_for_dynamo(plan)  # a backward captured inside Dynamo's trace of a step asks for no key first
        results = plan.forward(list(inputs))
        outs, saved = results[:plan.num_outputs], results[plan.num_outputs:]
        ctx.set_materialize_grads(False)  # None then marks an output the loss does not use
        ctx.tangent_meta = [(o.shape, o.dtype, o.device) for o, d in zip(outs, plan.differentiable) if d]
        ctx.plan = plan
        ctx.inputs = inputs  # kept for a backward that runs the forward again (create_graph=True, a fallback)
        ctx.versions = {k: inputs[k]._version for k in plan.saved_from if isinstance(inputs[k], torch.Tensor)}
        ctx.tensor_slots = [isinstance(s, torch.Tensor) for s in saved]
        ctx.others = [s for s in saved if not isinstance(s, torch.Tensor)]
        ctx.save_for_backward(*(s for s in saved if isinstance(s, torch.Tensor)))
        ctx.mark_non_differentiable(*(o for o, d in zip(outs, plan.differentiable)
                                      if isinstance(o, torch.Tensor) and not d))
        return tuple(outs)

    @staticmethod
    def _compiled_autograd_key(ctx: Any) -> tuple:
        """Compiled autograd's engine asks each node for its key as it walks the autograd graph, before Dynamo
        traces the backward it captures (and on each cache hit): for a forward that ran before compiled autograd
        was on, what Dynamo cannot make while tracing `backward` is made here. (The key is `autograd.Function`'s
        own.)"""
        if not torch.compiler.is_compiling():
            prepare_for_dynamo(ctx.plan)
        return (ctx._autograd_function_id,)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[Any, ...]:
        plan: Plan = ctx.plan
        if torch.compiler.is_compiling():  # compiled autograd: Dynamo traces this backward into the whole one
            if torch.is_grad_enabled():  # create_graph=True: captured too; the saved values have no history
                return (None, *grads_outside_dynamo()(ctx, grad_outputs))
            results = plan.backward_module()(*_saved_values(ctx), *_tangents(ctx, grad_outputs))
            return (None, *_grads(plan, results, grad_outputs))
        with autocast_disabled():  # the backward graph holds the forward's casts: an autocast on now adds none
            if torch.is_grad_enabled():  # create_graph=True: the grads must be differentiable themselves
                return (None, *differentiable_grads(ctx, grad_outputs))
            with torch.no_grad():
                grads = _grads(plan, _run_backward(ctx, grad_outputs), grad_outputs)
        return (None, *grads)


def _run_backward(ctx: Any, grad_outputs: Sequence[Any]) -> list:
    """The compiled backward on the saved values and tangents, freeing each saved value after its last use where
    it can (see the module's docstring)."""
    plan: Plan = ctx.plan
    backward = plan.backward()
    args = [*_saved_values(ctx), *_tangents(ctx, grad_outputs)]
    if backward.consume is None or not plan.consumes:
        return backward(args)
    ctx.maybe_clear_saved_tensors()  # autograd's references: dropped unless the graph is retained
    try:
        return backward.consume(args)
    except InputsConsumed as e:
        plan.stop_consuming(str(e))
    with same_draws(ctx):
        saved = plan.forward(list(unchanged_inputs(ctx)))[plan.num_outputs:]
    return backward([*saved, *_tangents(ctx, grad_outputs)])


def _saved_values(ctx: Any) -> list[Any]:
    tensors, others = iter(ctx.saved_tensors), iter(ctx.others)
    return [next(tensors) if is_tensor else next(others) for is_tensor in ctx.tensor_slots]


def _tangents(ctx: Any, grad_outputs: Sequence[Any]) -> list[Any]:
    """The backward graph's tangents: the incoming gradients of the differentiable outputs, contiguous as traced,
    zeros for those the loss does not use."""
    incoming = [g for g, d in zip(grad_outputs, ctx.plan.differentiable) if d]
    return [torch.zeros(shape, dtype=dtype, device=device) if g is None else g.contiguous()
            for g, (shape, dtype, device) in zip(incoming, ctx.tangent_meta)]


def _grads(plan: Plan, results: Sequence[Any], grad_outputs: Sequence[Any]) -> list[Any]:
    """One gradient per primal from the backward graph's outputs: None where it computes none, or where the primal
    reaches no output that got a gradient. No list item is assigned: torch 2.11's Dynamo, tracing this under
    compiled autograd, breaks the graph on `list.__setitem__`."""
    used = [g is not None for g in grad_outputs]  # None: the loss does not use that output
    if all(u or not d for u, d in zip(used, plan.differentiable)):  # the usual call: no primal to look at
        return [None if j is None else results[j] for j in plan.grad_slots]
    return [None if j is None or not any(r and u for r, u in zip(reach, used)) else results[j]
            for j, reach in zip(plan.grad_slots, plan.reaches)]


def _output_sources(fw: Graph) -> tuple[int, ...]:
    """Per forward output, a mask of the primals its value is computed from (bit k: primal k), through the forward
    graph's data flow. That covers autograd's reach (a detach or an argmax passes data but no gradient), so a primal
    it leaves out of every output the loss uses gets no gradient in eager either. A node's outputs read all its
    arguments, except batch norm's in training (`_UPDATE_ONLY`)."""
    bits = {inp.name: 1 << k for k, inp in enumerate(fw.inputs)}
    for node in fw.nodes:
        unread, leading = _update_only(node)
        mask = narrow = 0  # what every output reads; what the leading `leading` read
        for name in node_refs(node):
            mask |= bits.get(name, 0)
            narrow |= 0 if name in unread else bits.get(name, 0)
        for j, out in enumerate(node.outputs):
            bits[out] = narrow if j < leading else mask
    return tuple(bits.get(o.name, 0) for o in fw.outputs)


# Batch norm in training reads its running statistics only to update them: its output and the batch's mean and
# inverse std do not depend on them. Without this, a model with batch norm would count as one whose forward reads
# an input it writes (the statistics), and could not run its forward again for a backward with create_graph=True.
# op → (index of its `training` argument; the statistics' argument indices; the number of leading outputs that do
# not read them). (`_batch_norm_with_update_functional` is left out: its backward formula reads the statistics
# themselves, so they are saved values anyway.)
_UPDATE_ONLY = {
    "aten._native_batch_norm_legit_functional.default": (5, (3, 4), 3),
}


def _update_only(node: Any) -> tuple[set[str], int]:
    """The names of the arguments `node`'s leading outputs do not read, and how many outputs those are."""
    rule = _UPDATE_ONLY.get(node.op)
    if rule is None:
        return set(), 0
    training, stats, leading = rule
    if not (len(node.args) > training and node.args[training] is True):
        return set(), 0
    return {a.name for k in stats if k < len(node.args) and isinstance(a := node.args[k], Ref)}, leading


def _frames_without_dynamo(fn: Callable) -> None:
    """Dynamo neither compiles a frame of `fn` nor one it calls. The engine calls `CompiledFunction.backward` as a
    frame of its own, and inside a function compiled through Dynamo (a training step with `loss.backward()` or
    `torch.autograd.grad` in it: Dynamo breaks its graph there and runs the call) Dynamo compiled that frame too:
    its trace took the branch meant for compiled autograd, so the backward ran as a module of ATen calls, compiled
    again as new graphs, instead of the compiled backward (and, with create_graph=True, gave the first layers'
    weights gradients 0.8 off eager's, silently, before that branch learnt create_graph). Compiled autograd still
    inlines `backward` into the backward it captures: this acts on frames, not on inlining. A torch without the
    switch (`set_code_exec_strategy`) leaves the frame to Dynamo, whose trace is right, only slower."""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
    except ImportError:
        return
    set_code_exec_strategy(fn.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))


_frames_without_dynamo(CompiledFunction.backward)


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
