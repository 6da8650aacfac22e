"""Symbol names: renaming a graph's symbols everywhere at once, and the canonical names `s0, s1, ...`.

A symbol's name appears in the symbol table, in the sizes, strides and offsets of values, in `Sym` arguments, and
as the name of each `sym` input (a frontend names such an input after the symbol it carries; the interpreter and
the frontends' runners bind symbols from those inputs by name, so they are symbols here too). `rename_symbols`
changes all of these together.

`specialize_symbols` replaces symbols by values: the graph as it is at those values (the `sym` inputs stay, so
that the graph takes the same arguments, and bind symbols nothing reads).

`canonical_symbols` names the symbols `s0, s1, ...` in order of first appearance: the inputs in order (a `sym`
input's own name, then each input's sizes, strides and offset), then each node's arguments and results, then the
declared symbols that appear nowhere. Both capture frontends call it on every graph they make, so a function gives
the same symbol names, and the same text, whichever frontend traced it (their ShapeEnvs name symbols by hashes).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import sympy

from .._errors import GraphError
from ._expr import ExprTree, parse_expr, parse_tree
from ._schema import Graph, Input, Output, Ref, Sym, Symbol, Value, map_args, rename_reads


def rename_dim(d: int | str, names: Mapping[str, str]) -> int | str:
    """A size, stride or offset with its symbols renamed; the expression is printed again by sympy."""
    if isinstance(d, int) or not names:
        return d
    expr = parse_expr(d)
    swap = {s: sympy.Symbol(names[s.name], integer=True) for s in expr.free_symbols if s.name in names}
    return str(expr.xreplace(swap)) if swap else d


def _rename_arg(arg: Any, names: Mapping[str, str]) -> Any:
    return map_args(arg, lambda a: Sym(rename_dim(a.expr, names)) if isinstance(a, Sym) else a)


def _rename_value(v: Value, names: Mapping[str, str]) -> Value:
    return v.replace(shape=tuple(rename_dim(d, names) for d in v.shape),
                     stride=tuple(rename_dim(d, names) for d in v.stride),
                     storage_offset=rename_dim(v.storage_offset, names))


def sym_inputs(graph: Graph) -> list[str]:
    """Names of the inputs that carry a symbolic int: each binds the symbol of its name."""
    return [i.name for i in graph.inputs if (v := graph.values.get(i.name)) is not None and v.type == "sym"]


def rename_symbols(graph: Graph, names: Mapping[str, str]) -> Graph:
    """The graph with symbol `s` called `names[s]` (the others keep their names), in the table, sizes, `Sym`
    arguments and `sym` inputs. The mapping is applied at once, so it may swap names."""
    carriers = set(sym_inputs(graph))
    refs = {old: new for old, new in names.items() if old in carriers}
    nodes = [rename_reads(n, refs) for n in graph.nodes]
    nodes = [n.replace(args=_rename_arg(n.args, names), kwargs={k: _rename_arg(v, names) for k, v in n.kwargs.items()})
             for n in nodes]
    values = {refs.get(k, k): _rename_value(v, names).replace(base=refs.get(v.base, v.base))
              for k, v in graph.values.items()}
    return graph.replace(
        symbols=tuple(Symbol(names.get(s.name, s.name), s.hint, s.lower, s.upper) for s in graph.symbols),
        inputs=tuple(Input(refs.get(i.name, i.name), i.kind, i.mutated) for i in graph.inputs),
        nodes=tuple(nodes),
        outputs=tuple(Output(refs.get(o.name, o.name), o.kind, o.input) for o in graph.outputs),
        values=values,
    )


def _specialize_dim(d: int | str, values: Mapping[str, int]) -> int | str:
    if isinstance(d, int):
        return d
    expr = parse_expr(d)
    swap = {s: sympy.Integer(values[s.name]) for s in expr.free_symbols if s.name in values}
    if not swap:
        return d
    expr = expr.xreplace(swap)
    return int(expr) if expr.is_Integer else str(expr)


def _specialize_arg(arg: Any, values: Mapping[str, int], carriers: set[str]) -> Any:
    def one(a: Any) -> Any:
        if isinstance(a, Ref) and a.name in carriers:
            return values[a.name]  # a read of a specialized symbol's `sym` input
        if not isinstance(a, Sym):
            return a
        d = _specialize_dim(a.expr, values)
        return d if isinstance(d, int) else Sym(d)
    return map_args(arg, one)


def specialize_symbols(graph: Graph, values: Mapping[str, int]) -> Graph:
    """The graph at `values` (symbol name → int): each of those symbols replaced by its value in sizes, strides,
    offsets and `Sym` arguments (an expression left constant becomes an int) and dropped from the symbol table.
    Its `sym` inputs stay inputs; the nodes that read one read its value instead (outputs still return it)."""
    unknown = sorted(set(values) - {s.name for s in graph.symbols} - set(sym_inputs(graph)))
    if unknown:
        raise GraphError(f"graph {graph.name!r} has no symbol {unknown[0]!r} to specialize")
    carriers = set(sym_inputs(graph)) & set(values)
    nodes = tuple(n.replace(args=_specialize_arg(n.args, values, carriers),
                            kwargs={k: _specialize_arg(v, values, carriers) for k, v in n.kwargs.items()})
                  for n in graph.nodes)
    fields = {}
    for name, v in graph.values.items():
        fields[name] = v.replace(shape=tuple(_specialize_dim(d, values) for d in v.shape),
                                 stride=tuple(_specialize_dim(d, values) for d in v.stride),
                                 storage_offset=_specialize_dim(v.storage_offset, values))
    return graph.replace(symbols=tuple(s for s in graph.symbols if s.name not in values), nodes=nodes, values=fields)


# ---------------------------------------------------------------------------------------------- canonical names

def _tree_names(tree: ExprTree) -> Iterator[str]:
    """The names of an expression tree, left to right as written."""
    kind = tree[0]
    if kind == "name":
        yield tree[1]
    elif kind == "neg":
        yield from _tree_names(tree[1])
    elif kind == "bin":
        yield from _tree_names(tree[2])
        yield from _tree_names(tree[3])
    elif kind == "call":
        for a in tree[2]:
            yield from _tree_names(a)


@functools.lru_cache(maxsize=4096)
def _names_in(text: str) -> tuple[str, ...]:
    return tuple(_tree_names(parse_tree(text)))


def _value_dims(v: Value | None) -> Iterator[int | str]:
    if v is not None:
        yield from (*v.shape, *v.stride, v.storage_offset)


def _sym_exprs(arg: Any) -> Iterator[str]:
    if isinstance(arg, Sym):
        yield arg.expr
    elif isinstance(arg, (list, tuple)):
        for a in arg:
            yield from _sym_exprs(a)


def _appearances(graph: Graph, carriers: set[str]) -> Iterator[str]:
    """Every place a symbol could first appear, in canonical order: names and expression texts."""
    for inp in graph.inputs:
        if inp.name in carriers:
            yield inp.name
        yield from (d for d in _value_dims(graph.values.get(inp.name)) if isinstance(d, str))
    for node in graph.nodes:
        yield from _sym_exprs(node.args)
        yield from _sym_exprs(tuple(node.kwargs[k] for k in sorted(node.kwargs)))
        for o in node.outputs:
            yield from (d for d in _value_dims(graph.values.get(o)) if isinstance(d, str))


def symbol_order(graph: Graph) -> list[str]:
    """The graph's symbols (declared ones and `sym` inputs) in order of first appearance."""
    symbols = {s.name for s in graph.symbols} | set(sym_inputs(graph))
    order: dict[str, None] = {}
    for text in _appearances(graph, symbols):
        for name in (text,) if text in symbols else _names_in(text):
            if name in symbols:
                order.setdefault(name)
    for s in graph.symbols:
        order.setdefault(s.name)
    return [n for n in order if n in symbols]


def _fresh_names(graph: Graph, count: int, symbols: set[str]) -> list[str]:
    """`s0, s1, ...`, skipping names that values or constants other than the symbols' own inputs hold."""
    taken = (set(graph.values) | set(graph.constants) | set(graph.input_names)) - symbols
    names, k = [], 0
    while len(names) < count:
        if f"s{k}" not in taken:
            names.append(f"s{k}")
        k += 1
    return names


def canonical_symbols(graph: Graph) -> Graph:
    """The graph with its symbols named `s0, s1, ...` in order of first appearance (see the module's doc), the
    symbol table in that order. A graph already canonical is returned as it is."""
    order = symbol_order(graph)
    names = dict(zip(order, _fresh_names(graph, len(order), set(order))))
    position = {new: k for k, new in enumerate(names.values())}
    table = tuple(sorted((Symbol(names[s.name], s.hint, s.lower, s.upper) for s in graph.symbols),
                         key=lambda s: position[s.name]))
    if all(old == new for old, new in names.items()) and table == graph.symbols:
        return graph
    return rename_symbols(graph, names).replace(symbols=table)
