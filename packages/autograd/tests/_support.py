"""Helpers for ember-autograd's tests: capture a function as an ember Graph, a tiny partitioner that saves every
forward value the backward reads, interpreter-compiled halves, and an eager-vs-compiled comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember_autograd import joint, wrap
from ember_core import CompiledGraph, Graph, Input, Interpreter, JointGraph, Output, Partition, Ref, from_fx
from torch.fx.experimental.proxy_tensor import make_fx


def capture(fn: Callable, *args: Any, kinds: Sequence[str] | None = None, outputs: Sequence[Output] | None = None,
            mutated: Sequence[int] = (), tracing_mode: str = "real") -> Graph:
    """A functional ATen graph of `fn`, as a frontend would hand it over: input kinds (and which inputs the
    graph mutates) and output kinds stamped. Mutations must already be outputs of `fn`."""
    gm = make_fx(torch.func.functionalize(fn), tracing_mode=tracing_mode)(*args)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, n in enumerate(placeholders):
        kind = kinds[k] if kinds else "user"
        n.meta["ember_input"] = Input(n.name, kind, mutated=k in mutated)
    if outputs is not None:
        out = next(n for n in gm.graph.nodes if n.op == "output")
        names = [a.name for a in out.args[0]]
        out.meta["ember_outputs"] = [Output(name, o.kind, o.input) for name, o in zip(names, outputs)]
    return from_fx(gm, name=getattr(fn, "__name__", "fn"))


def refs(node) -> list[str]:
    found: list[str] = []

    def walk(a):
        if isinstance(a, Ref):
            found.append(a.name)
        elif isinstance(a, (list, tuple)):
            for x in a:
                walk(x)

    walk(node.args)
    walk(tuple(node.kwargs.values()))
    return found


def save_everything(jg: JointGraph) -> Partition:
    """Forward region → forward graph; backward region → backward graph; saves every forward value it reads."""
    g = jg.graph
    primals, tangents = g.inputs[:jg.num_primals], g.inputs[jg.num_primals:]
    fw_outs, grads = g.outputs[:jg.num_forward_outputs], g.outputs[jg.num_forward_outputs:]
    fw_nodes = [n for n in g.nodes if n.meta["region"] == "forward"]
    bw_nodes = [n for n in g.nodes if n.meta["region"] == "backward"]
    made_by_forward = {i.name for i in primals} | {o for n in fw_nodes for o in n.outputs}
    reads = [r for n in bw_nodes for r in refs(n)] + [o.name for o in grads]
    saved = tuple(dict.fromkeys(r for r in reads if r in made_by_forward))

    def sub(name, inputs, nodes, outputs):
        names = {i.name for i in inputs} | {o for n in nodes for o in n.outputs}
        values = {k: v for k, v in g.values.items() if k in names}
        return Graph(name, tuple(inputs), tuple(nodes), tuple(outputs), values, g.symbols, dict(g.constants))

    forward = sub(g.name + "_fw", primals, fw_nodes, [*fw_outs, *(Output(s, "saved") for s in saved)])
    backward = sub(g.name + "_bw", [*(Input(s, "saved") for s in saved), *tangents], bw_nodes, grads)
    return Partition(forward, backward, saved)


def interpreted(graph: Graph) -> CompiledGraph:
    return CompiledGraph(Interpreter(graph).run, graph, "interpreter")


class Compiled:
    """`fn` through joint → save_everything → interpreter → wrap; counts backward compiles."""

    def __init__(self, fn: Callable, *args: Any, graph: Graph | None = None, **capture_options: Any):
        self.graph = graph if graph is not None else capture(fn, *args, **capture_options)
        self.joint = joint(self.graph, args)
        self.partition = save_everything(self.joint)
        self.backward_compiles = 0
        self.run = wrap(self.partition, interpreted(self.partition.forward), self._compile_backward)

    def _compile_backward(self) -> CompiledGraph:
        self.backward_compiles += 1
        return interpreted(self.partition.backward)

    def __call__(self, *args: Any) -> list:
        return self.run(list(args))


def leaves(args: Sequence[Any]) -> list[Any]:
    """Fresh copies of the inputs, floating tensors that required grad requiring it again."""
    return [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]


def cotangents(outs: Sequence[Any], seed: int = 0) -> list[Any]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) if _needs_grad(o) else None for o in outs]


def _needs_grad(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def grads_of(outs: Sequence[Any], inputs: Sequence[Any], cts: Sequence[Any]) -> list[Any]:
    pairs = [(o, c) for o, c in zip(outs, cts) if c is not None]
    wrt = [x for x in inputs if _needs_grad(x)]
    if not pairs:
        return [None] * len(wrt)
    return list(torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs], allow_unused=True))


def check_against_eager(fn: Callable, *args: Any, seed: int | None = None, **capture_options: Any) -> Compiled:
    """Outputs, their requires_grad and the gradients of the compiled function equal eager's."""
    compiled = Compiled(fn, *args, **capture_options)
    eager_in, compiled_in = leaves(args), leaves(args)
    if seed is not None:
        torch.manual_seed(seed)
    expected = fn(*eager_in)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if seed is not None:
        torch.manual_seed(seed)
    actual = compiled(*compiled_in)
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
        assert _needs_grad(a) == _needs_grad(e)
    cts = cotangents(expected)
    assert_same_grads(grads_of(actual, compiled_in, cts), grads_of(expected, eager_in, cts))
    return compiled


def assert_same_grads(actual: Sequence[Any], expected: Sequence[Any]) -> None:
    """Equal gradients; where eager has none, the compiled one is none or zero."""
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, e)
