"""A stable fingerprint of a graph for cache keys: blind to value and symbol names, graph name, producer and
source locations; or, with `names=True`, blind to source locations only (for a result that names the graph's
values, such as a kernel plan, which serves only a graph with the same names)."""

from __future__ import annotations

import ctypes
import hashlib
import json

from ._json import graph_to_json
from ._schema import Graph, Input, Node, Output, Ref, Sym, Symbol, Value
from ._symbol_names import rename_dim

# "name" keeps the fx name of a tuple-returning node: a value name like any other.
_IGNORED_META = ("source", "module", "stack", "name")
_LOCATION_META = ("source", "module", "stack")


def _rename(arg, names: dict[str, str], symbols: dict[str, str]):
    if isinstance(arg, Ref):
        return Ref(names.get(arg.name, arg.name))
    if isinstance(arg, Sym):
        return Sym(rename_dim(arg.expr, symbols))
    if isinstance(arg, (list, tuple)):
        return tuple(_rename(a, names, symbols) for a in arg)
    return arg


def _rename_value(v: Value, names: dict[str, str], symbols: dict[str, str]) -> Value:
    return v.replace(
        shape=tuple(rename_dim(d, symbols) for d in v.shape),
        stride=tuple(rename_dim(d, symbols) for d in v.stride),
        storage_offset=rename_dim(v.storage_offset, symbols),
        base=names.get(v.base, v.base),
    )


def _canonical_node(n: Node, names: dict[str, str], symbols: dict[str, str]) -> Node:
    return Node(
        outputs=tuple(names[o] for o in n.outputs),
        op=n.op,
        args=_rename(n.args, names, symbols),
        kwargs={k: _rename(v, names, symbols) for k, v in n.kwargs.items()},
        meta={k: v for k, v in n.meta.items() if k not in _IGNORED_META},
    )


def canonical(graph: Graph) -> Graph:
    """The same graph with values renamed `%0, %1 ...` in definition order, symbols renamed `k0, k1 ...` in
    declaration order, and name and location metadata dropped; its subgraphs likewise."""
    order = [i.name for i in graph.inputs] + list(graph.constants) + [o for n in graph.nodes for o in n.outputs]
    names = {old: f"%{k}" for k, old in enumerate(order)}
    symbols = {s.name: f"k{k}" for k, s in enumerate(graph.symbols)}
    return graph.replace(
        name="",
        producer="",
        symbols=tuple(Symbol(symbols[s.name], s.hint, s.lower, s.upper) for s in graph.symbols),
        inputs=tuple(Input(names[i.name], i.kind, i.mutated) for i in graph.inputs),
        nodes=tuple(_canonical_node(n, names, symbols) for n in graph.nodes),
        outputs=tuple(Output(names[o.name], o.kind, o.input) for o in graph.outputs),
        values={names[k]: _rename_value(v, names, symbols) for k, v in graph.values.items() if k in names},
        constants={names[k]: c.__class__(names[k], c.tensor) for k, c in graph.constants.items()},
        subgraphs={k: canonical(sub) for k, sub in graph.subgraphs.items()},  # called by name: keys stay
    )


def without_locations(graph: Graph) -> Graph:
    """The same graph, names kept, with producer and source-location metadata dropped; its subgraphs likewise."""
    return graph.replace(
        producer="",
        nodes=tuple(n.replace(meta={k: v for k, v in n.meta.items() if k not in _LOCATION_META}) for n in graph.nodes),
        subgraphs={k: without_locations(sub) for k, sub in graph.subgraphs.items()},
    )


def fingerprint(graph: Graph, *, names: bool = False) -> str:
    """A hex digest equal for graphs that differ only in names and source locations (`names=True`: only in source
    locations and producer)."""
    g = without_locations(graph) if names else canonical(graph)
    data = graph_to_json(g.replace(constants={}))
    h = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    for name, c in g.constants.items():
        t = c.tensor.detach().cpu()
        t = (t.to_dense() if t.is_mkldnn else t).contiguous()  # a pre-packed (oneDNN) weight: by its values
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b"")
    return h.hexdigest()[:32]
