"""split-moments: a short row's Welford becomes two sums, the mean's and then the squared deviations' from it.

A `reduce_welford` keeps a running mean and m2 per lane: a chain of dependent operations per value, or shifted
sums in double (`codegen-cpp`'s `_reductions.py`). When a row fits in the cache, reading it twice is cheaper:

    loop { x = ...; s = reduce_sum x }                                   # pass 1: only what x needs
    m = s / n
    loop { x = ...; d = x - m; s1 = reduce_sum d; s2 = reduce_sum d * d; ... }   # pass 2: the loop as it was
    mean = m + s1 / n;  m2 = max(s2 - min(s1 * (s1 / n), FLT_MAX), 0)

Three float sums a value, vectorized as any sum, with no division. This is the corrected two-pass algorithm
(Chan, Golub and LeVeque): s1 removes the first pass's rounding from both results (m is off by s1 / n, and s2 by
s1^2 / n), and no term cancels (s2 sums squared deviations from about the mean), so float32 lanes give float64's
variance of data at 1e6 with unit spread, which a float32 sum of squares would lose entirely. The correction
s1^2 / n is at most s2 exactly, but s1 holds the first pass's rounding, and where the squared deviations overflow
(a row holding 3e38) s1 is ~1e31 and its square overflows too: capped at the dtype's largest finite value, m2 is
inf as Welford's, not inf - inf. The layer norm of
a 4096 x 1024 float32 tensor took 2.7 ms with Welford and 1.7 ms split at 1 thread in C++.

A Welford is split when its kernel has i-dims (a whole-tensor reduction keeps its chunked Welford: its row is
all of the tensor), the r-dims are static with at most `max_elements` elements (a row that does not fit in the
cache would be read twice from memory), and what computes its operand reads no buffer its loop writes (pass 1
would read it before pass 2 writes it). Pass 1 computes only the operand; stores and other reductions stay in
pass 2. A codegen that computes a short row's moments in registers itself goes without it (`Capabilities.row_moments`):
Triton's does.
"""

from __future__ import annotations

import math

import torch
from ember_core import to_dtype

from .._decisions import Note
from .._loop_ir import Instr, Kernel, KernelPlan, Loop, Op
from .._rewrite import canonicalize, rename_values, used_names

MAX_ELEMENTS = 16384  # 64 KiB of float32 a row: read again from L2 (1-2 MiB a core), not memory


class SplitMoments:
    id = "split-moments"
    # split: a short row's Welford is two sums now; kept: whole-tensor / symbolic or long rows / an operand that
    # reads what its loop writes
    reasons = frozenset({"short-row", "whole-tensor", "symbolic-rows", "row-too-long", "reads-written-buffer"})

    def __init__(self, max_elements: int = MAX_ELEMENTS):
        self.max_elements = max_elements

    @staticmethod
    def wanted(capabilities) -> bool:
        """Not for a codegen that computes a short row's moments in registers itself (`Capabilities.row_moments`)."""
        return not capabilities.row_moments

    def run(self, plan: KernelPlan, note: Note) -> KernelPlan:
        steps = tuple(self.split(s, note) if isinstance(s, Kernel) and _welfords(s) else s for s in plan.steps)
        return plan.replace(steps=steps)

    def split(self, kernel: Kernel, note: Note) -> Kernel:
        refusal = self.refuse(kernel)
        if refusal is not None:
            for w in _welfords(kernel):
                note("kept", refusal[0], (kernel.name, *w.outs), f"{kernel.name}: {w.outs[0]} stays Welford "
                     f"({refusal[1]})")
            return kernel
        n = math.prod(int(d.size) for d in kernel.reduce_dims)
        body: list = []
        for s in kernel.body:
            if not isinstance(s, Loop) or not any(i.op is Op.REDUCE_WELFORD for i in s.body):
                body.append(s)
                continue
            parts = _split_loop(s, n)
            if parts is None:
                for w in (i for i in s.body if i.op is Op.REDUCE_WELFORD):
                    note("kept", "reads-written-buffer", (kernel.name, *w.outs),
                         f"{kernel.name}: {w.outs[0]}'s operand reads a buffer its loop writes")
                body.append(s)
                continue
            body += parts
            for w in (i for i in s.body if i.op is Op.REDUCE_WELFORD):
                note("split", "short-row", (kernel.name, *w.outs),
                     f"{kernel.name}: {w.outs[0]} and {w.outs[1]} as two sums over rows of {n}")
        return canonicalize(kernel.replace(body=tuple(body)))

    def refuse(self, kernel: Kernel) -> tuple[str, str] | None:
        """(reason code, words) why this kernel's Welfords stay as they are; None when they split."""
        if not kernel.outer_dims:
            return "whole-tensor", "no i-dims: its row is the whole tensor"
        sizes = [d.size for d in kernel.reduce_dims]
        if not all(s.is_Integer for s in sizes):
            return "symbolic-rows", f"the r-dims {', '.join(map(str, sizes))} are not static"
        n = math.prod(int(s) for s in sizes)
        if n > self.max_elements:
            return "row-too-long", f"{n} elements per row > {self.max_elements}"
        return None


