"""The trace frontend leaves other threads alone. Four threads share one module and one custom autograd Function and
call them eagerly and through `ember.compile(..., options={"frontend": "trace"})` at once, for many rounds; each
thread compiles afresh now and then, so that traces run while the others call eagerly. Every call must succeed and
equal eager: a trace's stand-ins (functional and fake tensors) must never be seen in the module's parameters, and
the `Function.apply` a trace intercepts must stay eager's `apply` in every other thread, with and without grad."""

from __future__ import annotations

import copy

import ember
import torch
from ember_core.testing import in_threads
from torch import nn
from torch.testing import assert_close

ROUNDS = 100
OPTIONS = {"frontend": "trace", "codegen.cpu": "interpreter"}  # the frontend is under test: keep compiles cheap


class Triple(torch.autograd.Function):
    """A backward that is not the forward's derivative, so a gradient that went around it would show."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 5


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("shift", torch.randn(8))

    def forward(self, x):
        return Triple.apply(self.fc(x)).tanh() + self.shift


def scaled(x):
    return Triple.apply(x).sin()


def _grads(fn, x):
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad


def test_four_threads_call_a_module_and_a_function_eagerly_and_compiled_at_once():
    torch.manual_seed(0)
    model = Block()
    twin = copy.deepcopy(model)  # the reference: never touched by a trace
    inputs = [torch.randn(4, 8) for _ in range(4)]
    with torch.no_grad():
        expected = [twin(x) for x in inputs]
    expected_grads = [_grads(scaled, x) for x in inputs]
    shared = ember.compile(model, options=OPTIONS)
    shared_fn = ember.compile(scaled, options=OPTIONS)

    def work(k: int) -> None:
        compiled, compiled_fn = shared, shared_fn
        for r in range(ROUNDS):
            j = (k + r) % len(inputs)
            x = inputs[j]
            if r % 8 == 2 * k % 8:  # a fresh compile: its trace runs while the other threads call
                compiled = ember.compile(model, options=OPTIONS)
                compiled_fn = ember.compile(scaled, options=OPTIONS)
            with torch.no_grad():
                assert_close(model(x), expected[j])  # eager, on the very module others trace
                assert_close(compiled(x), expected[j])
            assert_close(Triple.apply(x), x * 3)  # eager apply, no grad needed
            assert_close(compiled_fn(x), (x * 3).sin())  # traced apply, no grad needed
            for fn in (scaled, compiled_fn):  # eager and traced apply on a tensor that requires grad
                out, grad = _grads(fn, x)
                assert_close(out, expected_grads[j][0])
                assert_close(grad, expected_grads[j][1])
        assert all(type(p) is nn.Parameter for p in model.parameters())

    with ember.record_events() as rec:
        in_threads(work)
    assert not [e.message for e in rec.events if e.kind == "fallback"]
    assert torch.equal(model.fc.weight, twin.fc.weight) and torch.equal(model.shift, twin.shift)
