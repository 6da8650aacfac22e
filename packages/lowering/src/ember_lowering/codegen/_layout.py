"""Where each buffer of a plan lives: its storage root, its offset from that root, and the names the wrapper
and the kernels both use.

A root is a buffer that owns the storage the wrapper hands to kernels: an input, a constant, an extern's result,
or a buffer a kernel writes, whole or part by part, that reuses no other storage (an "owner"). A view, a part or
a temp that reuses an owner's storage is addressed as `root + rel_offset + sum(index * stride)`. Symbols the
plan's sizes use are bound by the wrapper from the inputs' shapes and strides (as `PlanInterpreter.bindings`) and
passed to kernels as integers.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

import sympy
from ember_core import Ref, Sym, as_sympy

from ember_lowering import Buffer, Extern, Kernel, KernelPlan, to_expr

from ._errors import CannotPrint

_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*$")


def _safe(prefix: str, name: str, taken: set[str]) -> str:
    stem = name if _IDENT.match(name) and not keyword.iskeyword(name) else re.sub(r"\W", "_", name)
    out, k = f"{prefix}{stem}", 0
    while out in taken:
        k += 1
        out = f"{prefix}{stem}_{k}"
    taken.add(out)
    return out


@dataclass
class PlanLayout:
    """Roots, offsets and names of one plan's buffers and symbols."""

    plan: KernelPlan

    def __post_init__(self) -> None:
        plan = self.plan
        self.buffers: dict[str, Buffer] = plan.buffer_map
        self.extern_outs = {o for s in plan.externs for o in s.outs if o != "_"}
        self.kernel_writes = {i.buffer for k in plan.kernels for i in k.instrs() if i.buffer and i.op.value == "store"}
        self.assembled = {b.base for b in plan.buffers if b.kind == "part"}  # written part by part, never whole
        taken: set[str] = set()
        self.local = {b.name: _safe("b_", b.name, taken) for b in plan.buffers}
        self.symbols = self._used_symbols()
        self.sym_local = {s: _safe("S_", s, taken) for s in self.symbols}
        self.lowers = {s.name: s.lower for s in plan.symbols if s.lower is not None}
        for b in plan.buffers:
            if self.is_owner(b.name) and b.offset != 0:
                raise CannotPrint(f"buffer {b.name!r} is written by a kernel at offset {b.offset}")

    # ------------------------------------------------------------------ roots

    def is_owner(self, name: str) -> bool:
        b = self.buffers[name]
        return b.kind in ("temp", "output") and b.base is None and (name in self.kernel_writes or
                                                                     name in self.assembled)

    def root(self, name: str) -> str:
        b = self.buffers[name]
        if b.kind in ("view", "part") or (b.kind == "temp" and b.base is not None):
            return self.root(b.base)
        return name

    def rel_offset(self, name: str) -> sympy.Expr:
        """Elements from the root's first element to this buffer's storage offset."""
        b = self.buffers[name]
        if b.kind == "view":
            return self.rel_offset(b.base) + b.offset
        if b.kind == "part" or (b.kind == "temp" and b.base is not None):
            return b.offset
        return sympy.Integer(0)

    def pointer(self, name: str) -> str:
        """What a kernel that takes one pointer per part (`KernelWalk.part_pointers`) points at for `name`: the
        part it lies in (a part at a static offset), else its root. With its own pointer a part's offset stays out
        of the kernel's text, so that kernels writing different parts of one buffer (an RNN's time steps) print
        alike and are built once (`_dedup.py`); the call passes the root's pointer plus the offset."""
        b = self.buffers[name]
        part = b.base if b.kind == "view" and self.buffers[b.base].kind == "part" else name
        if self.buffers[part].kind == "part" and self.buffers[part].offset.is_number:
            return part
        return self.root(name)

    # ------------------------------------------------------------------ symbols

    def _used_symbols(self) -> list[str]:
        """Plan symbols (and symbolic-int inputs) that any size, stride, index or extern argument uses."""
        known = {s.name for s in self.plan.symbols} | {n for n in self.plan.inputs if n not in self.buffers}
        used: set[str] = set()

        def add(e) -> None:
            used.update(s.name for s in as_sympy(e).free_symbols if s.name in known)

        for b in self.plan.buffers:
            for e in (*b.shape, *b.stride, b.offset):
                add(e)
        for step in self.plan.steps:
            if isinstance(step, Kernel):
                for d in step.dims:
                    add(d.size)
                for i in step.instrs():
                    for e in i.index:
                        add(e)
            else:
                for a in _flat_args(step):
                    if isinstance(a, Sym):
                        add(to_expr(a.expr))
                    elif isinstance(a, sympy.Basic):
                        add(a)
        for o in self.plan.outputs:
            if isinstance(o, Sym):
                add(to_expr(o.expr))
        order = [s.name for s in self.plan.symbols] + list(self.plan.inputs)
        return sorted(used, key=lambda n: (order.index(n) if n in order else len(order), n))

    def bindings(self) -> list[tuple[str, str]]:
        """(symbol, Python expression over the inputs) for each used symbol, from a bare size or stride.
        `CannotPrint` if a used symbol appears bare nowhere."""
        out: dict[str, str] = {}
        for k, name in enumerate(self.plan.inputs):
            b = self.buffers.get(name)
            if b is None:
                if name in self.symbols:
                    out.setdefault(name, f"int(inputs[{k}])")
                continue
            for d, e in enumerate(b.shape):
                if e.is_Symbol and e.name in self.symbols:
                    out.setdefault(e.name, f"{self.local[name]}.shape[{d}]")
            for d, e in enumerate(b.stride):
                if e.is_Symbol and e.name in self.symbols:
                    out.setdefault(e.name, f"{self.local[name]}.stride({d})")
        missing = [s for s in self.symbols if s not in out]
        if missing:
            raise CannotPrint(f"symbol(s) {', '.join(missing)} appear in no input's shape or strides")
        return [(s, out[s]) for s in self.symbols]


def _flat_args(ext: Extern):
    stack = [*ext.args, *ext.kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, (tuple, list)):
            stack.extend(a)
        elif not isinstance(a, Ref):
            yield a
