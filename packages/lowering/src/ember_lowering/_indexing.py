"""Index expressions: sympy over integer symbols (loop vars `i0`/`r0`, graph symbols `s0`, SSA values `t3`).

Every symbol is `sympy.Symbol(name, integer=True)`, as ember-core parses sizes, so expressions built here and
expressions parsed from text compare equal. `simplify` removes the `floor`/`Mod` that views introduce when the
loop ranges prove them trivial; `flat_index` turns a logical index into a storage offset for codegens.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

import sympy
from ember_core import as_sympy
from ember_core import parse_expr as core_parse_expr

Expr = sympy.Expr
ZERO = sympy.Integer(0)
ONE = sympy.Integer(1)


@functools.cache
def sym(name: str) -> sympy.Symbol:
    """The symbol for a loop var, graph symbol or SSA value."""
    return sympy.Symbol(name, integer=True)


def var(prefix: str, k: int) -> sympy.Symbol:
    return sym(f"{prefix}{k}")


def parse_expr(text: str) -> Expr:
    """An expression from text, read by ember-core's expression grammar (never evaluated as Python); every
    name that is not a known function is an integer symbol. Raises `ember_core.ExprError`."""
    return core_parse_expr(text, "index")


def to_expr(x: int | str | Expr) -> Expr:
    """An index expression from an int, a sympy expression or text (parsed, never evaluated)."""
    if isinstance(x, str):
        return parse_expr(x)
    if isinstance(x, float):
        raise TypeError(f"not an index expression: {x!r}")
    return as_sympy(x)


def linear_index(idx: Sequence[Expr], sizes: Sequence[Expr]) -> Expr:
    """Row-major linear index of `idx` within `sizes`."""
    out, acc = ZERO, ONE
    for e, s in zip(reversed(idx), reversed(sizes)):
        out += e * acc
        acc *= s
    return out


def names_in(expr: Expr) -> set[str]:
    return {s.name for s in expr.free_symbols}


def numel(shape: Sequence[Expr]) -> Expr:
    return sympy.Mul(*shape) if shape else ONE


def contiguous_strides(shape: Sequence[Expr | int]) -> tuple[Expr, ...]:
    strides, acc = [], ONE
    for d in (to_expr(x) for x in reversed(shape)):
        strides.append(acc)
        acc = acc * (sympy.Integer(max(int(d), 1)) if d.is_number else d)  # as torch: size-0 dims count as 1
    return tuple(reversed(strides))


def row_major(shape: Sequence[Expr], stride: Sequence[Expr]) -> bool:
    """Are the strides a row-major layout's (a dim of size 1 may have any stride: it is never stepped)?"""
    return all(d == 1 or sympy.expand(s - c) == 0 for d, s, c in zip(shape, stride, contiguous_strides(shape)))


def storage_size(shape: Sequence[Expr], stride: Sequence[Expr], offset: Expr = ZERO) -> Expr:
    """Elements a layout spans from the storage start: offset + 1 + sum((size - 1) * stride); 0 when empty."""
    if any(d.is_number and d == 0 for d in shape):
        return ZERO
    return sympy.expand(offset + 1 + sum(((d - 1) * s for d, s in zip(shape, stride)), ZERO))


def substitute(expr: Expr, mapping: Mapping[sympy.Symbol, Expr]) -> Expr:
    return expr.xreplace(dict(mapping)) if mapping else expr


# ---------------------------------------------------------------------------------------------- bounds


class Ranges:
    """What `simplify` knows: each loop var lies in [0, size), each graph symbol is at least its lower bound (a
    symbol without one may be negative)."""

    def __init__(self, sizes: Mapping[str, Expr] = (), lowers: Mapping[str, int] = ()):
        self.sizes = dict(sizes)
        self.lowers = dict(lowers)

    def with_sizes(self, sizes: Mapping[str, Expr]) -> Ranges:
        return Ranges({**self.sizes, **sizes}, self.lowers)


