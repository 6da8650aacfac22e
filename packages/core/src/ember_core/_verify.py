"""`verify(graph)`: the schema's rules, checked. Errors name the node and field and show the graph around it."""

from __future__ import annotations

import re

from ._dtypes import DTYPE_NAMES
from ._errors import GraphError
from ._ops import resolve_op
from ._printer import format_graph
from ._schema import INPUT_KINDS, OUTPUT_KINDS, VALUE_TYPES, Graph, Sym, iter_refs

_SYMBOL_LIKE = re.compile(r"\b([a-z]\d+)\b")


def _fail(graph: Graph, where: str, what: str, node_index: int | None = None) -> GraphError:
    text = f"graph {graph.name!r}: {where}: {what}"
    if node_index is not None:
        text += "\n" + format_graph(graph, mark=node_index, window=10)
    return GraphError(text)


def _check_syms(graph: Graph, args, where: str, node_index: int | None, symbols: set[str]) -> None:
    for arg in args if isinstance(args, (list, tuple)) else (args,):
        if isinstance(arg, (list, tuple)):
            _check_syms(graph, arg, where, node_index, symbols)
        elif isinstance(arg, Sym):
            for name in _SYMBOL_LIKE.findall(arg.expr):
                if name not in symbols:
                    raise _fail(graph, where, f"symbolic expression {arg.expr!r} uses undeclared symbol {name!r}", node_index)


def _check_value(graph: Graph, name: str, symbols: set[str]) -> None:
    v = graph.values[name]
    where = f"values.{name}"
    if v.type not in VALUE_TYPES:
        raise _fail(graph, f"{where}.type", f"unknown value type {v.type!r}; expected one of {VALUE_TYPES}")
    if v.dtype not in DTYPE_NAMES:
        raise _fail(graph, f"{where}.dtype", f"unknown dtype {v.dtype!r}")
    if v.type == "tensor" and len(v.shape) != len(v.stride):
        raise _fail(graph, where, f"shape has {len(v.shape)} dims but stride has {len(v.stride)}")
    for field, dims in (("shape", v.shape), ("stride", v.stride), ("storage_offset", (v.storage_offset,))):
        for d in dims:
            if isinstance(d, str):
                _check_syms(graph, Sym(d), f"{where}.{field}", None, symbols)


def verify(graph: Graph) -> Graph:
    """Check every rule of the schema; return the graph unchanged, or raise `GraphError`."""
    symbols = {s.name for s in graph.symbols}
    defined: set[str] = set()

    def define(name: str, where: str, node_index: int | None = None) -> None:
        if name in defined:
            raise _fail(graph, where, f"value {name!r} is defined twice", node_index)
        if name not in graph.values:
            raise _fail(graph, where, f"value {name!r} has no entry in values", node_index)
        _check_value(graph, name, symbols)
        defined.add(name)

    for k, inp in enumerate(graph.inputs):
        if inp.kind not in INPUT_KINDS:
            raise _fail(graph, f"inputs[{k}].kind", f"unknown input kind {inp.kind!r}; expected one of {INPUT_KINDS}")
        define(inp.name, f"inputs[{k}]")
    defined.update(graph.constants)
    for i, node in enumerate(graph.nodes):
        where = f"node {i} ({', '.join(node.outputs)} = {node.op})"
        try:
            resolve_op(node.op)
        except GraphError as e:
            raise _fail(graph, f"{where}.op", str(e), i) from None
        for j, arg in enumerate(node.args):
            for ref in iter_refs(arg):
                if ref not in defined:
                    raise _fail(graph, f"{where}.args[{j}]", f"refers to undefined value {ref!r}", i)
        for key, arg in node.kwargs.items():
            for ref in iter_refs(arg):
                if ref not in defined:
                    raise _fail(graph, f"{where}.kwargs.{key}", f"refers to undefined value {ref!r}", i)
        _check_syms(graph, node.args, f"{where}.args", i, symbols)
        _check_syms(graph, tuple(node.kwargs.values()), f"{where}.kwargs", i, symbols)
        if not node.outputs:
            raise _fail(graph, where, "node has no outputs", i)
        for out in node.outputs:
            define(out, f"{where}.outputs", i)
    mutated = {o.input for o in graph.outputs if o.kind == "mutation"}
    for k, out in enumerate(graph.outputs):
        where = f"outputs[{k}]"
        if out.kind not in OUTPUT_KINDS:
            raise _fail(graph, f"{where}.kind", f"unknown output kind {out.kind!r}; expected one of {OUTPUT_KINDS}")
        if out.name not in defined:
            raise _fail(graph, f"{where}.name", f"refers to undefined value {out.name!r}")
        if out.kind in ("mutation", "alias") and not (out.input is not None and 0 <= out.input < len(graph.inputs)):
            raise _fail(graph, f"{where}.input", f"output of kind {out.kind!r} needs a valid input index, got {out.input!r}")
    for k, inp in enumerate(graph.inputs):
        if inp.mutated and k not in mutated:
            raise _fail(graph, f"inputs[{k}].mutated", f"input {inp.name!r} is marked mutated but no output carries its new value")
    return graph
