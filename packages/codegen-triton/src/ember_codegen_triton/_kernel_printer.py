"""One loop-IR kernel as one `@triton.jit` function.

    @triton.jit
    def k0_reduce_4x8(b_x, b_out, S_s0, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
        xindex = tl.program_id(0).to(tl.int64) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < (4)
        ...

Each program runs `XBLOCK` points of the kernel's i-dims, flattened row-major into `xindex`. A kernel without
r-dims works on vectors of `XBLOCK` points. A kernel with r-dims is *persistent*: the whole reduced extent of a
row sits in one block of `RBLOCK` (its next power of two), values at outer level are `[XBLOCK, 1]` and values in
a `Loop` `[XBLOCK, RBLOCK]`; each reduction is one `tl.sum`/`tl.max`/... along axis 1. Plans for Triton have no
stashed values (`local` buffers; `Capabilities(stashes=False)`): in a persistent kernel the row is in registers
anyway, and what a later loop reads again is computed again there.

A row that is symbolic or longer than `MAX_RBLOCK` is *looped*: each `Loop` runs over the row in steps of
`RBLOCK`, its reductions kept in `[XBLOCK, RBLOCK]` lane accumulators reduced after the loop (`_reductions.py`, which
prints both forms).

Indirect loads and stores (gathers, scatters: an index reading SSA values) test the index against the buffer's
shape; out of range, the element is not touched and the kernel's error flag is raised. Ops without a rule in
`_rules.py` arrive composed from their defaults (`TritonCodegen.prints_op`, ember-lowering's `decompose_ops`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy
from ember_core import to_dtype
from ember_lowering import REDUCTIONS, Instr, Kernel, Loop, Op, Ranges, flat_index
from ember_lowering.codegen import CannotPrint, KernelWalk, PlanLayout, PrintedKernel

from ._exprs import TritonIndexPrinter
from ._reductions import TritonReduction
from ._rules import TL_DTYPE, cast, expression, literal, scalar

MAX_RBLOCK = 16384  # elements of a row a persistent reduction holds in one block
LOOPED_RBLOCK = 1024  # lanes of a looped reduction's accumulators
POINTWISE_XBLOCK = 1024
ROW_ELEMENTS = 4096  # XBLOCK * RBLOCK of a reduction kernel, at most
COLUMN_XBLOCK = 64  # rows of a kernel that reads across rows (see `_reads_columns`)


@dataclass(frozen=True)
class TritonKernel(PrintedKernel):
    """A printed kernel and its launch: `numel` (sympy, the flattened i-dims), `xblock`, `rblock` (0: none)."""

    numel: sympy.Expr = sympy.Integer(0)
    xblock: int = POINTWISE_XBLOCK
    rblock: int = 0
    warps: int = 4
    checks: bool = False  # takes an error flag (`ember_err`, one int32) that out-of-range indices raise


class TritonKernelPrinter(KernelWalk):
    """Prints one kernel; `CannotPrint` if it uses anything this printer does not handle."""

    def __init__(self, kernel: Kernel, layout: PlanLayout, name: str):
        stashes = sorted({n for n, b in layout.buffers.items() if b.kind == "local"} & {i.buffer for i in
                                                                                          kernel.instrs()})
        if stashes:  # a plan lowered for another codegen's capabilities
            raise CannotPrint(f"kernel {kernel.name} keeps rows in local buffers {stashes}: plans for Triton are "
                              f"lowered without stashes (its Capabilities)")
        super().__init__(kernel, layout, name)
        self.expr = TritonIndexPrinter(_SsaNames(self.names, self.dtypes), lambda n: 0 if n in self.loop_vars else
                                       layout.lowers.get(n))
        self.checks = False
        self.loaded: dict[tuple, tuple[str, str]] = {}  # (address, mask, other, shape) → (value, root) already loaded
        self.computed: dict[tuple, str] = {}  # (op, operands, dtype, inside) → the value that computed it
        self.same: dict[str, str] = {}  # value → the earlier value it equals
        self.accumulating: dict[str, TritonReduction] = {}  # reduction → its lanes, inside a looped Loop
        self.reduce = bool(self.k.reduce_dims)
        self.rsize = sympy.Mul(*[d.size for d in self.k.reduce_dims]) if self.reduce else sympy.Integer(0)
        # a reduction's rows flattened with the i-dim its loops stream with stride 1 last (NHWC statistics: C), so
        # that a program's rows lie side by side in memory; the plan's order is the store's (order-dims)
        streamed = list(_streamed(self.k, layout, self.ranges)) if self.reduce else []
        self.outer = _streaming_order(self.k, streamed) if self.reduce else list(self.k.outer_dims)
        self.columns = self.reduce and _reads_columns(self.k, self.outer, streamed)
        longest = ROW_ELEMENTS // COLUMN_XBLOCK if self.columns else MAX_RBLOCK
        self.looped = self.reduce and not (self.rsize.is_Integer and int(self.rsize) <= longest)
        self.rnumel = self.expr(self.rsize) if self.reduce else "0"
        self.numel = sympy.Mul(*[d.size for d in self.outer])  # the flattened i-dims (1 when none)

    # ------------------------------------------------------------------ entry

    def print(self) -> TritonKernel:
        body = self._body()
        roots = list(self.roots)  # in the order the body first uses them: kernels of one body list theirs alike
        params = [self.layout.local[r] for r in roots] + (["ember_err"] if self.checks else [])
        params += [self.layout.sym_local[s] for s in self.layout.symbols]
        params += ["XBLOCK: tl.constexpr"] + (["RBLOCK: tl.constexpr"] if self.reduce else [])
        origins = self.origins_comment("#")
        text = "\n".join(["@triton.jit", f"def {self.name}({', '.join(params)}):{origins}",
                          *["    " + line for line in body]])
        looped_rblock = ROW_ELEMENTS // COLUMN_XBLOCK if self.columns else LOOPED_RBLOCK
        rblock = (looped_rblock if self.looped else _next_pow2(int(self.rsize))) if self.reduce else 0
        xblock = max(1, min(64, ROW_ELEMENTS // rblock)) if self.reduce else POINTWISE_XBLOCK
        return TritonKernel(self.name, tuple(roots), self.written(), text,
                            self.numel, xblock, rblock, _warps(xblock * max(rblock, 1)), self.checks)

    # ------------------------------------------------------------------ the iteration space

    def _body(self) -> list[str]:
        outer, rdims = self.outer, self.k.reduce_dims
        col = "[:, None]" if self.reduce else ""
        lines = [f"xindex = tl.program_id(0).to(tl.int64) * XBLOCK + tl.arange(0, XBLOCK){col}",
                 f"xmask = xindex < {self.expr(self.numel)}",
                 *unflatten("xindex", outer, self.expr)]
        row = ["rindex = tl.arange(0, RBLOCK)[None, :].to(tl.int64)" + (" + roff" if self.looped else ""),
               f"rmask = rindex < {self.rnumel}", *unflatten("rindex", rdims, self.expr), "xrmask = xmask & rmask"]
        if self.reduce and not self.looped:
            lines += row
        for stmt in self.k.body:
            if isinstance(stmt, Loop) and self.looped:
                lines += self._looped(stmt, row)
            elif isinstance(stmt, Loop):
                lines += [line for i in stmt.body for line in self._instr(i, inside=True)]
            else:
                lines += self._instr(stmt, inside=False)
        return lines

    def _looped(self, loop: Loop, row: list[str]) -> list[str]:
        """A `Loop` over a row longer than one block: accumulators of `[XBLOCK, RBLOCK]` lanes, a loop over the
        row in steps of RBLOCK that updates them, and the reductions of the lanes after it."""
        accs = [TritonReduction(i, self) for i in loop.body if i.op in REDUCTIONS]
        self._forget_loop_values()  # values of an earlier loop's body are out of scope here (and this one's after)
        head = [line for a in accs for line in a.init()]
        self.accumulating = {a.i.out: a for a in accs}
        body = row + [line for i in loop.body for line in self._instr(i, inside=True)]
        self.accumulating = {}
        tail = [line for a in accs for line in a.final()]
        self._forget_loop_values()
        return head + [f"for roff in range(0, {self.rnumel}, RBLOCK):"] + ["    " + line for line in body] + tail

    def _shape(self, inside: bool) -> str:
        if not self.reduce:
            return "[XBLOCK]"
        return "[XBLOCK, RBLOCK]" if inside else "[XBLOCK, 1]"

    # ------------------------------------------------------------------ instructions

    def _instr(self, i: Instr, inside: bool) -> list[str]:
        self.define(i)
        if i.op is Op.LOAD:
            return self._load(i, inside)
        if i.op is Op.STORE:
            return self._store(i, inside)
        if i.op is Op.CONST:
            return [f"{i.out} = {literal(i.value, i.dtype)}"]
        if i.op is Op.INDEX:
            if i.index[0].is_number:  # a constant (a static size): older Tritons cannot broadcast a constexpr
                return [f"{i.out} = tl.full({self._shape(inside)}, {self.expr(i.index[0])}, {TL_DTYPE[i.dtype]})"]
            return [f"{i.out} = tl.broadcast_to(({self.expr(i.index[0])}), {self._shape(inside)})"
                    f".to({TL_DTYPE[i.dtype]})"]
        if i.op in REDUCTIONS:
            return self.accumulating[i.out].update() if self.looped else TritonReduction(i, self).full()
        src = [self.dtypes.get(s, i.dtype) for s in i.srcs]
        operands = [self.same.get(s, s) for s in i.srcs]
        key = (i.op, tuple(operands), i.dtype, inside)
        if key in self.computed:  # what fusion recomputed for a later loop, computed once
            self.same[i.out] = self.computed[key]
            return [f"{i.out} = {self.computed[key]}"]
        self.computed[key] = i.out
        return [f"{i.out} = {expression(i.op, operands, src, i.dtype)}"]

    def _address(self, i: Instr, inside: bool) -> str:
        zero = "tl.zeros(" + self._shape(inside) + ", tl.int64)"
        return f"{self.layout.local[self.layout.root(i.buffer)]} + (({self.expr(self.flat(i))}) + {zero})"

    def _mask(self, inside: bool, extra: str | None) -> str:
        base = "xrmask" if inside else "xmask"
        return f"{base} & {extra}" if extra else base

    def _bounds(self, i: Instr, inside: bool, mask: str) -> tuple[str, list[str]]:
        """The access's mask and, for an indirect access (its index reads SSA values), the lines that test its
        index against the buffer's shape: an element out of range is not touched; it fails a device assert that
        names the buffer (compiled in by a launch with `debug=True`), and raises the kernel's error flag when
        the launch passes one (the wrapper then runs the graph where torch raises its own error)."""
        tests = [f"(({self.expr(e)}) >= 0) & (({self.expr(e)}) < ({self.expr(size)}))" for e, size in self.indirect(i)]
        if not tests:
            return mask, []
        self.checks = True
        ok = f"{i.outs[0] if i.outs else 'st'}_{len(self.dtypes)}_ok"
        zero = "tl.zeros(" + self._shape(inside) + ", tl.int32)"
        what = repr(f"index out of range for {self.layout.local[self.layout.root(i.buffer)]} in {self.name}")
        return f"{mask} & {ok}", [f"{ok} = {' & '.join(tests)}",
                                  f"tl.device_assert({ok}, {what}, mask={mask})",  # compiled in debug mode only
                                  "if ember_err is not None:",  # None: the launch does not read a flag
                                  f"    tl.store(ember_err + {zero}, {zero} + 1, mask={mask} & ({ok} == 0))"]

    def _forget_loop_values(self) -> None:
        self.loaded = {}
        self.computed = {k: v for k, v in self.computed.items() if not k[3]}

    def _load(self, i: Instr, inside: bool) -> list[str]:
        """A load, or the value an identical earlier load gave (same address, mask and shape, and no store to its
        buffer's storage since): fusion recomputes what later loops need, so a kernel reads x several times."""
        root = self.read_root(i.buffer)
        ptr = self._address(i, inside)
        mask, lines = self._bounds(i, inside, self._mask(inside, i.srcs[0] if i.srcs else None))
        other = scalar(i.value if i.value is not None else 0, i.dtype)
        key = (ptr, mask, other, self._shape(inside))
        if key in self.loaded and not lines:
            self.same[i.out] = self.loaded[key][0]
            return [f"{i.out} = {self.loaded[key][0]}"]
        self.loaded[key] = (i.out, root)
        return lines + [f"{i.out} = tl.load({ptr}, mask={mask}, other={other})"]

    def _store(self, i: Instr, inside: bool) -> list[str]:
        root = self.write_root(i.buffer)
        self.loaded = {k: v for k, v in self.loaded.items() if v[1] != root}
        ptr = self._address(i, inside)
        dtype = self.layout.buffers[i.buffer].dtype
        value = cast(i.srcs[0], self.dtypes.get(i.srcs[0], dtype), dtype)
        mask, lines = self._bounds(i, inside, self._mask(inside, i.srcs[1] if len(i.srcs) > 1 else None))
        return lines + [f"tl.store({ptr}, tl.broadcast_to({value}, {self._shape(inside)}), mask={mask})"]


class _SsaNames(dict):
    """Symbol spellings for index expressions: dims and plan symbols by table, SSA values by their own name."""

    def __init__(self, names: dict[str, str], dtypes: dict[str, str]):
        super().__init__(names)
        self.dtypes = dtypes

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or key in self.dtypes

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key) if super().__contains__(key) else key