def is_nonneg(expr: Expr, ranges: Ranges) -> bool:
    """True when `expr >= 0` holds for every value of its graph symbols (polynomials only, else False)."""
    expr = sympy.expand(expr)
    if expr.is_number:
        return bool(expr >= 0)
    names = names_in(expr)
    if any(n in ranges.sizes for n in names):
        lo, _ = bounds(expr, ranges)
        return lo is not None and lo.is_number and bool(lo >= 0)
    if any(n not in ranges.lowers for n in names):
        return False  # a symbol of no declared range: an int the program passed may be negative
    shift = {sym(n): sym(n) + ranges.lowers[n] for n in names}
    shifted = sympy.expand(expr.xreplace(shift))
    try:
        poly = sympy.Poly(shifted, *[sym(n) for n in sorted(names)])
    except sympy.PolynomialError:
        return False
    return all(c.is_number and c >= 0 for c in poly.coeffs())


def _positive(expr: Expr, ranges: Ranges) -> bool:
    return is_nonneg(expr - 1, ranges)


def bounds(expr: Expr, ranges: Ranges) -> tuple[Expr | None, Expr | None]:
    """Lower and upper bounds of a linear expression over loop vars; None where unknown."""
    if expr.is_number:
        return expr, expr
    if isinstance(expr, sympy.Symbol):
        if expr.name in ranges.sizes:
            return ZERO, ranges.sizes[expr.name] - 1
        return (sympy.Integer(ranges.lowers[expr.name]) if expr.name in ranges.lowers else None), None
    if isinstance(expr, sympy.Add):
        lo, hi = ZERO, ZERO
        for a in expr.args:
            alo, ahi = bounds(a, ranges)
            lo = None if lo is None or alo is None else lo + alo
            hi = None if hi is None or ahi is None else hi + ahi
        return lo, hi
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_independent(*[sym(n) for n in ranges.sizes])
        if rest == expr or not _nonneg_coeff(coeff, ranges):
            return None, None
        lo, hi = bounds(rest, ranges)
        return (None if lo is None else coeff * lo), (None if hi is None else coeff * hi)
    if isinstance(expr, sympy.Mod) and _positive(expr.args[1], ranges):
        return ZERO, expr.args[1] - 1
    if isinstance(expr, sympy.floor):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        lo, hi = bounds(num, ranges)
        if _positive(den, ranges):
            return (None if lo is None else sympy.floor(lo / den)), (None if hi is None else sympy.floor(hi / den))
    return None, None


def _nonneg_coeff(coeff: Expr, ranges: Ranges) -> bool:
    return is_nonneg(coeff, ranges)


def _in_range(expr: Expr, den: Expr, ranges: Ranges) -> bool:
    """0 <= expr < den for every value of the loop vars?"""
    lo, hi = bounds(expr, ranges)
    return lo is not None and hi is not None and is_nonneg(lo, ranges) and is_nonneg(den - 1 - hi, ranges)


# ---------------------------------------------------------------------------------------------- simplify


def simplify(expr: Expr, ranges: Ranges) -> Expr:
    """Remove floor/Mod made trivial by the loop ranges; merge c*floor(x/c) + Mod(x, c) into x."""
    if expr.is_Atom:
        return expr
    args = [simplify(a, ranges) for a in expr.args]
    expr = expr.func(*args) if args != list(expr.args) else expr
    if isinstance(expr, sympy.floor):
        return _simplify_floor(expr, ranges)
    if isinstance(expr, sympy.Mod):
        return _simplify_mod(expr, ranges)
    if isinstance(expr, sympy.Add):
        return _merge_floor_mod(expr)
    return expr


