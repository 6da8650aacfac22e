"""The reference interpreter: runs a Graph node by node with torch.ops. The oracle for every codegen."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .._errors import GraphError
from ..graph._custom_function import _LIBRARY, _SCOPE, bound_call, function_outputs
from ..graph._printer import format_node
from ..graph._schema import Graph, Node, Ref, Sym, has_sym, node_refs
from ..graph._symbolic import evaluate


class Interpreter:
    """Plans a graph once (ops resolved, values freed after their last use), then runs it on many inputs.

    `overrides` maps an op name to a callable run in its place, with the same arguments (a transform that needs
    an op to behave differently, as the joint trace needs a differentiable `aten.copy`). `after_node(i, node,
    result)`, when given, is called after each node runs (the joint trace tags what each node recorded)."""

    def __init__(self, graph: Graph, overrides: Mapping[str, Callable] | None = None,
                 after_node: Callable[[int, Node, Any], None] | None = None):
        self.graph = graph
        self.after_node = after_node
        overrides = overrides or {}
        self._ops = [overrides[n.op] if n.op in overrides else node_callable(graph, n) for n in graph.nodes]
        self._frees = self._plan_frees(graph)
        self._has_syms = any(has_sym(n.args) or has_sym(tuple(n.kwargs.values())) for n in graph.nodes)
        self._outputs = [o.name for o in graph.outputs]

    @staticmethod
    def _plan_frees(graph: Graph) -> list[tuple[str, ...]]:
        keep = {o.name for o in graph.outputs}
        last: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            for r in node_refs(node):
                last[r] = i
        frees: list[list[str]] = [[] for _ in graph.nodes]
        for name, i in last.items():
            if name not in keep and name not in graph.constants:
                frees[i].append(name)
        return [tuple(f) for f in frees]

    def bindings(self, inputs: Sequence[Any]) -> dict[str, int]:
        """Concrete values of the graph's symbols, read off the inputs' shapes and symbolic-int inputs."""
        env: dict[str, int] = {}
        for inp, x in zip(self.graph.inputs, inputs):
            v = self.graph.values[inp.name]
            if v.type == "sym" and isinstance(x, (int, torch.SymInt)):
                env.setdefault(str(inp.name), x)
            if v.type == "tensor" and isinstance(x, torch.Tensor):
                for d, n in zip(v.shape, x.shape):
                    if isinstance(d, str) and d.isidentifier():
                        env.setdefault(d, n if isinstance(n, torch.SymInt) else int(n))  # traced: keep it symbolic
        return env

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        graph = self.graph
        if len(inputs) != len(graph.inputs):
            raise GraphError(f"graph {graph.name!r} takes {len(graph.inputs)} inputs, got {len(inputs)}")
        env: dict[str, Any] = {c.name: c.tensor for c in graph.constants.values()}
        env.update(zip(graph.input_names, inputs))
        syms = self.bindings(inputs) if self._has_syms else {}
        for i, node in enumerate(graph.nodes):
            try:
                args = [_read(a, env, syms) for a in node.args]
                kwargs = {k: _read(v, env, syms) for k, v in node.kwargs.items()}
                result = self._ops[i](*args, **kwargs)
            except Exception as e:
                if hasattr(e, "add_note"):  # Python 3.11+; on 3.10 the error goes up without the note
                    e.add_note(f"While running node {i} of graph {graph.name!r}: {format_node(node, graph.values)}")
                raise
            if len(node.outputs) == 1 and not isinstance(result, (tuple, list)):
                env[node.outputs[0]] = result
            else:
                for name, r in zip(node.outputs, result):
                    env[name] = r
            if self.after_node is not None:
                self.after_node(i, node, result)
            for name in self._frees[i]:
                del env[name]
        return [env[name] for name in self._outputs]

    __call__ = run


def _read(a: Any, env: dict[str, Any], syms: dict[str, int]) -> Any:
    if isinstance(a, Ref):
        return env[a.name]
    if isinstance(a, Sym):
        try:
            return evaluate(a.expr, syms)
        except KeyError as e:
            raise GraphError(f"symbol {e.args[0]!r} in {a.expr!r} has no value: no input's shape binds it") from None
    if isinstance(a, tuple):
        return [_read(x, env, syms) for x in a]
    return a


def interpret(graph: Graph, inputs: Sequence[Any]) -> list[Any]:
    """Run a graph once on concrete inputs; returns its outputs in order (every kind)."""
    return Interpreter(graph).run(inputs)


def node_callable(graph: Graph, node: Node) -> Callable[..., Any]:
    """What running `node` of `graph` calls: its op, or for an `ember.custom_function` call one bound to its
    subgraphs, which this interpreter runs (`_custom_function.py`)."""
    return bound_call(graph, node, Interpreter)



# A `view` recorded on one layout may not view another (a channels-last activation flattened); `reshape` copies
# only then. Passes that give values new layouts run such a view as `reshape` (`run_on_fakes`).
STRICT_VIEWS = ("aten.view.default", "aten._unsafe_view.default")
RESHAPE = "aten.reshape.default"


def run_on_fakes(graph: Graph, node: Node, env: Mapping[str, Any]) -> tuple[Node, Any]:
    """`node` run on the fake tensors of `env` (value name → fake; the caller's FakeTensorMode is active), to learn
    its results' layouts: the node as run (a strict view the layouts cannot take, as `reshape`) and its result, or
    None where it does not run (an op without a meta kernel, a size only data gives, a missing value; a strict
    view is then returned as `reshape`, which runs whatever the layouts)."""
    def read(a: Any) -> Any:
        if isinstance(a, Ref):
            return env[a.name]
        return [read(x) for x in a] if isinstance(a, tuple) else a

    for op in (node.op, RESHAPE) if node.op in STRICT_VIEWS else (node.op,):
        node = node.replace(op=op)
        try:
            return node, node_callable(graph, node)(*[read(a) for a in node.args],
                                                    **{k: read(v) for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001 - any failure means the same: the layout is unknown this way
            continue
    return node, None

# How a custom function call runs on fake tensors: its forward subgraph, interpreted (this module runs graphs, so the
# registration lives here, and `_custom_function.py` needs no interpreter).
@torch.library.register_fake("ember::custom_function", lib=_LIBRARY)
def _fake(tensors, sizes, forward, backward, non_differentiable):  # noqa: ANN001, ANN202 - torch's signature
    """Outputs shaped as the forward subgraph's: it runs on the fake inputs (new tensors, never the inputs)."""
    graph = (_SCOPE.get() or {}).get(forward)
    if graph is None:
        raise GraphError(f"ember.custom_function: forward subgraph {forward!r} is not in scope; trace calls of it "
                         "inside ember_core.subgraph_scope")
    outs = Interpreter(graph).run([*tensors, *sizes])[:function_outputs(graph)]
    return [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device) for o in outs]
