"""Rewrites of kernel bodies shared by the builder and the passes: renaming, substitution, splitting dims, CSE, DCE.

`canonicalize` is the normal form every kernel is kept in: duplicates merged, dead code removed, SSA values
named t0, t1, ... in order of definition (index expressions that use them are renamed too).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence

import sympy
from ember_core import Ref

from ._indexing import Ranges, simplify_all, sym
from ._loop_ir import REDUCTIONS, Dim, Extern, Instr, Kernel, Loop, Op, Stmt


def map_instrs(body: Iterable[Stmt], fn: Callable[[Instr], Instr]) -> tuple[Stmt, ...]:
    """Apply `fn` to every instruction, keeping the loop structure."""
    return tuple(Loop(tuple(fn(i) for i in s.body)) if isinstance(s, Loop) else fn(s) for s in body)


def rename_values(body: Iterable[Stmt], mapping: Mapping[str, str]) -> tuple[Stmt, ...]:
    """Rename SSA values: definitions, operands, and index expressions that use them."""
    if not mapping:
        return tuple(body)
    subs = {sym(a): sym(b) for a, b in mapping.items()}

    def fn(i: Instr) -> Instr:
        return i.replace(
            outs=tuple(mapping.get(o, o) for o in i.outs),
            srcs=tuple(mapping.get(s, s) for s in i.srcs),
            index=tuple(e.xreplace(subs) for e in i.index),
        )
    return map_instrs(body, fn)


def substitute_vars(body: Iterable[Stmt], mapping: Mapping[sympy.Symbol, sympy.Expr]) -> tuple[Stmt, ...]:
    """Substitute loop variables in every index expression."""
    if not mapping:
        return tuple(body)
    return map_instrs(body, lambda i: i.replace(index=tuple(e.xreplace(dict(mapping)) for e in i.index)))


def refine(kernel: Kernel, sizes: Sequence[sympy.Expr], lowers: dict[str, int] | None = None) -> Kernel | None:
    """`kernel` over its dims split into dims of `sizes`, when each of its dims is the product of consecutive ones
    (a reduction over the 1024 rows of an (8, 128, 1024) tensor viewed as (1024, 1024), whose producer walks
    (8, 128, 1024)): each split var becomes its parts in row-major order, and the index expressions are simplified
    over the parts' ranges and the graph symbols' lower bounds `lowers` (`floor((128·a + b)/128)` is `a`). None when
    `sizes` does not refine the dims, or they are the same. The kernel computes the same: the parts walk exactly the
    elements the var did, in the same order."""
    if len(sizes) <= len(kernel.dims):
        return None
    taken = {d.var for d in kernel.dims}
    dims: list[Dim] = []
    mapping: dict[sympy.Symbol, sympy.Expr] = {}
    k = 0
    for d in kernel.dims:
        group = [sizes[k]] if k < len(sizes) else []
        k += 1
        while group and sympy.expand(sympy.Mul(*group) - d.size) != 0 and k < len(sizes):
            group.append(sizes[k])
            k += 1
        if not group or sympy.expand(sympy.Mul(*group) - d.size) != 0:
            return None
        if len(group) == 1:
            dims.append(d)
            continue
        parts = []
        for size in group:
            n = 0
            while f"{d.var[0]}{n}" in taken:
                n += 1
            taken.add(f"{d.var[0]}{n}")
            parts.append(Dim(f"{d.var[0]}{n}", size))
        mapping[sym(d.var)] = sympy.Add(*[sym(p.var) * sympy.Mul(*group[j + 1:]) for j, p in enumerate(parts)])
        dims.extend(parts)
    if k != len(sizes):
        return None
    ranges = Ranges({d.var: d.size for d in dims}, lowers or {})
    body = map_instrs(substitute_vars(kernel.body, mapping),
                      lambda i: i.replace(index=simplify_all(i.index, ranges)) if i.index else i)
    return kernel.replace(dims=tuple(dims), body=body)


def defined_names(body: Iterable[Stmt]) -> list[str]:
    names: list[str] = []
    for s in body:
        for i in (s.body if isinstance(s, Loop) else (s,)):
            names.extend(i.outs)
    return names


def used_names(instr: Instr, defined: set[str] | None = None) -> set[str]:
    """SSA values an instruction reads: operands, and values its index expressions use."""
    used = set(instr.srcs)
    for e in instr.index:
        for s in e.free_symbols:
            if defined is None or s.name in defined:
                used.add(s.name)
    return used


# ---------------------------------------------------------------------------------------------- normal form


def canonicalize(kernel: Kernel) -> Kernel:
    body = hoist(kernel.body, {d.var for d in kernel.reduce_dims})
    body = cse(body)
    body = dce(body)
    return kernel.replace(body=renumber(body))


def hoist(body: Iterable[Stmt], reduce_vars: set[str]) -> tuple[Stmt, ...]:
    """Move what a loop computes the same in every iteration to just before the loop: instructions whose
    operands come from outside it and whose index uses no r-var (loads only of buffers the kernel never
    stores)."""
    body = tuple(body)
    stored = {i.buffer for s in body for i in (s.body if isinstance(s, Loop) else (s,)) if i.op is Op.STORE}
    out: list[Stmt] = []
    for s in body:
        if not isinstance(s, Loop):
            out.append(s)
            continue
        inner = set(defined_names(s.body))
        moved, kept = [], []
        for i in s.body:
            if _invariant(i, inner, reduce_vars, stored):
                moved.append(i)
                inner -= set(i.outs)
            else:
                kept.append(i)
        out.extend(moved)
        if kept:
            out.append(Loop(tuple(kept)))
    return tuple(out)


def _invariant(i: Instr, inner: set[str], reduce_vars: set[str], stored: set[str]) -> bool:
    if i.op is Op.STORE or i.op in REDUCTIONS or (i.op is Op.LOAD and i.buffer in stored):
        return False
    if any(s.name in reduce_vars for e in i.index for s in e.free_symbols):
        return False
    return not (used_names(i) & inner)


def _cse_key(i: Instr) -> tuple:
    value = i.value
    if i.op is Op.CONST and i.dtype in _F32_HELD and isinstance(value, float):
        # kernels hold these in float32: two Python floats that round to one float32 (1/sqrt(2) from GELU's
        # forward and from its backward) are one constant, and what they feed is computed once
        value = struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value
    return (i.op, i.dtype, i.srcs, i.buffer, i.index, type(value).__name__, repr(value), len(i.outs))


_F32_HELD = ("float32", "float16", "bfloat16")


def cse(body: Iterable[Stmt]) -> tuple[Stmt, ...]:
    """Merge identical instructions in scope (a store invalidates earlier loads of its buffer)."""
    outer: dict = {}
    mapping: dict[str, str] = {}
    out: list[Stmt] = []

    def visit(i: Instr, scopes: list[dict]) -> Instr | None:
        i = rename_values((i,), mapping)[0] if mapping else i
        if i.op is Op.STORE:
            for sc in scopes:
                for k in [k for k in sc if k[0] is Op.LOAD and k[3] == i.buffer]:
                    del sc[k]
            return i
        key = _cse_key(i)
        if key in scopes[-1]:
            mapping.update(zip(i.outs, scopes[-1][key]))
            return None
        scopes[-1][key] = i.outs
        if i.op in REDUCTIONS and len(scopes) > 1:
            scopes[0][key] = i.outs
        return i

    for s in body:
        if isinstance(s, Loop):
            scopes = [outer, dict(outer)]
            kept = [j for j in (visit(i, scopes) for i in s.body) if j is not None]
            out.append(Loop(tuple(kept)))
        else:
            j = visit(s, [outer])
            if j is not None:
                out.append(j)
    return tuple(out)


def dce(body: Iterable[Stmt]) -> tuple[Stmt, ...]:
    """Drop instructions whose results nothing uses (stores are always live), then empty loops."""
    body = tuple(body)
    defined = set(defined_names(body))
    live: set[str] = set()

    def keep(i: Instr) -> bool:
        if i.op is Op.STORE or any(o in live for o in i.outs):
            live.update(used_names(i, defined))
            return True
        return False

    out: list[Stmt] = []
    for s in reversed(body):
        if isinstance(s, Loop):
            kept = [i for i in reversed(s.body) if keep(i)]
            if kept:
                out.append(Loop(tuple(reversed(kept))))
        elif keep(s):
            out.append(s)
    return tuple(reversed(out))


def renumber(body: Iterable[Stmt], start: int = 0, prefix: str = "t") -> tuple[Stmt, ...]:
    body = tuple(body)
    names = defined_names(body)
    mapping = {n: f"{prefix}{k + start}" for k, n in enumerate(names)}
    return rename_values(body, {a: b for a, b in mapping.items() if a != b})


def rename_buffers(step, mapping: Mapping[str, str]):
    """Rename buffers in a kernel's loads and stores, or in an extern's arguments and outputs."""
    if not mapping:
        return step
    if isinstance(step, Extern):
        def arg(a):
            if isinstance(a, Ref):
                return type(a)(mapping.get(a.name, a.name))  # a Ref or an Item
            return tuple(arg(x) for x in a) if isinstance(a, tuple) else a
        return step.replace(outs=tuple(mapping.get(o, o) for o in step.outs), args=arg(step.args),
                            kwargs={k: arg(v) for k, v in step.kwargs.items()})
    return step.replace(body=map_instrs(step.body, lambda i: i.replace(buffer=mapping.get(i.buffer, i.buffer))
                                        if i.buffer is not None else i))
