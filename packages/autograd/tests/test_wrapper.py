"""wrap(): the autograd.Function around the compiled halves."""

from __future__ import annotations

import weakref

import pytest
import torch
import torch.nn.functional as F
from _support import Compiled, interpreted, leaves, save_everything
from ember_autograd import wrap
from ember_core import CompiledGraph, GraphError, InputsConsumed, Output, record_events


def mlp(x, w1, w2):
    return (F.gelu(x @ w1) @ w2,)


def mlp_inputs():
    torch.manual_seed(0)
    return [torch.randn(4, 8), torch.randn(8, 16, requires_grad=True), torch.randn(16, 3, requires_grad=True)]


def eager_grads(args, backwards=1):
    x, w1, w2 = leaves(args)
    out = mlp(x, w1, w2)[0]
    for _ in range(backwards):
        out.sum().backward(retain_graph=True)
    return w1.grad, w2.grad


def test_backward_is_compiled_lazily_and_once():
    args = mlp_inputs()
    compiled = Compiled(mlp, *args)
    x, w1, w2 = leaves(args)
    out = compiled(x, w1, w2)[0]
    assert compiled.backward_compiles == 0
    out.sum().backward()
    compiled(x, w1, w2)[0].sum().backward()
    assert compiled.backward_compiles == 1


def test_retain_graph_backward_twice():
    args = mlp_inputs()
    compiled = Compiled(mlp, *args)
    x, w1, w2 = leaves(args)
    out = compiled(x, w1, w2)[0]
    out.sum().backward(retain_graph=True)
    out.sum().backward()
    torch.testing.assert_close((w1.grad, w2.grad), eager_grads(args, backwards=2))


def test_backward_twice_without_retain_graph_is_torchs_error():
    args = mlp_inputs()
    x, w1, w2 = leaves(args)
    out = Compiled(mlp, *args)(x, w1, w2)[0]
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()


def test_double_backward_matches_eager_and_is_reported():
    # a gradient penalty: the backward with create_graph=True runs through ATen and is differentiated again
    args = mlp_inputs()
    x, w1, w2 = leaves(args)
    with record_events() as rec:
        out = Compiled(mlp, *args)(x, w1, w2)[0]
        g1, g2 = torch.autograd.grad(out.sum(), [w1, w2], create_graph=True)
        (out.sum() + g1.pow(2).sum()).backward()
    ex, ew1, ew2 = leaves(args)
    eout = mlp(ex, ew1, ew2)[0]
    eg1, eg2 = torch.autograd.grad(eout.sum(), [ew1, ew2], create_graph=True)
    torch.testing.assert_close((g1, g2), (eg1, eg2))
    (eout.sum() + eg1.pow(2).sum()).backward()
    torch.testing.assert_close((w1.grad, w2.grad), (ew1.grad, ew2.grad))
    assert [e.stage for e in rec.kinds("fallback")] == ["autograd"]


def test_without_grad_it_runs_the_forward_only():
    args = mlp_inputs()
    compiled = Compiled(mlp, *args)
    with torch.no_grad():
        out = compiled(*args)[0]
    assert not out.requires_grad
    torch.testing.assert_close(out, mlp(*args)[0])
    assert compiled.backward_compiles == 0


def test_non_differentiable_outputs_do_not_require_grad():
    def f(x):
        y = x.exp()
        return y, y.argmax(), y.detach() + 1

    x = torch.randn(5, requires_grad=True)
    y, idx, d = Compiled(f, x)(x)
    assert y.requires_grad and not idx.requires_grad and not d.requires_grad


def test_unused_output_gets_a_zero_tangent():
    def f(x):
        return x.sin(), x.cos()

    x = torch.randn(5, requires_grad=True)
    sin, _ = Compiled(f, x)(x)
    sin.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_an_input_that_only_unused_outputs_read_gets_no_gradient():
    """As in eager, where autograd never reaches it: None, not the zeros the backward computes for it."""
    def f(x, w, v):
        h = x @ w
        return h.tanh(), (h * v).sum(1), v.detach() * 2

    x, w, v = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True), torch.randn(5, requires_grad=True)
    run = Compiled(f, x, w, v)
    run(x, w, v)[0].sum().backward()
    assert v.grad is None  # read by the unused second output and, detached, by the third
    torch.testing.assert_close(w.grad, x.t() @ (1 - (x @ w).detach().tanh() ** 2))
    assert not run(x, w, v)[2].requires_grad
    run(x, w, v)[1].sum().backward()
    torch.testing.assert_close(v.grad, (x @ w).detach().sum(0))


def test_mutation_and_alias_outputs_come_back_in_the_forward_order():
    def f(x, buf):
        return x.view(-1), (x * 2).sum(), buf + 1

    kinds = [Output("", "alias", 0), Output(""), Output("", "mutation", 1)]
    x, buf = torch.randn(2, 3, requires_grad=True), torch.zeros(3)
    view, total, new_buf = Compiled(f, x, buf, outputs=kinds, mutated=[1])(x, buf)
    assert view.shape == (6,) and total.shape == () and torch.equal(new_buf, torch.ones(3))
    assert view.requires_grad and not new_buf.requires_grad


