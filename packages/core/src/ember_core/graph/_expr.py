"""Integer expressions from text, by ember's own grammar: symbolic sizes in graph files, indices in loop-IR text.

Text from a file is never handed to `eval` or `sympy.sympify` (which evaluates Python). This module reads it with
a small recursive-descent parser over a closed grammar, with limits on length, nesting and number sizes:

    expr  := term (('+' | '-') term)*
    term  := unary (('*' | '/' | '//' | '%') unary)*
    unary := ('-' | '+') unary | power
    power := atom ('**' unary)?
    atom  := INT | FLOAT | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'

FLOAT is a decimal with a point or an exponent (`1.7`, `0.30000000000000004`, `1e-05`): a double, finite, which
only a size's rounding function (`TruncToInt(1.7*ToFloat(s0))`, the size `F.interpolate` gives a fractional scale)
may turn into an integer. `expr_text` prints each as the shortest text that reads back to the same double.

Precedence and meaning are Python's, so every expression sympy prints (`(s0//2)`, `Max(1, s0 - 1)`,
`ModularIndexing(i0, 4, 8)`) reads back to an equal sympy object. A NAME followed by `(` must be a function of the
table passed in; any other NAME is an integer symbol. The parser builds a small tree (`ExprTree`) that two folds
consume: `to_sympy` (what the compiler reasons with) and `IntExpr` (plain Python ints, for run-time sizes;
`_int_expr.py`).

What a file says is a size or an index must have an integer value: `parse_integer` walks the tree and refuses a
true division, a float function or a shift whose result is not turned back into an integer (by `floor`,
`FloorToInt` ...). Whether the value is also non-negative depends on the symbols; the loaders check that at the
symbols' hints (`_sizes.py`).
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

import sympy
from torch.utils._sympy import functions as torch_sympy
from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity

from .._errors import EmberError

MAX_CHARS = 8192  # longer texts are refused before any parsing
MAX_DEPTH = 64  # parentheses, calls and unary signs nested deeper than this are refused
MAX_TREE_DEPTH = 256  # a longer chain `a + b + ...` (a tree this deep) is refused: the folds recurse over it
MAX_LITERAL_DIGITS = 40  # int64 needs 19; a double's shortest text 24 characters
MAX_POWER_BITS = 4096  # a numeric `a ** b` whose result would be larger is refused (no `10**10**10` hang)


class ExprError(EmberError, ValueError):
    """Text that is not an expression of the grammar, or breaks one of its limits. Names the text and position."""

    def __init__(self, text: str, what: str, pos: int | None = None):
        shown = text if len(text) <= 80 else text[:77] + "..."
        where = f" at column {pos + 1}" if pos is not None else ""
        super().__init__(f"expression {shown!r}{where}: {what}")
        self.text, self.what, self.pos = text, what, pos


# -------------------------------------------------------------------------------------------- function tables

def _torch_functions() -> dict[str, Any]:
    return {name: obj for name, obj in vars(torch_sympy).items()
            if isinstance(obj, type) and issubclass(obj, sympy.Function) and not name.startswith("_")}


# Schema sizes: torch's size functions (its `Mod` included) plus sympy's Max/Min/floor/ceiling/Abs.
SIZE_FUNCTIONS: Mapping[str, Any] = {**_torch_functions(), "Max": sympy.Max, "Min": sympy.Min,
                                     "floor": sympy.floor, "ceiling": sympy.ceiling, "Abs": sympy.Abs}
# Loop-IR indices: the same, with sympy's own `Mod` (what the lowering builds).
INDEX_FUNCTIONS: Mapping[str, Any] = {**SIZE_FUNCTIONS, "Mod": sympy.Mod}

# What each function gives, for `integer_problem`: an integer when every argument is one ...
_INTEGER_OF_INTEGERS = frozenset({
    "FloorDiv", "CleanDiv", "CeilDiv", "ModularIndexing", "Mod", "PythonMod", "Max", "Min", "Abs", "Identity",
    "PowByNatural", "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "BitwiseFn_bitwise_xor",
    "IsNonOverlappingAndDenseIndicator"})
# ... an integer whatever its argument (rounding) ...
_INTEGER_OF_ANY = frozenset({"floor", "ceiling", "FloorToInt", "CeilToInt", "TruncToInt", "RoundToInt"})
# ... or a real number. A function of none of the tables (shifts, `Where`) is not allowed in a size.
_REAL_OF_ANY = frozenset({"ToFloat", "IntTrueDiv", "FloatTrueDiv", "FloatPow", "TruncToFloat", "RoundDecimal",
                          *(name for name in SIZE_FUNCTIONS if name.startswith("OpaqueUnaryFn_"))})


# -------------------------------------------------------------------------------------------- the tree

# ("int", n) | ("float", x) | ("name", s) | ("neg", x) | ("bin", op, a, b) | ("call", f, (args...))
ExprTree = tuple

_TOKEN = re.compile(r"([0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)|([0-9]+)|([A-Za-z_][A-Za-z_0-9]*)"
                    r"|(\*\*|//|[-+*/%(),])")
BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
           "//": operator.floordiv, "%": operator.mod, "**": operator.pow}


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, position) per token; kind is 'float', 'int', 'name' or 'op'."""
    out, pos = [], 0
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos == len(text):
            return out
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExprError(text, f"unexpected character {text[pos]!r}", pos)
        kind = ("float", "int", "name", "op")[m.lastindex - 1]
        out.append((kind, m.group(), pos))
        pos = m.end()


