"""What each step of a program costs per call, as profilers report it (`ember_core.KernelCost`): the bytes it moves
and, for matmul, convolution and attention externs, the FLOPs it does.

Bytes are the plan's: every buffer a step reads plus every buffer it writes, each counted once, over its distinct
elements (a broadcast dim, stride 0, counts once), times its dtype's size. A kernel's `local` scratch rows stay
in registers or cache and count nothing. This is what the step must move at least, the figure its bandwidth is
measured by: x * 2 + 1 over a million float32 moves 4 MB in and 4 MB out, 8 MB. Symbolic sizes take the values
they were traced with (the symbols' hints).

FLOPs come from `flop_rules`, one rule per ATen op, counting a multiply-add as two: mm 2·M·K·N, a convolution
2 · (elements of its output, or input if transposed) · (weight elements per output channel), attention
2·B·H·L·S·(E + Ev) forward and 2.5 times that backward (causal masks not discounted).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember_core import KernelCost, Ref

from ember_lowering import ITEMSIZE, Buffer, Extern, Kernel, KernelPlan, buffers_read, buffers_written, size_of, to_expr

from ._program import InterpretedKernel, Program, Segment

Shape = tuple[int, ...]
ShapeOf = Callable[[Any], Shape]  # the traced shape of an argument of an extern (a Ref)


def program_costs(program: Program) -> list[KernelCost]:
    """One `KernelCost` per kernel, interpreted kernel and extern call of `program`, in the order they run, named
    as the wrapper's ranges are."""
    sizes = _Sizes(program.plan)
    out = []
    for index, step in enumerate(program.steps):
        if isinstance(step, Segment):
            out += [KernelCost(k.name, "kernel", sizes.moved(k.ir)) for k in step.kernels if k.ir is not None]
        elif isinstance(step, InterpretedKernel):
            out.append(KernelCost(step.name or step.kernel.name, "interpreted", sizes.moved(step.kernel)))
        else:
            out.append(extern_cost(program.extern_name(index), step, sizes))
    return out


def extern_cost(name: str, ext: Extern, sizes: _Sizes) -> KernelCost:
    rule = flop_rules.get(ext.op)
    refs = [a for a in ext.args if isinstance(a, Ref)]
    flops = 0
    if rule is not None:
        try:
            flops = int(rule(sizes.shape, ext))
        except (TypeError, ValueError, IndexError, KeyError):  # an argument of a form the rule does not know
            flops = 0
    dtype = sizes.buffers[refs[0].name].dtype if refs and refs[0].name in sizes.buffers else ""
    return KernelCost(name, "extern", sizes.moved(ext), flops, ext.op, dtype)


class _Sizes:
    """Buffer sizes of one plan, its symbols at their hints."""

    def __init__(self, plan: KernelPlan):
        self.buffers = plan.buffer_map
        self.hints = {s.name: s.hint for s in plan.symbols}

    def value(self, expr: Any) -> int:
        return size_of(expr, self.hints)

    def shape(self, arg: Any) -> Shape:
        if not isinstance(arg, Ref):
            raise TypeError(f"{arg!r} is not a buffer")
        return tuple(self.value(d) for d in self.buffers[arg.name].shape)

    def nbytes(self, b: Buffer) -> int:
        """Distinct elements of `b` (its stride-0 dims once) times its dtype's size."""
        sizes = [self.value(d) for d in b.shape]
        distinct = [n for n, s in zip(sizes, b.stride) if to_expr(s) != 0]
        return (math.prod(distinct) if all(sizes) else 0) * ITEMSIZE.get(b.dtype, 4)

    def moved(self, step: Kernel | Extern) -> int:
        names = dict.fromkeys([*buffers_read(step), *buffers_written(step)])
        return sum(self.nbytes(self.buffers[n]) for n in names
                   if n in self.buffers and self.buffers[n].kind != "local")


# ---------------------------------------------------------------------------------------------- FLOP rules


def _matmul(a: int, b: int) -> Callable[[ShapeOf, Extern], int]:
    """FLOPs of a (batched) matrix product of arguments `a` [..., M, K] and `b` [..., K, N]."""
    def rule(shape: ShapeOf, ext: Extern) -> int:
        x, y = shape(ext.args[a]), shape(ext.args[b])
        return 2 * math.prod(x) * y[-1]
    return rule


def _conv_flops(out: Shape, inp: Shape, weight: Shape, transposed: bool) -> int:
    return 2 * math.prod(inp if transposed else out) * math.prod(weight[1:])


def _convolution(shape: ShapeOf, ext: Extern) -> int:
    inp, weight = shape(ext.args[0]), shape(ext.args[1])
    out = shape(Ref(ext.outs[0]))
    return _conv_flops(out, inp, weight, bool(ext.args[6]))


def _convolution_backward(shape: ShapeOf, ext: Extern) -> int:
    grad_out, inp, weight = (shape(a) for a in ext.args[:3])
    mask = ext.args[10]
    return _conv_flops(grad_out, inp, weight, bool(ext.args[7])) * (int(bool(mask[0])) + int(bool(mask[1])))


def _attention(query: int, scale: float) -> Callable[[ShapeOf, Extern], int]:
    """FLOPs of attention with q [B, H, L, E] at `query` and k, v [B, H, S, E|Ev] after it (`scale` times)."""
    def rule(shape: ShapeOf, ext: Extern) -> int:
        q, k, v = (shape(a) for a in ext.args[query:query + 3])
        return int(scale * 2 * math.prod(q[:-1]) * k[-2] * (q[-1] + v[-1]))
    return rule


flop_rules: dict[str, Callable[[ShapeOf, Extern], int]] = {
    "aten.mm.default": _matmul(0, 1),
    "aten.bmm.default": _matmul(0, 1),
    "aten.addmm.default": _matmul(1, 2),
    "aten.baddbmm.default": _matmul(1, 2),
    "aten.convolution.default": _convolution,
    "aten.convolution_backward.default": _convolution_backward,
    **{f"aten.{name}.default": _attention(0, 1.0) for name in (
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")},
    **{f"aten.{name}.default": _attention(1, 2.5) for name in (
        "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward")},
}
