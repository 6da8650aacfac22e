"""Symbolic size expressions: text in the schema, sympy in memory, ints at run time."""

from __future__ import annotations

import functools
from typing import Mapping

import sympy
from torch.utils._sympy import functions as torch_sympy

_LOCALS = {
    name: getattr(torch_sympy, name)
    for name in dir(torch_sympy)
    if isinstance(getattr(torch_sympy, name), type) and issubclass(getattr(torch_sympy, name), sympy.Basic)
}
_LOCALS.update({"Max": sympy.Max, "Min": sympy.Min})


def expr_text(expr) -> str:
    """The schema text of a sympy expression or int."""
    return str(expr)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> sympy.Expr:
    """A sympy expression from schema text; symbol names become integer symbols."""
    expr = sympy.sympify(text, locals=_LOCALS)
    return expr.xreplace({s: sympy.Symbol(s.name, integer=True) for s in expr.free_symbols})


def evaluate(text: str | int, bindings: Mapping[str, int]) -> int:
    """The integer value of a dimension under concrete symbol values."""
    if isinstance(text, int):
        return text
    expr = parse(text)
    value = expr.xreplace({s: sympy.Integer(bindings[s.name]) for s in expr.free_symbols})
    return int(value)


def free_symbols(text: str | int) -> set[str]:
    return set() if isinstance(text, int) else {s.name for s in parse(text).free_symbols}