def _split(num: Expr, den: Expr) -> tuple[Expr, Expr]:
    """num = den * q + r, where q collects the terms of num that den divides."""
    q, r = ZERO, ZERO
    for t in sympy.Add.make_args(sympy.expand(num)):
        coeff, rest = t.as_coeff_Mul()
        if den.is_Integer and coeff.is_Integer:  # the common case, without sympy.cancel (a tenth of a printer's time)
            if coeff % den == 0:
                q += (coeff // den) * rest
            else:
                r += t
            continue
        part = sympy.cancel(t / den)
        if sympy.fraction(part)[1] == 1:
            q += part
        else:
            r += t
    return q, r


def _nested_floor(expr: Expr) -> Expr:
    """floor(floor(a/b)/c) → floor(a/(b*c)), for positive integer b and c."""
    num, den = sympy.fraction(sympy.together(expr.args[0]))
    if isinstance(num, sympy.floor) and den != 1:
        inner_num, inner_den = sympy.fraction(sympy.together(num.args[0]))
        return sympy.floor(inner_num / (inner_den * den))
    return expr


def _simplify_floor(expr: Expr, ranges: Ranges) -> Expr:
    expr = _nested_floor(expr)
    if not isinstance(expr, sympy.floor):
        return expr
    num, den = sympy.fraction(sympy.together(expr.args[0]))
    if den == 1 or not _positive(den, ranges):
        return expr
    q, r = _split(num, den)
    if r == 0:
        return q
    if _in_range(r, den, ranges):
        return q
    return q + sympy.floor(r / den) if q != 0 else expr


def _simplify_mod(expr: Expr, ranges: Ranges) -> Expr:
    num, den = expr.args
    if not _positive(den, ranges):
        return expr
    _, r = _split(num, den)
    if _in_range(r, den, ranges):
        return r
    return sympy.Mod(r, den) if r != num else expr


def _merge_floor_mod(expr: Expr) -> Expr:
    """c*floor(x/c)*k + Mod(x, c)*k → x*k, repeatedly (the row-major flatten of an unflatten); k may be a symbol (a
    dynamic row length) as well as a number."""
    terms = list(sympy.Add.make_args(expr))
    changed = True
    while changed:
        changed = False
        for i, t in enumerate(terms):
            mods = [f for f in sympy.Mul.make_args(t) if isinstance(f, sympy.Mod)]
            if len(mods) != 1:
                continue
            m = mods[0]
            k = sympy.Mul(*[f for f in sympy.Mul.make_args(t) if f is not m])
            x, c = m.args
            want = sympy.expand(k * c * _nested_floor(sympy.floor(x / c)))
            for j, u in enumerate(terms):
                if j != i and sympy.expand(u - want) == 0:
                    terms = [v for n, v in enumerate(terms) if n not in (i, j)] + [k * x]
                    changed = True
                    break
            if changed:
                break
    return sympy.Add(*terms)


def simplify_all(exprs: Iterable[Expr], ranges: Ranges) -> tuple[Expr, ...]:
    return tuple(simplify(e, ranges) for e in exprs)


def flat_index(index: Sequence[Expr], stride: Sequence[Expr], offset: Expr = ZERO,
               ranges: Ranges | None = None) -> Expr:
    """The storage offset (in elements) of a logical index under a layout; what a codegen addresses memory with."""
    flat = sympy.expand(offset + sum((i * s for i, s in zip(index, stride)), ZERO))
    ranges = ranges or Ranges()
    names = names_in(flat)
    known = tuple(sorted((n, ranges.sizes.get(n), ranges.lowers.get(n)) for n in names))
    return _simplified(flat, known)


@functools.lru_cache(maxsize=8192)
def _simplified(flat: Expr, known: tuple[tuple[str, Expr | None, int | None], ...]) -> Expr:
    """`simplify` of an address, kept: kernels of one shape address alike, and lowering's passes and the printers
    ask again. What it depends on is `flat` and the ranges of the names in it (`known`: name, size, lower bound)."""
    return simplify(flat, Ranges({n: s for n, s, _ in known if s is not None},
                                 {n: lo for n, _, lo in known if lo is not None}))
