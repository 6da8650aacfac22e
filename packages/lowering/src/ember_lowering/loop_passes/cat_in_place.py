"""cat-in-place: a cat whose pieces the plan's kernels write is assembled where it lies, with no copy.

A cat of more than `MAX_CAT_PIECES` pieces is ATen's (`_rules_index._cat`), and ATen copies every piece into the
result. When a kernel of the plan has just written a piece, that copy is the whole cost of the cat: an unrolled
GRU's training step made seven cats of 32 slices each (the per-time-step gradients that `cat-matmul-sums`
joins for one weight-gradient matmul, and each layer's output sequence), 6% of the step. Here the result is
allocated first and each piece's kernel writes its slice of it: the piece becomes a `part` of the result
(`_loop_ir.Buffer`), and views of the piece stay views of it. A piece no kernel of the plan writes (an input, an
ATen result, a piece that is in another cat already) is copied into its slice by a kernel of its own where the cat
was.

The slices must be the pieces' own layouts, so the pass takes `C = cat([P0, P1, ...], d)` when:
- C is a temp or an output of its own storage, row-major, and the dims before `d` have size 1 (each piece's
  slice is then one run of C's storage, in the piece's own row-major order: a cat along the leading dim);
- every piece has C's dtype (a cat that promotes stays ATen's);
- at least half of the pieces are written in place; a piece is, when the buffer whose storage it is (itself, or the
  buffer it is a whole-buffer view of) is a row-major temp of its own storage that exactly one kernel writes,
  that no output is or views, that no ATen call may write into, and that is in no other cat's slice (nor twice
  in this one).
"""

from __future__ import annotations

import sympy
from ember_core import Ref, may_write

from .._decisions import Note
from .._fusion import step_reads, step_writes, view_roots
from .._indexing import contiguous_strides, numel, row_major, sym
from .._loop_ir import Buffer, Dim, Extern, Instr, Kernel, KernelPlan, Op

CAT = "aten.cat.default"


class CatInPlace:
    id = "cat-in-place"
    # assembled: a cat's pieces written into its buffer; kept: a cat left to ATen (the reason says why)
    reasons = frozenset({"pieces-in-place", "layout", "dtypes", "few-pieces-in-place"})

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        if not any(isinstance(s, Extern) and s.op == CAT for s in plan.steps):
            return plan
        buffers = dict(plan.buffer_map)
        writers: dict[str, list[int]] = {}
        for k, step in enumerate(plan.steps):
            for n in step_writes(step):
                writers.setdefault(n, []).append(k)
        roots = view_roots(plan)
        # what an ATen call may write into (an in-place overload `extern-in-place` chose): neither moved into a
        # slice nor assembled (the call would write over the parts' values while they are read)
        written = {n for s in plan.steps if isinstance(s, Extern) and may_write(s.op) for n in step_reads(s, roots)}
        pinned = written | {roots.get(o, o) for o in plan.outputs if isinstance(o, str)}  # or an output is or views
        taken: set[str] = set()  # buffers made parts, by any cat
        steps: list = []
        for step in plan.steps:
            if not (isinstance(step, Extern) and step.op == CAT) or step.outs[0] in written:
                steps.append(step)
                continue
            copies = _assemble(step, buffers, writers, plan.steps, pinned, taken, note)
            steps.extend([step] if copies is None else copies)
        return plan.replace(buffers=tuple(buffers.values()), steps=tuple(steps))


