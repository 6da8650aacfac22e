"""What every codegen's kernel printer shares: the kernel's names, ranges and roots, and how an access addresses
its buffer.

A printer subclasses `KernelWalk` and keeps what is its own: its loop nests, how a value, a load or a store is
spelled, its index printer (`index_printer()`, an `IndexPrinter` over `names`). The base owns:
- `dtypes`: each SSA value's dtype, filled in as the printer defines values (`define`); `value_dtypes`: every
  SSA value's dtype from the start, for what is printed before its value is defined (a looped row's lanes);
- `names`: what the loop vars and the plan's symbols are called in the kernel's text;
- `ranges`: the dims' sizes and the symbols' lower bounds, to simplify index expressions;
- `roots`: each storage root the kernel reads or writes (`read_root`, `write_root`), in order of first use, and
  whether it writes it: the kernel's parameters (with `part_pointers`, a part's own pointer instead of its root);
- `flat(i)`: an access's element as one offset from its root or part (`flat_index` with the buffer's strides and
  offset);
- `indirect(i)`: the (index, size) pairs of an access's dims whose index reads SSA values (gathers, scatters),
  which the printer tests against the buffer's shape (none for a load marked `in_bounds`);
- `origins_comment(marker)`: the graph nodes the kernel computes, as a comment of the language.
"""

from __future__ import annotations

import sympy
from ember_core import as_sympy

from ember_lowering import Instr, Kernel, Loop, Ranges, flat_index

from ._layout import PlanLayout


class KernelWalk:
    """The state of printing one kernel that does not depend on the language (see the module docstring)."""

    # a part of an assembled buffer (`cat-in-place`) is a parameter of its own, not its root plus an offset in the
    # text (`PlanLayout.pointer`): the codegen's calls then pass the root's pointer plus the part's offset
    part_pointers = False

    def __init__(self, kernel: Kernel, layout: PlanLayout, name: str):
        self.k, self.layout, self.name = kernel, layout, name
        self.dtypes: dict[str, str] = {}
        self.value_dtypes = {name: i.dtype for stmt in kernel.body
                             for i in (stmt.body if isinstance(stmt, Loop) else (stmt,)) for name in i.outs}
        self.loop_vars = {d.var for d in kernel.dims}
        self.names = {d.var: d.var for d in kernel.dims} | {s: layout.sym_local[s] for s in layout.symbols}
        self.ranges = Ranges({d.var: d.size for d in kernel.dims}, layout.lowers)
        self.roots: dict[str, bool] = {}  # root → written

    def define(self, i: Instr) -> None:
        for name in i.outs:
            self.dtypes[name] = i.dtype

    def operand_dtypes(self, i: Instr) -> list[str]:
        return [self.dtypes.get(s, i.dtype) for s in i.srcs]

    def pointer(self, buffer: str) -> str:
        """The parameter `buffer` is addressed from: its root, or with `part_pointers` its part."""
        return self.layout.pointer(buffer) if self.part_pointers else self.layout.root(buffer)

    def read_root(self, buffer: str) -> str:
        """The root (the pointer) of `buffer`, noted as read (unless written already); its name in the kernel."""
        root = self.pointer(buffer)
        self.roots.setdefault(root, False)
        return root

    def write_root(self, buffer: str) -> str:
        root = self.pointer(buffer)
        self.roots[root] = True
        return root

    def written(self) -> frozenset[str]:
        return frozenset(r for r, w in self.roots.items() if w)

    def flat(self, i: Instr) -> sympy.Expr:
        b = self.layout.buffers[i.buffer]
        offset = self.layout.rel_offset(i.buffer) - self.layout.rel_offset(self.pointer(i.buffer))  # a root's is 0
        return flat_index(i.index, b.stride, offset, self.ranges)

    def indirect(self, i: Instr) -> list[tuple[sympy.Expr, sympy.Expr]]:
        if i.in_bounds:  # proven inside the buffer (bound-indices): nothing to test
            return []
        b = self.layout.buffers[i.buffer]
        return [(e, size) for e, size in zip(i.index, b.shape)
                if any(s.name in self.dtypes for s in as_sympy(e).free_symbols)]

    def origins_comment(self, marker: str) -> str:
        return f"  {marker} from {', '.join(self.k.origins)}" if self.k.origins else ""