def test_input_that_newly_requires_grad_is_refused():
    args = mlp_inputs()
    compiled = Compiled(mlp, *args)
    x = args[0].clone().requires_grad_()
    with pytest.raises(RuntimeError, match="input 0 requires grad"):
        compiled(x, *args[1:])


def test_partition_of_the_wrong_shape_is_a_graph_error():
    args = mlp_inputs()
    part = Compiled(mlp, *args).partition
    broken = part.__class__(part.forward, part.backward.replace(inputs=part.backward.inputs[:-1]), part.saved)
    with pytest.raises(GraphError, match="one tangent per differentiable forward output"):
        wrap(broken, interpreted(broken.forward), lambda: interpreted(broken.backward))


def test_saved_non_tensor_values_reach_the_backward():
    def f(x):
        return (x * x.shape[0]).sum(1)

    x = torch.randn(4, 3, requires_grad=True)
    compiled = Compiled(f, x, tracing_mode="symbolic")
    part = save_everything(compiled.joint)
    run = wrap(part, interpreted(part.forward), lambda: interpreted(part.backward))
    x2 = torch.randn(5, 2, requires_grad=True)
    run([x2])[0].sum().backward()
    torch.testing.assert_close(x2.grad, torch.full((5, 2), 5.0))


def test_the_zero_tangent_of_an_unused_output_has_the_outputs_device_and_dtype():
    """What the interpreter cannot check on a GPU path: the zeros filled in for an unused output are made on the
    output's device in its dtype (a meta device and bfloat16 stand for CUDA ones here), not the CPU's default."""
    from types import SimpleNamespace

    from ember_autograd._wrapper import _tangents

    meta = torch.device("meta")
    ctx = SimpleNamespace(plan=SimpleNamespace(differentiable=(True, False, True)),
                          tangent_meta=[((2, 3), torch.bfloat16, meta), ((4,), torch.float16, meta)])
    used = torch.ones(4, dtype=torch.float16, device=meta)
    zeros, given = _tangents(ctx, [None, None, used])
    assert (zeros.shape, zeros.dtype, zeros.device) == ((2, 3), torch.bfloat16, meta)
    assert given is used


# ---------------------------------------------------------------- running the forward again; freeing saved values


def test_double_backward_refuses_an_input_modified_in_place_since_the_forward():
    """It runs the forward again on the inputs: a modified one gave other saved values, and silently wrong
    gradients (eager raises: x is saved for w's gradient)."""
    def f(x, w):
        return ((x * w).sin(),)

    x, w = torch.randn(5), torch.randn(5, requires_grad=True)
    out = Compiled(f, x, w)(x, w)[0]
    x.add_(1.0)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: input 0 .* is at version 1; "
                                           r"expected version 0"):
        torch.autograd.grad(out.sum(), [w], create_graph=True)


def test_an_input_modified_in_place_that_no_saved_value_reads_does_not_stop_double_backward():
    def f(x, w, v):
        return ((x * w).sin() + v,)

    x, w, v = torch.randn(5), torch.randn(5, requires_grad=True), torch.randn(5)
    out = Compiled(f, x, w, v)(x, w, v)[0]
    v.add_(1.0)
    g, = torch.autograd.grad(out.sum(), [w], create_graph=True)
    torch.testing.assert_close(g, x * (x * w).cos())


def test_a_graph_writing_an_input_its_saved_values_read_refuses_double_backward_and_keeps_saved_values():
    """Its forward run again would read the written value, not the one the saved values came from."""
    def f(x, w):
        return x * 2, (x * w).sin()

    x, w = torch.randn(5), torch.randn(5, requires_grad=True)
    compiled = Compiled(f, x, w, outputs=[Output("", "mutation", 0), Output("")], mutated=[0])
    assert compiled.run.plan.rereads == 0 and not compiled.run.plan.consumes
    out = compiled(x, w)[1]
    with pytest.raises(RuntimeError, match="writes its input 0 in place .* cannot run the forward again"):
        torch.autograd.grad(out.sum(), [w], create_graph=True)


class Consuming(Compiled):
    """A backward offering `consume`, as codegens of the loop IR do: it runs the graph, then records how many of its
    saved values anything else still holds once it has emptied the list (`held`); or, with `fail`, it empties the
    list and raises `InputsConsumed`, as a fallback midway does."""

    def __init__(self, *args, fail: bool = False, **kwargs):
        self.fail, self.held, self.consumed = fail, [], 0
        super().__init__(*args, **kwargs)

    def _compile_backward(self):
        compiled = super()._compile_backward()
        n = len(self.partition.saved)

        def consume(args: list) -> list:
            self.consumed += 1
            if self.fail:
                args.clear()
                raise InputsConsumed("graph 'test' cannot fall back: a kernel flagged an error")
            out = compiled.fn(list(args))
            saved = [weakref.ref(t) for t in args[:n] if isinstance(t, torch.Tensor)]
            args.clear()
            self.held.append(sum(r() is not None for r in saved))
            return out

        return CompiledGraph(compiled.fn, compiled.graph, compiled.codegen, consume=consume)


