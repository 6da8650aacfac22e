"""The numbers of a value's layout, checked where a graph is read: the JSON reader, the text reader and both kinds
of constant go through `layout_problem`, so a graph the one refuses the other refuses too.

Each size, stride and storage offset is an int or an integer expression over the graph's symbols (`_expr.py`
checks the grammar and that the value is an integer). Here the numbers are worked out at the symbols' hints, the
sizes the graph was captured with: every one must lie in [0, 2**63), and so must the product of the sizes (a size
0 counted as 1: torch multiplies them in turn) and the offset of the last element, as torch keeps them in int64.
A dimension naming a symbol the graph does not declare is left to `verify`, which names the symbol.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

from ._expr import ExprError
from ._int_expr import IntExpr

INT64_MAX = (1 << 63) - 1
Dim = int | str


def is_static(value) -> bool:
    """Are a value's sizes and strides all plain ints, none an expression over the graph's symbols?"""
    return all(type(d) is int for d in (*value.shape, *value.stride))


def contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    """The row-major strides of a static shape, as torch gives a new tensor (a size 0 or 1 steps as 1)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def layout_problem(shape: Sequence[Dim], stride: Sequence[Dim], offset: Dim,
                   hints: Mapping[str, int]) -> tuple[str, str] | None:
    """(field, what is wrong) for the first number of the layout outside [0, 2**63) at the hints, or None."""
    if _plain(shape, stride, offset):  # the common case, checked without the walk below
        return _extent_problem(list(shape), list(stride), offset)
    numbers: dict[str, list[int | None]] = {}
    for field, dims in (("shape", shape), ("stride", stride), ("storage_offset", (offset,))):
        numbers[field] = []
        for i, d in enumerate(dims):
            where = field if field == "storage_offset" else f"{field}[{i}]"
            n, problem = _value(d, hints)
            if problem is not None:
                return where, problem
            numbers[field].append(n)
    return _extent_problem(numbers["shape"], numbers["stride"], numbers["storage_offset"][0])


def _plain(shape: Sequence[Dim], stride: Sequence[Dim], offset: Dim) -> bool:
    """Every number an int in range already (so only the count and the extent are left to check)."""
    return type(offset) is int and 0 <= offset <= INT64_MAX and \
        all(type(d) is int and 0 <= d <= INT64_MAX for dims in (shape, stride) for d in dims)


def row_major_problem(shape: Sequence[int]) -> tuple[str, str] | None:
    """`layout_problem` of a contiguous tensor of this shape (a constant): its strides too must fit in int64."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return layout_problem(shape, strides[::-1], 0, {})


def _value(d: Dim, hints: Mapping[str, int]) -> tuple[int | None, str | None]:
    """(the dimension's value at the hints, or None when a symbol has none; what is wrong with it, or None)."""
    if isinstance(d, int):
        n = d
    else:
        try:
            expr = _compiled(d)
            if not set(expr.names) <= hints.keys():
                return None, None
            n = expr(hints)
        except (ExprError, ArithmeticError) as e:  # a function without an integer meaning, a division by zero
            return None, f"{d!r} cannot be evaluated at the symbols' hints: {e}"[:300]
    if not 0 <= n <= INT64_MAX:
        value = f"{n}" if isinstance(d, int) else f"{d!r} is {n} at the symbols' hints {dict(hints)},"
        return None, f"{value} outside [0, 2**63)"[:300]
    return n, None


@functools.lru_cache(maxsize=8192)
def _compiled(text: str) -> IntExpr:
    return IntExpr(text)


def _extent_problem(sizes: list[int | None], strides: list[int | None], offset: int | None) -> tuple[str, str] | None:
    """Too many elements, or a last element past int64, when every number is known."""
    if None in sizes:
        return None
    count = math.prod(max(n, 1) for n in sizes)  # torch multiplies the sizes in turn: a 0 after others helps none
    if count > INT64_MAX:
        return "shape", f"sizes that multiply to {count} (a size 0 counting as 1), more than int64 counts"
    if 0 in sizes or None in strides or offset is None or len(strides) != len(sizes):
        return None
    last = offset + sum((n - 1) * s for n, s in zip(sizes, strides))
    if last > INT64_MAX:
        return "stride", f"the last element lies at offset {last}, past int64"
    return None
