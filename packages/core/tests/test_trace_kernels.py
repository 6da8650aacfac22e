"""ember's Autograd kernels for traces (`execution/_trace_kernels.py`) against eager's margin losses, and the swap
of torch's kernels that `eager_derivatives` makes while a trace runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from ember_core import eager_derivatives, resolve_op
from ember_core.execution._trace_kernels import (
    TRACE_KERNELS,
    cosine_similarity,
    multi_margin_loss,
    multilabel_margin_loss_forward,
)

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _on_a_grid(*shape: int) -> torch.Tensor:
    """Scores in halves: margins met exactly (z = 0) are common, as with rounded or integer logits."""
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(7)) * 2).round() / 2


def _value_and_grad(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_()
    out = fn(x)
    (grad,) = torch.autograd.grad((out * torch.linspace(0.5, 2.0, out.numel()).reshape(out.shape)).sum(), x)
    return out, grad


@pytest.mark.parametrize("reduction", list(_REDUCTIONS))
@pytest.mark.parametrize("p, margin, weighted", [(1, 1.0, False), (2, 0.5, True), (1, 2.0, True)])
def test_multi_margin_loss_is_eagers_at_met_margins(reduction, p, margin, weighted):
    x = _on_a_grid(6, 4)
    x[2, 1] = float("nan")  # eager's kernel skips a term whose margin is NaN
    target, weight = torch.tensor([1, 0, 3, 2, 2, 1]), torch.tensor([1.0, 2.0, 0.5, 3.0]) if weighted else None
    want = _value_and_grad(lambda x: F.multi_margin_loss(x, target, p, margin, weight, reduction=reduction), x)
    got = _value_and_grad(lambda x: multi_margin_loss(x, target, p, margin, weight, _REDUCTIONS[reduction]), x)
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("reduction", list(_REDUCTIONS))
@pytest.mark.parametrize("shape, target", [((3, 4), [[1, 3, -1, 0], [0, -1, 2, 2], [3, 2, 1, 0]]),
                                           ((4,), [1, 3, -1, 0]), ((4,), [2, 2, 0, 1])])
def test_multilabel_margin_loss_is_eagers_at_met_margins(reduction, shape, target):
    x = _on_a_grid(*shape)
    x.view(-1)[2] = float("nan")
    target = torch.tensor(target)
    want = _value_and_grad(lambda x: F.multilabel_margin_loss(x, target, reduction=reduction), x)
    got = _value_and_grad(lambda x: multilabel_margin_loss_forward(x, target, _REDUCTIONS[reduction])[0], x)
    torch.testing.assert_close(got, want, equal_nan=True)
    want_mask = torch.ops.aten.multilabel_margin_loss_forward.default(x, target, _REDUCTIONS[reduction])[1]
    torch.testing.assert_close(multilabel_margin_loss_forward(x, target, _REDUCTIONS[reduction])[1], want_mask)


def test_eager_derivatives_swaps_torchs_kernels_and_puts_them_back():
    keys = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
    ops = [resolve_op(name) for name in (*TRACE_KERNELS, "aten.softshrink.default")]

    def kernels():
        return [tuple(op.py_kernels.get(k) for k in keys) for op in ops]

    before = kernels()
    with eager_derivatives():
        with eager_derivatives():  # nested: the inner block changes nothing, and puts nothing back
            inside = kernels()
        assert kernels() == inside
    assert kernels() == before
    margin_losses, cosine, softshrink = inside[:2], inside[2], inside[3]
    torch_had = [k[0] is not None for k in before[:2]]
    assert [k[0] for k in margin_losses] == [k if had else None for k, had in zip(TRACE_KERNELS.values(), torch_had)]
    assert cosine == (None, cosine_similarity) and before[2] == (None, None)  # torch's is C++: ours at its key
    assert softshrink[0] is None  # softshrink is kept whole: autograd takes eager's formula


@pytest.mark.parametrize("case", ["zero rows", "broadcast", "dim 0, eps", "integers", "float64", "bfloat16"])
def test_cosine_similarity_is_eagers_with_the_gradient_through_the_clamp(case):
    """ATen clamps the norms in place under no_grad: the value is the clamped one, the gradient passes through the
    clamp (a zero row's gradient is not 0). The out-of-place kernel has both."""
    g = torch.Generator().manual_seed(3)
    x1, x2, dim, eps = torch.randn(5, 6, generator=g), torch.randn(5, 6, generator=g), 1, 1e-8
    if case == "zero rows":
        x1[1], x2[3], x1[4] = 0.0, 0.0, 1e-9
    elif case == "broadcast":
        x2 = x2[:1]
    elif case == "dim 0, eps":
        dim, eps = 0, 0.5
        x1[:, 2] *= 0.01
    elif case == "float64":
        x1, x2 = x1.double(), x2.double()
    elif case == "bfloat16":
        x1, x2 = x1.bfloat16(), x2.bfloat16()
    if case == "integers":
        ints = (x2 * 3).round().to(torch.int64)
        torch.testing.assert_close(cosine_similarity(x1, ints, dim, eps), F.cosine_similarity(x1, ints, dim, eps))
        return
    want = _value_and_grad(lambda t: F.cosine_similarity(t, x2 * 0.5 + t.detach(), dim, eps) + 0 * t.sum(), x1)
    got = _value_and_grad(lambda t: cosine_similarity(t, x2 * 0.5 + t.detach(), dim, eps) + 0 * t.sum(), x1)
    torch.testing.assert_close(got, want)
    want = _value_and_grad(lambda t: F.cosine_similarity(x1, t, dim, eps), x2)
    got = _value_and_grad(lambda t: cosine_similarity(x1, t, dim, eps), x2)
    torch.testing.assert_close(got, want)