def test_the_backward_is_given_the_saved_values_to_free_unless_the_graph_is_retained():
    def f(x, w1, w2):  # saved: tanh(x @ w1), kept by nothing else
        return ((x @ w1).tanh() @ w2,)

    args = mlp_inputs()
    compiled = Consuming(f, *args)
    x, w1, w2 = leaves(args)
    out = compiled(x, w1, w2)[0]
    out.sum().backward(retain_graph=True)  # autograd keeps them for the next backward
    out.sum().backward()
    inputs = {i.name for i in compiled.partition.forward.inputs}
    made = [s for s in compiled.partition.saved if s not in inputs]  # the test holds the inputs, nothing these
    assert made and compiled.held == [len(compiled.partition.saved), len(compiled.partition.saved) - len(made)]
    ex, ew1, ew2 = leaves(args)
    f(ex, ew1, ew2)[0].sum().backward()
    torch.testing.assert_close((w1.grad, w2.grad), (2 * ew1.grad, 2 * ew2.grad))


def test_a_backward_that_cannot_fall_back_midway_gets_its_saved_values_made_again():
    """The forward runs again on the function's inputs (the same dropout mask), the backward without `consume`,
    and so do later calls; reported once."""
    def f(x, w):
        return (F.dropout(x @ w, 0.5).tanh(),)

    args = [torch.randn(4, 8), torch.randn(8, 6, requires_grad=True)]
    compiled, plain = Consuming(f, *args, fail=True), Compiled(f, *args)
    with record_events() as rec:
        for _ in range(2):
            grads = []
            for run in (compiled, plain):
                x, w = leaves(args)
                torch.manual_seed(7)
                run(x, w)[0].sum().backward()
                grads.append(w.grad)
            torch.testing.assert_close(*grads)
    assert compiled.consumed == 1 and not compiled.run.plan.consumes
    [event] = rec.kinds("fallback")
    assert event.stage == "autograd" and "needed its saved values again" in event.message


def test_saved_values_made_again_refuse_an_input_modified_in_place_since_the_forward():
    def f(x, w):  # saved: exp(x), not x (whose version autograd would check itself)
        return ((x.exp() * w).sin(),)

    x, w = torch.randn(5), torch.randn(5, requires_grad=True)
    compiled = Consuming(f, x, w, fail=True)
    out = compiled(x, w)[0]
    x.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation: input 0"):
        out.sum().backward()


def test_double_backward_through_layer_norm_matches_eager():
    """A gradient penalty through a layer norm: its second derivative must see how the norm's mean and inverse std
    depend on the input. ATen returns those without history, so differentiating the backward graph on values made
    again by `native_layer_norm` (as this did) dropped that dependence and gave w a wrong gradient."""
    def f(x, w):
        return (F.layer_norm(x @ w, (16,)).tanh().sum(1),)

    torch.manual_seed(0)
    args = [torch.randn(8, 4, requires_grad=True), torch.randn(4, 16, requires_grad=True)]
    got = []
    for fn in (Compiled(f, *args), f):
        x, w = leaves(args)
        g, = torch.autograd.grad(fn(x, w)[0].sum(), x, create_graph=True)
        g.pow(2).sum().backward()
        got.append((g.detach(), w.grad))
    torch.testing.assert_close(*got)


def _legit(x, w, b, rm, rv):
    out, _, _, new_rm, new_rv = torch.ops.aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)
    return out.tanh(), new_rm, new_rv


def test_batch_norm_in_training_reads_its_running_stats_only_to_update_them():
    """Its output and saved mean and inverse std do not depend on the running stats it writes: the forward may run
    again after the update (the backward still consumes its saved values; create_graph=True still works)."""
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    args = [torch.randn(8, 4, requires_grad=True), w, b, torch.zeros(4), torch.ones(4)]
    compiled = Compiled(_legit, *args, outputs=[Output(""), Output("", "mutation", 3), Output("", "mutation", 4)],
                        mutated=[3, 4])
    plan = compiled.run.plan
    assert plan.rereads is None and plan.consumes and not {3, 4} & set(plan.saved_from)
    x, w, b, rm, rv = leaves(args)
    g, = torch.autograd.grad(compiled(x, w, b, rm, rv)[0].sum(), x, create_graph=True)
    ex, ew, eb, erm, erv = leaves(args)
    eg, = torch.autograd.grad(_legit(ex, ew, eb, erm, erv)[0].sum(), ex, create_graph=True)
    torch.testing.assert_close(g, eg)
