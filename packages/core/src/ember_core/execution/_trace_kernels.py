"""ember's Autograd kernels for traces: in place of torch's for two margin losses, and for cosine_similarity.

torch registers Python kernels at the Autograd key of a few ops, which the Python dispatcher of a trace (make_fx
enables it) runs before autograd: they decompose the op, and autograd then differentiates the pieces. Those of
`multi_margin_loss` and `multilabel_margin_loss_forward` clamp each margin term with `clamp_min(z, 0)`, whose
derivative passes the gradient where z = 0 exactly (a margin met exactly, common with rounded or integer logits)
and whose value is NaN where z is; eager's kernels count a term only where z > 0, in value and in gradient, so a NaN
score drops out of eager's loss. The kernels here compute the same losses with `where(z > 0, z, 0)`, so the
captured pieces have eager's values and eager's derivative (`eager_derivatives` in `_tracing.py` installs them).

`cosine_similarity` has no kernel of torch's above autograd: ATen's composite runs, and clamps the two norms to eps
in place under no_grad, which a functional graph cannot say (capture refused the graph: it ran eagerly). Eager's
value is the clamped norm's, its gradient passes through the clamp as if it were not there. The kernel here says
that with out-of-place ops: `where(n < eps, eps + (n - n.detach()), n)`, eps exactly where eager clamps, and a
derivative of 1 everywhere.
"""

from __future__ import annotations

from typing import Any

import torch

_MEAN, _SUM = 1, 2  # torch's Reduction enum: 0 none, 1 mean, 2 sum


def _positive_part(z: torch.Tensor) -> torch.Tensor:
    """z where z > 0, else 0 (NaN included): the terms eager's kernels add, with their derivative."""
    return torch.where(z > 0, z, torch.zeros((), dtype=z.dtype, device=z.device))


def _reduce(per_sample: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == _MEAN:
        return per_sample.mean()
    if reduction == _SUM:
        return per_sample.sum()
    return per_sample


def multi_margin_loss(x: torch.Tensor, target: torch.Tensor, p: Any = 1, margin: Any = 1,
                      weight: torch.Tensor | None = None, reduction: int = _MEAN) -> torch.Tensor:
    """Per sample, the mean over classes i != y of max(0, margin - x[y] + x[i])^p (times weight[y])."""
    torch._check(p == 1 or p == 2, lambda: "only p == 1 and p == 2 supported")
    torch._check(x.dim() <= 2 and x.numel() != 0,
                 lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {x.shape}")
    rows = x.reshape(-1, x.shape[-1] if x.dim() else 1)
    classes = rows.shape[1]
    torch._check(target.numel() == rows.shape[0],
                 lambda: f"inconsistent target size, expected {rows.shape[0]} but got {target.shape}")
    label = target.reshape(-1, 1)
    z = _positive_part(margin - rows.gather(1, label) + rows)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight.reshape(-1)[label]
    others = torch.arange(classes, device=x.device) != label
    z = torch.where(others, z, torch.zeros((), dtype=z.dtype, device=z.device))
    return _reduce(z.sum(1) / classes, reduction)


def multilabel_margin_loss_forward(x: torch.Tensor, target: torch.Tensor,
                                   reduction: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample, the sum over its labels j (target's entries before the first -1) and its non-label classes i
    of max(0, 1 - x[j] + x[i]), over the number of classes; and the 0/1 mask of label classes (`is_target`)."""
    torch._check(x.dim() <= 2 and x.numel() != 0,
                 lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {x.shape}")
    torch._check(target.shape == x.shape,
                 lambda: f"inconsistent target size: {target.shape} for input of size: {x.shape}")
    width = x.shape[-1] if x.dim() else 1
    rows, labels = x.reshape(-1, width), target.reshape(-1, width)
    classes = rows.shape[1]
    position = torch.arange(classes, device=x.device)
    first_end = torch.where(labels == -1, position, classes).amin(1, keepdim=True)
    listed = position < first_end  # (N, C): the positions of target that hold labels
    label = torch.where(listed, labels, 0)
    is_target = ((label.unsqueeze(2) == position) & listed.unsqueeze(2)).any(1)  # (N, C): class c is a label
    z = 1 - rows.gather(1, label).unsqueeze(2) + rows.unsqueeze(1)  # (N, label position, class)
    counted = listed.unsqueeze(2) & ~is_target.unsqueeze(1)
    z = torch.where(counted, _positive_part(z), torch.zeros((), dtype=z.dtype, device=z.device))
    per_sample = z.sum((1, 2)) / classes
    loss = _reduce(per_sample, reduction)
    if x.dim() < 2 and reduction not in (_MEAN, _SUM):
        loss = loss.reshape(())
    return loss, is_target.to(x.dtype).reshape(target.shape)


# op name → ember's kernel for traces, installed in place of torch's Autograd kernel where torch has one
def _clamped_under_no_grad(norm: torch.Tensor, eps: float) -> torch.Tensor:
    """`norm.clamp_min_(eps)` run under no_grad, out of place: the clamped value, the gradient of `norm` itself."""
    passes = norm - norm.detach()  # 0 in value (a norm below eps is finite), 1 in derivative
    return torch.where(norm < eps, passes + eps, norm)


def cosine_similarity(x1: torch.Tensor, x2: torch.Tensor, dim: int = 1, eps: float = 1e-8) -> torch.Tensor:
    """ATen's: integer inputs in the common dtype, both broadcast, each divided by its norm along `dim` clamped to
    eps, the products summed along `dim`."""
    common = torch.result_type(x1, x2)
    torch._check(common.is_floating_point or common.is_complex,
                 lambda: f"expected common dtype to be floating point, yet common dtype is {common}")
    x1 = x1 if x1.is_floating_point() or x1.is_complex() else x1.to(common)
    x2 = x2 if x2.is_floating_point() or x2.is_complex() else x2.to(common)
    x1, x2 = torch.broadcast_tensors(x1, x2)
    n1 = _clamped_under_no_grad(torch.linalg.vector_norm(x1, 2, dim=dim, keepdim=True), eps)
    n2 = _clamped_under_no_grad(torch.linalg.vector_norm(x2, 2, dim=dim, keepdim=True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


TRACE_KERNELS = {
    "aten.multi_margin_loss.default": multi_margin_loss,
    "aten.multilabel_margin_loss_forward.default": multilabel_margin_loss_forward,
    "aten.cosine_similarity.default": cosine_similarity,
}
