"""Graphs for the freezing tests: a function traced with make_fx, some of its inputs marked parameters."""

from __future__ import annotations

from ember_core import Graph, Input, from_fx, interpret
from torch.fx.experimental.proxy_tensor import make_fx


def traced(fn, *args, params: tuple[int, ...] = ()) -> Graph:
    """`fn` traced on `args`, the inputs at `params` of kind `param`."""
    graph = from_fx(make_fx(fn)(*args), name=fn.__name__)
    inputs = tuple(Input(i.name, "param" if k in params else i.kind, i.mutated) for k, i in enumerate(graph.inputs))
    return graph.replace(inputs=inputs)


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def run_frozen(result, args) -> list:
    """A `FreezeResult`'s graph run on the inputs it kept."""
    return interpret(result.graph, [args[k] for k in result.kept])