def _welfords(kernel: Kernel) -> list[Instr]:
    return [i for i in kernel.instrs() if i.op is Op.REDUCE_WELFORD]


def _split_loop(loop: Loop, n: int) -> list | None:
    """[pass 1, the means, pass 2] for a loop with Welfords; None when an operand reads what the loop writes."""
    welfords = [i for i in loop.body if i.op is Op.REDUCE_WELFORD]
    by_name = {o: i for i in loop.body for o in i.outs}
    needed: set[str] = set()
    stack = [w.srcs[0] for w in welfords]
    while stack:
        v = stack.pop()
        if v in needed or v not in by_name:
            continue  # done, or an outer value
        needed.add(v)
        stack += used_names(by_name[v])
    slice_ = [i for i in loop.body if i.outs and i.out in needed]
    written = {i.buffer for i in loop.body if i.op is Op.STORE}
    if any(i.op is Op.LOAD and i.buffer in written for i in slice_):
        return None
    first, means, second, after = list(slice_), [], [], []
    for i in loop.body:
        if i.op is not Op.REDUCE_WELFORD:
            second.append(i)
            continue
        (x,), (mean, m2), t = i.srcs, i.outs, i.dtype
        v = {k: f"{mean}_{k}" for k in ("sum", "n", "m", "d", "dd", "s1", "s2", "c", "mc", "cc", "top", "ccb",
                                         "zero")}
        first.append(Instr(Op.REDUCE_SUM, (v["sum"],), t, (x,)))
        means += [Instr(Op.CONST, (v["n"],), t, value=float(n)), Instr(Op.DIV, (v["m"],), t, (v["sum"], v["n"]))]
        second += [Instr(Op.SUB, (v["d"],), t, (x, v["m"])), Instr(Op.MUL, (v["dd"],), t, (v["d"], v["d"])),
                   Instr(Op.REDUCE_SUM, (v["s1"],), t, (v["d"],)), Instr(Op.REDUCE_SUM, (v["s2"],), t, (v["dd"],))]
        after += [Instr(Op.DIV, (v["c"],), t, (v["s1"], v["n"])), Instr(Op.ADD, (mean,), t, (v["m"], v["c"])),
                  Instr(Op.MUL, (v["cc"],), t, (v["s1"], v["c"])),
                  Instr(Op.CONST, (v["top"],), t, value=torch.finfo(to_dtype(t)).max),
                  Instr(Op.MINIMUM, (v["ccb"],), t, (v["cc"], v["top"])),
                  Instr(Op.SUB, (v["mc"],), t, (v["s2"], v["ccb"])),
                  Instr(Op.CONST, (v["zero"],), t, value=0.0), Instr(Op.MAXIMUM, (m2,), t, (v["mc"], v["zero"]))]
    # pass 1's copies of the operands' values take names of their own (SSA: one definition each)
    first_loop = rename_values([Loop(tuple(first))], {v: f"{v}_first" for v in needed})
    return [*first_loop, *means, Loop(tuple(second)), *after]