def _assemble(step: Extern, buffers: dict[str, Buffer], writers: dict[str, list[int]], all_steps: tuple,
              pinned: set[str], taken: set[str], note: Note) -> list[Kernel] | None:
    """Make the cat's pieces parts of its result (`buffers` updated) and return the kernels that copy the pieces
    no kernel writes in place; None: the cat stays as it is."""
    pieces = step.args[0] if step.args else step.kwargs.get("tensors", ())
    dim = step.args[1] if len(step.args) > 1 else step.kwargs.get("dim", 0)
    out = step.outs[0]
    c = buffers.get(out)
    if c is None or not isinstance(dim, int) or not all(isinstance(p, Ref) for p in pieces) or not pieces:
        return None
    d = dim % c.rank if c.rank else 0
    if c.kind not in ("temp", "output") or c.base is not None or c.offset != 0 or \
            not row_major(c.shape, c.stride) or any(e != 1 for e in c.shape[:d]) or \
            any(buffers[p.name].rank != c.rank or _empty(buffers[p.name]) for p in pieces):
        note("kept", "layout", (out,), f"{out}: its pieces' slices are not runs of its storage in their own order")
        return None
    if any(buffers[p.name].dtype != c.dtype for p in pieces):
        note("kept", "dtypes", (out,), f"{out}: a cat of several dtypes")
        return None
    mine: list[str | None] = []  # per piece: the buffer made a part of C, or None (copied)
    for p in pieces:
        r = _in_place(buffers[p.name], buffers, writers, all_steps, pinned, taken)
        if r is not None and r in mine:
            r = None
        mine.append(r)
    placed = sum(r is not None for r in mine)
    if 2 * placed < len(pieces):
        note("kept", "few-pieces-in-place", (out,), f"{out}: {placed} of {len(pieces)} pieces written in place")
        return None
    copies, at = [], sympy.Integer(0)
    for j, (p, r) in enumerate(zip(pieces, mine)):
        piece = buffers[p.name]
        if r is not None:
            buffers[r] = buffers[r].replace(kind="part", base=out, offset=at)
            taken.add(r)
        else:
            name = _fresh(f"{out}_part{j}", buffers)
            buffers[name] = Buffer(name, c.dtype, piece.shape, contiguous_strides(piece.shape), "part", at, out)
            copies.append(_copy(p.name, name, piece, step.origins))
        at = sympy.expand(at + numel(piece.shape))
    note("assembled", "pieces-in-place", (out, *(r for r in mine if r is not None)),
         f"{out}: {placed} of {len(pieces)} pieces written in place, {len(copies)} copied")
    return copies


def _in_place(piece: Buffer, buffers: dict[str, Buffer], writers: dict[str, list[int]], all_steps: tuple,
              pinned: set[str], taken: set[str]) -> str | None:
    """The buffer whose storage the piece is, if a kernel writes it and it may move into the cat's slice."""
    r = buffers[piece.base] if piece.kind == "view" else piece
    if piece.kind == "view" and (piece.offset != 0 or not row_major(piece.shape, piece.stride) or
                                 sympy.expand(numel(piece.shape) - numel(r.shape)) != 0):
        return None  # a view of part of its buffer, or of its elements in another order
    if r.kind != "temp" or r.base is not None or r.offset != 0 or not row_major(r.shape, r.stride):
        return None
    if r.name in taken or r.name in pinned or r.dtype != piece.dtype:
        return None
    steps = writers.get(r.name, [])
    if len(steps) != 1 or not isinstance(all_steps[steps[0]], Kernel):
        return None
    return r.name


def _empty(b: Buffer) -> bool:
    return any(e.is_number and e == 0 for e in b.shape)


def _fresh(stem: str, buffers: dict[str, Buffer]) -> str:
    name, k = stem, 0
    while name in buffers:
        k += 1
        name = f"{stem}_{k}"
    return name


def _copy(src: str, dst: str, piece: Buffer, origins: tuple[str, ...]) -> Kernel:
    """A kernel that copies `src` into `dst`, element by element (the pass's names: `name_kernels` renames)."""
    dims = tuple(Dim(f"i{k}", e) for k, e in enumerate(piece.shape))
    index = tuple(sym(x.var) for x in dims)
    body = (Instr(Op.LOAD, ("t0",), piece.dtype, buffer=src, index=index),
            Instr(Op.STORE, (), "", srcs=("t0",), buffer=dst, index=index))
    return Kernel("copy", dims, body, origins)
