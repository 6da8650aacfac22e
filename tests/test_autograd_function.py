"""Custom `torch.autograd.Function`s inside compiled code keep their own backward, through both frontends.

Each test runs the same function eagerly and through `ember.compile` on copies of the same inputs and compares the
outputs, whether they require grad, and every gradient (inputs and parameters). A Function whose backward is not
the derivative of its forward (`DoubleGrad`, `StraightThroughRound`) proves that ember differentiates the region with
the author's backward instead of re-deriving the forward. No supported form may fall back to eager.
"""

from __future__ import annotations

import ember
import pytest
import torch
from conftest import assert_same_training_step
from torch import nn
from torch.autograd.function import once_differentiable


def compile_with(frontend, fn, **kwargs):
    return ember.compile(fn, options={"frontend": frontend}, **kwargs)


def copies(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]


def assert_same_as_eager(fn, frontend, *inputs, loss=lambda out: out.sum(), **compile_kwargs):
    """Forward and backward through eager and ember; outputs, their requires_grad and input grads must agree.
    Returns ember's events, so a test can look at the graphs."""
    eager_in, ember_in = copies(inputs), copies(inputs)
    expected = fn(*eager_in)
    with ember.record_events() as rec:
        got = compile_with(frontend, fn, **compile_kwargs)(*ember_in)
    expected_outs = expected if isinstance(expected, tuple) else (expected,)
    got_outs = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected_outs, got_outs, strict=True):
        torch.testing.assert_close(g, e)
        assert g.requires_grad == e.requires_grad
    loss(expected).backward()
    loss(got).backward()
    for k, (e, g) in enumerate(zip(eager_in, ember_in)):
        if e.requires_grad:
            assert g.grad is not None, f"input {k} lost its gradient"
            torch.testing.assert_close(g.grad, e.grad, msg=lambda m, k=k: f"grad of input {k}: {m}")
    assert not [e.message for e in rec.events if e.kind == "fallback"]
    return rec


# ---------------------------------------------------------------------------------------------- the Functions


