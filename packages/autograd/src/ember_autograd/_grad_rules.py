"""Ops whose ATen autograd formula is missing, given one for the joint trace (`grad_rules`: op name → callable
the Interpreter runs in the op's place while the joint is traced).

`aten.copy.default(dst, src)` is the functional form of `dst.copy_(src)`: what decompositions (circular `pad`,
`diff`, ...) and functionalization leave in a captured graph. Eager never runs it under autograd (it runs
`copy_`, whose formula exists), so ATen has no derivative for it ("derivative for aten::copy is not implemented").
Its value is `src` broadcast to `dst`'s shape and cast to `dst`'s dtype, in `dst`'s layout; so, as for `copy_`:
d/dsrc is the gradient summed back to `src`'s shape and cast to `src`'s dtype, and d/ddst is zero (every element
is overwritten).
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


grad_rules: dict[str, Callable[..., Any]] = {
    "aten.copy.default": differentiable_copy,
}
