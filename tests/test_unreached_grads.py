"""A parameter the loss does not reach keeps `grad is None`, as in eager.

A compiled graph is one autograd node for all its outputs. When the loss uses some of them, eager autograd leaves
`.grad` None on a parameter that only the others depend on; a node that is handed zeros for the unused outputs
would write zero gradients there instead, and an optimizer treats the two apart: AdamW skips a parameter without a
gradient but decays one with a zero gradient and moves its moments (a Hugging Face model returns its pooler's
output beside the hidden states; a training loop that uses only the hidden states would drift from eager).
"""

from __future__ import annotations

import copy

import ember
import pytest
import torch
import torch.nn.functional as F
from conftest import FRONTENDS
from torch import nn


class TwoHeads(nn.Module):
    """A trunk and two heads; `forward` returns the trunk's features and both heads' outputs."""

    def __init__(self):
        super().__init__()
        self.trunk, self.head, self.aux = nn.Linear(6, 8), nn.Linear(8, 4), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        return h, self.head(h), F.gelu(self.aux(h))


def _grads(model):
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def _assert_same_grads(got, want):
    assert {n for n, g in got.items() if g is None} == {n for n, g in want.items() if g is None}
    for n, g in want.items():
        if g is not None:
            torch.testing.assert_close(got[n], g, msg=lambda m, n=n: f"{n}: {m}")


LOSSES = {
    "trunk only": lambda h, y, z: h.square().sum(),
    "one head": lambda h, y, z: y.sum(),
    "the other head": lambda h, y, z: (z * 2).mean(),
    "every output": lambda h, y, z: h.sum() + y.sum() + z.sum(),
    # floor's derivative is zero but it is reached: eager gives the aux head zero gradients, not None
    "a zero derivative": lambda h, y, z: z.floor().sum() + h.sum(),
}


@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("loss", LOSSES)
def test_parameters_the_loss_does_not_reach_keep_no_gradient(frontend, loss):
    torch.manual_seed(0)
    model = TwoHeads()
    twin = copy.deepcopy(model)
    compiled = ember.compile(twin, options={"frontend": frontend})
    x = torch.randn(5, 6)
    LOSSES[loss](*model(x)).backward()
    LOSSES[loss](*compiled(x)).backward()
    _assert_same_grads(_grads(twin), _grads(model))


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_adamw_steps_of_a_model_with_an_unused_head_stay_eagers(frontend):
    torch.manual_seed(0)
    model = TwoHeads()
    twin = copy.deepcopy(model)
    compiled = ember.compile(twin, options={"frontend": frontend})
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.5) for m in (model, twin)]
    for _ in range(3):
        x = torch.randn(5, 6)
        for m, opt in zip((model, compiled), opts):
            opt.zero_grad()
            h, y, _ = m(x)
            (h.sum() + y.square().sum()).backward()
            opt.step()
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, msg=lambda m, n=n: f"{n}: {m}")
    torch.testing.assert_close(twin.aux.weight, model.aux.weight, rtol=0, atol=0)  # never stepped in eager


def test_an_input_only_an_unused_output_reads_gets_no_gradient(frontend="dynamo"):
    def f(a, b):
        return a * 2, torch.sin(b)

    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    out, _ = ember.compile(f, options={"frontend": frontend})(a, b)
    out.sum().backward()
    assert b.grad is None
    torch.testing.assert_close(a.grad, torch.full((4,), 2.0))


def test_a_second_backward_through_other_outputs_reaches_their_parameters():
    """retain_graph: the first backward uses one head, the second the other; each reaches its own parameters."""
    torch.manual_seed(0)
    model = TwoHeads()
    twin = copy.deepcopy(model)
    compiled = ember.compile(twin)
    x = torch.randn(5, 6)
    outs = [m(x) for m in (model, compiled)]
    for out in outs:
        out[1].sum().backward(retain_graph=True)
    _assert_same_grads(_grads(twin), _grads(model))
    for out in outs:
        out[2].sum().backward()
    _assert_same_grads(_grads(twin), _grads(model))


def test_the_unused_head_across_a_graph_break_keeps_no_gradient():
    class Broken(TwoHeads):
        def forward(self, x):
            h = torch.tanh(self.trunk(x))
            torch._dynamo.graph_break()
            return h, self.head(h), self.aux(h)

    torch.manual_seed(0)
    model = Broken()
    twin = copy.deepcopy(model)
    x = torch.randn(5, 6)
    model(x)[1].sum().backward()
    ember.compile(twin)(x)[1].sum().backward()
    _assert_same_grads(_grads(twin), _grads(model))


def test_under_compiled_autograd_the_unused_head_keeps_no_gradient():
    torch.manual_seed(0)
    model = TwoHeads()
    twin = copy.deepcopy(model)
    x = torch.randn(5, 6)
    model(x)[1].sum().backward()
    compiled = ember.compile(twin)
    try:
        with ember.compiled_autograd.enable():
            compiled(x)[1].sum().backward()
    finally:
        ember.compiled_autograd.reset()
    _assert_same_grads(_grads(twin), _grads(model))


def _two_outputs(a, b):
    return a * 2, torch.sin(b)


class _NoGradForB(torch.autograd.Function):
    """A user's own function whose backward gives its second input no gradient (None), as ember's node does for an
    input only an unused output reads."""

    @staticmethod
    def forward(ctx, a, b):
        return a * 2, torch.sin(b)

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        return grad_a * 2, None


ANOTHER_PATH = {
    # b is read again outside the compiled function: its gradient is that path's alone
    "a leaf read again": lambda f, a, w: f(a, w)[0].sum() + (w * 3).sum(),
    "an intermediate read again": lambda f, a, w: (lambda b: f(a, b)[0].sum() + (b * 3).sum())(w * 2),
    "an intermediate read nowhere else": lambda f, a, w: f(a, w * 2)[0].sum(),
    "a leaf read nowhere else": lambda f, a, w: f(a, w)[0].sum(),
}


@pytest.mark.parametrize("loss", ANOTHER_PATH)
@pytest.mark.parametrize("function", ["ember", "a user's autograd.Function"])
def test_under_compiled_autograd_a_missing_gradient_adds_as_nothing(function, loss):
    """Compiled autograd traces the sum of two gradients flowing into one tensor as `torch.add` before it knows a
    node's backward gives None for its edge; the captured backward then raised TypeError (add of None). The sum is
    the other path's gradient, and a tensor no path reaches keeps `grad is None`."""
    f = ember.compile(_two_outputs) if function == "ember" else _NoGradForB.apply
    torch.manual_seed(0)
    a, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    ANOTHER_PATH[loss](_two_outputs, a, w).backward()
    want = {"a": a.grad, "w": w.grad}
    a.grad = w.grad = None
    try:
        with ember.compiled_autograd.enable() as compiler:
            ANOTHER_PATH[loss](f, a, w).backward()
    finally:
        ember.compiled_autograd.reset()
    assert compiler.captures == 1
    _assert_same_grads({"a": a.grad, "w": w.grad}, want)