class Swish(torch.autograd.Function):
    """Old style: forward takes ctx and saves its input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s + x * s * (1 - s))


class ScaledMatmul(torch.autograd.Function):
    """New style: forward without ctx, `setup_context` saves what backward needs; a non-tensor argument."""

    @staticmethod
    def forward(x, w, scale):
        return (x @ w) * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, scale = inputs
        ctx.save_for_backward(x, w)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad = grad * ctx.scale
        return grad @ w.t(), x.t() @ grad, None


class ClampWithMask(torch.autograd.Function):
    """Two outputs, the second marked non-differentiable; non-tensor arguments (a float and a bool)."""

    @staticmethod
    def forward(ctx, x, limit, keep_sign):
        mask = (x.abs() <= limit).to(x.dtype)
        ctx.save_for_backward(mask)
        out = x.clamp(-limit, limit) if keep_sign else x.abs().clamp(max=limit)
        ctx.mark_non_differentiable(mask)
        return out, mask

    @staticmethod
    def backward(ctx, grad, grad_mask):
        (mask,) = ctx.saved_tensors
        return grad * mask, None, None


class OnceDifferentiableCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


class DoubleGrad(torch.autograd.Function):
    """Identity forward, backward doubles the gradient: not the derivative of the forward."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class StraightThroughRound(torch.autograd.Function):
    """Rounds forward and passes the gradient straight through (the true derivative is zero almost everywhere)."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class NoGradInside(torch.autograd.Function):
    """Forward computes a statistic under an explicit torch.no_grad(); ctx holds a tensor and a number directly."""

    @staticmethod
    def forward(ctx, x):
        with torch.no_grad():
            centre = x.mean(dim=-1, keepdim=True)
        ctx.centre = centre
        ctx.factor = 0.5
        return (x - centre) * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor + ctx.centre * 0


# ---------------------------------------------------------------------------------------------- forms


def test_old_style_function_with_saved_input(frontend):
    assert_same_as_eager(lambda x: Swish.apply(x * 2).tanh(), frontend, torch.randn(4, 5, requires_grad=True))


def test_new_style_function_with_setup_context(frontend):
    def f(x, w):
        return ScaledMatmul.apply(x.relu(), w, 0.5)

    assert_same_as_eager(f, frontend, torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True))


def test_non_differentiable_output_and_non_tensor_arguments(frontend):
    def f(x):
        out, mask = ClampWithMask.apply(x * 3, 1.5, True)
        return out + 1, mask

    assert_same_as_eager(f, frontend, torch.randn(6, requires_grad=True), loss=lambda outs: outs[0].pow(2).sum())


def test_once_differentiable_backward(frontend):
    assert_same_as_eager(lambda x: OnceDifferentiableCube.apply(x.sin()), frontend, torch.randn(7, requires_grad=True))


@pytest.mark.parametrize("function", [DoubleGrad, StraightThroughRound], ids=lambda f: f.__name__)
def test_custom_backward_is_used_not_the_derivative_of_forward(frontend, function):
    x = torch.randn(5) * 3

    def f(x):
        return function.apply(x * 1.5)

    assert_same_as_eager(f, frontend, x.requires_grad_())
    x_c = x.detach().clone().requires_grad_()
    compile_with(frontend, f)(x_c).sum().backward()
    factor = 2.0 if function is DoubleGrad else 1.0  # the true derivative would give 1.5 and 0
    torch.testing.assert_close(x_c.grad, torch.full_like(x_c, 1.5 * factor))


def test_function_called_twice_in_one_graph(frontend):
    def f(x, y):
        return Swish.apply(Swish.apply(x) + DoubleGrad.apply(y)) * Swish.apply(y)

    assert_same_as_eager(f, frontend, torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True))


def test_forward_with_explicit_no_grad_and_tensor_on_ctx(frontend):
    assert_same_as_eager(lambda x: NoGradInside.apply(x.exp()), frontend, torch.randn(3, 4, requires_grad=True))


def test_function_with_symbolic_sizes(frontend):
    def f(x):
        return Swish.apply(x.view(x.shape[0], -1)).sum(dim=1)

    for n in (4, 6):
        assert_same_as_eager(f, frontend, torch.randn(n, 2, 3, requires_grad=True), dynamic=True)


def test_only_some_inputs_require_grad(frontend):
    def f(x, w):
        return ScaledMatmul.apply(x, w, 2.0)

    assert_same_as_eager(f, frontend, torch.randn(3, 4), torch.randn(4, 2, requires_grad=True))


def test_inference_under_no_grad_matches_eager(frontend):
    x = torch.randn(4, 5, requires_grad=True)
    with torch.no_grad():
        with ember.record_events() as rec:
            out = compile_with(frontend, lambda x: Swish.apply(x * 2))(x)
        torch.testing.assert_close(out, Swish.apply(x * 2))
    assert not out.requires_grad
    assert not [e for e in rec.events if e.kind == "fallback"]


class SwishMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.down(Swish.apply(self.up(x)))


def test_module_with_parameters_in_training(frontend):
    model = SwishMLP().train()
    compiled = compile_with(frontend, model)
    for _ in range(2):
        assert_same_training_step(model, compiled, [torch.randn(5, 8, requires_grad=True)])


def test_training_steps_with_an_optimizer_track_eager(frontend):
    eager_model = SwishMLP()
    ember_model = SwishMLP()
    ember_model.load_state_dict(eager_model.state_dict())
    compiled = compile_with(frontend, ember_model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager_model, ember_model)]
    for _ in range(3):
        x = torch.randn(5, 8)
        for run, opt in ((eager_model, opts[0]), (compiled, opts[1])):
            opt.zero_grad()
            run(x).pow(2).mean().backward()
            opt.step()
    for e, c in zip(eager_model.parameters(), ember_model.parameters()):
        torch.testing.assert_close(c, e)


# ---------------------------------------------------------------------------------------------- what ember built


def test_joint_graph_holds_the_custom_backward(frontend):
    """DoubleGrad's forward is a clone; its backward a multiplication by 2, which only the custom backward has."""
    rec = assert_same_as_eager(lambda x: DoubleGrad.apply(x.sin()), frontend, torch.randn(5, requires_grad=True))
    (traced,) = [e for e in rec.events if e.kind == "joint_traced"]
    backward = [n for n in traced.graph.nodes if n.meta.get("region") == "backward"]
    assert any(n.op == "aten.mul.Tensor" and 2 in n.args for n in backward), str(traced.graph)


