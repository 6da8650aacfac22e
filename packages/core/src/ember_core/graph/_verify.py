"""`verify(graph)`: the schema's rules, checked. Errors name the node and field and show the graph around it."""

from __future__ import annotations

from .._errors import GraphError
from ._arg_types import ValueKind, arguments_problem
from ._checkpoint import checkpoint_problem
from ._custom_function import call_problem, is_custom_function
from ._dtypes import DTYPE_NAMES, dtype_name
from ._expr import ExprError, parse_integer
from ._ops import resolve_op
from ._printer import format_graph
from ._schema import INPUT_KINDS, OUTPUT_KINDS, REGIONS, VALUE_TYPES, Graph, Node, Sym, iter_refs
from ._sizes import layout_problem


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
            try:
                expr = parse_integer(arg.expr)
            except ExprError as e:
                raise _fail(graph, where, f"symbolic expression does not parse: {e}", node_index) from None
            for name in sorted(s.name for s in expr.free_symbols):
                if name not in symbols:
                    what = f"symbolic expression {arg.expr!r} uses undeclared symbol {name!r}"
                    raise _fail(graph, where, what, node_index)


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
    problem = layout_problem(v.shape, v.stride, v.storage_offset, {s.name: s.hint for s in graph.symbols})
    if problem is not None:
        raise _fail(graph, f"{where}.{problem[0]}", problem[1])


def verify(graph: Graph) -> Graph:
    """Check every rule of the schema; return the graph unchanged, or raise `GraphError`."""
    symbols = {s.name for s in graph.symbols}
    defined: set[str] = set()
    for k, inp in enumerate(graph.inputs):
        if inp.kind not in INPUT_KINDS:
            raise _fail(graph, f"inputs[{k}].kind", f"unknown input kind {inp.kind!r}; expected one of {INPUT_KINDS}")
        _define(graph, inp.name, f"inputs[{k}]", None, defined, symbols)
    for name in graph.constants:
        if name in defined:
            raise _fail(graph, f"constants.{name}", f"constant {name!r} has the name of an input")
        defined.add(name)
    for i, node in enumerate(graph.nodes):
        _check_node(graph, i, node, defined, symbols)
    _check_outputs(graph, defined)
    for sub in graph.subgraphs.values():
        verify(sub)
    return graph


def _define(graph: Graph, name: str, where: str, node_index: int | None, defined: set[str], symbols: set[str]) -> None:
    if name in defined:
        raise _fail(graph, where, f"value {name!r} is defined twice", node_index)
    if name not in graph.values:
        raise _fail(graph, where, f"value {name!r} has no entry in values", node_index)
    _check_value(graph, name, symbols)
    defined.add(name)


def _check_node(graph: Graph, i: int, node: Node, defined: set[str], symbols: set[str]) -> None:
    where = f"node {i} ({', '.join(node.outputs)} = {node.op})"
    try:
        op = resolve_op(node.op)
    except GraphError as e:
        raise _fail(graph, f"{where}.op", str(e), i) from None
    problem = arguments_problem(op, node.op, node.args, node.kwargs, _value_kind(graph))
    if problem is None and is_custom_function(node.op):
        problem = call_problem(graph, node)
    if problem is not None:
        raise _fail(graph, f"{where}.args", problem, i)
    fields = [(f"args[{j}]", a) for j, a in enumerate(node.args)] + [(f"kwargs.{k}", a) for k, a in node.kwargs.items()]
    for field, arg in fields:
        for ref in iter_refs(arg):
            if ref not in defined:
                raise _fail(graph, f"{where}.{field}", f"refers to undefined value {ref!r}", i)
        _check_syms(graph, arg, f"{where}.{field}", i, symbols)
    if not node.outputs:
        raise _fail(graph, where, "node has no outputs", i)
    for out in node.outputs:
        _define(graph, out, f"{where}.outputs", i, defined, symbols)
    _check_node_meta(graph, node, where, i)


def _value_kind(graph: Graph) -> ValueKind:
    """What `arguments_problem` knows of a value by its name: its record's type and dtype (a constant's are
    its tensor's)."""
    def kind(name: str) -> tuple[str, str] | None:
        v = graph.values.get(name)
        if v is not None:
            return v.type, v.dtype
        c = graph.constants.get(name)
        if c is not None:
            try:
                return "tensor", dtype_name(c.tensor.dtype)
            except ValueError:
                return "tensor", str(c.tensor.dtype)
        return None
    return kind


def _check_node_meta(graph: Graph, node: Node, where: str, i: int) -> None:
    region = node.meta.get("region")
    if region is not None and region not in REGIONS:
        raise _fail(graph, f"{where}.meta.region", f"unknown region {region!r}; expected one of {REGIONS}", i)
    problem = checkpoint_problem(node.meta)
    if problem is not None:
        raise _fail(graph, f"{where}.meta.{problem[0]}", problem[1], i)


def _check_outputs(graph: Graph, defined: set[str]) -> None:
    mutated: dict[int, int] = {}  # input index → the output carrying its new value
    for k, out in enumerate(graph.outputs):
        where = f"outputs[{k}]"
        if out.kind not in OUTPUT_KINDS:
            raise _fail(graph, f"{where}.kind", f"unknown output kind {out.kind!r}; expected one of {OUTPUT_KINDS}")
        if out.name not in defined:
            raise _fail(graph, f"{where}.name", f"refers to undefined value {out.name!r}")
        if out.kind in ("mutation", "alias") and not (out.input is not None and 0 <= out.input < len(graph.inputs)):
            what = f"output of kind {out.kind!r} needs a valid input index, got {out.input!r}"
            raise _fail(graph, f"{where}.input", what)
        if out.kind == "mutation":
            _check_mutation(graph, where, k, out.input, mutated)
    for k, inp in enumerate(graph.inputs):
        if inp.mutated and k not in mutated:
            what = f"input {inp.name!r} is marked mutated but no output carries its new value"
            raise _fail(graph, f"inputs[{k}].mutated", what)


def _check_mutation(graph: Graph, where: str, k: int, index: int, mutated: dict[int, int]) -> None:
    inp = graph.inputs[index]
    if not inp.mutated:
        what = f"mutation output of input {index} ({inp.name!r}), but that input is not marked mutated"
        raise _fail(graph, f"{where}.input", what)
    if index in mutated:
        what = f"input {index} ({inp.name!r}) already has a mutation output: outputs[{mutated[index]}]"
        raise _fail(graph, f"{where}.input", what)
    mutated[index] = k