def _streamed(k: Kernel, layout: PlanLayout, ranges: Ranges):
    """(flat element offset, bytes) of each load in the kernel's loops: what it streams through a row."""
    for stmt in k.body:
        for i in stmt.body if isinstance(stmt, Loop) else ():
            if i.op is Op.LOAD and i.buffer in layout.buffers:
                b = layout.buffers[i.buffer]
                flat = flat_index(i.index, b.stride, layout.rel_offset(i.buffer), ranges)
                yield sympy.expand(flat), to_dtype(b.dtype).itemsize


def _streaming_order(k: Kernel, streamed: list) -> list:
    """k's i-dims with the one its loops' loads (`_streamed`) walk with stride 1 (most bytes) moved last, if any."""
    outer = list(k.outer_dims)
    weight = {d.var: 0 for d in outer}
    for flat, size in streamed:
        for d in outer:
            if flat.coeff(sympy.Symbol(d.var, integer=True)) == 1:
                weight[d.var] += size
    best = max(outer, key=lambda d: weight[d.var], default=None)
    if best is None or weight[best.var] == 0 or best is outer[-1]:
        return outer
    return [d for d in outer if d is not best] + [best]


def _reads_columns(k: Kernel, outer: list, streamed: list) -> bool:
    """Does the kernel read across rows: do more of the bytes its loops stream (`_streamed`: loads that change along
    its last i-dim in `outer`) lie next to each other along that i-dim (stride 1) than along its last r-dim? A weight's
    gradient (a sum over the tokens of [tokens, width]), batch norm's statistics over NHWC data. Such a kernel takes
    many rows a program (`COLUMN_XBLOCK`) and short looped steps along them, so that each step of a program loads
    whole stretches of memory; a row a program and the whole row a block would read one element of each 32-byte
    sector it touches."""
    if not outer:
        return False
    x = sympy.Symbol(outer[-1].var, integer=True)
    r = sympy.Symbol(k.reduce_dims[-1].var, integer=True)
    across = along = 0
    for flat, size in streamed:
        if flat.coeff(x) == 0:  # the same for every row of a program (a per-token scale): cached, not streamed
            continue
        if flat.coeff(r) == 1:
            along += size
        elif flat.coeff(x) == 1 and flat.coeff(r) != 0:
            across += size
    return across > along


def unflatten(flat: str, dims, expr) -> list[str]:
    """`d = flat // (sizes after d) % size(d)` for each dim, row-major."""
    lines, after = [], sympy.Integer(1)
    for d in reversed(dims):
        div = f" // ({expr(after)})" if after != 1 else ""
        mod = f" % ({expr(d.size)})" if d is not dims[0] else ""
        lines.append(f"{d.var} = {flat}{div}{mod}")
        after = after * d.size
    return list(reversed(lines))


def _warps(block: int) -> int:
    """Warps per program from the elements of its block: 4 up to 2048 elements, 8 up to 8192, then 16."""
    return 4 if block <= 2048 else 8 if block <= 8192 else 16


def _next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))
