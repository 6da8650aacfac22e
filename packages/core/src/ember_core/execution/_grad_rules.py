"""Ops whose ATen autograd formula is missing or wrong, given a right one (`grad_rules`: op name → callable run in
the op's place wherever a graph runs under autograd: while the joint graph is traced, and in the interpreter
codegen, which runs a graph under eager autograd when the joint cannot be traced).

`aten.copy.default(dst, src)` is the functional form of `dst.copy_(src)`: what decompositions (circular `pad`,
`diff`, ...) and functionalization leave in a captured graph. Eager never runs it under autograd (it runs
`copy_`, whose formula exists), so ATen has no derivative for it ("derivative for aten::copy is not implemented").
Its value is `src` broadcast to `dst`'s shape and cast to `dst`'s dtype, in `dst`'s layout; so, as for `copy_`:
d/dsrc is the gradient summed back to `src`'s shape and cast to `src`'s dtype, and d/ddst is zero (every element
is overwritten).

`prims.convert_element_type(a, dtype)` (torch's decompositions of bfloat16 math, `renorm` among them, leave it in a
graph) has no autograd formula at all: it is `a` cast to `dtype`, so it runs as `aten._to_copy`, whose derivative
casts the gradient back.

`prims.copy_strided(a, stride)` (torch's decomposition of `lerp` leaves it where its result's strides would differ
from eager's: inputs of other layouts, under symbolic sizes) has no autograd formula either: it is `a` laid out
with `stride`, so it runs as a copy into an empty tensor of that layout, whose derivative passes the gradient on.

`aten.rrelu_with_noise_functional(x, noise, ...)` is what functionalization makes of training-mode `rrelu`, which
draws a slope per element into `noise` in place. It returns the drawn slopes as a second output, but ATen's
formula for it reads the `noise` *argument*, the buffer before the draw (`empty`): the gradient came back zeros
where x < 0, or garbage, without an error. Here the gradient reads the slopes the forward drew, as eager's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, dst: torch.Tensor, src: Any, non_blocking: bool = False) -> torch.Tensor:
        ctx.src_meta = (src.shape, src.dtype) if isinstance(src, torch.Tensor) else None
        return torch.ops.aten.copy.default(dst, src, non_blocking)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        grad_dst = torch.zeros_like(grad) if ctx.needs_input_grad[0] else None
        grad_src = None
        if ctx.needs_input_grad[1] and ctx.src_meta is not None:
            shape, dtype = ctx.src_meta
            grad_src = grad.sum_to_size(shape).to(dtype)
        return grad_dst, grad_src, None


def differentiable_copy(dst: torch.Tensor, src: Any, non_blocking: bool = False) -> torch.Tensor:
    """`aten.copy.default` with the derivative of `copy_`."""
    return _Copy.apply(dst, src, non_blocking)


def differentiable_convert(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`prims.convert_element_type` as `aten._to_copy`, which autograd can differentiate."""
    return torch.ops.aten._to_copy.default(a, dtype=dtype)


def differentiable_copy_strided(a: torch.Tensor, stride: Any) -> torch.Tensor:
    """`prims.copy_strided` as a copy into `a.new_empty_strided`, which autograd can differentiate."""
    return a.new_empty_strided(a.shape, stride).copy_(a)


class _RReLUWithNoise(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, noise: torch.Tensor, lower: Any, upper: Any, training: bool,
                generator: Any) -> tuple[torch.Tensor, torch.Tensor]:
        out, slopes = torch.ops.aten.rrelu_with_noise_functional.default(x, noise, lower, upper, training,
                                                                         generator=generator)
        ctx.save_for_backward(x, slopes)
        ctx.args = (lower, upper, training)
        ctx.mark_non_differentiable(slopes)
        return out, slopes

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _grad_slopes: Any) -> tuple[Any, ...]:
        x, slopes = ctx.saved_tensors
        lower, upper, training = ctx.args
        grad_x = torch.ops.aten.rrelu_with_noise_backward.default(grad, x, slopes, lower, upper, training, False)
        return grad_x, None, None, None, None, None


def differentiable_rrelu_with_noise(x: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125,
                                    upper: Any = 1.0 / 3.0, training: bool = False,
                                    generator: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`aten.rrelu_with_noise_functional` whose derivative reads the slopes it drew."""
    return _RReLUWithNoise.apply(x, noise, lower, upper, training, generator)


grad_rules: dict[str, Callable[..., Any]] = {
    "aten.copy.default": differentiable_copy,
    "prims.convert_element_type.default": differentiable_convert,
    "prims.copy_strided.default": differentiable_copy_strided,
    "aten.rrelu_with_noise_functional.default": differentiable_rrelu_with_noise,
}
