"""Symbolic size expressions: text in the schema, sympy in memory, ints at run time."""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping

import sympy
import torch
from sympy.printing.str import StrPrinter

from ._expr import parse_expr


class _SchemaPrinter(StrPrinter):
    """sympy's text, but a float (a double in the shape env: a fractional scale of `F.interpolate`) as the shortest
    text that reads back to the same double; sympy prints 15 digits, and `0.30000000000000004` would come back 0.3."""

    def _print_Float(self, expr: sympy.Float) -> str:
        value = float(expr)
        if sympy.Float(value) != expr:
            raise ValueError(f"the float {expr} of a size expression is not a double")
        return repr(value)


_PRINTER = _SchemaPrinter()


def expr_text(expr) -> str:
    """The schema text of a sympy expression or int."""
    return _PRINTER.doprint(expr) if isinstance(expr, sympy.Basic) else str(expr)


def parse(text: str) -> sympy.Expr:
    """A sympy expression from schema text, read by ember's own grammar (`_expr.py`, never `sympify`); symbol
    names become integer symbols. Raises `ExprError` (a `ValueError`) for text outside the grammar."""
    return parse_expr(text, "size")


def evaluate(text: str | int, bindings: Mapping[str, int]) -> int:
    """The integer value of a dimension under concrete symbol values. Under fake tensors a binding may be a
    SymInt: the value is then a SymInt too, computed with Python arithmetic so that make_fx records it."""
    if isinstance(text, int):
        return text
    expr = parse(text)
    values = {s: bindings[s.name] for s in expr.free_symbols}
    if any(not isinstance(v, int) for v in values.values()):
        return _evaluate_traced(expr, {s.name: v for s, v in values.items()})
    return int(expr.xreplace({s: sympy.Integer(v) for s, v in values.items()}))


_TRACED_FUNCTIONS = {"FloorDiv": operator.floordiv, "CleanDiv": operator.floordiv, "Mod": operator.mod,
                     "PythonMod": operator.mod, "Max": torch.sym_max, "Min": torch.sym_min}


def _evaluate_traced(expr: sympy.Expr, env: Mapping[str, object]):
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return env[expr.name]
    if isinstance(expr, (sympy.floor, sympy.ceiling)):  # what `a // b` in schema text parses to
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if not den.is_Integer:
            raise ValueError(f"cannot evaluate {expr} on symbolic ints: its divisor is not an integer")
        n = _evaluate_traced(sympy.expand(num), env)
        return n // int(den) if isinstance(expr, sympy.floor) else -(-n // int(den))
    args = [_evaluate_traced(a, env) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return functools.reduce(operator.add, args)
    if isinstance(expr, sympy.Mul):
        return functools.reduce(operator.mul, args)
    if isinstance(expr, sympy.Pow):
        return args[0] ** args[1]
    fn = _TRACED_FUNCTIONS.get(type(expr).__name__)
    if fn is None:
        raise ValueError(f"cannot evaluate {expr} on symbolic ints: {type(expr).__name__} is not handled")
    return functools.reduce(fn, args)


def free_symbols(text: str | int) -> set[str]:
    return set() if isinstance(text, int) else {s.name for s in parse(text).free_symbols}
