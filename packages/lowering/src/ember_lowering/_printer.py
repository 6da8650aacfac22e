"""The one canonical text form of a KernelPlan: one line per buffer, instruction, loop header and extern.

It is what `str(plan)` returns, what `EMBER_LOGS=kernels` shows and what the golden tests compare;
`parse_plan(format_plan(plan)) == plan`. Deterministic: no addresses, no timings; names are given in order.

    # ember kernel plan 'graph' on cpu
    # passes: lower, fuse-inline, fuse-vertical, fuse-siblings, plan-buffers
    # symbols: s0=8 in [2, inf]
    def graph(x_1):
      x_1: f32[s0, 16] input
      out: f32[s0, 16] output
      kernel reduce_s0x16[i0 < s0, r0 < 16]:  # from _softmax
        loop:
          t0: f32 = load x_1[i0, r0]
          t1: f32 = reduce_max t0
        ...
      extern mm = aten.mm.default(x_1, w)  # from mm
      return (out)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from ember_core import Ref, Sym

from ._indexing import contiguous_strides
from ._loop_ir import DTYPE_SHORT, IMPLICIT_CAST, Buffer, Extern, Instr, Item, Kernel, KernelPlan, Loop, Op

INDENT = "  "

# A line's key says which statement it prints: ("buffer", name), ("step", k), ("stmt", k, j) or
# ("stmt", k, j, n) for the n-th instruction of loop j of step k. The verifier marks lines by key.
Key = tuple


def format_plan(plan: KernelPlan, *, mark: Key | None = None, window: int | None = None) -> str:
    """The text form. `mark` puts `>` before the line with that key; `window` keeps that many lines either side."""
    lines = list(plan_lines(plan))
    if mark is None:
        return "\n".join(text for _, text in lines)
    at = next((i for i, (key, _) in enumerate(lines) if key == mark), None)
    out = [("> " + text[2:] if i == at and text.startswith("  ") else text) for i, (_, text) in enumerate(lines)]
    if at is None or window is None:
        return "\n".join(out)
    lo, hi = max(0, at - window), min(len(out), at + window + 1)
    return "\n".join((["  ..."] if lo else []) + out[lo:hi] + (["  ..."] if hi < len(out) else []))


def plan_lines(plan: KernelPlan) -> Iterator[tuple[Key, str]]:
    yield (), f"# ember kernel plan {plan.name!r} on {plan.device}"
    if plan.passes:
        yield (), f"# passes: {', '.join(plan.passes)}"
    if plan.symbols:
        syms = ", ".join(f"{s.name}={s.hint} in [{s.lower}, {'inf' if s.upper is None else s.upper}]"
                         for s in plan.symbols)
        yield (), f"# symbols: {syms}"
    yield (), f"def {plan.name}({', '.join(plan.inputs)}):"
    for b in plan.buffers:
        yield ("buffer", b.name), INDENT + format_buffer(b)
    for k, step in enumerate(plan.steps):
        if isinstance(step, Kernel):
            yield from _kernel_lines(step, k)
        else:
            yield ("step", k), INDENT + format_extern(step)
    yield (), INDENT + f"return ({', '.join(o if isinstance(o, str) else format_arg(o) for o in plan.outputs)})"


def format_layout(dtype: str, shape: tuple, stride: tuple) -> str:
    text = f"{DTYPE_SHORT[dtype]}[{', '.join(map(str, shape))}]"
    if tuple(stride) != contiguous_strides(shape):
        text += "{" + ", ".join(map(str, stride)) + "}"
    return text


def format_buffer(b: Buffer) -> str:
    text = f"{b.name}: {format_layout(b.dtype, b.shape, b.stride)} {b.kind}"
    if b.base is not None:
        text += f" of {b.base}" if b.kind in ("view", "part") else f" reuses {b.base}"
    if b.offset != 0:
        text += f" at {b.offset}"
    return text


def _kernel_lines(kernel: Kernel, k: int) -> Iterator[tuple[Key, str]]:
    dims = ", ".join(f"{d.var} < {d.size}" for d in kernel.dims)
    origins = f"  # from {', '.join(kernel.origins)}" if kernel.origins else ""
    yield ("step", k), f"{INDENT}kernel {kernel.name}[{dims}]:{origins}"
    for j, stmt in enumerate(kernel.body):
        if isinstance(stmt, Loop):
            yield ("stmt", k, j), INDENT * 2 + "loop:"
            for n, instr in enumerate(stmt.body):
                yield ("stmt", k, j, n), INDENT * 3 + format_instr(instr)
        else:
            yield ("stmt", k, j), INDENT * 2 + format_instr(stmt)


def format_index(index: tuple) -> str:
    return "[" + ", ".join(str(e) for e in index) + "]"


def format_scalar(value: Any, dtype: str) -> str:
    if dtype == "bool" or isinstance(value, bool):
        return repr(bool(value))
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return repr(value)


def format_instr(instr: Instr) -> str:
    op = instr.op
    if op is Op.STORE:
        text = f"store {instr.buffer}{format_index(instr.index)} = {instr.srcs[0]}"
        return text + (f" if {instr.srcs[1]}" if len(instr.srcs) > 1 else "")
    lhs = f"{', '.join(instr.outs)}: {DTYPE_SHORT[instr.dtype]} = "
    if op is Op.LOAD:
        text = f"load {instr.buffer}{format_index(instr.index)}" + (" in bounds" if instr.in_bounds else "")
        if instr.srcs:
            text += f" if {instr.srcs[0]} else {format_scalar(instr.value, instr.dtype)}"
        return lhs + text
    if op is Op.CONST:
        return lhs + f"const {format_scalar(instr.value, instr.dtype)}"
    if op is Op.INDEX:
        return lhs + f"index {instr.index[0]}"
    if op is Op.CAST and instr.value == IMPLICIT_CAST:
        return lhs + f"cast {instr.srcs[0]} implicit"
    return lhs + f"{op.value} {', '.join(instr.srcs)}"


# ---------------------------------------------------------------------------------------------- extern args


def format_extern(ext: Extern) -> str:
    args = [format_arg(a) for a in ext.args] + [f"{k}={format_arg(v)}" for k, v in sorted(ext.kwargs.items())]
    origins = f"  # from {', '.join(ext.origins)}" if ext.origins else ""
    return f"extern {', '.join(ext.outs)} = {ext.op}({', '.join(args)}){origins}"


def format_arg(a: Any) -> str:
    """Extern arguments as Python-like text that `_parser.parse_arg` reads back."""
    if isinstance(a, Item):
        return f"item({a.name})"
    if isinstance(a, Ref):
        return a.name
    if isinstance(a, Sym):
        return f"sym({a.expr!r})"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(format_arg(x) for x in a) + "]"
    if isinstance(a, float):
        return format_scalar(a, "float64")
    if isinstance(a, torch.dtype):
        return str(a)  # torch.float32
    if isinstance(a, torch.device):
        return f"device({str(a)!r})"
    if isinstance(a, (torch.layout, torch.memory_format)):
        return str(a)  # torch.strided, torch.contiguous_format
    if isinstance(a, sympy.Basic):
        return f"sym({str(a)!r})"
    return repr(a)


KernelPlan.__str__ = format_plan  # type: ignore[method-assign] - the IR's text form (see KernelPlan)