def test_captured_graph_keeps_the_function_as_a_unit(frontend):
    rec = assert_same_as_eager(lambda x: Swish.apply(x + 1), frontend, torch.randn(5, requires_grad=True))
    (captured,) = [e.graph for e in rec.events if e.kind == "graph_captured"]
    (call,) = [n for n in captured.nodes if n.op == "ember.custom_function.default"]
    assert set(captured.subgraphs) == {call.args[2], call.args[3]}
    assert not [n for n in captured.nodes if n.op == "aten.detach.default"]


# ---------------------------------------------------------------------------------------------- fallbacks


class DirtyScale(torch.autograd.Function):
    """Writes its input in place (`mark_dirty`): not supported inside a graph, so it must run eagerly."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_unsupported_function_falls_back_visibly_and_keeps_its_gradient(frontend):
    def f(x):
        return DirtyScale.apply(x + 1).sum()

    x_eager = torch.randn(4, requires_grad=True)
    x_ember = x_eager.detach().clone().requires_grad_()
    f(x_eager).backward()
    with ember.record_events() as rec:
        out = compile_with(frontend, f)(x_ember)
    out.backward()
    torch.testing.assert_close(x_ember.grad, x_eager.grad)
    fallbacks = [e for e in rec.events if e.kind == "fallback"]
    assert fallbacks and "mark_dirty" in fallbacks[0].message


# ------------------------------------------------------------------ custom ops with a registered autograd formula


@torch.library.custom_op("ember_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x.sin() * scale


@scaled_sin.register_fake
def _(x, scale):
    return torch.empty_like(x)


def _scaled_sin_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


def _scaled_sin_backward(ctx, grad):  # twice the true derivative: proves this formula, not a derived one, ran
    (x,) = ctx.saved_tensors
    return grad * x.cos() * ctx.scale * 2, None


scaled_sin.register_autograd(_scaled_sin_backward, setup_context=_scaled_sin_setup)


def test_custom_op_keeps_its_registered_backward(frontend):
    """A `torch.library.custom_op` differentiates by its registered formula, which runs its forward under no_grad
    (as an autograd.Function does): capture once saw grad off there and detached its output, losing the gradient
    (linear_cross_entropy's chunked path, an op that computes its gradient in the forward)."""

    def f(x):
        return scaled_sin(x * 1.5, 3.0) + x

    assert_same_as_eager(f, frontend, torch.randn(6, requires_grad=True))  # and no fallback


def test_custom_op_under_no_grad_inside_the_function_stays_cut(frontend):
    def f(x):
        with torch.no_grad():
            y = scaled_sin(x, 2.0)
        return y * x

    assert_same_as_eager(f, frontend, torch.randn(6, requires_grad=True))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_linear_cross_entropy_chunked_gradient(frontend, reduction):
    """The chunked path is a custom op that computes the gradient in the forward and returns it with the loss."""
    lce = pytest.importorskip("torch.nn.modules.linear_cross_entropy_options",
                              reason="this torch has no linear_cross_entropy (torch 2.11)")
    options = lce.LinearCrossEntropyOptions(batch_chunk_size=2, allow_retain_graph=True)

    def f(x, w, b, target):
        return torch.nn.functional.linear_cross_entropy(x, w, target, linear_bias=b, reduction=reduction,
                                                        options=options)

    x, w, b = (torch.randn(6, 3, requires_grad=True), torch.randn(8, 3, requires_grad=True),
               torch.randn(8, requires_grad=True))
    assert_same_as_eager(f, frontend, x, w, b, torch.randint(0, 8, (6,)))