class _Parser:
    def __init__(self, text: str, functions: Mapping[str, Any]):
        self.text, self.functions = text, functions
        self.toks = _tokens(text)
        self.k = 0
        self.depth = 0

    def fail(self, what: str) -> ExprError:
        pos = self.toks[self.k][2] if self.k < len(self.toks) else len(self.text)
        return ExprError(self.text, what, pos)

    def peek(self) -> str | None:
        return self.toks[self.k][1] if self.k < len(self.toks) else None

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        if self.k >= len(self.toks):
            raise self.fail(f"expected {expected!r}, found the end" if expected else "unexpected end")
        tok = self.toks[self.k]
        if expected is not None and tok[1] != expected:
            raise self.fail(f"expected {expected!r}, found {tok[1]!r}")
        self.k += 1
        return tok

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}")

    def whole(self) -> ExprTree:
        if not self.toks:
            raise ExprError(self.text, "empty expression")
        tree = self.expr()
        if self.k != len(self.toks):
            raise self.fail(f"unexpected {self.peek()!r}")
        return tree

    def chain(self, ops: tuple[str, ...], operand: Callable[[], ExprTree]) -> ExprTree:
        tree = operand()
        while self.peek() in ops and self.toks[self.k][0] == "op":
            op = self.take()[1]
            tree = ("bin", op, tree, operand())
        return tree

    def expr(self) -> ExprTree:
        return self.chain(("+", "-"), self.term)

    def term(self) -> ExprTree:
        return self.chain(("*", "/", "//", "%"), self.unary)

    def unary(self) -> ExprTree:
        if self.peek() in ("-", "+"):
            sign = self.take()[1]
            self.nested()
            operand = self.unary()
            self.depth -= 1
            return ("neg", operand) if sign == "-" else operand
        return self.power()

    def power(self) -> ExprTree:
        base = self.atom()
        if self.peek() == "**":
            self.take()
            self.nested()
            exponent = self.unary()
            self.depth -= 1
            return ("bin", "**", base, exponent)
        return base

    def atom(self) -> ExprTree:
        kind, tok, _ = self.take()
        if kind == "int":
            if len(tok) > MAX_LITERAL_DIGITS:
                self.k -= 1
                raise self.fail(f"integer literal longer than {MAX_LITERAL_DIGITS} digits")
            return ("int", int(tok))
        if kind == "float":
            value = float(tok)
            if len(tok) > MAX_LITERAL_DIGITS or not math.isfinite(value):
                self.k -= 1
                raise self.fail(f"float literal {tok[:MAX_LITERAL_DIGITS]!r} is too long or not finite")
            return ("float", value)
        if kind == "name":
            return self.call(tok) if self.peek() == "(" else ("name", tok)
        if tok == "(":
            self.nested()
            tree = self.expr()
            self.take(")")
            self.depth -= 1
            return tree
        self.k -= 1
        raise self.fail(f"unexpected {tok!r}")

    def call(self, name: str) -> ExprTree:
        if name not in self.functions:
            raise self.fail(f"unknown function {name!r}")
        self.take("(")
        self.nested()
        args = [self.expr()]
        while self.peek() == ",":
            self.take()
            args.append(self.expr())
        self.take(")")
        self.depth -= 1
        return ("call", name, tuple(args))


