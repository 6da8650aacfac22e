"""Byte sizes of graph values: element count × element size, symbolic sizes evaluated at their hints."""

from __future__ import annotations

import math
from collections.abc import Mapping

import sympy
from ember_core import Graph, Value, parse_expr, to_dtype

SIZE_BYTES = 8  # a symbolic int or a scalar, saved as a Python int


def hints(graph: Graph) -> dict[str, int]:
    """Each symbol's hint: the value it had when the graph was traced."""
    return {s.name: s.hint for s in graph.symbols}


def dim_at_hint(dim: int | str, symbol_hints: Mapping[str, int]) -> int:
    """A dimension's value with every symbol at its hint (an undeclared symbol counts as 1)."""
    if isinstance(dim, int):
        return dim
    expr = parse_dim(dim)
    return int(expr.xreplace({s: sympy.Integer(symbol_hints.get(s.name, 1)) for s in expr.free_symbols}))


def numel(value: Value, symbol_hints: Mapping[str, int]) -> int:
    """Element count of a tensor value (1 for a symbolic int or scalar, 0 for none)."""
    if value.type == "none":
        return 0
    if value.type != "tensor":
        return 1
    return math.prod(dim_at_hint(d, symbol_hints) for d in value.shape)


def nbytes(value: Value, symbol_hints: Mapping[str, int]) -> int:
    """Bytes a value takes when saved: numel × element size for tensors, 8 for sizes and scalars."""
    if value.type == "none":
        return 0
    if value.type != "tensor":
        return SIZE_BYTES
    return numel(value, symbol_hints) * to_dtype(value.dtype).itemsize


def parse_dim(text: str) -> sympy.Expr:
    """A symbolic size expression (schema text) as sympy, by ember-core's grammar (never evaluated)."""
    return parse_expr(text)
