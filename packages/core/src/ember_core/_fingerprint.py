"""A stable fingerprint of a graph for cache keys: blind to value names, graph name, producer and source locations."""

from __future__ import annotations

import ctypes
import hashlib
import json

import torch

from ._json import graph_to_json
from ._schema import Graph, Node, Ref

_IGNORED_META = ("source", "module", "stack")


def _rename(arg, names: dict[str, str]):
    if isinstance(arg, Ref):
        return Ref(names.get(arg.name, arg.name))
    if isinstance(arg, (list, tuple)):
        return tuple(_rename(a, names) for a in arg)
    return arg


def canonical(graph: Graph) -> Graph:
    """The same graph with values renamed `%0, %1 ...` in definition order and location metadata dropped."""
    order = [i.name for i in graph.inputs] + list(graph.constants) + [o for n in graph.nodes for o in n.outputs]
    names = {old: f"%{k}" for k, old in enumerate(order)}
    nodes = tuple(
        Node(
            outputs=tuple(names[o] for o in n.outputs),
            op=n.op,
            args=_rename(n.args, names),
            kwargs={k: _rename(v, names) for k, v in n.kwargs.items()},
            meta={k: v for k, v in n.meta.items() if k not in _IGNORED_META},
        )
        for n in graph.nodes
    )
    return graph.replace(
        name="",
        producer="",
        inputs=tuple(i.__class__(names[i.name], i.kind, i.mutated) for i in graph.inputs),
        nodes=nodes,
        outputs=tuple(o.__class__(names[o.name], o.kind, o.input) for o in graph.outputs),
        values={names[k]: v.replace(base=names.get(v.base, v.base)) for k, v in graph.values.items() if k in names},
        constants={names[k]: c.__class__(names[k], c.tensor) for k, c in graph.constants.items()},
    )


def fingerprint(graph: Graph) -> str:
    """A hex digest equal for graphs that differ only in names and source locations."""
    g = canonical(graph)
    data = graph_to_json(g.replace(constants={}))
    h = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    for name, c in g.constants.items():
        t = c.tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b"")
    return h.hexdigest()[:32]