def parse_tree(text: str, functions: Mapping[str, Any] = SIZE_FUNCTIONS) -> ExprTree:
    """The tree of an expression text, or `ExprError`."""
    if not isinstance(text, str):
        raise ExprError(repr(text), f"expected text, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ExprError(text, f"longer than {MAX_CHARS} characters")
    tree = _Parser(text, functions).whole()
    if _depth(tree) > MAX_TREE_DEPTH:
        raise ExprError(text, f"a chain of operations deeper than {MAX_TREE_DEPTH}")
    return tree


def _depth(tree: ExprTree) -> int:
    """How deep the tree is, walked without recursion (a left-leaning chain is as deep as it is long)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in children(node))
    return deepest


# -------------------------------------------------------------------------------------------- integer values

def integer_problem(tree: ExprTree) -> str | None:
    """Why the expression may have a value that is not an integer, or None when every value it takes is one."""
    stray = _function_without_kind(tree)
    if stray is not None:
        return f"function {stray!r} is not allowed in a size or index"
    real = _real_part(tree)
    if real is None:
        return None
    return f"not an integer expression: {real} gives a real number (round it with floor(...) or FloorToInt(...))"


def children(tree: ExprTree) -> tuple:
    kind = tree[0]
    return tree[2] if kind == "call" else tree[1:] if kind == "neg" else tree[2:] if kind == "bin" else ()


def _function_without_kind(tree: ExprTree) -> str | None:
    """The first function of the tree that no kind table names (a shift, which grows without bound; `Where`), or
    None."""
    if tree[0] == "call" and tree[1] not in _INTEGER_OF_INTEGERS | _INTEGER_OF_ANY | _REAL_OF_ANY:
        return tree[1]
    return next((f for c in children(tree) if (f := _function_without_kind(c)) is not None), None)


def _real_part(tree: ExprTree) -> str | None:
    """The first piece of the tree whose value may be real, not integer; None when there is none."""
    kind = tree[0]
    if kind in ("int", "name"):
        return None
    if kind == "float":
        return f"the float {tree[1]!r}"
    if kind == "bin" and tree[1] == "/":
        return "a true division '/'"
    if kind == "call" and tree[1] in _INTEGER_OF_ANY:
        return None
    if kind == "call" and tree[1] in _REAL_OF_ANY:
        return f"{tree[1]}(...)"
    return next((r for c in children(tree) if (r := _real_part(c)) is not None), None)


# -------------------------------------------------------------------------------------------- to sympy

@functools.cache
def _symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True)


def _check_power(text: str, base: Any, exponent: Any) -> None:
    """Refuse a numeric power whose value would be huge (its digits, not just its time, are the danger)."""
    if not (getattr(base, "is_number", False) and getattr(exponent, "is_number", False)):
        return
    if not exponent.is_Integer:
        raise ExprError(text, f"numeric power with a non-integer exponent {exponent}")
    bits = max(abs(int(base)) if base.is_Integer else 2, 2).bit_length()
    if abs(int(exponent)) * bits > MAX_POWER_BITS:
        raise ExprError(text, f"{base}**{exponent} is larger than {MAX_POWER_BITS} bits")


def to_sympy(tree: ExprTree, functions: Mapping[str, Any], text: str = "") -> sympy.Expr:
    """The sympy expression of a tree: the same object Python arithmetic on sympy values would give."""
    kind = tree[0]
    if kind == "int":
        return sympy.Integer(tree[1])
    if kind == "float":
        return sympy.Float(tree[1])  # a Python float: 53 bits, the value torch's shape env holds
    if kind == "name":
        return _symbol(tree[1])
    if kind == "neg":
        return -to_sympy(tree[1], functions, text)
    if kind == "bin":
        a, b = to_sympy(tree[2], functions, text), to_sympy(tree[3], functions, text)
        if tree[1] == "**":
            _check_power(text, a, b)
        if tree[1] in ("/", "//", "%") and b == 0:
            raise ExprError(text, "division by zero")
        return BINARY[tree[1]](a, b)
    args = [to_sympy(a, functions, text) for a in tree[2]]
    if tree[1] in ("PowByNatural", "FloatPow") and len(args) == 2:
        _check_power(text, *args)
    return functions[tree[1]](*args)


@functools.lru_cache(maxsize=8192)
def _parse_cached(text: str, table: str) -> sympy.Expr:
    functions = INDEX_FUNCTIONS if table == "index" else SIZE_FUNCTIONS
    tree = parse_tree(text, functions)
    try:
        expr = to_sympy(tree, functions, text)
    except ExprError:
        raise
    except Exception as e:  # a function given the wrong arity or argument kinds raises TypeError, ValueError ...
        raise ExprError(text, f"{type(e).__name__}: {e}"[:200]) from None
    if not isinstance(expr, sympy.Expr) or expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo, IntInfinity,
                                                    NegativeIntInfinity):
        raise ExprError(text, "does not denote a finite integer expression")
    return expr


def parse_expr(text: str, table: str = "size") -> sympy.Expr:
    """A sympy expression from text; names are integer symbols. `table` picks the functions: 'size' (schema
    sizes, torch's `Mod`) or 'index' (loop-IR indices, sympy's `Mod`)."""
    return _parse_cached(text, table)


@functools.lru_cache(maxsize=8192)
def parse_integer(text: str, table: str = "size") -> sympy.Expr:
    """`parse_expr` for what a file says is a size, stride, offset, symbolic int or index: refused (`ExprError`)
    unless every value it can take is an integer."""
    expr = parse_expr(text, table)
    problem = integer_problem(parse_tree(text, INDEX_FUNCTIONS if table == "index" else SIZE_FUNCTIONS))
    if problem is not None:
        raise ExprError(text, problem)
    return expr


def as_sympy(x: int | float | sympy.Basic) -> sympy.Basic:
    """A number or expression the compiler computed, as sympy. Text is refused: text goes through `parse_expr`,
    which never evaluates it (`sympy.sympify` would run it as Python)."""
    if isinstance(x, sympy.Basic):
        return x
    if isinstance(x, bool):
        return sympy.Integer(int(x))
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, float):
        return sympy.Float(x)
    raise TypeError(f"not a number or expression: {type(x).__name__} {x!r}"[:200])
