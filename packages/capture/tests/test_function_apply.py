"""The trace frontend's `Function.apply`: what a custom function's forward leaves on ctx reaches its backward.

Each function is compiled with the trace frontend (graphs run in ember-core's interpreter) and its gradients are
compared with eager's; the captured call must be one `ember.custom_function` node, not an eager fallback."""

from __future__ import annotations

import threading

import pytest
import torch
from ember_capture import TraceFrontend
from ember_core import CUSTOM_FUNCTION
from torch.autograd import Function
from torch.testing import assert_close


def check_against_eager(fn, compile_graph, events, *inputs, dynamic=None):
    got = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    want = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    TraceFrontend().wrap(fn, compile_graph, {"dynamic": dynamic})(*got).sum().backward()
    fn(*want).sum().backward()
    for g, w in zip(got, want):
        assert_close(g.grad, w.grad)
    assert not events.of("fallback"), [e.message for e in events.of("fallback")]
    assert any(n.op == CUSTOM_FUNCTION for n in compile_graph.graphs[-1].nodes)


class KeepsOnCtx(torch.autograd.Function):
    """Tensors and sizes kept on ctx as attributes, in containers too, next to plain numbers."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.pair = (x.exp(), 2)
        ctx.shape = x.shape
        ctx.scale = 0.5
        return x * y

    @staticmethod
    def backward(ctx, grad):
        ex, two = ctx.pair
        return (grad * ex * ctx.scale * two).reshape(ctx.shape), None


def test_tensors_sizes_and_numbers_kept_on_ctx(compile_graph, events):
    check_against_eager(lambda x, y: KeepsOnCtx.apply(x, y), compile_graph, events,
                        torch.randn(3, 4, requires_grad=True), torch.randn(3, 4), dynamic=True)


class ChecksNeeds(torch.autograd.Function):
    """Backward computes only the gradients `needs_input_grad` asks for, and saves a None."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, None, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, nothing, w = ctx.saved_tensors
        assert nothing is None
        gx = grad @ w.t() if ctx.needs_input_grad[0] else None
        gw = x.t() @ grad if ctx.needs_input_grad[1] else None
        return gx, gw


def test_needs_input_grad_and_a_saved_none(compile_graph, events):
    x, w = torch.randn(2, 3), torch.randn(3, 4, requires_grad=True)
    check_against_eager(lambda x, w: ChecksNeeds.apply(x, w), compile_graph, events, x, w)
    backward = next(g for k, g in compile_graph.graphs[-1].subgraphs.items() if k.endswith("_backward"))
    assert [o.input for o in backward.outputs] == [1]  # only w's gradient was asked for


class WithDefault(torch.autograd.Function):
    """New style, with a default argument that `apply` binds."""

    @staticmethod
    def forward(x, power=3):
        return x**power

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.power = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.power * x ** (ctx.power - 1), None


def test_new_style_defaults_are_bound(compile_graph, events):
    check_against_eager(lambda x: WithDefault.apply(x), compile_graph, events, torch.randn(5, requires_grad=True))


def waiting_function(capturing: threading.Thread, started: threading.Event, release: threading.Event) -> type:
    """x * 2 as a custom Function whose forward, in the capturing thread, holds the capture open until released."""

    class Waits(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if threading.current_thread() is capturing:
                started.set()
                release.wait(10)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    return Waits


def test_other_threads_keep_the_original_apply_during_a_capture(compile_graph):
    """While one thread captures, another thread's call is eager's (its output keeps its own grad_fn)."""
    seen = {}
    started, release = threading.Event(), threading.Event()
    capturing = threading.current_thread()

    Waits = waiting_function(capturing, started, release)

    def other_thread():
        started.wait(10)
        seen["fn"] = type(Waits.apply(torch.ones(1, requires_grad=True)).grad_fn).__name__
        release.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    TraceFrontend().wrap(lambda x: Waits.apply(x), compile_graph, {})(torch.ones(2, requires_grad=True))
    thread.join(10)
    assert seen["fn"] == "WaitsBackward"
    assert any(n.op == CUSTOM_FUNCTION for n in compile_graph.graphs[-1].nodes)


class Doubles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_a_call_that_needs_no_gradient_runs_inline(compile_graph, events):
    """A tensor that does not require grad: the call is the original `apply`, inline in the graph (on torch 2.14,
    whose `apply` is a `classmethod_descriptor` without `__func__`, this raised AttributeError)."""
    compiled = TraceFrontend().wrap(lambda x: Doubles.apply(x) + 1, compile_graph, {})
    x = torch.randn(4)
    assert_close(compiled(x), x * 2 + 1)
    assert not events.of("fallback") and compile_graph.count == 1
    assert not any(n.op == CUSTOM_FUNCTION for n in compile_graph.graphs[-1].nodes)


class _BoundLikeAClassmethod:
    """A descriptor that binds as `classmethod` does but has no `__func__`: the shape of torch 2.14's
    `classmethod_descriptor`, on any torch."""

    def __init__(self, inner):
        self.inner = inner

    def __get__(self, obj, cls=None):
        return self.inner.__get__(obj, cls)


@pytest.fixture
def apply_without_func(monkeypatch):
    monkeypatch.setattr(Function, "apply", _BoundLikeAClassmethod(Function.__dict__["apply"]))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_apply_is_called_through_whatever_descriptor_torch_defines(apply_without_func, compile_graph, events,
                                                                   requires_grad):
    compiled = TraceFrontend().wrap(lambda x: Doubles.apply(x).sin(), compile_graph, {})
    x = torch.randn(4, requires_grad=requires_grad)
    xe = x.detach().clone().requires_grad_(requires_grad)
    out, expected = compiled(x), Doubles.apply(xe).sin()
    assert_close(out, expected)
    if requires_grad:
        out.sum().backward()
        expected.sum().backward()
        assert_close(x.grad, xe.grad)
    assert not events.of("fallback")
    assert isinstance(Function.__dict__["apply"], _BoundLikeAClassmethod)  # put back as it was


def test_other_threads_call_apply_without_grad_during_a_capture(apply_without_func, compile_graph):
    """While one thread captures, eager calls in another thread, with and without grad, are eager's."""
    seen = {}
    started, release = threading.Event(), threading.Event()
    capturing = threading.current_thread()

    Waits = waiting_function(capturing, started, release)

    def other_thread():
        try:
            started.wait(10)
            seen["no_grad"] = Waits.apply(torch.ones(2))
            seen["grad"] = type(Waits.apply(torch.ones(1, requires_grad=True)).grad_fn).__name__
        except Exception as e:  # noqa: BLE001 - reported below, in the test's thread
            seen["error"] = e
        finally:
            release.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    compiled = TraceFrontend().wrap(lambda x: Waits.apply(x), compile_graph, {})
    assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    thread.join(10)
    assert "error" not in seen, seen.get("error")
    assert_close(seen["no_grad"], torch.full((2,), 2.0))
    assert seen["grad"] == "WaitsBackward"
