"""Ops whose ATen derivative branches on a Scalar argument, in forms whose derivatives do not, for a joint trace in
which that argument is a number read from a tensor at run time (`.item()`: a Python float Dynamo made an input after
it changed). The trace holds such a number as a symbol with no value, and a formula that asks a question of it
cannot be traced: `add`'s and `sub`'s derivative asks whether alpha is 1 (`maybe_multiply`), `pow`'s whether the
exponent is 0 or the base 0. The graph then ran under eager autograd.

Each form computes what the op computes, with the derivative eager's formula gives:
- `add(x, y, alpha=s)` → `x + y * s`, `sub` and `rsub` alike: ATen converts alpha to the op's dtype and multiplies,
  as `mul` by the number does;
- `addmm(c, a, b, beta=β, alpha=α)` → `β·c + α·(a @ b)`, each term 0 where its number is 0 (as BLAS reads neither
  `c` nor the product then: an inf there gives no NaN), and `addmv`, `baddbmm`, `addbmm`, `addr` alike. The product
  rounds once more than ATen's fused gemm, within float32's tolerance;
- `pow(x, s)` → `pow(x, t)` with `t` a 0-d float64 tensor holding `s`, whose derivative is zero where the exponent
  is 0 as eager's is (by `where`, not a branch); `pow(s, x)` → `pow(t, x)` likewise. ATen runs a 0-d CPU tensor
  base or exponent as the number. Only for a float number and a floating-point tensor: an integer tensor would
  promote differently, and an int exponent is compiled per value (`SpecializationNeeded`), where lowering computes
  `x ** 3` as eager's kernel does (`x * x * x`), not by `pow`;
- `softshrink(x, λ)` → `where(-λ <= x <= λ, 0·x, where(x > λ, x - λ, x + λ))`, and `celu(x, α)` → `where(x <= 0,
  expm1(min(x, 0)·(1/α))·α, x)`, as eager's kernels compute them (λ, α and 1/α converted to the tensor's dtype),
  with their derivatives: the `0·x` of a value inside [-λ, λ] is detached (eager's gradient there is 0 whatever
  flows in; a NaN passes it), and the exponential never sees a positive argument (expm1 of a large one is inf, and
  the gradient through the branch `where` does not take would be 0·inf). Eager's checks on the number (λ ≥ 0,
  α ≠ 0) ask it a question too, and are not made: a negative λ or a zero α computes where eager raises, as an
  inference graph's kernel does.

A number that is not symbolic takes the op itself, so a static trace keeps eager's very kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _symbolic(x: Any) -> bool:
    return isinstance(x, (torch.SymFloat, torch.SymInt))


def _number_tensor(s: Any, like: torch.Tensor) -> torch.Tensor:
    return torch.full((), s, dtype=torch.float64, device=like.device)


def _with_alpha(op: Callable, combine: Callable) -> Callable:
    def form(x: Any, y: Any, alpha: Any = 1) -> Any:
        if not _symbolic(alpha):
            return op(x, y, alpha=alpha)
        return combine(x, y, alpha)
    return form


def _pow_tensor_scalar(x: torch.Tensor, exponent: Any) -> torch.Tensor:
    if not isinstance(exponent, torch.SymFloat) or not x.is_floating_point():
        return aten.pow.Tensor_Scalar(x, exponent)
    return aten.pow.Tensor_Tensor(x, _number_tensor(exponent, x))


def _pow_scalar(base: Any, exponent: torch.Tensor) -> torch.Tensor:
    if not isinstance(base, torch.SymFloat) or not exponent.is_floating_point():
        return aten.pow.Scalar(base, exponent)
    return aten.pow.Tensor_Tensor(_number_tensor(base, exponent), exponent)


def _scaled(x: torch.Tensor, s: Any) -> torch.Tensor:
    """`s * x`, and 0 where `s` is 0 (a symbolic `s`), for the terms of `addmm` and its kind."""
    if not _symbolic(s):
        return x if s == 1 else aten.mul.Tensor(x, s)
    return aten.where.ScalarSelf(aten.eq.Scalar(_number_tensor(s, x), 0), 0.0, aten.mul.Tensor(x, s))


def _product_plus(op: Callable, product: Callable) -> Callable:
    def form(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> Any:
        if not (_symbolic(alpha) or _symbolic(beta)) or not c.is_floating_point():
            return op(c, a, b, beta=beta, alpha=alpha)
        made = _scaled(product(a, b), alpha)
        if not _symbolic(beta) and beta == 0:  # eager reads nothing of `c`
            return made
        return aten.add.Tensor(_scaled(c, beta), made)
    return form


def _softshrink(x: torch.Tensor, lambd: Any = 0.5) -> torch.Tensor:
    if not _symbolic(lambd) or not x.is_floating_point():
        return aten.softshrink.default(x, lambd)
    inside = aten.logical_and.default(aten.ge.Scalar(x, -lambd), aten.le.Scalar(x, lambd))
    outside = aten.where.self(aten.gt.Scalar(x, lambd), aten.sub.Tensor(x, lambd), aten.add.Tensor(x, lambd))
    return aten.where.self(inside, aten.mul.Tensor(aten.detach.default(x), 0), outside)  # NaN: outside's branch


def _celu(x: torch.Tensor, alpha: Any = 1.0) -> torch.Tensor:
    if not _symbolic(alpha) or not x.is_floating_point():
        return aten.celu.default(x, alpha)
    negative = aten.mul.Tensor(aten.expm1.default(aten.mul.Tensor(aten.clamp_max.default(x, 0), 1 / alpha)), alpha)
    return aten.where.self(aten.le.Scalar(x, 0), negative, x)  # NaN takes x's branch, its gradient too


def run_time_scalar_forms() -> dict[str, Callable[..., Any]]:
    """Op name → its form for a joint trace (an `Interpreter` override: called with the op's arguments)."""
    return {
        "aten.add.Tensor": _with_alpha(aten.add.Tensor, lambda x, y, s: aten.add.Tensor(x, aten.mul.Tensor(y, s))),
        "aten.sub.Tensor": _with_alpha(aten.sub.Tensor, lambda x, y, s: aten.sub.Tensor(x, aten.mul.Tensor(y, s))),
        "aten.rsub.Tensor": _with_alpha(aten.rsub.Tensor, lambda x, y, s: aten.sub.Tensor(y, aten.mul.Tensor(x, s))),
        "aten.addmm.default": _product_plus(aten.addmm.default, aten.mm.default),
        "aten.addmv.default": _product_plus(aten.addmv.default, aten.mv.default),
        "aten.baddbmm.default": _product_plus(aten.baddbmm.default, aten.bmm.default),
        "aten.addbmm.default": _product_plus(aten.addbmm.default, lambda a, b: aten.sum.dim_IntList(
            aten.bmm.default(a, b), [0])),
        "aten.addr.default": _product_plus(aten.addr.default, lambda a, b: aten.mul.Tensor(
            aten.unsqueeze.default(a, 1), b)),
        "aten.pow.Tensor_Scalar": _pow_tensor_scalar,
        "aten.pow.Scalar": _pow_scalar,
        "aten.softshrink.default": _softshrink,
        "aten.celu.default": _celu,
    }
