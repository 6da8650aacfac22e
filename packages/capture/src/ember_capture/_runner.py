"""Calling a compiled graph the way the user's function was called: the frontend's run-time epilogue.

A compiled graph returns every output in `graph.outputs` order. `GraphRunner` writes `mutation` outputs into the
caller's tensors (`inp.copy_(new)`, recorded by autograd when eager autograd would record it) and rebuilds `alias`
outputs as real views of the caller's input, so a function that returns a view of its input returns a view: by
replaying the graph's view ops on the input when the output is a chain of them (autograd then differentiates
eager's view ops: `expand`'s backward is a sum), else by `torch.as_strided` from the output's `Value` (whose
backward scatters element by element). Everything is planned once; a call does list indexing and copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember_core import ExprError, Graph, IntExpr, Node, Output, Ref, interpreter_codegen, is_view_op, iter_refs


def _dim_reader(dim: int | str, where: dict[str, tuple[int, int | None]]) -> Callable[[Sequence[Any]], int] | None:
    """A function of the inputs that gives a dimension's value: an int, or an expression over bound symbols
    (read by ember-core's grammar into integer arithmetic; the text is never evaluated as Python)."""
    if isinstance(dim, int):
        return lambda inputs: dim
    try:
        expr = IntExpr(dim)
    except ExprError:
        return None
    if any(n not in where for n in expr.names):
        return None
    places = [(n, *where[n]) for n in expr.names]

    def read(inputs: Sequence[Any]) -> int:
        return expr({n: inputs[k] if d is None else inputs[k].shape[d] for n, k, d in places})

    return read


def symbol_locations(graph: Graph) -> dict[str, tuple[int, int | None]]:
    """Where each plain symbol can be read at run time: (input index, dim), or (input index, None) for int inputs."""
    where: dict[str, tuple[int, int | None]] = {}
    for k, inp in enumerate(graph.inputs):
        v = graph.values[inp.name]
        if v.type == "sym":
            where.setdefault(inp.name, (k, None))
        for d, dim in enumerate(v.shape if v.type == "tensor" else ()):
            if isinstance(dim, str) and dim.isidentifier():
                where.setdefault(dim, (k, d))
    return where


def _view_chain(graph: Graph, j: int, k: int) -> Callable[[Sequence[Any]], torch.Tensor] | None:
    """Output j made from input k by view ops alone (their size arguments may be symbolic values computed from the
    inputs' sizes), as a function of the inputs that replays them; None when anything else is on the way (the
    output is then rebuilt by `as_strided`)."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    inputs = {i.name for i in graph.inputs}
    name, target, chain, sizes = graph.outputs[j].name, graph.inputs[k].name, [], []
    while name != target:
        node: Node | None = producer.get(name)
        if node is None or len(node.outputs) != 1 or not is_view_op(node.op) or not node.args or \
                not isinstance(node.args[0], Ref):
            return None
        chain.append(node)
        sizes += iter_refs((node.args[1:], node.kwargs))
        name = node.args[0].name
    if not chain:
        return None
    needed: dict[str, Node] = {}
    while sizes:  # the symbolic sizes the views read, and what they are computed from (the inputs' sizes)
        name = sizes.pop()
        if name in inputs or name in needed:
            continue
        node = producer.get(name)
        if node is None or any(graph.values[o].type != "sym" for o in node.outputs):
            return None
        needed.update(dict.fromkeys(node.outputs, node))
        sizes += iter_refs((node.args, node.kwargs))
    nodes = [n for n in graph.nodes if n.outputs[0] in needed] + chain[::-1]
    values = {i.name: graph.values[i.name] for i in graph.inputs}
    values.update({o: graph.values[o] for n in nodes for o in n.outputs})
    sub = Graph(name=f"{graph.name}_view_{j}", inputs=graph.inputs, nodes=tuple(nodes),
                outputs=(Output(graph.outputs[j].name),), values=values, symbols=graph.symbols)
    fn = interpreter_codegen().compile(sub, None, {})
    return lambda inputs: fn(inputs)[0]


class _AliasPlan:
    """How to rebuild one `alias` output as a view of input `k`."""

    def __init__(self, graph: Graph, j: int, k: int, where: dict[str, tuple[int, int | None]]):
        out, inp = graph.values[graph.outputs[j].name], graph.values[graph.inputs[k].name]
        self.j, self.k = j, k
        self.detach = inp.requires_grad and not out.requires_grad
        self.same = (out.shape, out.stride, out.storage_offset, out.dtype) == \
            (inp.shape, inp.stride, inp.storage_offset, inp.dtype)
        self.retype = out.dtype != inp.dtype  # a view as another dtype (`view(torch.int32)`, `view_as_complex`)
        self.replay = None if self.same or self.detach else _view_chain(graph, j, k)
        self.stride = [_dim_reader(s, where) for s in out.stride]
        self.offset = _dim_reader(out.storage_offset, where)

    def __call__(self, inputs: Sequence[Any], outs: Sequence[Any]) -> torch.Tensor:
        if self.replay is not None:
            return self.replay(inputs)
        base = inputs[self.k]
        if self.detach:
            base = base.detach()
        if self.same:
            return base
        got = outs[self.j]
        stride = [s(inputs) if s else got.stride(i) for i, s in enumerate(self.stride)]
        offset = self.offset(inputs) if self.offset else got.storage_offset()
        if self.retype:  # strides and offset count elements of the output's dtype
            base = base.view(got.dtype)
        return torch.as_strided(base, got.shape, stride, offset)


class GraphRunner:
    """`runner(inputs) -> user outputs`: calls `compiled(inputs)`, applies mutations, rebuilds aliases."""

    def __init__(self, graph: Graph, compiled: Callable[[Sequence[Any]], list]):
        self.graph, self.compiled = graph, compiled
        where = symbol_locations(graph)
        values, inputs = graph.values, graph.inputs
        self._mutations = [(j, o.input, values[o.name].requires_grad)
                           for j, o in enumerate(graph.outputs) if o.kind == "mutation"]
        self._user = [j for j, o in enumerate(graph.outputs) if o.kind in ("user", "alias")]
        self._aliases = {j: _AliasPlan(graph, j, o.input, where) for j, o in enumerate(graph.outputs)
                         if o.kind == "alias"}
        any_grad = any(values[i.name].requires_grad for i in inputs)
        self._detach = [j for j, o in enumerate(graph.outputs) if any_grad and o.kind == "user"
                        and values[o.name].type == "tensor" and not values[o.name].requires_grad]

    @property
    def passthrough(self) -> Callable[[Sequence[Any]], list] | None:
        """The compiled callable itself, when there is nothing to apply around it (the per-call fast path)."""
        if self._mutations or self._detach or self._aliases or len(self._user) != len(self.graph.outputs):
            return None
        return getattr(self.compiled, "fn", self.compiled)

    def __call__(self, inputs: list) -> list:
        outs = self.compiled(inputs)
        for j, k, grad in self._mutations:
            _write(inputs[k], outs[j], grad)
        for j in self._detach:
            if outs[j].requires_grad:
                outs[j] = outs[j].detach()
        if not self._aliases:
            return [outs[j] for j in self._user]
        aliases = self._aliases
        return [aliases[j](inputs, outs) if j in aliases else outs[j] for j in self._user]


def _write(target: torch.Tensor, new: torch.Tensor, grad: bool) -> None:
    """`target.copy_(new)`, recorded by autograd when eager would record the mutation.

    A write eager autograd would not see (a buffer updated inside a kernel, like batch norm's running stats, or a
    write under no_grad) goes through `.data`, so it does not bump the version counter of a tensor the graph's
    ops may have saved for backward (eager's kernel updates it in place before saving it, too)."""
    if grad and not (target.is_leaf and target.requires_grad) and torch.is_grad_enabled():
        target.copy_(new)
        return
    with torch.no_grad():
        target.data.copy_(new)
